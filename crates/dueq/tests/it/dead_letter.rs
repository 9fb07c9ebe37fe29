//! Nothing dies unseen (DESIGN 2.18): a dead task stays findable by its business key until it
//! is retried or deleted, and the dead-letter queue shows the attempts it made against the
//! attempts it had, whichever path failed it.

use std::time::Duration;

use dueq::{
    CancelOutcome, ClaimedTask, Due, Outcome, Queue, RescheduleOutcome, SettingsPatch, TaskRef,
    TaskSpec, TaskState, Worker,
};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, wait_stats};

fn key(k: &str) -> TaskRef {
    TaskRef::key(k).unwrap()
}

/// Claims the one due task of `q`.
async fn claim_one(q: &Queue) -> ClaimedTask {
    let mut c = q.claim(1, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1, "one due task");
    c.tasks.pop().unwrap()
}

/// Enqueues `k` due now, claims it and fails it for good.
async fn kill(q: &Queue, k: &str, payload: &str) -> ClaimedTask {
    q.enqueue(TaskSpec::new(payload.as_bytes().to_vec()).key(k))
        .await
        .unwrap();
    let t = claim_one(q).await;
    q.nack(&t.id, &t.lease_token, "card declined", None, true)
        .await
        .unwrap();
    t
}

#[tokio::test]
async fn a_dead_task_is_found_by_key_until_it_is_retried_or_deleted() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    let dead = kill(&q, "order:44:cancel", "first").await;

    let got = q.get(&key("order:44:cancel")).await.unwrap().unwrap();
    assert_eq!(got.id, dead.id);
    assert_eq!(got.state, TaskState::Dead);
    assert_eq!((got.attempt, got.max_attempts), (1, 5));
    assert_eq!(got.last_error.as_deref(), Some("card declined"));
    // by id too, as before
    assert_eq!(
        q.get(&TaskRef::Id(dead.id.clone()))
            .await
            .unwrap()
            .unwrap()
            .state,
        TaskState::Dead
    );
    // cancel and reschedule by key act on live tasks only
    assert_eq!(
        q.cancel(&key("order:44:cancel")).await.unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(
        q.reschedule(&key("order:44:cancel"), Due::DelayMs(0))
            .await
            .unwrap(),
        RescheduleOutcome::NotFound
    );

    // a live task under the key wins; once it is gone the dead one is found again
    let live = q
        .enqueue(TaskSpec::new(b"second".to_vec()).key("order:44:cancel"))
        .await
        .unwrap();
    let got = q.get(&key("order:44:cancel")).await.unwrap().unwrap();
    assert_eq!(
        (got.id.clone(), got.state),
        (live.id.clone(), TaskState::Scheduled)
    );
    assert_eq!(
        q.cancel(&key("order:44:cancel")).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        q.get(&key("order:44:cancel")).await.unwrap().unwrap().id,
        dead.id
    );

    // a newer death under the same key is the one found
    let newer = kill(&q, "order:44:cancel", "third").await;
    assert_eq!(
        q.get(&key("order:44:cancel")).await.unwrap().unwrap().id,
        newer.id
    );
    // the newer one deleted: the older dead task, neither retried nor deleted, is found again
    assert_eq!(
        q.dead_delete(std::slice::from_ref(&newer.id))
            .await
            .unwrap(),
        [true]
    );
    let got = q.get(&key("order:44:cancel")).await.unwrap().unwrap();
    assert_eq!((got.id, got.state), (dead.id.clone(), TaskState::Dead));
    // both deleted: nothing is found under the key
    assert_eq!(
        q.dead_delete(std::slice::from_ref(&dead.id)).await.unwrap(),
        [true]
    );
    assert!(q.get(&key("order:44:cancel")).await.unwrap().is_none());

    // retried: the key is live again, on the same task
    let other = kill(&q, "order:45:cancel", "x").await;
    q.dead_retry(std::slice::from_ref(&other.id)).await.unwrap();
    let got = q.get(&key("order:45:cancel")).await.unwrap().unwrap();
    assert_eq!((got.id, got.state), (other.id, TaskState::Scheduled));
    let raw: Option<String> = redis::cmd("HGET")
        .arg(&q.keys().dead_keys)
        .arg("order:45:cancel")
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(raw, None, "a retried task leaves no dead-key entry");
}

#[tokio::test]
async fn expired_into_the_dead_letter_queue_and_lease_deaths_are_found_by_key() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    q.update_settings(
        &SettingsPatch::default()
            .on_expire(Some(dueq::OnExpire::Dead))
            .max_attempts(Some(1)),
    )
    .await
    .unwrap();
    // expired before it started (the queue paused over its expiry), kept in the DLQ
    q.pause().await.unwrap();
    q.enqueue(
        TaskSpec::new(b"e".to_vec())
            .key("order:1:remind")
            .ttl_ms(200),
    )
    .await
    .unwrap();
    wait_until_async(DEADLINE, "the task expired", || async {
        q.recover().await.unwrap();
        q.stats().await.unwrap().expired_total == 1
    })
    .await;
    q.resume().await.unwrap();
    let got = q.get(&key("order:1:remind")).await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Dead);
    assert_eq!(got.last_error.as_deref(), Some("expired"));

    // a lease that ran out on its last attempt
    q.enqueue(
        TaskSpec::new(b"l".to_vec())
            .key("order:2:cancel")
            .lease_ms(1_000),
    )
    .await
    .unwrap();
    claim_one(&q).await;
    wait_until_async(DEADLINE, "the lease ran out", || async {
        q.recover().await.unwrap();
        q.stats().await.unwrap().dead == 2
    })
    .await;
    let got = q.get(&key("order:2:cancel")).await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Dead);
    assert_eq!((got.attempt, got.max_attempts), (1, 1));
}

#[tokio::test]
async fn the_dead_key_index_stays_within_the_dead_letter_cap() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    q.update_settings(&SettingsPatch::default().dead_max(Some(2)))
        .await
        .unwrap();
    for i in 0..6 {
        kill(&q, &format!("order:{i}"), "x").await;
    }
    let n: u64 = redis::cmd("HLEN")
        .arg(&q.keys().dead_keys)
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(n, 2);
    assert!(q.get(&key("order:0")).await.unwrap().is_none());
    assert_eq!(
        q.get(&key("order:5")).await.unwrap().unwrap().state,
        TaskState::Dead
    );
}

/// The DLQ shows attempts made against attempts allowed, the queue's default resolved, for
/// each way a task dies in the library: a handler's `Outcome::Fail`, a nack, a batch of nacks
/// and attempts that ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_queue_shows_the_attempts_of_every_path() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("pay");
    // a handler failing for good
    q.enqueue(TaskSpec::new(b"fail".to_vec()).key("w"))
        .await
        .unwrap();
    let w = Worker::builder(ctx.client.clone())
        .handle("pay", |_t: ClaimedTask| async {
            Outcome::Fail {
                error: "no such card".into(),
            }
        })
        .build()
        .unwrap()
        .start();
    wait_stats(&q, |s| s.dead == 1).await;
    w.shutdown().await.unwrap();
    // one nack, then a batch of two
    kill(&q, "n", "x").await;
    for k in ["b1", "b2"] {
        q.enqueue(TaskSpec::new(b"x".to_vec()).key(k))
            .await
            .unwrap();
    }
    let c = q.claim(2, None).await.unwrap();
    let items: Vec<_> = c
        .tasks
        .iter()
        .map(|t| (&t.id, &t.lease_token, "batch", None, true))
        .collect();
    q.nack_batch(&items).await.unwrap();
    // attempts that ran out, under a queue default of 2
    q.update_settings(&SettingsPatch::default().max_attempts(Some(2)))
        .await
        .unwrap();
    q.enqueue(TaskSpec::new(b"x".to_vec()).key("r"))
        .await
        .unwrap();
    for _ in 0..2 {
        let t = loop {
            let c = q.claim(1, None).await.unwrap();
            if let Some(t) = c.tasks.into_iter().next() {
                break t;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        q.nack(&t.id, &t.lease_token, "again", Some(0), false)
            .await
            .unwrap();
    }
    let page = q.dead_list(0, 10).await.unwrap();
    let mut seen: Vec<(String, u32, u32)> = page
        .tasks
        .iter()
        .map(|d| {
            (
                d.task.key.clone().unwrap(),
                d.task.attempt,
                d.task.max_attempts,
            )
        })
        .collect();
    seen.sort();
    // the queue's default is read when listed, as a get reads it
    assert_eq!(
        seen,
        [
            ("b1".to_owned(), 1, 2),
            ("b2".to_owned(), 1, 2),
            ("n".to_owned(), 1, 2),
            ("r".to_owned(), 2, 2),
            ("w".to_owned(), 1, 2),
        ]
    );
    for d in &page.tasks {
        let got = q
            .get(&TaskRef::Id(d.task.id.clone()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.attempt, got.max_attempts),
            (d.task.attempt, d.task.max_attempts),
            "the DLQ and a get agree"
        );
    }
}

#[tokio::test]
async fn the_dead_letter_list_shows_each_task_s_group_as_get_does() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("tenants");
    q.enqueue(
        TaskSpec::new(b"x".to_vec())
            .key("grouped")
            .group("merchant-7"),
    )
    .await
    .unwrap();
    let t = claim_one(&q).await;
    q.nack(&t.id, &t.lease_token, "card declined", None, true)
        .await
        .unwrap();
    kill(&q, "plain", "y").await;

    let page = q.dead_list(0, 10).await.unwrap();
    let mut groups: Vec<(String, Option<String>)> = page
        .tasks
        .iter()
        .map(|d| (d.task.key.clone().unwrap(), d.task.group.clone()))
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        [
            ("grouped".to_owned(), Some("merchant-7".to_owned())),
            ("plain".to_owned(), None),
        ]
    );
    for d in &page.tasks {
        let got = q
            .get(&TaskRef::id(d.task.id.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.group, d.task.group);
    }
}
