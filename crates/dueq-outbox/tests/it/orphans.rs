//! The orphan sweep of owned queues (`RelayConfig::owned_queue`) against what a restored
//! database and foreign tasks leave in Redis.

use std::time::{Duration, Instant};

use dueq::{TaskRef, TaskSpec};
use dueq_outbox::{OutboxTask, RelayConfig, cancel_in_tx, enqueue_in_tx};

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

/// The sweep's repair of its race with a row committed meanwhile enqueues the live rows it
/// finds for the keys it cancelled, `pending` ones included, straight into Redis, leaving the
/// row `pending`. A `pending` row is cancelled in the table alone (`cancel_in_tx` answers
/// `Cancelled`: "will never run"), so the task the sweep put into Redis stays, and runs if it
/// is due before the next sweep. Here the window is opened on purpose: 1 000 orphans in one
/// page, and the rows for their keys commit while the sweep is cancelling them (watched from
/// a second connection). Up to 5 rounds, until one hits the window (the sweep reports
/// restored rows); every round's timers are then cancelled and must leave no Redis task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_row_restored_by_the_sweep_and_then_cancelled_leaves_no_task() {
    const N: usize = 1_000;
    let env = Env::new().await;
    let relay = env.relay(
        RelayConfig::default()
            .batch(N)
            .owned_queue("orders")
            .unwrap(),
    );
    let orders = env.client.queue("orders").unwrap();
    // a second connection, so the watch does not queue behind the sweep's cancels
    let watch = dueq::Client::connect(&env.redis.url()).await.unwrap();
    let watched = watch.queue("orders").unwrap();
    for round in 1..=5 {
        let keys: Vec<String> = (0..N).map(|i| format!("r{round}:k{i}")).collect();
        let specs: Vec<TaskSpec> = keys
            .iter()
            .map(|k| {
                TaskSpec::new(b"old".to_vec())
                    .key(k.clone())
                    .delay_ms(60_000)
            })
            .collect();
        orders.enqueue_batch(&specs).await.unwrap();
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            let t = OutboxTask::new(k.clone(), b"new".to_vec()).delay_ms(60_000);
            enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
        }
        let pass = {
            let relay = relay.clone();
            tokio::spawn(async move { relay.reconcile().await.unwrap() })
        };
        // commit once the sweep has started cancelling this round's orphans
        let t0 = Instant::now();
        while watched.stats().await.unwrap().scheduled >= N as u64 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the sweep never cancelled"
            );
        }
        tx.commit().await.unwrap();
        let rep = pass.await.unwrap();

        // the application cancels every timer of the round, and the relay catches up
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            cancel_in_tx(&mut tx, "orders", k).await.unwrap();
        }
        tx.commit().await.unwrap();
        env.relay_all(&relay).await;
        let mut left = Vec::new();
        for k in &keys {
            if let Some(t) = key_task(&env, k).await {
                let state = env.state(k).await;
                left.push(format!("{k} (row {state:?}, task due {})", t.due_at_ms));
            }
        }
        assert!(
            left.is_empty(),
            "{} timers cancelled in the table still have a Redis task (round {round}, \
             sweep {rep:?}), e.g. {:?}",
            left.len(),
            &left[..left.len().min(3)]
        );
        if rep.restored > 0 {
            break;
        }
    }
}
