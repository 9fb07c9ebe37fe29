//! Partitions (DESIGN 3, issue "one queue across a Redis Cluster"): case C35 on a 3-master
//! cluster, and the rules of a partitioned queue on one server: settings split over the
//! partitions, a change refused while the queue holds tasks, workers that take every
//! partition's work exactly once and idle at one round of calls per poll.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, CancelOutcome, Client, Due, ErrorKind, Outcome, Queue, RateLimit,
    RescheduleOutcome, SettingsPatch, TaskRef, TaskSpec, TaskState, Worker, partition_of_id,
    partition_of_key,
};
use dueq_testkit::RedisCluster;
use tokio::sync::mpsc;

use crate::support::{Ctx, DEADLINE, script_calls};

async fn partitioned(client: &Client, name: &str, n: u16) -> Queue {
    let q = client.queue(name).unwrap();
    let s = q
        .update_settings(&SettingsPatch::default().partitions(Some(n)))
        .await
        .unwrap();
    assert_eq!(s.partitions, Some(n));
    q
}

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

/// Limits are split over the partitions (so together they hold the queue's limit), a limit
/// below the partition count and a change of partitions on a queue with tasks are refused
/// naming the field, and nothing is written.
#[tokio::test]
async fn settings_are_split_and_partitions_change_only_on_an_empty_queue() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    q.update_settings(
        &SettingsPatch::default()
            .concurrency(Some(8))
            .rate_limit(Some(RateLimit::new(100, 1_000)))
            .max_attempts(Some(3)),
    )
    .await
    .unwrap();
    let s = partitioned(&ctx.client, "orders", 3).await;
    drop(s);
    let s = q.settings().await.unwrap();
    assert_eq!(
        s.concurrency,
        Some(8),
        "the queue's limit is the sum of the shares"
    );
    assert_eq!(s.rate_limit, Some(RateLimit::new(100, 1_000)));
    assert_eq!(s.max_attempts, Some(3));
    let shares: Vec<u64> = q
        .partition_stats()
        .await
        .unwrap()
        .iter()
        .map(|p| p.concurrency_limit.unwrap())
        .collect();
    assert_eq!(shares, vec![3, 3, 2]);
    assert_eq!(q.stats().await.unwrap().concurrency_limit, Some(8));

    // a limit below the partition count
    let e = q
        .update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("group_concurrency"), "{e}");
    assert_eq!(q.settings().await.unwrap().group_concurrency, None);

    // out of range
    for bad in [0u16, 1025] {
        let e = q
            .update_settings(&SettingsPatch::default().partitions(Some(bad)))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("partitions"), "{e}");
    }

    // with a task in the queue, partitions stay
    q.enqueue(TaskSpec::new(b"1".to_vec()).key("k1"))
        .await
        .unwrap();
    let e = q
        .update_settings(&SettingsPatch::default().partitions(Some(6)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("partitions: the queue holds 1"),
        "{e}"
    );
    assert_eq!(q.settings().await.unwrap().partitions, Some(3));

    // the concurrency limit holds over all partitions together
    let specs: Vec<TaskSpec> = (0..60)
        .map(|i| TaskSpec::new(vec![]).key(format!("c{i}")))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let mut active = 0;
    for _ in 0..10 {
        active += q.claim(100, None).await.unwrap().tasks.len();
    }
    assert_eq!(active, 8);
    assert_eq!(q.stats().await.unwrap().active, 8);

    // pause and resume reach every partition
    q.pause().await.unwrap();
    assert!(q.partition_stats().await.unwrap().iter().all(|p| p.paused));
    q.resume().await.unwrap();
    assert!(q.partition_stats().await.unwrap().iter().all(|p| !p.paused));
}

/// A worker on a partitioned queue runs every task once, wakes for a task enqueued into any
/// partition of an idle queue, and idles at one round of calls per poll.
#[tokio::test]
async fn a_worker_takes_every_partition_once_and_idles_cheaply() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 6).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(50)
        .handle("orders", move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((t.id, t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let specs: Vec<TaskSpec> = (0..3_000)
        .map(|i| {
            let s = TaskSpec::new(vec![]).delay_ms(i % 300);
            if i % 2 == 0 {
                s.key(format!("k{i}"))
            } else {
                s
            }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let mut seen = BTreeSet::new();
    let mut per_part = [0u32; 6];
    let start = Instant::now();
    while seen.len() < 3_000 {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let (id, due, started) = tokio::time::timeout(left, rx.recv())
            .await
            .expect("every task runs")
            .unwrap();
        assert!(started >= due, "{id} early");
        per_part[usize::from(partition_of_id(id.as_str(), 6))] += 1;
        assert!(seen.insert(id), "a task ran twice");
    }
    assert!(per_part.iter().all(|&c| c > 300), "{per_part:?}");
    crate::support::wait_stats(&q, |s| s.active == 0 && s.succeeded_total == 3_000).await;

    // idle: the partitions' fallback polls go out together
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let before = script_calls(&ctx);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = script_calls(&ctx) - before;
    // 6 partitions polled about once a second for 4 s, plus the worker's own duties
    assert!(calls <= 6 * 5 + 6, "{calls} script calls in 4 s idle");

    // a task into an idle queue, whatever its partition, starts at once
    for i in 0..6 {
        let sent = Instant::now();
        q.enqueue(TaskSpec::new(vec![]).key(format!("late{i}")))
            .await
            .unwrap();
        let got = tokio::time::timeout(DEADLINE, rx.recv()).await.unwrap();
        assert!(got.is_some());
        assert!(
            sent.elapsed() < Duration::from_millis(500),
            "woken after {:?}",
            sent.elapsed()
        );
    }
    worker.shutdown().await.unwrap();
}

/// The fallback polls of an idle partitioned queue's partitions (with tasks due in an hour)
/// go out together: one round of calls per poll, also after wake-ups of each partition at
/// other times put them out of step.
#[tokio::test]
async fn idle_partitions_poll_in_one_round() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 6).await;
    // a key of each partition
    let keys: Vec<String> = (0..6)
        .map(|p| {
            (0..)
                .map(|i| format!("k{i}"))
                .find(|k| partition_of_key(k, 6) == p)
                .unwrap()
        })
        .collect();
    // every partition holds work due in an hour, as an idle delay queue does
    let future: Vec<TaskSpec> = (0..60)
        .map(|i| {
            TaskSpec::new(vec![])
                .key(format!("f{i}"))
                .delay_ms(3_600_000)
        })
        .collect();
    q.enqueue_batch(&future).await.unwrap();
    assert!(
        q.partition_stats()
            .await
            .unwrap()
            .iter()
            .all(|p| p.scheduled > 0)
    );
    let mut claimer = q.due_claimer();
    claimer.claim(10).await.unwrap();
    let start = Instant::now();
    let mut woken = 0;
    // wake each partition in turn, 150 ms apart
    while woken < 6 {
        if start.elapsed() > Duration::from_millis(300 + 150 * woken as u64) {
            q.enqueue(TaskSpec::new(vec![]).key(keys[woken].as_str()))
                .await
                .unwrap();
            woken += 1;
        }
        tokio::select! {
            () = claimer.ready() => {
                let got = claimer.claim(10).await.unwrap();
                crate::support::ack_all(&q, &got).await;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    let mut rounds = 0;
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(4) {
        claimer.ready().await;
        assert!(claimer.claim(10).await.unwrap().is_empty());
        rounds += 1;
    }
    // 4 s of 1 s polls (and one more round while they come back in step); partitions
    // polling out of step would make about 24
    assert!(rounds <= 7, "{rounds} rounds of claims in 4 s idle");
    claimer.close();
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

/// Priorities and schedules keep their meaning on a partitioned queue: a claim takes an even
/// share from each partition, priority 0 first in each; a schedule's ticks are placed in
/// partition 0 (beside the schedule, where their `schedule:` keys route) and run once each.
#[tokio::test]
async fn priorities_and_schedules_on_a_partitioned_queue() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 4).await;
    let key_in = |p: u16, tag: &str| {
        (0..)
            .map(|i| format!("{tag}{i}"))
            .filter(|k| partition_of_key(k, 4) == p)
            .take(if tag == "low" { 50 } else { 5 })
            .collect::<Vec<_>>()
    };
    let mut specs = Vec::new();
    for p in 0..4 {
        for k in key_in(p, "low") {
            specs.push(TaskSpec::new(b"9".to_vec()).key(k).priority(9));
        }
    }
    for p in 0..4 {
        for k in key_in(p, "high") {
            specs.push(TaskSpec::new(b"0".to_vec()).key(k));
        }
    }
    q.enqueue_batch(&specs).await.unwrap();
    let c = q.claim(40, None).await.unwrap();
    assert_eq!(c.tasks.len(), 40);
    let high = c.tasks.iter().filter(|t| t.priority == 0).count();
    assert_eq!(
        high, 20,
        "every partition's priority-0 tasks come in its share"
    );
    for p in 0..4 {
        let mine: Vec<u8> = c
            .tasks
            .iter()
            .filter(|t| partition_of_id(t.id.as_str(), 4) == p)
            .map(|t| t.priority)
            .collect();
        assert_eq!(mine, [0, 0, 0, 0, 0, 9, 9, 9, 9, 9], "partition {p}");
    }
    crate::support::ack_all(&q, &c.tasks).await;

    // a schedule every second (the shortest allowed); a worker fires and runs its ticks
    let (tx, mut rx) = mpsc::unbounded_channel();
    q.set_schedule(&dueq::ScheduleSpec::new("tick", b"t".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(50)
        .handle("orders", move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((t.id, t.key));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let mut ticks = BTreeSet::new();
    while ticks.len() < 4 {
        let (id, key) = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("ticks run")
            .unwrap();
        let Some(key) = key.filter(|k| k.starts_with("schedule:tick:")) else {
            continue;
        };
        assert_eq!(
            partition_of_id(id.as_str(), 4),
            0,
            "{key} outside partition 0"
        );
        assert!(ticks.insert(key), "a tick ran twice");
    }
    worker.shutdown().await.unwrap();
}

/// A rate limit split over the partitions holds for the queue as a whole, with several
/// claimers at once; and the bound of the split: due work in one partition gets only that
/// partition's share of a concurrency limit.
#[tokio::test]
async fn split_limits_hold_for_the_whole_queue_and_their_bound() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rated");
    q.update_settings(
        &SettingsPatch::default()
            .partitions(Some(3))
            .rate_limit(Some(RateLimit::new(30, 600_000))),
    )
    .await
    .unwrap();
    let specs: Vec<TaskSpec> = (0..300)
        .map(|i| TaskSpec::new(vec![]).key(format!("r{i}")))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    // four claimers, as four processes would, each asking until the limit stops them all
    let claims = (0..4).map(|_| {
        let q = q.clone();
        async move {
            let mut c = q.due_claimer();
            let mut got = 0;
            for _ in 0..20 {
                got += c.claim(7).await.unwrap().len();
            }
            got
        }
    });
    let total: usize = futures_util::future::join_all(claims).await.iter().sum();
    assert_eq!(
        total, 30,
        "the queue's rate limit over all partitions and claimers"
    );
    let s = q.stats().await.unwrap();
    assert_eq!(s.active, 30);
    assert_eq!(s.rate_limit, Some(RateLimit::new(30, 600_000)));

    // the bound: a concurrency limit of 6 over 3 partitions, all due work in partition 1
    let q = ctx.queue("skewed");
    q.update_settings(
        &SettingsPatch::default()
            .partitions(Some(3))
            .concurrency(Some(6)),
    )
    .await
    .unwrap();
    let specs: Vec<TaskSpec> = (0..)
        .map(|i| format!("s{i}"))
        .filter(|k| partition_of_key(k, 3) == 1)
        .take(20)
        .map(|k| TaskSpec::new(vec![]).key(k))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let got = q.claim(20, None).await.unwrap().tasks.len();
    assert_eq!(got, 2, "partition 1's share of 6 over 3");
}

/// Partitions left from an earlier count take the queue's state when they are used again: a
/// queue paused at 4 partitions, set to 1, resumed and set to 4 again is not paused anywhere.
#[tokio::test]
async fn partitions_used_again_take_the_queue_state() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "again", 4).await;
    q.pause().await.unwrap();
    partitioned(&ctx.client, "again", 1).await;
    q.resume().await.unwrap();
    partitioned(&ctx.client, "again", 4).await;
    let parts = q.partition_stats().await.unwrap();
    assert_eq!(parts.len(), 4);
    assert!(parts.iter().all(|p| !p.paused), "{parts:?}");
    q.enqueue_batch(
        &(0..20)
            .map(|i| TaskSpec::new(vec![]).key(format!("a{i}")))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert_eq!(q.claim(20, None).await.unwrap().tasks.len(), 20);
}

/// A partition with a task due soon keeps its timer when another partition's wake-up makes
/// the claimer look: it is not asked early for nothing (which would push its next look to
/// the fallback poll, a second away), so its task is claimed on time.
#[tokio::test]
async fn a_wake_up_of_one_partition_keeps_the_timers_of_the_others() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "timers", 2).await;
    let key_of = |p: u16| {
        (0..)
            .map(|i| format!("t{i}"))
            .find(|k| partition_of_key(k, 2) == p)
            .unwrap()
    };
    let mut claimer = q.due_claimer();
    assert!(claimer.claim(10).await.unwrap().is_empty());
    let later = q
        .enqueue(TaskSpec::new(vec![]).key(key_of(1)).delay_ms(700))
        .await
        .unwrap();
    let start = Instant::now();
    let mut woke = false;
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the task due in 700 ms never came"
        );
        if !woke && start.elapsed() > Duration::from_millis(300) {
            q.enqueue(TaskSpec::new(vec![]).key(key_of(0)))
                .await
                .unwrap();
            woke = true;
        }
        tokio::select! {
            () = claimer.ready() => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => continue,
        }
        let got = claimer.claim(10).await.unwrap();
        crate::support::ack_all(&q, &got).await;
        if let Some(t) = got.iter().find(|t| t.id == later.id) {
            let late = t.claimed_at_ms - t.due_at_ms;
            assert!(late < 200, "claimed {late} ms after its due time");
            break;
        }
    }
    assert!(woke);
    claimer.close();
}

/// A saturated worker (every slot busy while tasks keep coming due) claims as soon as a slot
/// frees on a partitioned queue, as with one partition: partitions held back for want of a
/// slot take what a short claim of another left (before, freed slots stayed idle for up to a
/// fallback poll while due tasks waited; found by review). Same run, same load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_worker_claims_as_soon_as_a_slot_frees() {
    let ctx = Ctx::new().await;
    let producer = Client::connect(&ctx.server.url()).await.unwrap();
    let mut makespan = Vec::new();
    for (name, n) in [("sat1", 1u16), ("sat6", 6)] {
        partitioned(&ctx.client, name, n).await;
        let q = producer.queue(name).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let worker = Worker::builder(ctx.client.clone())
            .concurrency(4)
            .handle(name, move |_t| {
                let tx = tx.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = tx.send(Instant::now());
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start();
        // idle a while first, as a worker waiting for work does
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let start = Instant::now();
        // one batch, due 50 ms apart from 0.5 s on (keyless: the partitions in turn)
        let specs: Vec<TaskSpec> = (0..12u64)
            .map(|i| TaskSpec::new(vec![]).delay_ms(500 + i * 50))
            .collect();
        q.enqueue_batch(&specs).await.unwrap();
        let mut last = start;
        for _ in 0..12 {
            last = tokio::time::timeout(DEADLINE, rx.recv())
                .await
                .unwrap()
                .unwrap();
        }
        makespan.push(last - start);
        worker.shutdown().await.unwrap();
    }
    // 12 tasks of 200 ms on 4 slots, the first due at 0.5 s: about 1.26 s either way (seen:
    // 1 partition 1.26 s, 6 partitions 1.81 to 1.91 s, slots idle up to a poll while tasks wait)
    assert!(
        makespan[1] < makespan[0] + Duration::from_millis(300),
        "1 partition: {:?}, 6 partitions: {:?}",
        makespan[0],
        makespan[1]
    );
}

/// A pause through a client whose partition count is up to `LAYOUT_TTL` old (read just
/// before another process partitioned the empty queue) pauses every partition (before, only
/// partition 0, while stats said the queue was paused; found by review).
#[tokio::test]
async fn a_pause_right_after_a_partition_change_pauses_every_partition() {
    let ctx = Ctx::new().await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue("sp").unwrap();
    stale.stats().await.unwrap(); // caches the count: 1
    let q = partitioned(&ctx.client, "sp", 6).await;
    stale.pause().await.unwrap();
    let parts = q.partition_stats().await.unwrap();
    assert!(
        parts.iter().all(|p| p.paused),
        "paused: {:?}",
        parts.iter().map(|p| p.paused).collect::<Vec<_>>()
    );
}

/// Keys `{prefix}0..n` that a fresh client cannot find by key in queue `name`.
async fn missing_for_a_fresh_client(ctx: &Ctx, name: &str, prefix: &str, n: usize) -> Vec<String> {
    let fresh = Client::connect(&ctx.server.url()).await.unwrap();
    let q = fresh.queue(name).unwrap();
    let mut missing = Vec::new();
    for i in 0..n {
        let k = format!("{prefix}{i}");
        if q.get(&TaskRef::key(k.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(k);
        }
    }
    missing
}

/// A FLUSHALL takes a partitioned queue's count with everything else, while a client keeps
/// its layout cached (`LAYOUT_TTL`, 5 s). Its enqueues right after the wipe are refused by
/// the partitions above 0 (their count is gone), so it reads the layout again and they land
/// in the one partition a fresh client reads, findable by key and with ids of partition 0.
#[tokio::test]
async fn enqueues_routed_by_a_layout_cached_before_a_flushall_land_where_clients_look() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "wiped", 3).await;
    let specs = |prefix: &str| -> Vec<TaskSpec> {
        (0..30)
            .map(|i| {
                TaskSpec::new(b"x".to_vec())
                    .key(format!("{prefix}{i}"))
                    .delay_ms(60_000)
            })
            .collect()
    };
    q.enqueue_batch(&specs("before-")).await.unwrap();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut ctx.server.conn())
        .unwrap();
    let done = q.enqueue_batch(&specs("after-")).await.unwrap();
    assert!(done.iter().all(|e| e.created()), "{done:?}");
    assert!(
        done.iter().all(|e| partition_of_id(e.id.as_str(), 3) == 0),
        "ids of partitions above 0: {:?}",
        done.iter().map(|e| e.id.as_str()).collect::<Vec<_>>()
    );
    let missing = missing_for_a_fresh_client(&ctx, "wiped", "after-", 30).await;
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
    // and one at a time, keyless too
    q.enqueue(TaskSpec::new(b"y".to_vec()).delay_ms(60_000))
        .await
        .unwrap();
    let fresh = Client::connect(&ctx.server.url()).await.unwrap();
    assert_eq!(
        fresh
            .queue("wiped")
            .unwrap()
            .stats()
            .await
            .unwrap()
            .scheduled,
        31
    );
}

/// The count of an empty queue goes from 3 to 1 while another client has 3 cached: that
/// client's enqueues are refused by partitions 1 and 2, which forget their count first, and
/// land in partition 0.
#[tokio::test]
async fn enqueues_routed_by_a_count_cached_before_it_shrank_land_where_clients_look() {
    let ctx = Ctx::new().await;
    partitioned(&ctx.client, "shrunk", 3).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue("shrunk").unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 3); // caches the count
    ctx.client
        .queue("shrunk")
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(None))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..30)
        .map(|i| {
            TaskSpec::new(b"x".to_vec())
                .key(format!("k{i}"))
                .delay_ms(60_000)
        })
        .collect();
    stale.enqueue_batch(&specs).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, "shrunk", "k", 30).await;
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
}

/// Keyed specs `{prefix}0..n`, due in a minute.
fn keyed_specs(prefix: &str, n: usize) -> Vec<TaskSpec> {
    (0..n)
        .map(|i| {
            TaskSpec::new(b"x".to_vec())
                .key(format!("{prefix}{i}"))
                .delay_ms(60_000)
        })
        .collect()
}

/// A queue name whose partition 1 has other keys under `a` partitions than under `b`
/// (partition_tag depends on the count).
fn name_with_other_keys(prefix: &str, a: u16, b: u16) -> String {
    (0..1000)
        .map(|i| format!("{prefix}{i}"))
        .find(|n| {
            dueq::QueueKeys::partition(n, 1, a).unwrap().meta
                != dueq::QueueKeys::partition(n, 1, b).unwrap().meta
        })
        .unwrap()
}

/// Partition p's keys depend on the count (`partition_tag(name, p, n)`): after a change 2 ->
/// 4, a client with 2 cached routes keys to partition 1 *of 2*, which forgot its count in
/// the change, so it is refused there and routes them by 4 (partition 0 is not checked).
#[tokio::test]
async fn a_count_cached_before_it_grew_is_refused_by_the_old_partition_keys() {
    let ctx = Ctx::new().await;
    let name = name_with_other_keys("grow", 2, 4);
    partitioned(&ctx.client, &name, 2).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue(&name).unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 2); // caches the count
    ctx.client
        .queue(&name)
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(Some(4)))
        .await
        .unwrap();
    stale.enqueue_batch(&keyed_specs("k", 30)).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, &name, "k", 30).await;
    // partition 0 is not checked (documented); these went through the check of partition 1
    let via_checked: Vec<_> = missing
        .iter()
        .filter(|k| partition_of_key(k, 2) == 1)
        .collect();
    assert!(
        via_checked.is_empty(),
        "routed by the old count to partition 1 of 2, accepted, not found by a fresh client: \
         {via_checked:?} (all missing: {missing:?})"
    );
}

/// The same for a smaller count, 4 -> 2: partition 1 of 4 (other keys than partition 1 of
/// 2) forgets its count too.
#[tokio::test]
async fn a_count_cached_before_it_shrank_to_two_is_refused_by_partition_1_of_4() {
    let ctx = Ctx::new().await;
    let name = name_with_other_keys("shrink", 4, 2);
    partitioned(&ctx.client, &name, 4).await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue(&name).unwrap();
    assert_eq!(stale.partition_stats().await.unwrap().len(), 4);
    ctx.client
        .queue(&name)
        .unwrap()
        .update_settings(&SettingsPatch::default().partitions(Some(2)))
        .await
        .unwrap();
    stale.enqueue_batch(&keyed_specs("k", 40)).await.unwrap();
    let missing = missing_for_a_fresh_client(&ctx, &name, "k", 40).await;
    let via_p1: Vec<_> = missing
        .iter()
        .filter(|k| partition_of_key(k, 4) == 1)
        .collect();
    assert!(
        via_p1.is_empty(),
        "routed by the old count to partition 1 of 4, accepted, not found by a fresh client: \
         {via_p1:?} (all missing: {missing:?})"
    );
}

/// Which cluster nodes hold `key` (a node that does not answers MOVED).
fn node_of(cluster: &RedisCluster, key: &str) -> usize {
    (0..cluster.nodes().len())
        .find(|&i| {
            redis::cmd("EXISTS")
                .arg(key)
                .query::<i64>(&mut cluster.nodes()[i].conn())
                .is_ok()
        })
        .unwrap()
}

/// On a Redis Cluster a FLUSHALL (or a restart without persistence) takes one node:
/// partition 0 keeps its count (6), a partition on the flushed node loses its own. A client
/// refused there reads the layout again, finds 6 still, and sends the share there
/// unchecked: every keyed enqueue is accepted and found by key by every client.
#[tokio::test]
async fn a_cluster_node_flushed_without_partition_0_still_takes_its_keys() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    partitioned(&client, "one_node", 6).await;
    let metas: Vec<String> = (0..6u16)
        .map(|p| dueq::QueueKeys::partition("one_node", p, 6).unwrap().meta)
        .collect();
    let zero = node_of(&cluster, &metas[0]);
    let victim = (0..3).find(|&i| i != zero).unwrap();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[victim].conn())
        .unwrap();
    let fresh = Client::connect(&url).await.unwrap();
    let q = fresh.queue("one_node").unwrap();
    let mut failed = Vec::new();
    for i in 0..30 {
        let k = format!("k{i}");
        if let Err(e) = q
            .enqueue(TaskSpec::new(b"x".to_vec()).key(k.clone()).delay_ms(60_000))
            .await
        {
            failed.push((k, partition_of_key(&format!("k{i}"), 6), e.to_string()));
        }
    }
    assert!(failed.is_empty(), "refused: {failed:#?}");
}

/// On a Redis Cluster the node holding partition 0 is flushed; a client with 6 cached
/// routes to partitions on the other nodes, whose metas still say 6: accepted, while a
/// fresh client reads 1 from partition 0 and never looks there.
#[ignore = "known limit, not fixed: a cluster node wipe that takes partition 0 but not the others leaves their counts, so a cached count is accepted there for up to 5 s (docs/SCALING.md)"]
#[tokio::test]
async fn a_cluster_node_flushed_with_partition_0_refuses_a_cached_count() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    let q = partitioned(&client, "zero_node", 6).await;
    assert_eq!(q.partition_stats().await.unwrap().len(), 6);
    let meta0 = dueq::QueueKeys::new("zero_node").unwrap().meta;
    let zero = node_of(&cluster, &meta0);
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[zero].conn())
        .unwrap();
    q.enqueue_batch(&keyed_specs("k", 30)).await.unwrap();
    let fresh = Client::connect(&url).await.unwrap();
    let f = fresh.queue("zero_node").unwrap();
    let mut missing = Vec::new();
    for i in 0..30 {
        let k = format!("k{i}");
        if f.get(&TaskRef::key(k.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(k);
        }
    }
    assert!(
        missing.is_empty(),
        "not found by a fresh client: {missing:?}"
    );
}

/// A batch of keyless tasks and one key routed to a partition of a cluster node flushed
/// without partition 0 succeeds whole (the refused share goes there unchecked), so no error
/// makes a caller send the keyless tasks again.
#[tokio::test]
async fn a_batch_with_a_share_for_a_flushed_node_is_written_once() {
    let cluster = RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let client = Client::connect(&url).await.unwrap();
    partitioned(&client, "mixed", 6).await;
    let meta0 = dueq::QueueKeys::new("mixed").unwrap().meta;
    let zero = node_of(&cluster, &meta0);
    let victim = (0..3).find(|&i| i != zero).unwrap();
    let victim_parts: Vec<u16> = (1..6u16)
        .filter(|&p| {
            node_of(
                &cluster,
                &dueq::QueueKeys::partition("mixed", p, 6).unwrap().meta,
            ) == victim
        })
        .collect();
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.nodes()[victim].conn())
        .unwrap();
    let bad_key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| victim_parts.contains(&partition_of_key(k, 6)))
        .unwrap();
    let mut batch: Vec<TaskSpec> = (0..10)
        .map(|_| TaskSpec::new(b"keyless".to_vec()).delay_ms(60_000))
        .collect();
    batch.push(TaskSpec::new(b"x".to_vec()).key(bad_key).delay_ms(60_000));
    let q = client.queue("mixed").unwrap();
    let done = q.enqueue_batch(&batch).await.unwrap();
    assert!(done.iter().all(|e| e.created()), "{done:?}");
    assert_eq!(q.stats().await.unwrap().scheduled, 11);
}
