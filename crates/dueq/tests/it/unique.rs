//! The unique window (`unique_for_ms`): a business key stays taken for that long after its
//! task finished, whatever the end (succeeded, dead, cancelled, expired); an enqueue of the
//! key in the window writes nothing and answers the finished task; the window's entries go
//! by themselves once it ends. Most tests run on a frozen Redis clock (debug builds) so a
//! window of minutes passes at once; the last ones wait on the real clock.

use std::time::Duration;

use dueq::{
    Client, DeadRetryOutcome, EnqueueOutcome, ErrorKind, LeaseRecoverer, OnConflict, Queue,
    SettingsPatch, TaskId, TaskRef, TaskSpec, TaskState,
};
use dueq_testkit::{RedisCluster, wait_until_async};
use tokio::sync::oneshot;

use crate::support::{Ctx, DEADLINE, queue_firer, stop_firer};

const WINDOW: u64 = 60_000;

/// How the first task under the key ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Succeed,
    Die,
    Cancel,
    Expire,
}

/// Enqueues `key` with a window and ends its task as `end`; returns its id.
async fn finish(q: &Queue, key: &str, end: End) -> TaskId {
    let mut spec = TaskSpec::new(key.as_bytes().to_vec())
        .key(key)
        .unique_for_ms(WINDOW);
    if let End::Expire = end {
        spec = spec.delay_ms(1_000).ttl_ms(2_000);
    }
    let e = q.enqueue(spec).await.unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Created);
    match end {
        End::Succeed | End::Die => {
            let c = q.claim(1, None).await.unwrap().tasks;
            assert_eq!(c[0].id, e.id);
            if let End::Succeed = end {
                q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
            } else {
                q.nack(&c[0].id, &c[0].lease_token, "boom", None, true)
                    .await
                    .unwrap();
            }
        }
        End::Cancel => {
            q.cancel(&TaskRef::Key(key.into())).await.unwrap();
        }
        End::Expire => {}
    }
    e.id
}

fn hlen(ctx: &Ctx, key: &str) -> u64 {
    redis::cmd("HLEN").arg(key).query(&mut ctx.raw()).unwrap()
}

fn exists(ctx: &Ctx, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<u64>(&mut ctx.raw())
        .unwrap()
        == 1
}

/// For each end: a re-send of the key in the window answers the finished task (keep and
/// replace alike) and writes nothing; after the window the key is free and the window's
/// entries are gone.
#[cfg(debug_assertions)]
#[tokio::test]
async fn a_key_stays_taken_for_its_window_after_every_end() {
    let ctx = Ctx::new().await;
    let start = ctx.redis_now_ms();
    let (clock, client) = crate::support::frozen_client(&ctx, start).await;
    let q = client.queue("uniq").unwrap();
    for (end, state) in [
        (End::Succeed, TaskState::Succeeded),
        (End::Die, TaskState::Dead),
        (End::Cancel, TaskState::Cancelled),
        (End::Expire, TaskState::Expired),
    ] {
        let key = format!("order-{end:?}");
        let id = finish(&q, &key, end).await;
        if let End::Expire = end {
            clock.advance_ms(3_000);
            assert_eq!(q.recover().await.unwrap().expired, 1);
        }
        let before = q.stats().await.unwrap().enqueued_total;
        let tasks = hlen(&ctx, &q.keys().tasks);
        clock.advance_ms(WINDOW - 1_000);
        for conflict in [OnConflict::Keep, OnConflict::Replace] {
            let again = q
                .enqueue(
                    TaskSpec::new(b"again".to_vec())
                        .key(&key)
                        .unique_for_ms(WINDOW)
                        .on_conflict(conflict),
                )
                .await
                .unwrap();
            assert_eq!(again.outcome, EnqueueOutcome::Finished(state), "{end:?}");
            assert_eq!(again.id, id, "{end:?}");
        }
        // a debounce is refused alike
        let d = q
            .enqueue(
                TaskSpec::new(b"d".to_vec())
                    .key(&key)
                    .on_conflict(OnConflict::Debounce)
                    .debounce_max_ms(5_000),
            )
            .await
            .unwrap();
        assert_eq!(d.outcome, EnqueueOutcome::Finished(state));
        assert_eq!(q.stats().await.unwrap().enqueued_total, before, "{end:?}");
        assert_eq!(hlen(&ctx, &q.keys().tasks), tasks, "{end:?}");
        assert_eq!(hlen(&ctx, &q.keys().keys), 0, "{end:?}");
        // the key's window names the task, how it ended and when the key is free
        let w = q.unique_window(&key).await.unwrap().unwrap();
        assert_eq!((&w.id, w.state), (&id, state), "{end:?}");
        assert_eq!(w.ends_at_ms, clock.now_ms().unwrap() + 1_000, "{end:?}");
        // the window ends: the key is free again
        clock.advance_ms(1_000);
        assert_eq!(q.unique_window(&key).await.unwrap(), None, "{end:?}");
        let fresh = q
            .enqueue(TaskSpec::new(b"fresh".to_vec()).key(&key))
            .await
            .unwrap();
        assert_eq!(fresh.outcome, EnqueueOutcome::Created, "{end:?}");
        assert_ne!(fresh.id, id);
        q.cancel(&TaskRef::Id(fresh.id)).await.unwrap();
    }
    // every window ended: a recover pass (what the recoverer runs when the recovery index
    // says the first one ends) leaves none behind
    q.recover().await.unwrap();
    assert!(!exists(&ctx, &q.keys().uniq));
    assert!(!exists(&ctx, &q.keys().uniq_at));
}

/// Without a window a finished key is free at once; the queue's `unique_for_ms` setting
/// gives keyed tasks a window unless they say 0; a keyless task with a window is refused
/// naming the field, as is a window over the cap, and nothing is written.
#[cfg(debug_assertions)]
#[tokio::test]
async fn the_queue_setting_and_the_checks() {
    let ctx = Ctx::new().await;
    let start = ctx.redis_now_ms();
    let (clock, client) = crate::support::frozen_client(&ctx, start).await;
    let q = client.queue("uniq-setting").unwrap();
    let run = |key: &'static str, w: Option<u64>| {
        let q = q.clone();
        async move {
            let mut s = TaskSpec::new(b"x".to_vec()).key(key);
            if let Some(w) = w {
                s = s.unique_for_ms(w);
            }
            let e = q.enqueue(s).await.unwrap();
            let c = q.claim(1, None).await.unwrap().tasks;
            q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
            let again = q
                .enqueue(TaskSpec::new(b"y".to_vec()).key(key))
                .await
                .unwrap();
            if again.created() {
                // out of the way of the next claim
                q.cancel(&TaskRef::Id(again.id)).await.unwrap();
            }
            (again.outcome == EnqueueOutcome::Finished(TaskState::Succeeded)).then_some(e.id)
        }
    };
    assert_eq!(run("plain", None).await, None, "no window by default");
    q.update_settings(&SettingsPatch::default().unique_for_ms(Some(WINDOW)))
        .await
        .unwrap();
    assert_eq!(
        q.settings().await.unwrap().unique_for_ms,
        Some(WINDOW),
        "the setting reads back"
    );
    assert!(run("by-setting", None).await.is_some());
    assert_eq!(run("opted-out", Some(0)).await, None);
    clock.advance_ms(WINDOW);

    let before = q.stats().await.unwrap().enqueued_total;
    let e = q
        .enqueue(TaskSpec::new(b"x".to_vec()).unique_for_ms(1_000))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("unique_for_ms"), "{e}");
    let e = q
        .enqueue(
            TaskSpec::new(b"x".to_vec())
                .key("k")
                .unique_for_ms(dueq::MAX_UNIQUE_FOR_MS + 1),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("unique_for_ms:"), "{e}");
    let e = q
        .update_settings(&SettingsPatch::default().unique_for_ms(Some(dueq::MAX_UNIQUE_FOR_MS + 1)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unique_for_ms"), "{e}");
    assert_eq!(q.stats().await.unwrap().enqueued_total, before);
}

/// A replace of a live key takes the new window; a dead task retried takes its key and its
/// window back (its window entry goes), and its next end opens the window again; a dead task
/// whose key is in another task's window is not retried.
#[cfg(debug_assertions)]
#[tokio::test]
async fn replace_and_dead_retry_carry_the_window() {
    let ctx = Ctx::new().await;
    let start = ctx.redis_now_ms();
    let (clock, client) = crate::support::frozen_client(&ctx, start).await;
    let q = client.queue("uniq-retry").unwrap();
    // a live task replaced without a window ends without one
    q.enqueue(TaskSpec::new(b"a".to_vec()).key("r").unique_for_ms(WINDOW))
        .await
        .unwrap();
    let r = q
        .enqueue(
            TaskSpec::new(b"b".to_vec())
                .key("r")
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    let c = q.claim(1, None).await.unwrap().tasks;
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let again = q
        .enqueue(TaskSpec::new(b"c".to_vec()).key("r"))
        .await
        .unwrap();
    assert_eq!(again.outcome, EnqueueOutcome::Created);
    q.cancel(&TaskRef::Id(again.id)).await.unwrap();

    // dead, retried, dead again: the window holds after each death
    let id = finish(&q, "d", End::Die).await;
    // a recover pass on a queue with an open window (and no task expiry ever) answers its end
    let r = q.recover().await.unwrap();
    assert_eq!(
        r.next_check_at_ms(),
        Some(clock.now_ms().unwrap() + WINDOW),
        "{r:?}"
    );
    let out = q.dead_retry(std::slice::from_ref(&id)).await.unwrap();
    assert_eq!(out, vec![DeadRetryOutcome::Retried]);
    assert!(!exists(&ctx, &q.keys().uniq), "the window entry went");
    let live = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("d"))
        .await
        .unwrap();
    assert_eq!((live.outcome, &live.id), (EnqueueOutcome::Existing, &id));
    let c = q.claim(1, None).await.unwrap().tasks;
    q.nack(&c[0].id, &c[0].lease_token, "again", None, true)
        .await
        .unwrap();
    let kept = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("d"))
        .await
        .unwrap();
    assert_eq!(kept.outcome, EnqueueOutcome::Finished(TaskState::Dead));

    // an older dead task under a key another task's window holds stays dead
    let old = q
        .enqueue(TaskSpec::new(b"old".to_vec()).key("shared"))
        .await
        .unwrap();
    let c = q.claim(1, None).await.unwrap().tasks;
    q.nack(&c[0].id, &c[0].lease_token, "x", None, true)
        .await
        .unwrap();
    let newer = finish(&q, "shared", End::Succeed).await;
    assert_ne!(newer, old.id);
    let out = q.dead_retry(std::slice::from_ref(&old.id)).await.unwrap();
    assert_eq!(out, vec![DeadRetryOutcome::Conflict]);
    clock.advance_ms(WINDOW);
    let out = q.dead_retry(std::slice::from_ref(&old.id)).await.unwrap();
    assert_eq!(out, vec![DeadRetryOutcome::Retried]);
    let c = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(c[0].id, old.id);
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();

    // a dead task retried after its window ended (and was dropped) takes the queue's setting
    // (an ended window not dropped yet counts as gone too: its length is not taken back)
    q.update_settings(&SettingsPatch::default().unique_for_ms(Some(0)))
        .await
        .unwrap();
    let ended = finish(&q, "ended", End::Die).await;
    clock.advance_ms(WINDOW);
    assert_eq!(hlen(&ctx, &q.keys().uniq), 1);
    let out = q.dead_retry(std::slice::from_ref(&ended)).await.unwrap();
    assert_eq!(out, vec![DeadRetryOutcome::Retried]);
    let c = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(c[0].id, ended);
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let again = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("ended"))
        .await
        .unwrap();
    assert_eq!(again.outcome, EnqueueOutcome::Created);
    q.cancel(&TaskRef::Id(again.id)).await.unwrap();
    q.update_settings(&SettingsPatch::default().unique_for_ms(Some(WINDOW)))
        .await
        .unwrap();
    let late = finish(&q, "late", End::Die).await;
    clock.advance_ms(WINDOW);
    q.recover().await.unwrap();
    assert_eq!(hlen(&ctx, &q.keys().uniq), 0);
    let out = q.dead_retry(std::slice::from_ref(&late)).await.unwrap();
    assert_eq!(out, vec![DeadRetryOutcome::Retried]);
    let c = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(c[0].id, late);
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let again = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("late"))
        .await
        .unwrap();
    assert_eq!(
        again.outcome,
        EnqueueOutcome::Finished(TaskState::Succeeded)
    );
}

/// A schedule's template window covers each tick's key: a backfill of a tick whose task
/// finished inside the window creates nothing.
#[tokio::test]
async fn a_schedule_tick_keeps_its_key_for_the_templates_window() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("uniq-sched");
    let spec = dueq::ScheduleSpec::new("tick", b"t".to_vec())
        .every_ms(1_000)
        .unique_for_ms(WINDOW);
    q.set_schedule(&spec).await.unwrap();
    let firer = queue_firer(&ctx.client, &q, 20);
    let start = std::time::Instant::now();
    let task = loop {
        assert!(start.elapsed() < DEADLINE, "no tick fired");
        if let Some(t) = q.claim(1, None).await.unwrap().tasks.pop() {
            break t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop_firer(firer).await;
    q.ack(&task.id, &task.lease_token).await.unwrap();
    let key = task.key.clone().unwrap();
    let tick: u64 = key.rsplit(':').next().unwrap().parse().unwrap();
    let r = q
        .backfill_schedule("tick", tick, tick + 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.ticks, r.created), (1, 0), "{r:?}");
    let e = q
        .enqueue(TaskSpec::new(b"t".to_vec()).key(&key))
        .await
        .unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Finished(TaskState::Succeeded));
    assert_eq!(e.id, task.id);
}

/// A tick fired ahead and cancelled by hand keeps its key in the template's window: a change
/// of the schedule, which takes the tick as not fired, does not fire it again.
#[tokio::test]
async fn a_tick_cancelled_in_its_window_is_not_fired_again_by_a_change() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("uniq-refire");
    let spec = |payload: &[u8]| {
        dueq::ScheduleSpec::new("t", payload.to_vec())
            .every_ms(10_000)
            .unique_for_ms(WINDOW)
    };
    q.set_schedule(&spec(b"v1")).await.unwrap();
    let firer = queue_firer(&ctx.client, &q, 20);
    let mut key = None;
    wait_until_async(DEADLINE, "a tick fired ahead", || {
        let found = crate::support::schedule_keys(&ctx, &q);
        key = found.first().map(|(k, _)| k.clone());
        let any = !found.is_empty();
        async move { any }
    })
    .await;
    stop_firer(firer).await;
    let key = key.unwrap();
    let tick: u64 = key.rsplit(':').next().unwrap().parse().unwrap();
    q.cancel(&TaskRef::Key(key.clone())).await.unwrap();
    q.set_schedule(&spec(b"v2")).await.unwrap();
    let firer = queue_firer(&ctx.client, &q, 20);
    wait_until_async(
        DEADLINE,
        "the changed schedule fires past the tick",
        || async {
            let s = q.schedule("t").await.unwrap().unwrap();
            s.last_fire_at_ms.is_some_and(|l| l >= tick)
        },
    )
    .await;
    stop_firer(firer).await;
    assert_eq!(
        q.get(&TaskRef::Key(key.clone())).await.unwrap(),
        None,
        "{key}"
    );
    let e = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key(&key))
        .await
        .unwrap();
    assert_eq!(e.outcome, EnqueueOutcome::Finished(TaskState::Cancelled));
}

/// On the real clock with `dueq serve`'s recoverer running: windows opened by an ack and by a
/// cancel are dropped soon after they end, without any other call on the queue, and the
/// queue's memory returns to what it was before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_windows_go_by_themselves() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("uniq-gone");
    let (tx, rx) = oneshot::channel::<()>();
    let recoverer = tokio::spawn(LeaseRecoverer::new(ctx.client.clone()).run(async move {
        let _ = rx.await;
    }));
    // a claimed and acknowledged task, and a cancelled one, each with a 1 s window
    for key in ["acked", "cancelled"] {
        q.enqueue(TaskSpec::new(b"x".to_vec()).key(key).unique_for_ms(1_000))
            .await
            .unwrap();
    }
    let c = q.claim(1, None).await.unwrap().tasks;
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    q.cancel(&TaskRef::Key("cancelled".into())).await.unwrap();
    assert_eq!(hlen(&ctx, &q.keys().uniq), 2);
    wait_until_async(DEADLINE, "the ended windows to go", || async {
        !exists(&ctx, &q.keys().uniq) && !exists(&ctx, &q.keys().uniq_at)
    })
    .await;
    for key in ["acked", "cancelled"] {
        let e = q
            .enqueue(TaskSpec::new(b"y".to_vec()).key(key))
            .await
            .unwrap();
        assert_eq!(e.outcome, EnqueueOutcome::Created);
    }
    let _ = tx.send(());
    recoverer.await.unwrap();
}

/// The window follows the key's partition on a partitioned queue and holds on a Redis Cluster.
#[tokio::test]
async fn windows_on_partitions_and_a_cluster() {
    let ctx = Ctx::new().await;
    check_windows(&ctx.client, "uniq-parts", 4).await;
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    check_windows(&client, "uniq-cluster", 6).await;
}

async fn check_windows(client: &Client, name: &str, partitions: u16) {
    let q = client.queue(name).unwrap();
    q.update_settings(&SettingsPatch::default().partitions(Some(partitions)))
        .await
        .unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("order-{i}")).collect();
    let specs: Vec<_> = keys
        .iter()
        .map(|k| {
            TaskSpec::new(k.as_bytes().to_vec())
                .key(k)
                .unique_for_ms(WINDOW)
        })
        .collect();
    let made = q.enqueue_batch(&specs).await.unwrap();
    let start = std::time::Instant::now();
    let mut acked = 0;
    while acked < keys.len() {
        assert!(start.elapsed() < DEADLINE, "only {acked} claimed");
        for t in q.claim(100, None).await.unwrap().tasks {
            q.ack(&t.id, &t.lease_token).await.unwrap();
            acked += 1;
        }
    }
    let again = q.enqueue_batch(&specs).await.unwrap();
    for ((k, m), a) in keys.iter().zip(&made).zip(&again) {
        assert_eq!(
            a.outcome,
            EnqueueOutcome::Finished(TaskState::Succeeded),
            "{k}"
        );
        assert_eq!(a.id, m.id, "{k}");
    }
    let e = q
        .enqueue(TaskSpec::new(b"one".to_vec()).key("order-7"))
        .await
        .unwrap();
    assert_eq!(e.id, made[7].id);
    assert_eq!(q.stats().await.unwrap().enqueued_total, keys.len() as u64);
    // keys in windows would be looked for in other partitions: the count stays
    let e = q
        .update_settings(&SettingsPatch::default().partitions(Some(partitions + 1)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unique window"), "{e}");
    assert_eq!(q.settings().await.unwrap().partitions, Some(partitions));
}
