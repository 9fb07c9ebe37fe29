//! Cases C37, C38 and C39 of `shared/cases/CASES.md`: the outbox against a real PostgreSQL
//! and a real redis-server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Outcome, TaskId, TaskRef, Worker, WorkerHandle};
use dueq_outbox::{OutboxTask, RelayConfig, enqueue_in_tx};
use dueq_testkit::wait_until_async;
use sqlx::Row;

use crate::support::Env;

/// Runs per key: (started_at_ms, due_at_ms) of each run.
type Runs = Arc<Mutex<HashMap<String, Vec<(u64, u64)>>>>;

fn worker(env: &Env, queue: &str, runs: &Runs) -> WorkerHandle {
    let runs = runs.clone();
    Worker::builder(env.client.clone())
        .concurrency(256)
        .handle(queue, move |t| {
            let runs = runs.clone();
            async move {
                runs.lock()
                    .unwrap()
                    .entry(t.key.clone().unwrap_or_default())
                    .or_default()
                    .push((t.started_at_ms, t.due_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start()
}

fn ran(runs: &Runs, key: &str) -> usize {
    runs.lock().unwrap().get(key).map_or(0, Vec::len)
}

async fn create_order(env: &Env, id: i64, commit: bool) {
    let mut tx = env.db.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES ($1)")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    let task = OutboxTask::new(format!("order:{id}:cancel"), id.to_string()).delay_ms(30 * 60_000);
    assert!(
        enqueue_in_tx(&mut tx, "orders", &task)
            .await
            .unwrap()
            .created
    );
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
}

async fn in_redis(env: &Env, key: &str) -> Option<dueq::Task> {
    let q = env.client.queue("orders").unwrap();
    q.get(&TaskRef::key(key).unwrap()).await.unwrap()
}

/// Case C37 in shared/cases/CASES.md: an order row and its cancel timer written in one
/// PostgreSQL transaction: commit → the task is in Redis within 1 s; rollback → never.
/// The relay's fallback poll is set to 60 s, so only the NOTIFY can meet the 1 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c37_outbox_commit_and_rollback() {
    let env = Env::new().await;
    sqlx::query("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .execute(&env.db.pool)
        .await
        .unwrap();
    let relay = env.spawn_relay(RelayConfig::default().poll_ms(60_000));

    create_order(&env, 1, true).await;
    let committed = Instant::now();
    wait_until_async(
        Duration::from_secs(1),
        "order 1's timer is in Redis",
        || async { in_redis(&env, "order:1:cancel").await.is_some() },
    )
    .await;
    eprintln!("commit → in Redis: {:?}", committed.elapsed());
    let row_due: i64 =
        sqlx::query_scalar("SELECT due_at_ms FROM dueq_outbox WHERE key = 'order:1:cancel'")
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    let t = in_redis(&env, "order:1:cancel").await.unwrap();
    assert_eq!(t.due_at_ms, row_due as u64, "Redis has the row's due time");
    assert_eq!(t.payload, b"1");
    // Redis has it before the relay's own commit lands: wait for the row to say so.
    wait_until_async(
        Duration::from_secs(1),
        "the row is marked relayed",
        || async { env.state("order:1:cancel").await.as_deref() == Some("relayed") },
    )
    .await;

    create_order(&env, 2, false).await;
    create_order(&env, 3, true).await;
    wait_until_async(
        Duration::from_secs(1),
        "order 3's timer is in Redis",
        || async { in_redis(&env, "order:3:cancel").await.is_some() },
    )
    .await;
    // Rows are relayed in id order and order 2's row id lies between 1 and 3: had it
    // committed, it would be in Redis by now.
    assert!(in_redis(&env, "order:2:cancel").await.is_none());
    assert_eq!(env.state("order:2:cancel").await, None);
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(orders, 2);
    let stats = env.client.queue("orders").unwrap().stats().await.unwrap();
    assert_eq!(stats.enqueued_total, 2);
    relay.stop().await;
}

/// Case C38 in shared/cases/CASES.md: PostgreSQL as the source of truth; 10 000 pending tasks;
/// `FLUSHALL` on Redis. The reconciler restores every one with its original due time and key,
/// none runs twice, and a task completed before the wipe is not restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c38_redis_wiped() {
    const N: usize = 10_000;
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().recheck_ms(0));
    let q = env.client.queue("orders").unwrap();
    let runs: Runs = Arc::default();

    // A task that runs and completes before the wipe, its success recorded in the table.
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(
        &mut tx,
        "orders",
        &OutboxTask::new("order:0:cancel", b"0".to_vec()),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let w = worker(&env, "orders", &runs);
    wait_until_async(
        Duration::from_secs(10),
        "order 0 is recorded succeeded",
        || async {
            relay.relay_once().await.unwrap();
            env.state("order:0:cancel").await.as_deref() == Some("succeeded")
        },
    )
    .await;
    w.shutdown().await.unwrap();
    assert_eq!(ran(&runs, "order:0:cancel"), 1);

    // 10 000 pending timers, relayed into a paused queue so none runs before the wipe.
    q.pause().await.unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    let base: i64 = sqlx::query_scalar("SELECT dueq_outbox_now_ms()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    for i in 1..=N {
        let due = base as u64 + 500 + (i as u64 % 1000);
        let t = OutboxTask::new(format!("order:{i}:cancel"), i.to_string()).due_at_ms(due);
        enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    assert_eq!(q.stats().await.unwrap().scheduled, N as u64);

    let mut raw = env.redis.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut raw).unwrap();
    assert_eq!(q.stats().await.unwrap().scheduled, 0, "Redis is empty");

    let rep = relay.reconcile().await.unwrap();
    assert_eq!(rep.restored, N as u64, "{rep:?}");
    assert_eq!(
        rep.examined, N as u64,
        "the completed row is not looked at: {rep:?}"
    );
    assert!(rep.complete);
    assert!(
        in_redis(&env, "order:0:cancel").await.is_none(),
        "completed task not restored"
    );
    let rows = sqlx::query("SELECT key, due_at_ms FROM dueq_outbox WHERE key <> 'order:0:cancel'")
        .fetch_all(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(rows.len(), N);
    for chunk in rows.chunks(1000) {
        let got = futures_util::future::join_all(chunk.iter().map(|r| {
            let q = q.clone();
            let key = TaskRef::key(r.get::<String, _>(0)).unwrap();
            async move { q.get(&key).await }
        }))
        .await;
        for (r, t) in chunk.iter().zip(got) {
            let t = t.unwrap().expect("restored");
            assert_eq!(t.due_at_ms, r.get::<i64, _>(1) as u64, "original due time");
            assert_eq!(t.key.as_deref(), Some(r.get::<String, _>(0).as_str()));
        }
    }

    // Now let them run: each exactly once, never early; the old one not again.
    let w = worker(&env, "orders", &runs);
    wait_until_async(
        Duration::from_secs(60),
        "every restored task ran",
        || async { runs.lock().unwrap().len() == N + 1 },
    )
    .await;
    wait_until_async(
        Duration::from_secs(60),
        "every row is recorded succeeded",
        || async {
            relay.relay_once().await.unwrap();
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM dueq_outbox WHERE state = 'succeeded'")
                    .fetch_one(&env.db.pool)
                    .await
                    .unwrap();
            n == N as i64 + 1
        },
    )
    .await;
    let rep = relay.reconcile().await.unwrap();
    assert_eq!(rep.restored, 0, "{rep:?}");
    w.shutdown().await.unwrap();
    let runs = runs.lock().unwrap();
    for (key, v) in runs.iter() {
        assert_eq!(v.len(), 1, "{key} ran {} times", v.len());
        assert!(v[0].0 >= v[0].1, "{key} ran early");
    }
}

/// Case C39 in shared/cases/CASES.md: a task in Redis whose row was deleted, and one whose
/// row was marked done, in PostgreSQL: the reconciler removes both before they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c39_redis_ahead_of_the_database() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let runs: Runs = Arc::default();
    let w = worker(&env, "orders", &runs);
    let mut tx = env.db.pool.begin().await.unwrap();
    for k in ["deleted", "done", "control"] {
        let t = OutboxTask::new(k, k.as_bytes().to_vec()).delay_ms(3_000);
        enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let ids: HashMap<String, String> = sqlx::query("SELECT key, task_id FROM dueq_outbox")
        .fetch_all(&env.db.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for k in ["deleted", "done", "control"] {
        assert!(in_redis(&env, k).await.is_some());
    }

    sqlx::query("DELETE FROM dueq_outbox WHERE key = 'deleted'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    sqlx::query("UPDATE dueq_outbox SET state = 'succeeded' WHERE key = 'done'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    let rep = relay.reconcile().await.unwrap();
    assert_eq!(rep.removed, 2, "{rep:?}");
    let q = env.client.queue("orders").unwrap();
    for k in ["deleted", "done"] {
        let id = TaskRef::Id(TaskId::new(ids[k].clone()).unwrap());
        assert!(
            q.get(&id).await.unwrap().is_none(),
            "{k} removed from Redis"
        );
    }
    wait_until_async(Duration::from_secs(20), "the control task ran", || async {
        ran(&runs, "control") == 1
    })
    .await;
    assert_eq!(ran(&runs, "deleted"), 0);
    assert_eq!(ran(&runs, "done"), 0);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM dueq_outbox_tombstones")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    w.shutdown().await.unwrap();
}

/// Case C39, the part tombstones cannot see: Redis tasks with no row at all (here rows deleted
/// in the relay's mode, as after restoring the database from an older backup, and tasks
/// enqueued behind the outbox's back). In a queue declared owned by the outbox the reconciler
/// removes them, a few per pass, going on from where the last pass stopped; it keeps the
/// tasks of live rows and of the queue's schedules, and never touches a queue it does not own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c39_orphans_of_an_owned_queue_are_removed() {
    let env = Env::new().await;
    let cfg = RelayConfig::default()
        .batch(2)
        .max_rows_per_pass(3)
        .owned_queue("orders")
        .unwrap();
    let relay = env.relay(cfg);
    let mut tx = env.db.pool.begin().await.unwrap();
    for k in ["live-1", "live-2", "restored-away-1", "restored-away-2"] {
        let t = OutboxTask::new(k, k.as_bytes().to_vec()).delay_ms(60_000);
        enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;

    // the database "restored" without two rows: no trigger, so no tombstone
    let mut tx = env.db.pool.begin().await.unwrap();
    sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("DELETE FROM dueq_outbox WHERE key LIKE 'restored-away-%'")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let orders = env.client.queue("orders").unwrap();
    let other = env.client.queue("other").unwrap();
    let direct = |key: Option<&str>| {
        let t = dueq::TaskSpec::new(b"x".to_vec()).delay_ms(60_000);
        match key {
            Some(k) => t.key(k),
            None => t,
        }
    };
    orders.enqueue(direct(Some("foreign"))).await.unwrap();
    let keyless = orders.enqueue(direct(None)).await.unwrap().id;
    orders
        .enqueue(direct(Some("schedule:nightly:1767225600000")))
        .await
        .unwrap();
    other.enqueue(direct(Some("foreign"))).await.unwrap();

    // 7 scheduled tasks in `orders`, at most 3 looked at per pass
    let mut passes = 0;
    let mut removed = 0;
    let mut swept = 0;
    loop {
        let rep = relay.reconcile().await.unwrap();
        assert!(rep.swept <= 3, "{rep:?}");
        assert_eq!(rep.removed, 0, "no tombstones: {rep:?}");
        passes += 1;
        removed += rep.orphans_removed;
        swept += rep.swept;
        if rep.complete {
            break;
        }
        assert!(passes < 10, "the sweep never completed");
    }
    assert!(
        passes >= 3,
        "7 tasks need at least 3 passes of 3, took {passes}"
    );
    assert_eq!(swept, 7);
    assert_eq!(
        removed, 4,
        "two rows restored away, a foreign and a keyless task"
    );
    for k in ["restored-away-1", "restored-away-2", "foreign"] {
        assert!(in_redis(&env, k).await.is_none(), "{k} removed");
    }
    assert!(orders.get(&TaskRef::Id(keyless)).await.unwrap().is_none());
    for k in ["live-1", "live-2", "schedule:nightly:1767225600000"] {
        assert!(in_redis(&env, k).await.is_some(), "{k} kept");
    }
    let not_owned = other.get(&TaskRef::key("foreign").unwrap()).await.unwrap();
    assert!(not_owned.is_some(), "a queue not owned is never swept");
    assert_eq!(env.state("live-1").await.as_deref(), Some("relayed"));

    // a full sweep later finds nothing more to remove
    let rep = relay.reconcile().await.unwrap();
    assert_eq!(rep.orphans_removed, 0, "{rep:?}");
}

#[test]
fn an_owned_queue_name_is_checked() {
    let err = RelayConfig::default().owned_queue("no spaces").unwrap_err();
    assert_eq!(err.field(), Some("owned_queue"), "{err}");
}
