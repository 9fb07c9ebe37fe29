//! A timer set again under the key of a row being cancelled (`enqueue_in_tx` after
//! `cancel_in_tx`, before the relay carried the cancel): the row's `renew`.

use dueq::{NackOutcome, OnConflict, TaskRef, TaskSpec};
use dueq_outbox::{OutboxTask, RelayConfig, cancel_in_tx, enqueue_in_tx};

use crate::support::Env;

/// Commits `task` in queue `q` and lets `relay` carry it into Redis.
async fn relayed(env: &Env, relay: &dueq_outbox::Relay, task: OutboxTask) {
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(&mut tx, "q", &task).await.unwrap();
    tx.commit().await.unwrap();
    env.relay_all(relay).await;
}

/// The new timer is a task of its own, not a replace of the old one (which keeps the
/// attempts made): after the old timer failed once, the new one's first run is attempt 1.
#[tokio::test]
async fn a_timer_set_again_after_a_cancel_starts_its_own_attempts() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    relayed(
        &env,
        &relay,
        OutboxTask::new("k", b"old".to_vec()).max_attempts(2),
    )
    .await;
    let c = q.claim(10, None).await.unwrap();
    let t = &c.tasks[0];
    assert_eq!(t.attempt, 1);
    let n = q
        .nack(&t.id, &t.lease_token, "boom", Some(600_000), false)
        .await
        .unwrap();
    assert!(matches!(n, NackOutcome::Rescheduled { .. }), "{n:?}");

    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    let again = enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).max_attempts(2),
    )
    .await
    .unwrap();
    assert!(again.created);
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let c = q.claim(10, None).await.unwrap();
    let t = &c.tasks[0];
    assert_eq!(t.payload, b"new");
    assert_eq!(
        t.attempt, 1,
        "the new timer's first run is counted as attempt {} of {}",
        t.attempt, t.max_attempts
    );
}

/// The old timer ran and succeeded (the relay has not recorded it yet); the key is
/// cancelled, set again, and the new timer cancelled again before the relay ran: no task is
/// left under the key, and the row ends with the old timer's outcome (it keeps that task's
/// id, so that a tombstone could remove the task were the row deleted by hand).
#[tokio::test]
async fn a_new_timer_cancelled_before_the_relay_ran_leaves_no_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    relayed(&env, &relay, OutboxTask::new("k", b"old".to_vec())).await;
    let c = q.claim(10, None).await.unwrap();
    let t = &c.tasks[0];
    q.ack(&t.id, &t.lease_token).await.unwrap();

    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).delay_ms(3_600_000),
    )
    .await
    .unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    assert!(q.get(&TaskRef::key("k").unwrap()).await.unwrap().is_none());
    assert_eq!(env.state("k").await.as_deref(), Some("succeeded"));
    assert_eq!(q.stats().await.unwrap().succeeded_total, 1);
}

/// A row set again stays `cancelling` with the old timer's task id until the relay carries
/// it: deleted by hand meanwhile, it leaves a tombstone, and the old timer's task is removed.
#[tokio::test]
async fn a_row_set_again_and_deleted_by_hand_leaves_no_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    relayed(
        &env,
        &relay,
        OutboxTask::new("k", b"old".to_vec()).delay_ms(600_000),
    )
    .await;
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("DELETE FROM dueq_outbox WHERE key = 'k'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    env.relay_all(&relay).await;
    relay.reconcile().await.unwrap();
    let left = q.get(&TaskRef::key("k").unwrap()).await.unwrap();
    assert!(left.is_none(), "the old timer's task stays: {left:?}");
}

/// The README's recipe for another language: INSERT ... ON CONFLICT DO NOTHING, then (no
/// row) UPDATE the `cancelling` row to `renew`. If the relay carries the cancel between the
/// two, neither statement writes and no live row holds the key: the recipe says to start
/// over, and the INSERT then writes.
#[tokio::test]
async fn the_readme_recipe_sets_the_timer_when_the_relay_cancels_in_between() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    relayed(
        &env,
        &relay,
        OutboxTask::new("k", b"old".to_vec()).delay_ms(600_000),
    )
    .await;
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    tx.commit().await.unwrap();

    let mut w = env.db.pool.begin().await.unwrap();
    let ins = sqlx::query(
        "INSERT INTO dueq_outbox (queue, key, payload, due_at_ms)
         VALUES ('q', 'k', '\\x6e6577', dueq_outbox_now_ms() + 600000)
         ON CONFLICT (queue, key) WHERE state IN ('pending', 'relayed', 'cancelling') DO NOTHING",
    )
    .execute(&mut *w)
    .await
    .unwrap();
    assert_eq!(ins.rows_affected(), 0);
    env.relay_all(&relay).await; // the cancel lands now
    let upd = sqlx::query(
        "UPDATE dueq_outbox SET relay_op = 'renew', payload = '\\x6e6577',
             due_at_ms = dueq_outbox_now_ms() + 600000
         WHERE queue = 'q' AND key = 'k' AND state = 'cancelling' AND relay_op = 'cancel'",
    )
    .execute(&mut *w)
    .await
    .unwrap();
    assert_eq!(upd.rows_affected(), 0);
    // neither wrote, and no live row holds the key: start over
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dueq_outbox WHERE queue = 'q' AND key = 'k'
           AND state IN ('pending', 'relayed', 'cancelling')",
    )
    .fetch_one(&mut *w)
    .await
    .unwrap();
    assert_eq!(held, 0);
    let ins = sqlx::query(
        "INSERT INTO dueq_outbox (queue, key, payload, due_at_ms)
         VALUES ('q', 'k', '\\x6e6577', dueq_outbox_now_ms() + 600000)
         ON CONFLICT (queue, key) WHERE state IN ('pending', 'relayed', 'cancelling') DO NOTHING",
    )
    .execute(&mut *w)
    .await
    .unwrap();
    w.commit().await.unwrap();
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM dueq_outbox WHERE key = 'k' AND state IN ('pending', 'relayed')",
    )
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(
        live,
        1,
        "INSERT wrote {}, UPDATE wrote {}: no timer",
        ins.rows_affected(),
        upd.rows_affected()
    );
}

/// A timer set again is live like any: a second `enqueue_in_tx` of the key keeps it
/// (`created: false`), and `reschedule_in_tx` moves it before the relay carried it.
#[tokio::test]
async fn a_timer_set_again_is_kept_and_moved_like_a_live_one() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    relayed(
        &env,
        &relay,
        OutboxTask::new("k", b"old".to_vec()).delay_ms(600_000),
    )
    .await;

    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    let set = enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    let again = enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"newer".to_vec()).delay_ms(1_000),
    )
    .await
    .unwrap();
    assert!(set.created && !again.created, "{set:?} {again:?}");
    assert_eq!(set.row_id, again.row_id);
    let target = 4_000_000_000_000u64;
    let moved =
        dueq_outbox::reschedule_in_tx(&mut tx, "q", "k", dueq_outbox::OutboxDue::AtMs(target))
            .await
            .unwrap();
    assert_eq!(moved, Some(target));
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let t = q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap();
    assert_eq!((t.payload.as_slice(), t.due_at_ms), (&b"new"[..], target));
    assert_eq!(env.state("k").await.as_deref(), Some("relayed"));
}

/// Relayed timer (task T1 in Redis, due in 10 min); cancel, set again (renew), cancel again;
/// the row is then deleted by hand before the relay ran: it keeps T1's id, so it leaves a
/// tombstone, and T1 is removed.
#[tokio::test]
async fn a_timer_set_again_cancelled_and_deleted_by_hand_leaves_no_task() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"old".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    tx.commit().await.unwrap();
    sqlx::query("DELETE FROM dueq_outbox WHERE key = 'k'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    env.relay_all(&relay).await;
    relay.reconcile().await.unwrap();
    let left = q.get(&TaskRef::key("k").unwrap()).await.unwrap();
    assert!(
        left.is_none(),
        "the old timer's task stays and will run: {left:?}"
    );
}

/// The shipped SQL example for cancelling (`examples/sql/order_paid.sql`, the README's "to
/// cancel" rule) also cancels a timer set again by `enqueue_in_tx` (`cancelling` with
/// relay_op `renew` until the relay carries it): no timer runs for a paid order.
#[tokio::test]
async fn the_example_sql_cancel_drops_a_timer_set_again() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("orders").unwrap();
    let key = "order:43:cancel";
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "orders",
        &OutboxTask::new(key, b"old".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    // the application re-arms the timer (cancel, set again)
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "orders", key).await.unwrap();
    let again = enqueue_in_tx(
        &mut tx,
        "orders",
        &OutboxTask::new(key, b"new".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    assert!(again.created);
    tx.commit().await.unwrap();
    // the payment service (another language) runs the example's cancel
    let sql = include_str!("../../examples/sql/order_paid.sql");
    let start = sql.find("UPDATE dueq_outbox").unwrap();
    let end = start + sql[start..].find(';').unwrap();
    let stmt = sql[start..end].replace(":order", "43");
    let n = sqlx::query(&stmt)
        .execute(&env.db.pool)
        .await
        .unwrap()
        .rows_affected();
    env.relay_all(&relay).await;
    let left = q.get(&TaskRef::key(key).unwrap()).await.unwrap();
    assert!(
        left.is_none(),
        "the example's cancel updated {n} rows; the timer is live in Redis: {left:?}"
    );
}

/// A renew whose old task is running: the relay leaves the row (`cancelling`, `renew`) until
/// that run ends, then sets the new timer; meanwhile the row holds the key (a further
/// enqueue keeps it).
#[tokio::test]
async fn a_timer_set_again_over_a_running_task_is_set_when_the_run_ends() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let q = env.client.queue("q").unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"old".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let c = q.claim(10, None).await.unwrap();
    let t = c.tasks[0].clone();
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"new".to_vec()).delay_ms(3_600_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // the renew finds T1 running: the row waits
    relay.relay_once().await.unwrap();
    assert_eq!(env.state("k").await.as_deref(), Some("cancelling"));
    let mut tx = env.db.pool.begin().await.unwrap();
    let kept = enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"third".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(!kept.created, "{kept:?}");
    q.ack(&t.id, &t.lease_token).await.unwrap();
    env.relay_all(&relay).await;
    let live = q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap();
    assert_eq!(live.payload, b"new");
    assert_ne!(live.id, t.id);
    assert_eq!(env.state("k").await.as_deref(), Some("relayed"));
}

/// A renew round that enqueued the new task N and then failed to commit (simulated: T1
/// cancelled and N enqueued by hand, as the round did); a worker claims N. The next round
/// finds N under the key, not T1: it takes N for the row's task instead of waiting for it
/// or making another, so once N is acknowledged the reconciler does not run the timer again.
#[tokio::test]
async fn a_renew_repeated_after_a_failed_commit_keeps_the_new_task() {
    let env = Env::new().await;
    // batch 1 and recheck 0: another queue's due row takes every tracking slot, as a busy
    // relay's backlog would, so row k is next looked up by the reconciler
    let relay = env.relay(RelayConfig::default().batch(1).recheck_ms(0));
    let q = env.client.queue("q").unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "other",
        &OutboxTask::new("x", b"x".to_vec()).due_at_ms(1),
    )
    .await
    .unwrap();
    enqueue_in_tx(
        &mut tx,
        "q",
        &OutboxTask::new("k", b"old".to_vec()).delay_ms(600_000),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    enqueue_in_tx(&mut tx, "q", &OutboxTask::new("k", b"new".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let due: i64 = sqlx::query_scalar("SELECT due_at_ms FROM dueq_outbox WHERE key = 'k'")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    // what the failed round did in Redis
    let key = TaskRef::key("k").unwrap();
    q.cancel(&key).await.unwrap();
    q.enqueue(
        TaskSpec::new(b"new".to_vec())
            .key("k")
            .due_at_ms(u64::try_from(due).unwrap())
            .on_conflict(OnConflict::Replace),
    )
    .await
    .unwrap();
    let c = q.claim(10, None).await.unwrap();
    let n = c.tasks[0].clone();
    assert_eq!(n.payload, b"new");
    env.relay_all(&relay).await;
    let (task_id, err): (Option<String>, Option<String>) =
        sqlx::query_as("SELECT task_id, last_error FROM dueq_outbox WHERE key = 'k'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    q.ack(&n.id, &n.lease_token).await.unwrap();
    let rep = relay.reconcile().await.unwrap();
    let again = q.get(&key).await.unwrap();
    assert!(
        again.is_none(),
        "N ({}) ran and succeeded; row task_id {task_id:?}, last_error {err:?}; the \
         reconciler ({rep:?}) set the timer again: {again:?}",
        n.id
    );
}

/// A renew waiting for its old task's run is looked at again only a second later: it holds
/// back neither the rows behind it (here with a batch of one) nor keeps the relay busy.
#[tokio::test]
async fn a_renew_waiting_for_a_run_does_not_hold_back_later_rows() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().batch(1));
    let q = env.client.queue("q").unwrap();
    relayed(&env, &relay, OutboxTask::new("k", b"old".to_vec())).await;
    let c = q.claim(10, None).await.unwrap();
    let t = c.tasks[0].clone();
    let mut tx = env.db.pool.begin().await.unwrap();
    cancel_in_tx(&mut tx, "q", "k").await.unwrap();
    let later = |k: &str| OutboxTask::new(k, b"o".to_vec()).delay_ms(3_600_000);
    enqueue_in_tx(&mut tx, "q", &later("k")).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(&mut tx, "q", &later("other")).await.unwrap();
    tx.commit().await.unwrap();
    for _ in 0..5 {
        relay.relay_once().await.unwrap();
    }
    assert!(
        q.get(&TaskRef::key("other").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(env.state("k").await.as_deref(), Some("cancelling"));
    q.ack(&t.id, &t.lease_token).await.unwrap();
    env.relay_all(&relay).await;
    assert_eq!(env.state("k").await.as_deref(), Some("relayed"));
}
