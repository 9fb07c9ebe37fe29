//! Partitions on a 3-master Redis Cluster: case C35 (six partitions, 60 000 keyed tasks) and
//! C36 (a partition's slot moves to another master during a drain).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, CancelOutcome, Client, Due, Outcome, RescheduleOutcome, TaskRef, TaskSpec,
    TaskState, Worker, partition_of_id, partition_of_key,
};
use dueq_testkit::RedisCluster;
use tokio::sync::mpsc;

use super::partitioned;
use crate::support::DEADLINE;

/// C35: 6 partitions on 3 masters, 60 000 keyed tasks.
#[tokio::test]
async fn c35_partitions_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    let q = partitioned(&client, "orders", 6).await;

    // due over the next 1.5 s, keyed, in batches of 1 000 (each split by partition)
    let n = 60_000;
    let specs: Vec<TaskSpec> = (0..n)
        .map(|i| {
            TaskSpec::new(format!("{i}").into_bytes())
                .key(format!("order:{i}:cancel"))
                .delay_ms((i as u64 * 7919) % 1_500)
        })
        .collect();
    let mut ids = HashMap::new();
    for (c, chunk) in specs.chunks(1_000).enumerate() {
        let replies = q.enqueue_batch(chunk).await.unwrap();
        for (i, e) in replies.into_iter().enumerate() {
            assert!(e.created());
            let key = format!("order:{}:cancel", c * 1_000 + i);
            // the id names the partition the key hashes to
            assert_eq!(
                partition_of_id(e.id.as_str(), 6),
                partition_of_key(&key, 6),
                "{key}"
            );
            ids.insert(e.id.clone(), (key, e.due_at_ms));
        }
    }

    // every partition holds some, none more than twice another; stats add up
    let parts = q.partition_stats().await.unwrap();
    let counts: Vec<u64> = parts.iter().map(|s| s.scheduled).collect();
    assert_eq!(counts.iter().sum::<u64>(), n as u64);
    let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
    assert!(*lo > 0 && *hi <= 2 * *lo, "partition counts {counts:?}");
    assert_eq!(q.stats().await.unwrap().scheduled, n as u64);

    // each partition's keys are in one slot, the partitions on every master
    let mut node = cluster.nodes()[0].conn();
    let mut slots = BTreeSet::new();
    for p in 0..6 {
        let k = dueq::QueueKeys::partition("orders", p, 6).unwrap();
        let s: BTreeSet<u16> = k
            .all()
            .iter()
            .map(|key| {
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(*key)
                    .query(&mut node)
                    .unwrap()
            })
            .collect();
        assert_eq!(s.len(), 1, "partition {p} in slots {s:?}");
        assert_eq!(*s.first().unwrap(), dueq::slot_of(&k.sched));
        slots.extend(s);
    }
    assert_eq!(slots.len(), 6);
    // the tags put two partitions on each master of the cluster's even split
    let mut per_master = [0; 3];
    for &slot in &slots {
        per_master[slot_owner(&cluster, slot).1] += 1;
    }
    assert_eq!(per_master, [2, 2, 2]);
    for (i, node) in cluster.nodes().iter().enumerate() {
        let keys: u64 = redis::cmd("DBSIZE").query(&mut node.conn()).unwrap();
        assert!(keys > 0, "master {i} holds no key of the queue");
    }

    // get, cancel and reschedule by key, each in its partition
    for i in (0..n).step_by(1_000) {
        let key = format!("order:{i}:cancel");
        let t = q.get(&TaskRef::key(&key).unwrap()).await.unwrap().unwrap();
        assert_eq!(t.payload, format!("{i}").into_bytes());
        assert_eq!(t.state, TaskState::Scheduled);
        let by_id = q.get(&t.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(by_id.key.as_deref(), Some(key.as_str()));
    }
    let mut cancelled = BTreeSet::new();
    for i in (0..n).step_by(997) {
        let key = format!("order:{i}:cancel");
        assert_eq!(
            q.cancel(&TaskRef::key(&key).unwrap()).await.unwrap(),
            CancelOutcome::Cancelled
        );
        cancelled.insert(key);
    }
    let later = format!("order:{}:cancel", 1);
    let r = q
        .reschedule(&TaskRef::key(&later).unwrap(), Due::DelayMs(3_600_000))
        .await
        .unwrap();
    assert!(matches!(r, RescheduleOutcome::Rescheduled { .. }), "{r:?}");
    // an idempotent enqueue finds the key in its partition
    let again = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("order:2:cancel"))
        .await
        .unwrap();
    assert!(!again.created());
    let left = n as u64 - cancelled.len() as u64;
    assert_eq!(q.stats().await.unwrap().scheduled, left);

    // drain with one claimer: never early, due order within each partition
    let mut claimer = q.due_claimer().lease_ms(Some(60_000));
    let mut last_due: BTreeMap<u16, u64> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let start = Instant::now();
    while seen.len() as u64 + 1 < left {
        assert!(
            start.elapsed() < DEADLINE * 3,
            "drained {} of {left}",
            seen.len()
        );
        let tasks = claimer.claim(500).await.unwrap();
        for t in &tasks {
            assert!(t.claimed_at_ms >= t.due_at_ms, "{} early", t.id);
            let p = partition_of_id(t.id.as_str(), 6);
            let prev = last_due.insert(p, t.due_at_ms).unwrap_or(0);
            assert!(t.due_at_ms >= prev, "partition {p} out of due order");
            assert!(seen.insert(t.id.clone()), "{} twice", t.id);
            assert!(!cancelled.contains(&ids[&t.id].0));
        }
        let acks: Vec<_> = tasks
            .iter()
            .map(|t| (t.id.clone(), t.lease_token.clone()))
            .collect();
        for o in q.ack_batch(&acks).await.unwrap() {
            assert_eq!(o, AckOutcome::Acked);
        }
        if tasks.is_empty() {
            claimer.ready().await;
        }
    }
    claimer.close();
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.scheduled, s.active),
        (1, 0),
        "the rescheduled task is left"
    );
    assert_eq!(s.succeeded_total, left - 1);
}

/// The node ids, and which node (index) owns `slot`, from `CLUSTER NODES`.
fn slot_owner(cluster: &RedisCluster, slot: u16) -> (Vec<String>, usize) {
    let ids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut n.conn())
                .unwrap()
        })
        .collect();
    let table: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query(&mut cluster.nodes()[0].conn())
        .unwrap();
    for line in table.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let owns = f.iter().skip(8).any(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            match (a.parse::<u16>(), b.parse::<u16>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                _ => false,
            }
        });
        if owns {
            let i = ids.iter().position(|id| id == f[0]).unwrap();
            return (ids, i);
        }
    }
    panic!("no node owns slot {slot}:\n{table}");
}

/// Moves `slot` from node `from` to node `to` as `redis-cli --cluster reshard` does:
/// IMPORTING / MIGRATING, `MIGRATE` of its keys one at a time (`pause` apart, so claims and
/// acks meet the slot half moved), then `SETSLOT NODE` everywhere.
async fn move_slot(cluster: &RedisCluster, slot: u16, from: usize, to: usize, pause: Duration) {
    let (ids, owner) = slot_owner(cluster, slot);
    assert_eq!(owner, from);
    let nodes = cluster.nodes();
    let mut src = nodes[from].conn();
    let mut dst = nodes[to].conn();
    let () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&ids[from])
        .query(&mut dst)
        .unwrap();
    let () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&ids[to])
        .query(&mut src)
        .unwrap();
    let port = cluster.ports()[to];
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1)
            .query(&mut src)
            .unwrap();
        let Some(key) = keys.first() else { break };
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(port)
            .arg(key)
            .arg(0)
            .arg(5_000)
            .query(&mut src)
            .unwrap();
        tokio::time::sleep(pause).await;
    }
    for n in nodes {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&ids[to])
            .query(&mut n.conn())
            .unwrap();
    }
}

/// C36: as C35, and one partition's slot moves to another master during a drain. Nothing is
/// lost, no task runs again after its ack, and the errors of the move are retried.
#[tokio::test]
async fn c36_slot_migration_mid_drain() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    let q = partitioned(&client, "orders", 6).await;
    let n = 12_000;
    let specs: Vec<TaskSpec> = (0..n)
        .map(|i| {
            TaskSpec::new(format!("{i}").into_bytes())
                .key(format!("order:{i}"))
                .delay_ms(i as u64 % 3_000)
        })
        .collect();
    for chunk in specs.chunks(1_000) {
        q.enqueue_batch(chunk).await.unwrap();
    }
    let moved = dueq::QueueKeys::partition("orders", 2, 6).unwrap();
    let slot = dueq::slot_of(&moved.sched);
    let (_, from) = slot_owner(&cluster, slot);
    let to = (from + 1) % 3;

    // each run reports its task; an ack that landed is reported by the acker's count
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(client.clone())
        .concurrency(40)
        .handle("orders", move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((t.id, t.attempt, t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let mut runs: HashMap<dueq::TaskId, u32> = HashMap::new();
    let start = Instant::now();
    let mut migrated = false;
    let mut migration = None;
    let mut ran_when_moved = None;
    while runs.len() < n {
        assert!(
            start.elapsed() < DEADLINE * 6,
            "ran {} of {n} tasks",
            runs.len()
        );
        if !migrated && runs.len() > n / 6 {
            migrated = true;
            let cluster = &cluster;
            migration = Some(Box::pin(move_slot(
                cluster,
                slot,
                from,
                to,
                Duration::from_millis(40),
            )));
        }
        let next = async {
            match migration.as_mut() {
                Some(m) => {
                    m.await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = rx.recv() => {
                let (id, _attempt, due, started) = got.unwrap();
                assert!(started >= due, "{id} early");
                *runs.entry(id).or_default() += 1;
            }
            () = next => {
                migration = None;
                ran_when_moved = Some(runs.len());
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    if let Some(m) = migration {
        m.await;
    }
    assert!(migrated);
    // the move happened mid-drain: work was left when it ended
    let left = n - ran_when_moved.expect("the move ended during the drain");
    assert!(left > 0, "the drain ended before the move");
    assert_eq!(slot_owner(&cluster, slot).1, to, "the slot moved");
    crate::support::wait_stats(&q, |s| s.scheduled == 0 && s.active == 0).await;
    let stats = worker.shutdown().await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!(s.dead, 0);
    // a task runs again only when its lease expired before its ack landed (at-least-once);
    // every ack that landed counted a success, so successes = tasks means none ran twice
    // after its ack
    assert_eq!(s.succeeded_total, n as u64, "{stats:?}");
    let twice = runs.values().filter(|&&c| c > 1).count();
    assert_eq!(twice, 0, "{twice} tasks ran twice; worker {stats:?}");
    // the moved partition's tasks are still found where its keys are now
    let t = (0..n)
        .map(|i| format!("order:{i}"))
        .find(|k| partition_of_key(k, 6) == 2)
        .unwrap();
    q.enqueue(
        TaskSpec::new(b"again".to_vec())
            .key(t.as_str())
            .delay_ms(60_000),
    )
    .await
    .unwrap();
    let got = q.get(&TaskRef::key(&t).unwrap()).await.unwrap().unwrap();
    assert_eq!(got.payload, b"again");
    let keys_on_target: u64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut cluster.nodes()[to].conn())
        .unwrap();
    assert!(keys_on_target > 0);
}
