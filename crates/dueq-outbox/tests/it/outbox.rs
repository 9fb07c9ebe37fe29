//! The outbox calls, the relay's duties and the migration, one behaviour per test.

use std::collections::HashSet;
use std::time::Duration;

use dueq::{Outcome, TaskRef, TaskSpec, Worker};
use dueq_outbox::{
    OutboxCancel, OutboxDue, OutboxTask, RelayConfig, cancel_in_tx, enqueue_in_tx, migrate,
    reschedule_in_tx, stats,
};
use dueq_testkit::wait_until_async;
use sqlx::Row;

use crate::support::Env;

async fn count(env: &Env) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM dueq_outbox")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn migrate_twice_applies_nothing_the_second_time() {
    let env = Env::new().await;
    assert_eq!(migrate(&env.db.pool).await.unwrap(), Vec::<i32>::new());
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field_and_writes_nothing() {
    let env = Env::new().await;
    let mut tx = env.db.pool.begin().await.unwrap();
    let ok = OutboxTask::new("k", b"p".to_vec());
    let cases: Vec<(&str, OutboxTask, &str)> = vec![
        ("bad queue", ok.clone(), "queue"),
        ("q", OutboxTask::new("", b"p".to_vec()), "key"),
        ("q", OutboxTask::new("k".repeat(513), b"p".to_vec()), "key"),
        (
            "q",
            OutboxTask::new("k", vec![0u8; (1 << 20) + 1]),
            "payload",
        ),
        ("q", ok.clone().max_attempts(0), "max_attempts"),
        ("q", ok.clone().lease_ms(0), "lease_ms"),
        // shorter than a worker can renew (DESIGN 2.17)
        ("q", ok.clone().lease_ms(dueq::MIN_LEASE_MS - 1), "lease_ms"),
        (
            "q",
            ok.clone().due_at_ms(dueq::MAX_DUE_AT_MS + 1),
            "due_at_ms",
        ),
        (
            "q",
            ok.clone().delay_ms(dueq_outbox::MAX_DELAY_MS + 1),
            "delay_ms",
        ),
    ];
    for (queue, task, field) in cases {
        let e = enqueue_in_tx(&mut tx, queue, &task).await.unwrap_err();
        assert_eq!(e.field(), Some(field), "{e}");
        assert!(e.to_string().contains(field), "{e}");
        assert!(!e.is_retryable());
    }
    let e = cancel_in_tx(&mut tx, "q", "").await.unwrap_err();
    assert_eq!(e.field(), Some("key"));
    tx.commit().await.unwrap();
    assert_eq!(count(&env).await, 0);
}

#[tokio::test]
async fn the_table_refuses_bad_rows_from_plain_sql() {
    let env = Env::new().await;
    for (sql, constraint) in [
        (
            "INSERT INTO dueq_outbox (queue, key, due_at_ms) VALUES ('a b', 'k', 0)",
            "queue_ok",
        ),
        (
            "INSERT INTO dueq_outbox (queue, key, due_at_ms) VALUES ('q', '', 0)",
            "key_ok",
        ),
        (
            "INSERT INTO dueq_outbox (queue, key, due_at_ms, max_attempts) VALUES ('q', 'k', 0, 0)",
            "attempts_ok",
        ),
        (
            "INSERT INTO dueq_outbox (queue, key, due_at_ms, lease_ms) VALUES ('q', 'k', 0, 999)",
            "lease_ok",
        ),
    ] {
        let e = sqlx::query(sql).execute(&env.db.pool).await.unwrap_err();
        assert!(e.to_string().contains(constraint), "{e}");
    }
    assert_eq!(count(&env).await, 0);
}

#[tokio::test]
async fn a_rows_task_options_reach_its_redis_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let mut tx = env.db.pool.begin().await.unwrap();
    let task = OutboxTask::new("k", b"1".to_vec())
        .delay_ms(60_000)
        .max_attempts(3)
        .lease_ms(5_000)
        .priority(4)
        .group("merchant-7")
        .header("X-Tenant", "acme");
    enqueue_in_tx(&mut tx, "q", &task).await.unwrap();
    // a writer in another language: the options as JSON, attempts in their column
    sqlx::query(
        "INSERT INTO dueq_outbox (queue, key, due_at_ms, max_attempts, options)
         VALUES ('q', 'sql', dueq_outbox_now_ms() + 60000, 2,
                 '{\"priority\": 9, \"headers\": {\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}}')",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let q = env.client.queue("q").unwrap();
    let t = q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap();
    assert_eq!(
        (t.max_attempts, t.lease_ms, t.priority, t.group.as_deref()),
        (3, 5_000, 4, Some("merchant-7"))
    );
    assert_eq!(t.headers, [("x-tenant", "acme")].into_iter().collect());
    let t = q.get(&TaskRef::key("sql").unwrap()).await.unwrap().unwrap();
    assert_eq!((t.max_attempts, t.priority, t.group), (2, 9, None));
    assert_eq!(
        t.headers.traceparent(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
}

#[tokio::test]
async fn a_row_whose_options_dueq_cannot_read_is_rejected_naming_them() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let bad = [
        ("type", r#"{"priority": "high"}"#, "priority"),
        ("range", r#"{"priority": 10}"#, "priority"),
        ("typo", r#"{"priorty": 4}"#, "priorty"),
        ("per-enqueue", r#"{"ttl_ms": 1000}"#, "ttl_ms"),
        ("group", r#"{"group": ""}"#, "group"),
    ];
    for (key, options, _) in bad {
        sqlx::query(
            "INSERT INTO dueq_outbox (queue, key, due_at_ms, options)
             VALUES ('q', $1, 0, $2::jsonb)",
        )
        .bind(key)
        .bind(options)
        .execute(&env.db.pool)
        .await
        .unwrap();
    }
    // a good row in the same batch is relayed all the same
    sqlx::query(
        "INSERT INTO dueq_outbox (queue, key, due_at_ms, options)
         VALUES ('q', 'good', 0, '{\"priority\": null, \"group\": null}')",
    )
    .execute(&env.db.pool)
    .await
    .unwrap();
    // not an object: refused by the table itself
    let e = sqlx::query(
        "INSERT INTO dueq_outbox (queue, key, due_at_ms, options) VALUES ('q', 'k', 0, '[]')",
    )
    .execute(&env.db.pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("options_ok"), "{e}");
    env.relay_all(&relay).await;
    let rows: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT key, state, last_error FROM dueq_outbox ORDER BY key")
            .fetch_all(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 6);
    let q = env.client.queue("q").unwrap();
    for (key, state, error) in rows {
        if key == "good" {
            assert_eq!(state, "relayed", "{error:?}");
            let t = q
                .get(&TaskRef::key("good").unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((t.priority, t.group), (0, None));
            continue;
        }
        assert_eq!(state, "rejected", "{key}");
        let error = error.unwrap_or_default();
        let named = bad.iter().find(|b| b.0 == key).map(|b| b.2).unwrap();
        assert!(error.contains(named), "{key}: {error}");
        assert!(
            q.get(&TaskRef::key(key.as_str()).unwrap())
                .await
                .unwrap()
                .is_none()
        );
    }
}

#[tokio::test]
async fn attempts_and_lease_come_from_their_columns_else_from_the_options() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    for (key, attempts, options) in [
        ("json", None, r#"{"max_attempts": 2, "lease_ms": 9000}"#),
        (
            "column",
            Some(3),
            r#"{"max_attempts": 2, "lease_ms": 9000}"#,
        ),
    ] {
        sqlx::query(
            "INSERT INTO dueq_outbox (queue, key, due_at_ms, max_attempts, options)
             VALUES ('q', $1, dueq_outbox_now_ms() + 60000, $2, $3::jsonb)",
        )
        .bind(key)
        .bind(attempts)
        .bind(options)
        .execute(&env.db.pool)
        .await
        .unwrap();
    }
    env.relay_all(&relay).await;
    let q = env.client.queue("q").unwrap();
    let get = |k: &'static str| {
        let q = q.clone();
        async move { q.get(&TaskRef::key(k).unwrap()).await.unwrap().unwrap() }
    };
    let t = get("json").await;
    assert_eq!((t.max_attempts, t.lease_ms), (2, 9_000));
    let t = get("column").await;
    assert_eq!((t.max_attempts, t.lease_ms), (3, 9_000));
}

#[tokio::test]
async fn a_restore_refuses_a_row_changed_by_hand_and_restores_the_others() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().recheck_ms(0));
    let mut tx = env.db.pool.begin().await.unwrap();
    for key in ["a", "b", "c"] {
        let t = OutboxTask::new(key, b"1".to_vec()).delay_ms(3_600_000);
        enqueue_in_tx(&mut tx, "q", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    // Redis loses every task; one row's options are changed by hand in the meantime
    let q = env.client.queue("q").unwrap();
    for key in ["a", "b", "c"] {
        q.cancel(&TaskRef::key(key).unwrap()).await.unwrap();
    }
    sqlx::query("UPDATE dueq_outbox SET options = '{\"priority\": 10}' WHERE key = 'b'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    let rep = relay.reconcile().await.unwrap();
    assert_eq!((rep.restored, rep.rejected), (2, 1), "{rep:?}");
    for key in ["a", "c"] {
        assert!(
            q.get(&TaskRef::key(key).unwrap()).await.unwrap().is_some(),
            "{key}"
        );
    }
    let (state, error): (String, Option<String>) =
        sqlx::query_as("SELECT state, last_error FROM dueq_outbox WHERE key = 'b'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(state, "rejected");
    assert!(error.unwrap_or_default().contains("priority"));
}

#[tokio::test]
async fn a_live_key_is_kept_and_a_finished_key_can_be_used_again() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let mut tx = env.db.pool.begin().await.unwrap();
    let a = enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"1".to_vec()))
        .await
        .unwrap();
    let b = enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"2".to_vec()))
        .await
        .unwrap();
    assert!(a.created && !b.created);
    assert_eq!(a.row_id, b.row_id);
    assert_eq!(
        cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
        OutboxCancel::Requested
    );
    // the cancelled row gives its key up: it takes the new timer
    let c = enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"3".to_vec()))
        .await
        .unwrap();
    assert!(c.created);
    assert_eq!(c.row_id, a.row_id);
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let t = env
        .client
        .queue("q")
        .unwrap()
        .get(&TaskRef::key("k").unwrap())
        .await
        .unwrap();
    assert_eq!(t.unwrap().payload, b"3");
    let s = stats(&env.db.pool, "q").await.unwrap();
    assert_eq!((s.relayed, s.cancelled, s.pending), (1, 0, 0));

    // a finished row does not hold its key
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let mut tx = env.db.pool.begin().await.unwrap();
    let d = enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"4".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(d.created && d.row_id != a.row_id, "{d:?}");
    let s = stats(&env.db.pool, "q").await.unwrap();
    assert_eq!((s.cancelled, s.pending), (1, 1));
}

#[tokio::test]
async fn a_row_waiting_for_the_relay_counts_as_pending() {
    let env = Env::new().await;
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"1".to_vec()).delay_ms(60_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(stats(&env.db.pool, "q").await.unwrap().pending, 1);
    let rep = env.relay(RelayConfig::default()).reconcile().await.unwrap();
    assert_eq!(rep.pending, 1);
}

#[tokio::test]
async fn cancel_in_tx_of_a_relayed_row_cancels_the_redis_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"1".to_vec()).delay_ms(60_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    assert!(q.get(&TaskRef::key("k").unwrap()).await.unwrap().is_some());

    let mut tx = env.db.pool.begin().await.unwrap();
    assert_eq!(
        cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
        OutboxCancel::Requested
    );
    // a second cancel in the same transaction sees the request
    assert_eq!(
        cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
        OutboxCancel::Requested
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        env.state("k").await.as_deref(),
        Some("relayed"),
        "rolled back"
    );

    let mut tx = env.db.pool.begin().await.unwrap();
    assert_eq!(
        cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
        OutboxCancel::Requested
    );
    tx.commit().await.unwrap();
    assert_eq!(env.state("k").await.as_deref(), Some("cancelling"));
    env.relay_all(&relay).await;
    assert_eq!(env.state("k").await.as_deref(), Some("cancelled"));
    assert!(q.get(&TaskRef::key("k").unwrap()).await.unwrap().is_none());
    assert_eq!(q.stats().await.unwrap().cancelled_total, 1);
    let mut tx = env.db.pool.begin().await.unwrap();
    assert_eq!(
        cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
        OutboxCancel::NotFound
    );
}

/// Cancel a relayed timer and set a new one under the same key (new payload, new due time),
/// in one transaction or in two before the relay has carried the cancel: the new timer is
/// created and is the one Redis holds; the old one is gone. (Before, the cancelling row held
/// the key, so the enqueue answered `created: false` and no timer was left.) A third
/// transaction cancels the new timer again before the relay ran: nothing stays in Redis.
#[tokio::test]
async fn a_relayed_timer_cancelled_and_set_again_under_its_key_is_the_new_one() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let key = TaskRef::key("k").unwrap();
    let enqueue = |payload: &'static [u8], delay_ms: u64| {
        OutboxTask::new("k", payload.to_vec()).delay_ms(delay_ms)
    };
    for split in [false, true] {
        let mut tx = env.db.pool.begin().await.unwrap();
        assert!(
            enqueue_in_tx(&mut tx, "q", &enqueue(b"old", 60_000))
                .await
                .unwrap()
                .created
        );
        tx.commit().await.unwrap();
        env.relay_all(&relay).await;
        let old = q.get(&key).await.unwrap().unwrap();

        let mut tx = env.db.pool.begin().await.unwrap();
        assert_eq!(
            cancel_in_tx(&mut tx, "q", "k").await.unwrap(),
            OutboxCancel::Requested
        );
        if split {
            tx.commit().await.unwrap();
            tx = env.db.pool.begin().await.unwrap();
        }
        let again = enqueue_in_tx(&mut tx, "q", &enqueue(b"new", 120_000))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert!(again.created, "split {split}: {again:?}");
        assert_eq!(env.state("k").await.as_deref(), Some("cancelling"));
        env.relay_all(&relay).await;
        let t = q.get(&key).await.unwrap().unwrap();
        assert_eq!(t.payload, b"new", "split {split}");
        assert_eq!(t.due_at_ms, again.due_at_ms, "split {split}");
        assert!(t.due_at_ms >= old.due_at_ms + 59_000, "split {split}");
        assert_eq!(env.state("k").await.as_deref(), Some("relayed"));

        // the new timer is cancelled again: first set once more, then cancelled, before the
        // relay ran (the row is pending, with the Redis task of the timer before it)
        let mut tx = env.db.pool.begin().await.unwrap();
        cancel_in_tx(&mut tx, "q", "k").await.unwrap();
        assert!(
            enqueue_in_tx(&mut tx, "q", &enqueue(b"newer", 1_000))
                .await
                .unwrap()
                .created
        );
        let c = cancel_in_tx(&mut tx, "q", "k").await.unwrap();
        tx.commit().await.unwrap();
        env.relay_all(&relay).await;
        assert!(
            q.get(&key).await.unwrap().is_none(),
            "split {split}: cancel answered {c:?}, the row is {:?}",
            env.state("k").await
        );
        assert_eq!(env.state("k").await.as_deref(), Some("cancelled"));
    }
}

#[tokio::test]
async fn reschedule_in_tx_moves_the_redis_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"1".to_vec()).delay_ms(60_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let target = 4_000_000_000_000u64;
    let mut tx = env.db.pool.begin().await.unwrap();
    let due = reschedule_in_tx(&mut tx, "q", "k", OutboxDue::AtMs(target))
        .await
        .unwrap();
    assert_eq!(due, Some(target));
    assert_eq!(
        reschedule_in_tx(&mut tx, "q", "nope", OutboxDue::DelayMs(1))
            .await
            .unwrap(),
        None
    );
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let t = q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap();
    assert_eq!(t.due_at_ms, target);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_written_back_succeeded_and_dead() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().recheck_ms(0));
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(&mut tx, "q", &OutboxTask::new("ok", b"".to_vec()))
        .await
        .unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("bad", b"".to_vec()).max_attempts(1),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let w = Worker::builder(env.client.clone())
        .handle("q", |t| async move {
            if t.key.as_deref() == Some("bad") {
                Outcome::Fail {
                    error: "boom".into(),
                }
            } else {
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(
        Duration::from_secs(10),
        "both outcomes are in the table",
        || async {
            relay.relay_once().await.unwrap();
            env.state("ok").await.as_deref() == Some("succeeded")
                && env.state("bad").await.as_deref() == Some("dead")
        },
    )
    .await;
    w.shutdown().await.unwrap();
    let err: Option<String> =
        sqlx::query_scalar("SELECT last_error FROM dueq_outbox WHERE key = 'bad'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(err.as_deref(), Some("boom"));
}

/// A row whose key is in the unique window of a task that already finished (a replayed
/// event) enqueues nothing and takes that task's outcome; a row's `unique_for_ms` option
/// reaches its task.
#[tokio::test]
async fn a_row_in_a_unique_window_takes_the_finished_tasks_outcome() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let first = q
        .enqueue(
            TaskSpec::new(b"paid".to_vec())
                .key("payout:9")
                .unique_for_ms(60_000),
        )
        .await
        .unwrap();
    let c = q.claim(1, None).await.unwrap().tasks;
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("payout:9", b"again".to_vec()),
    )
    .await
    .unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("payout:10", b"new".to_vec()).unique_for_ms(60_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    assert_eq!(env.state("payout:9").await.as_deref(), Some("succeeded"));
    let id: Option<String> =
        sqlx::query_scalar("SELECT task_id FROM dueq_outbox WHERE key = 'payout:9'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(id.as_deref(), Some(first.id.as_str()));
    assert_eq!(q.stats().await.unwrap().enqueued_total, 2);
    // the second row's task keeps its key after it ran
    let c = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(c[0].key.as_deref(), Some("payout:10"));
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let again = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("payout:10"))
        .await
        .unwrap();
    assert_eq!(
        again.outcome,
        dueq::EnqueueOutcome::Finished(dueq::TaskState::Succeeded)
    );
}

/// A relay that died after Redis answered but before its commit: the next relay finds the
/// task it made (idempotent by key), and several relays at once never enqueue a row twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_relays_never_double_enqueue() {
    const N: usize = 3_000;
    let env = Env::new().await;
    let q = env.client.queue("q").unwrap();
    let early = q
        .enqueue(TaskSpec::new(b"0".to_vec()).key("k0").delay_ms(60_000))
        .await
        .unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    for i in 0..N {
        let t = OutboxTask::new(format!("k{i}"), i.to_string()).delay_ms(60_000);
        enqueue_in_tx(&mut tx, "q", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    let relays: Vec<_> = (0..3)
        .map(|_| env.relay(RelayConfig::default().batch(100)))
        .collect();
    let tasks: Vec<_> = relays
        .into_iter()
        .map(|r| {
            tokio::spawn(async move {
                let mut n = 0;
                loop {
                    let rep = r.relay_once().await.unwrap();
                    n += rep.enqueued;
                    if rep.enqueued == 0 && !rep.more {
                        return n;
                    }
                }
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, N as u64, "each row taken by exactly one relay");
    let s = q.stats().await.unwrap();
    assert_eq!(s.enqueued_total, N as u64, "k0 was found, not made again");
    let rows = sqlx::query("SELECT key, task_id FROM dueq_outbox WHERE state = 'relayed'")
        .fetch_all(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), N);
    let ids: HashSet<String> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(ids.len(), N);
    let k0: String = rows
        .iter()
        .find(|r| r.get::<String, _>(0) == "k0")
        .unwrap()
        .get(1);
    assert_eq!(k0, early.id.to_string());
}

/// PostgreSQL errors are retried: the relay's connections are killed, and a row committed
/// afterwards still reaches Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_survives_lost_database_connections() {
    let env = Env::new().await;
    let relay = env.spawn_relay(RelayConfig::default().poll_ms(200));
    let q = env.client.queue("q").unwrap();
    for round in 0..2 {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .execute(&env.db.pool)
        .await
        .unwrap();
        let key = format!("k{round}");
        let mut tx = loop {
            // our own pool lost connections too: the first try may fail
            if let Ok(tx) = env.db.pool.begin().await {
                break tx;
            }
        };
        enqueue_in_tx(
            &mut tx,
            "q",
            &OutboxTask::new(key.clone(), b"".to_vec()).delay_ms(60_000),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        wait_until_async(Duration::from_secs(15), "the row reaches Redis", || async {
            q.get(&TaskRef::key(key.clone()).unwrap())
                .await
                .unwrap()
                .is_some()
        })
        .await;
    }
    relay.stop().await;
}

/// A reconciler pass looks at `max_rows_per_pass` rows at most and the next pass goes on from
/// where it stopped, so a large table never holds either side for long.
#[tokio::test]
async fn reconciler_passes_are_bounded_and_resume_where_they_stopped() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().batch(5).max_rows_per_pass(10));
    let mut tx = env.db.pool.begin().await.unwrap();
    for i in 0..25 {
        let t = OutboxTask::new(format!("k{i}"), b"".to_vec()).delay_ms(60_000 + i);
        enqueue_in_tx(&mut tx, "q", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let mut raw = env.redis.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut raw).unwrap();
    let mut restored = Vec::new();
    loop {
        let rep = relay.reconcile().await.unwrap();
        assert!(rep.examined <= 10, "{rep:?}");
        restored.push(rep.restored);
        if rep.complete {
            break;
        }
        assert!(restored.len() < 10, "passes never completed: {restored:?}");
    }
    assert_eq!(restored, vec![10, 10, 5]);
    assert_eq!(
        env.client
            .queue("q")
            .unwrap()
            .stats()
            .await
            .unwrap()
            .scheduled,
        25
    );
    let rep = relay.reconcile().await.unwrap();
    assert_eq!(
        (rep.examined, rep.in_sync, rep.restored),
        (10, 10, 0),
        "{rep:?}"
    );
}
