//! The orphan sweep of owned queues (`RelayConfig::owned_queue`) against what a restored
//! database and foreign tasks leave in Redis.

use dueq::{TaskRef, TaskSpec};
use dueq_outbox::{OutboxTask, RelayConfig, enqueue_in_tx};

use crate::support::Env;

async fn key_task(env: &Env, key: &str) -> Option<dueq::Task> {
    let q = env.client.queue("orders").unwrap();
    q.get(&TaskRef::key(key).unwrap()).await.unwrap()
}

/// The database restored from an older backup re-creates order 42 (its id sequence went back
/// too), whose new cancel timer is due in 30 min; Redis still holds the old order 42's timer
/// under the same key, due in 2 s with the old payload. In an owned queue the row is the
/// truth: after a relay round and a reconciler pass, the key's Redis task must be the row's
/// (its due time and payload), else the new order is cancelled 30 min early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_under_a_new_rows_key_does_not_keep_its_own_due_time() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().owned_queue("orders").unwrap());
    let orders = env.client.queue("orders").unwrap();
    orders
        .enqueue(
            TaskSpec::new(b"old".to_vec())
                .key("order:42:cancel")
                .delay_ms(2_000),
        )
        .await
        .unwrap();

    let mut tx = env.db.pool.begin().await.unwrap();
    let t = OutboxTask::new("order:42:cancel", b"new".to_vec()).delay_ms(30 * 60_000);
    let row_due = enqueue_in_tx(&mut tx, "orders", &t)
        .await
        .unwrap()
        .due_at_ms;
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let rep = relay.reconcile().await.unwrap();

    let t = key_task(&env, "order:42:cancel")
        .await
        .expect("the key has a task in Redis");
    assert_eq!(
        (t.due_at_ms, t.payload.as_slice()),
        (row_due, b"new".as_slice()),
        "the key's Redis task is the old orphan, not the row's (reconciler: {rep:?})"
    );
}

/// dueq keys may hold any UTF-8, NUL included; PostgreSQL text cannot. A foreign task with
/// such a key in an owned queue is an orphan like any other (no row can hold its key), and
/// must not make the reconciler pass fail: it would fail at the same page on every pass, so
/// no orphan after it is ever removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_with_a_nul_byte_does_not_wedge_the_sweep() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().owned_queue("orders").unwrap());
    let orders = env.client.queue("orders").unwrap();
    for k in ["foreign\0key", "foreign-plain"] {
        orders
            .enqueue(TaskSpec::new(b"x".to_vec()).key(k).delay_ms(60_000))
            .await
            .unwrap();
    }

    let rep = relay
        .reconcile()
        .await
        .expect("a reconciler pass over an owned queue with a NUL in a task's key");
    assert_eq!(rep.orphans_removed, 2, "{rep:?}");
    assert!(key_task(&env, "foreign-plain").await.is_none());
}
