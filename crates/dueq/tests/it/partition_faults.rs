//! One failing partition stays that partition's problem (issue "reliability where operation
//! begins"): on one server, one partition's calls are made to fail (its `meta` hash replaced
//! by a string, so every script that reads it answers WRONGTYPE) while the others work.
//! A worker's acks of the healthy partitions go through at once, the failing partition's wait
//! with their leases kept alive, and nothing runs twice once it heals; a batch enqueue and
//! batch acks answer per task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dueq::{
    ClaimedTask, Client, ErrorKind, Outcome, Queue, QueueKeys, SettingsPatch, TaskSpec, Worker,
    partition_of_key,
};
use dueq_testkit::wait_until_async;
use tokio::sync::Notify;

use crate::support::{Ctx, DEADLINE};

const PARTS: u16 = 6;
const BROKEN: u16 = 3;

async fn partitioned(client: &Client, name: &str) -> Queue {
    let q = client.queue(name).unwrap();
    q.update_settings(&SettingsPatch::default().partitions(Some(PARTS)))
        .await
        .unwrap();
    q
}

/// Breaks partition `p`'s calls (its `meta` becomes a string) and returns how to heal it.
fn break_partition(ctx: &Ctx, name: &str, p: u16) -> impl FnOnce() {
    let meta = QueueKeys::partition(name, p, PARTS).unwrap().meta;
    let saved = format!("{meta}:saved");
    let mut raw = ctx.raw();
    let _: () = redis::cmd("RENAME")
        .arg(&meta)
        .arg(&saved)
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&meta)
        .arg("broken")
        .query(&mut raw)
        .unwrap();
    move || {
        let _: () = redis::cmd("RENAME")
            .arg(&saved)
            .arg(&meta)
            .query(&mut raw)
            .unwrap();
    }
}

/// Keys of `n` tasks per partition.
fn keys_by_partition(n: usize) -> HashMap<u16, Vec<String>> {
    let mut by: HashMap<u16, Vec<String>> = HashMap::new();
    let mut i = 0;
    while by.len() < usize::from(PARTS) || by.values().any(|v| v.len() < n) {
        let k = format!("order:{i}");
        let p = partition_of_key(&k, PARTS);
        let v = by.entry(p).or_default();
        if v.len() < n {
            v.push(k);
        }
        i += 1;
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_partition_holds_up_only_its_own_acks_and_keeps_its_leases() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders").await;
    let by = keys_by_partition(10);
    let specs: Vec<TaskSpec> = by
        .values()
        .flatten()
        .map(|k| {
            TaskSpec::new(k.clone().into_bytes())
                .key(k.clone())
                .lease_ms(1_000)
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    // every handler holds its task until the gate opens
    let gate = Arc::new(Notify::new());
    let open = Arc::new(Mutex::new(false));
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let w = {
        let (gate, open, runs) = (gate.clone(), open.clone(), runs.clone());
        Worker::builder(ctx.client.clone())
            .concurrency(100)
            .handle("orders", move |t: ClaimedTask| {
                let (gate, open, runs) = (gate.clone(), open.clone(), runs.clone());
                async move {
                    *runs
                        .lock()
                        .unwrap()
                        .entry(t.key.clone().unwrap())
                        .or_default() += 1;
                    while !*open.lock().unwrap() {
                        gate.notified().await;
                    }
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start()
    };
    wait_until_async(DEADLINE, "every task running", || async {
        runs.lock().unwrap().len() == 60
    })
    .await;
    let heal = break_partition(&ctx, "orders", BROKEN);
    *open.lock().unwrap() = true;
    gate.notify_waiters();
    // the healthy partitions' acks land at once, not behind the failing one's retries
    let healthy_done = || async {
        let stats = q.partition_stats().await;
        // (the broken partition's stats fail to read: count the others)
        match stats {
            Ok(s) => s.iter().map(|p| p.succeeded_total).sum::<u64>(),
            Err(_) => {
                let mut n = 0;
                for p in (0..PARTS).filter(|p| *p != BROKEN) {
                    let k = QueueKeys::partition("orders", p, PARTS).unwrap();
                    let v: Option<u64> = redis::cmd("HGET")
                        .arg(&k.stats)
                        .arg("succeeded_total")
                        .query(&mut ctx.raw())
                        .unwrap();
                    n += v.unwrap_or(0);
                }
                n
            }
        }
    };
    wait_until_async(
        Duration::from_secs(3),
        "the healthy partitions' acks",
        || async { healthy_done().await == 50 },
    )
    .await;
    // the failing partition for three lease lengths: its tasks' leases are kept alive
    tokio::time::sleep(Duration::from_secs(3)).await;
    heal();
    wait_until_async(DEADLINE, "every ack", || async {
        q.stats().await.is_ok_and(|s| s.succeeded_total == 60)
    })
    .await;
    let stats = w.shutdown().await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!(s.lease_expired_total, 0, "a held lease expired");
    assert_eq!(stats.succeeded, 60);
    assert!(
        runs.lock().unwrap().values().all(|&n| n == 1),
        "a task ran twice: {:?}",
        runs.lock().unwrap()
    );
}

#[tokio::test]
async fn a_batch_enqueue_and_batch_acks_answer_per_task_when_a_partition_fails() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders").await;
    let by = keys_by_partition(2);
    let keys: Vec<String> = by.values().flatten().cloned().collect();
    let heal = break_partition(&ctx, "orders", BROKEN);
    let specs: Vec<TaskSpec> = keys
        .iter()
        .map(|k| TaskSpec::new(b"x".to_vec()).key(k.clone()))
        .collect();
    let answers = q.enqueue_each(&specs).await.unwrap();
    for (k, a) in keys.iter().zip(&answers) {
        if partition_of_key(k, PARTS) == BROKEN {
            let e = a.as_ref().expect_err("the broken partition's task fails");
            assert_eq!(e.kind(), ErrorKind::Redis, "{e}");
        } else {
            assert!(a.as_ref().is_ok_and(|e| e.created()), "{k}: {a:?}");
        }
    }
    // enqueue_batch answers the first failure, the others written all the same
    assert!(q.enqueue_batch(&specs).await.is_err());
    heal();
    // a re-send of what failed lands; what landed answers created: false
    let again = q.enqueue_each(&specs).await.unwrap();
    for (k, a) in keys.iter().zip(&again) {
        let created = a.as_ref().unwrap().created();
        assert_eq!(created, partition_of_key(k, PARTS) == BROKEN, "{k}");
    }
    // acks: claim everything, break the partition again, ack all
    let claimed = q.claim(100, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), keys.len());
    let heal = break_partition(&ctx, "orders", BROKEN);
    let items: Vec<_> = claimed
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    let acks = q.ack_each(&items).await;
    for (t, a) in claimed.iter().zip(&acks) {
        let broken = partition_of_key(t.key.as_deref().unwrap(), PARTS) == BROKEN;
        assert_eq!(a.is_err(), broken, "{:?}: {a:?}", t.key);
    }
    heal();
}
