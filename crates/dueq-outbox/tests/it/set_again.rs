//! A timer set again under the key of a row being cancelled (`enqueue_in_tx` after
//! `cancel_in_tx`, before the relay carried the cancel): the row's `renew`.

use dueq::{NackOutcome, TaskRef};
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
/// cancelled, set again, and the new timer cancelled again before the relay ran: the row
/// ends `cancelled`, not `succeeded` by the old timer's run.
#[tokio::test]
async fn a_new_timer_cancelled_before_the_relay_ran_ends_cancelled() {
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
    assert_eq!(env.state("k").await.as_deref(), Some("cancelled"));
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
