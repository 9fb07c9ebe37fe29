//! Case C20 of `shared/cases/CASES.md`: dueq on a 3-master Redis Cluster.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, Backoff, CancelOutcome, Client, DeadRetryOutcome, Due, NackOutcome, Outcome,
    RescheduleOutcome, SettingsPatch, TaskRef, TaskSpec, TaskState, Worker,
};
use dueq_testkit::RedisCluster;
use tokio::sync::mpsc;

use crate::support::DEADLINE;

/// Every operation of one queue, on the cluster; panics on any error (a `CROSSSLOT` would be
/// one).
async fn every_operation(client: &Client, name: &str) {
    // recovered leases are due again at once
    let q = client
        .queue(name)
        .unwrap()
        .with_backoff(Backoff::new(1, 1.0, 1));
    q.update_settings(
        &SettingsPatch::default()
            .succeeded_max(Some(10))
            .dead_max(Some(10)),
    )
    .await
    .unwrap();

    // enqueue, single and batch
    let one = q
        .enqueue(TaskSpec::new(b"one".to_vec()).key("one"))
        .await
        .unwrap();
    assert!(one.created());
    let batch = q
        .enqueue_batch(&[
            TaskSpec::new(b"b0".to_vec()).key("b0"),
            TaskSpec::new(b"b1".to_vec()).key("b1"),
            TaskSpec::new(b"b2".to_vec()).key("b2"),
            TaskSpec::new(b"b3".to_vec()).key("b3"),
            TaskSpec::new(b"later".to_vec())
                .key("later")
                .delay_ms(60_000),
            TaskSpec::new(b"moved".to_vec())
                .key("moved")
                .delay_ms(60_000),
        ])
        .await
        .unwrap();
    assert!(batch.iter().all(|e| e.created()));

    // get by key and by id
    let t = q.get(&TaskRef::key("one").unwrap()).await.unwrap().unwrap();
    assert_eq!(
        (t.id.clone(), t.state),
        (one.id.clone(), TaskState::Scheduled)
    );
    let t = q.get(&batch[4].id.clone().into()).await.unwrap().unwrap();
    assert_eq!(t.payload, b"later");

    // claim, extend, ack, nack (retry and permanent), release
    let mut c = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(c.len(), 5, "{name}: the due tasks");
    let t = c.remove(0);
    assert_eq!(t.id, one.id);
    let until = q.extend(&t.id, &t.lease_token, 60_000).await.unwrap();
    assert!(until.is_some_and(|u| u >= t.lease_expires_at_ms));
    assert_eq!(
        q.ack(&t.id, &t.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let t = q.get(&one.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Succeeded);
    let dead = c.remove(0);
    assert_eq!(
        q.nack(&dead.id, &dead.lease_token, "fatal", None, true)
            .await
            .unwrap(),
        NackOutcome::Dead
    );
    let retried = c.remove(0);
    assert!(matches!(
        q.nack(&retried.id, &retried.lease_token, "again", Some(0), false)
            .await
            .unwrap(),
        NackOutcome::Rescheduled { .. }
    ));
    let released: Vec<_> = c
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    assert_eq!(q.release(&released).await.unwrap(), vec![true, true]);

    // the dead-letter queue: list, retry, delete
    let page = q.dead_list(0, 10).await.unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.tasks[0].task.id, dead.id);
    assert_eq!(
        q.dead_retry(std::slice::from_ref(&dead.id)).await.unwrap(),
        vec![DeadRetryOutcome::Retried]
    );
    // all four due ones again (retried, released x2, back from the DLQ)
    let c = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(c.len(), 4, "{name}");
    let again = c.iter().find(|t| t.id == dead.id).unwrap();
    assert_eq!(
        q.nack(&again.id, &again.lease_token, "fatal", None, true)
            .await
            .unwrap(),
        NackOutcome::Dead
    );
    assert_eq!(
        q.dead_delete(std::slice::from_ref(&dead.id)).await.unwrap(),
        vec![true]
    );
    assert!(q.get(&dead.id.clone().into()).await.unwrap().is_none());
    let rest: Vec<_> = c
        .iter()
        .filter(|t| t.id != dead.id)
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    assert_eq!(
        q.ack_batch(&rest).await.unwrap(),
        vec![AckOutcome::Acked; 3]
    );

    // cancel and reschedule by key
    let later = TaskRef::key("later").unwrap();
    assert_eq!(q.cancel(&later).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(q.cancel(&later).await.unwrap(), CancelOutcome::NotFound);
    let moved = TaskRef::key("moved").unwrap();
    let o = q.reschedule(&moved, Due::DelayMs(0)).await.unwrap();
    assert!(matches!(o, RescheduleOutcome::Rescheduled { .. }), "{o:?}");

    // pause and resume
    q.pause().await.unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert!(c.paused && c.tasks.is_empty());
    assert!(q.stats().await.unwrap().paused);
    q.resume().await.unwrap();

    // recover an expired lease (the shortest allowed)
    let t = q.claim(10, Some(dueq::MIN_LEASE_MS)).await.unwrap().tasks;
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].key.as_deref(), Some("moved"));
    let start = Instant::now();
    loop {
        let r = q.recover().await.unwrap();
        if r.recovered == 1 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "{name}: lease never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = q.get(&moved).await.unwrap().unwrap();
    assert_eq!((t.state, t.attempt), (TaskState::Scheduled, 1));

    // stats
    let s = q.stats().await.unwrap();
    assert_eq!(s.queue, name);
    assert_eq!((s.scheduled, s.active, s.dead), (1, 0, 0));
    assert_eq!(s.enqueued_total, 7);
    assert_eq!(s.succeeded_total, 4);
    assert_eq!(s.dead_total, 2);
    assert_eq!(s.cancelled_total, 1);
    assert_eq!(s.lease_expired_total, 1);
    assert!(!s.paused);
    assert!(client.queues().await.unwrap().contains(&name.to_owned()));
}

/// Case C20 in shared/cases/CASES.md: a 3-master Redis Cluster.
///
/// Connects with a comma-separated seed list and proves that for queues `orders` and `a.b-c_1`
/// every operation (enqueue single and batch, get, claim, extend, ack, nack to retry and to the
/// DLQ, release, dead list/retry/delete, cancel and reschedule by key, pause/resume, recover,
/// stats, configure) works with no `CROSSSLOT` error, also after `FUNCTION FLUSH` on every node;
/// that all keys of one queue map to one slot (`CLUSTER KEYSLOT`) and live on one node; and
/// that a worker runs tasks on the cluster, including one enqueued while it is idle, promptly
/// (woken by the notification, well before its 1 s fallback poll).
#[tokio::test]
async fn c20_cluster() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    assert!(client.is_cluster());
    let r = client.readiness().await;
    assert!(r.ready(), "{r:?}");

    let mut holder = Vec::new();
    for name in ["orders", "a.b-c_1"] {
        every_operation(&client, name).await;
        let q = client.queue(name).unwrap();
        let mut node = cluster.nodes()[0].conn();
        let slots: BTreeSet<u16> = q
            .keys()
            .all()
            .iter()
            .map(|k| {
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(*k)
                    .query(&mut node)
                    .unwrap()
            })
            .collect();
        assert_eq!(slots.len(), 1, "{name}: keys in slots {slots:?}");
        let slot = *slots.first().unwrap();
        // the keys that exist are on one node, in that slot
        let mut holders = Vec::new();
        let mut found = BTreeSet::new();
        for (i, n) in cluster.nodes().iter().enumerate() {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut n.conn())
                .unwrap();
            if !keys.is_empty() {
                holders.push(i);
            }
            found.extend(keys);
        }
        assert_eq!(holders.len(), 1, "{name}: slot {slot} spread over nodes");
        holder.push(holders[0]);
        let all: BTreeSet<String> = q.keys().all().iter().map(|k| k.to_string()).collect();
        assert!(found.is_subset(&all), "{name}: {found:?}");
        // sched, tasks, keys, done, meta, stats exist at this point
        assert!(found.len() >= 6, "{name}: only {found:?}");
    }

    // wake-ups of `a.b-c_1` are published on another node than the first seed, where the
    // worker's pub/sub connection listens: they cross the cluster bus
    assert_eq!(
        holder,
        vec![0, 1],
        "slot owners changed; pick other queue names"
    );

    // the library flushed on every node is loaded again by itself
    for n in cluster.nodes() {
        redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query::<()>(&mut n.conn())
            .unwrap();
    }
    for name in ["orders", "a.b-c_1"] {
        let q = client.queue(name).unwrap();
        q.enqueue(TaskSpec::new(b"after flush".to_vec()))
            .await
            .unwrap();
        let c = q.claim(10, None).await.unwrap().tasks;
        assert_eq!(c.len(), 2, "{name}"); // "moved" and this one
        for t in c {
            q.ack(&t.id, &t.lease_token).await.unwrap();
        }
    }

    // a worker on the cluster
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut builder = Worker::builder(client.clone()).concurrency(4);
    for name in ["orders", "a.b-c_1"] {
        let tx = tx.clone();
        builder = builder.handle(name, move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((name, t.payload, t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        });
    }
    let worker = builder.build().unwrap().start();
    let mut ran = 0;
    for name in ["orders", "a.b-c_1"] {
        let q = client.queue(name).unwrap();
        q.enqueue(TaskSpec::new(b"first".to_vec())).await.unwrap();
        let (n, p, _, _) = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((n, p.as_slice()), (name, &b"first"[..]));
        ran += 1;
    }
    for i in 0..4u8 {
        let name = ["orders", "a.b-c_1"][usize::from(i % 2)];
        let q = client.queue(name).unwrap();
        // let the worker go idle (its fallback poll is 1 s away), then enqueue a due task
        tokio::time::sleep(Duration::from_millis(150)).await;
        q.enqueue(TaskSpec::new(vec![i])).await.unwrap();
        let (n, p, due, started) = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((n, p), (name, vec![i]));
        ran += 1;
        let late = started.saturating_sub(due);
        assert!(
            late < 400,
            "{name}: task enqueued while idle ran {late} ms late: no wake-up from the cluster"
        );
    }
    let stats = worker.shutdown().await.unwrap();
    assert_eq!(stats.succeeded, ran);
    assert_eq!(stats.redis_errors, 0);
    for name in ["orders", "a.b-c_1"] {
        let s = client.queue(name).unwrap().stats().await.unwrap();
        assert_eq!((s.scheduled, s.active), (0, 0), "{name}");
    }
}

/// The live workers registry on a cluster: one key outside any hash tag, so every heartbeat
/// script touches one slot (a `CROSSSLOT` would fail the beat and leave the list empty).
#[tokio::test]
async fn live_workers_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    let worker = Worker::builder(client.clone())
        .heartbeat_ms(100)
        .handle("orders", |_t| async { Outcome::Success })
        .build()
        .unwrap();
    let id = worker.id().unwrap().to_owned();
    let handle = worker.start();
    dueq_testkit::wait_until_async(DEADLINE, "the worker is listed", || async {
        client.workers().await.unwrap().iter().any(|w| w.id == id)
    })
    .await;
    assert_eq!(client.workers_of("orders").await.unwrap().len(), 1);
    handle.shutdown().await.unwrap();
    assert!(client.workers().await.unwrap().is_empty());
}

/// Cases C27, C28 and C29 of `shared/cases/CASES.md`, shortened, on the 3-master cluster:
/// the priority sets and the expiry index share the queue's hash tag, so priority order,
/// expiry (in the claim and in recovery, `on_expire: dead`) and debounce work there with no
/// `CROSSSLOT`.
#[tokio::test]
async fn c27_c28_c29_task_options_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    for name in ["opts-a", "opts-b", "opts-c"] {
        let q = client.queue(name).unwrap();
        q.update_settings(&SettingsPatch::default().on_expire(Some(dueq::OnExpire::Dead)))
            .await
            .unwrap();
        let nines: Vec<_> = (0..20)
            .map(|i| TaskSpec::new(format!("9-{i}").into_bytes()).priority(9))
            .collect();
        q.enqueue_batch(&nines).await.unwrap();
        q.enqueue(TaskSpec::new(b"0".to_vec())).await.unwrap();
        // due now but behind the 20 nines, so the claim below leaves it waiting: it expires
        // unstarted (an expiry must come after the due time)
        q.enqueue(TaskSpec::new(b"x".to_vec()).key("x").priority(9).ttl_ms(1))
            .await
            .unwrap();
        let c = q.claim(5, None).await.unwrap().tasks;
        assert_eq!(c[0].payload, b"0");
        assert_eq!(c[1].payload, b"9-0");
        let d = q
            .enqueue(
                TaskSpec::new(b"d".to_vec())
                    .key("d")
                    .delay_ms(60_000)
                    .on_conflict(dueq::OnConflict::Debounce)
                    .debounce_max_ms(1_000),
            )
            .await
            .unwrap();
        let again = q
            .enqueue(
                TaskSpec::new(b"d2".to_vec())
                    .key("d")
                    .delay_ms(60_000)
                    .on_conflict(dueq::OnConflict::Debounce)
                    .debounce_max_ms(1_000),
            )
            .await
            .unwrap();
        assert!(again.due_at_ms < d.due_at_ms, "debounce did not cap");
        let start = Instant::now();
        while q.stats().await.unwrap().expired_total == 0 {
            assert!(start.elapsed() < DEADLINE, "never expired");
            q.recover().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let page = q.dead_list(0, 10).await.unwrap();
        assert_eq!(page.tasks[0].task.last_error.as_deref(), Some("expired"));
    }
}

/// Cases C24, C25 and C26 of `shared/cases/CASES.md` on the 3-master cluster: two clients
/// (each its own connection and worker, as two processes would be) share a rate limit (20
/// per 500 ms: no window holds more, and 60 tasks take at least 1 s), a concurrency limit (3:
/// never more handlers running at once over both, and 3 reached), and a flooding group does
/// not hold back a small one (`group_concurrency` 2: group B's 10 tasks all start before A's
/// 100th).
#[tokio::test]
async fn c24_c25_c26_limits_on_a_cluster() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    let cluster = RedisCluster::start(3);
    let urls = cluster.urls().join(",");
    let clients = [
        Client::connect(&urls).await.unwrap(),
        Client::connect(&urls).await.unwrap(),
    ];
    let setup = clients[0].queue("rate").unwrap();
    setup
        .update_settings(&SettingsPatch::default().rate_limit(Some(dueq::RateLimit::new(20, 500))))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..60).map(|_| TaskSpec::new(b"r".to_vec())).collect();
    setup.enqueue_batch(&specs).await.unwrap();
    clients[0]
        .queue("conc")
        .unwrap()
        .update_settings(&SettingsPatch::default().concurrency(Some(3)))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..30).map(|_| TaskSpec::new(b"c".to_vec())).collect();
    clients[0]
        .queue("conc")
        .unwrap()
        .enqueue_batch(&specs)
        .await
        .unwrap();
    let groups = clients[0].queue("groups").unwrap();
    groups
        .update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..5_000)
        .map(|_| TaskSpec::new(b"a".to_vec()).group("A"))
        .collect();
    groups.enqueue_batch(&specs).await.unwrap();
    let specs: Vec<TaskSpec> = (0..10)
        .map(|_| TaskSpec::new(b"b".to_vec()).group("B"))
        .collect();
    groups.enqueue_batch(&specs).await.unwrap();

    let claims = Arc::new(Mutex::new(Vec::<u64>::new()));
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));
    let a_started = Arc::new(AtomicUsize::new(0));
    let b_started = Arc::new(Mutex::new(Vec::<usize>::new()));
    let mut handles = Vec::new();
    for c in &clients {
        let (claims, running, max_running) = (claims.clone(), running.clone(), max_running.clone());
        let (a_started, b_started) = (a_started.clone(), b_started.clone());
        handles.push(
            Worker::builder(c.clone())
                .concurrency(20)
                .handle("rate", move |t| {
                    let claims = claims.clone();
                    async move {
                        claims.lock().unwrap().push(t.claimed_at_ms);
                        Outcome::Success
                    }
                })
                .handle("conc", move |_| {
                    let (running, max_running) = (running.clone(), max_running.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        max_running.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Outcome::Success
                    }
                })
                .handle("groups", move |t| {
                    let (a_started, b_started) = (a_started.clone(), b_started.clone());
                    async move {
                        if t.group.as_deref() == Some("A") {
                            a_started.fetch_add(1, Ordering::SeqCst);
                        } else {
                            b_started
                                .lock()
                                .unwrap()
                                .push(a_started.load(Ordering::SeqCst));
                        }
                        Outcome::Success
                    }
                })
                .build()
                .unwrap()
                .start(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.lock().unwrap().len() < 60 || b_started.lock().unwrap().len() < 10 {
        assert!(
            Instant::now() < deadline,
            "the workers did not finish in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let conc = clients[0].queue("conc").unwrap();
    crate::support::wait_stats(&conc, |s| s.succeeded_total == 30).await;
    for h in handles {
        h.shutdown().await.unwrap();
    }
    let mut claims = claims.lock().unwrap().clone();
    claims.sort_unstable();
    for (i, &t) in claims.iter().enumerate() {
        let n = claims[..=i].iter().filter(|&&c| c + 500 > t).count();
        assert!(n <= 20, "{n} claims in the 500 ms up to {t}");
    }
    assert!(claims[59] - claims[0] >= 1_000, "{claims:?}");
    assert_eq!(max_running.load(Ordering::SeqCst), 3);
    let b = b_started.lock().unwrap().clone();
    assert!(
        b.iter().all(|&a| a < 100),
        "A's tasks started before each of B's: {b:?}"
    );
}

/// Start-up and readiness ask every primary whether it holds the function library, not one
/// at random: with the library flushed on one node, a user who may not load it is refused
/// every time (with what it needs), and a user who may loads it there again.
#[tokio::test]
async fn the_library_is_looked_for_on_every_primary() {
    let cluster = RedisCluster::start(3);
    let seeds = cluster.urls().join(",");
    let client = Client::connect(&seeds).await.unwrap();
    for n in cluster.nodes() {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg(&["reset", "on", ">app-pw", "~*", "&*", "+@all", "-function"])
            .query::<()>(&mut n.conn())
            .unwrap();
    }
    let libraries = |n: &dueq_testkit::RedisServer| {
        let l: Vec<redis::Value> = redis::cmd("FUNCTION")
            .arg("LIST")
            .query(&mut n.conn())
            .unwrap();
        l.len()
    };
    let flushed = &cluster.nodes()[1];
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut flushed.conn())
        .unwrap();
    let app = seeds.replace("redis://", "redis://app:app-pw@");
    for _ in 0..6 {
        let refused = Client::connect(&app).await.err().map(|e| e.to_string());
        let refused =
            refused.expect("a user without FUNCTION started beside a node without the library");
        assert!(refused.contains("+function|load"), "{refused}");
    }
    let r = client.readiness().await;
    assert!(r.ready(), "{r:?}");
    assert_eq!(
        libraries(flushed),
        1,
        "readiness did not load the library there"
    );
    let late = Client::connect(&app).await.unwrap();
    assert!(late.readiness().await.ready());
}

/// A partition whose node answers a claim late hands its tasks to the next claim. That claim
/// keeps room for them, so it never returns more than it was asked for (the worker would hand
/// the extra ones back: a claim and a release for nothing). One master is made slow with
/// `DEBUG SLEEP` while a claimer claims and acks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_partition_answer_fills_room_the_next_claim_kept() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let cluster = RedisCluster::builder(3)
        .arg("--enable-debug-command")
        .arg("yes")
        .start();
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    let q = client.queue("late").unwrap();
    q.update_settings(&SettingsPatch::default().partitions(Some(6)))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..3_000).map(|_| TaskSpec::new(b"t".to_vec())).collect();
    q.enqueue_batch(&specs).await.unwrap();

    // the test needs a partition of "late" on the master made slow
    let slow_partitions = (0..6)
        .filter(|p| {
            let keys = dueq::QueueKeys::partition("late", *p, 6).unwrap();
            cluster.master_of_key(&keys.meta) == 0
        })
        .count();
    assert!(
        slow_partitions > 0,
        "no partition of late on the first master"
    );

    /// Stops the slow-down when the test ends, also by a panic.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = Stop(Arc::new(AtomicBool::new(false)));
    let slow = {
        let stop = stop.0.clone();
        let mut conn = cluster.nodes()[0].conn();
        std::thread::spawn(move || {
            let mut sleeps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let slept: redis::RedisResult<()> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg("0.015")
                    .query(&mut conn);
                if slept.is_err() {
                    break;
                }
                sleeps += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            sleeps
        })
    };
    let mut claimer = q.due_claimer();
    let (mut claimed, mut most, mut claims, mut over) = (0, 0, 0, Vec::new());
    let deadline = Instant::now() + DEADLINE;
    while claimed < 3_000 && Instant::now() < deadline {
        let tasks = claimer.claim(60).await.unwrap();
        most = most.max(tasks.len());
        claims += 1;
        if tasks.len() > 60 {
            over.push(tasks.len());
        }
        claimed += tasks.len();
        let items: Vec<_> = tasks.into_iter().map(|t| (t.id, t.lease_token)).collect();
        let acked = q.ack_batch(&items).await.unwrap();
        assert!(acked.iter().all(|a| *a == AckOutcome::Acked));
        if items.is_empty() {
            claimer.ready().await;
        }
    }
    drop(stop);
    let sleeps = slow.join().unwrap();
    // (a claim still out for longer than the room is kept, 50 ms, may make a claim longer
    // on a loaded machine; without the room kept, about one claim in eight was)
    assert!(
        over.len() <= claims / 10,
        "{} of {claims} claims of 60 returned more: {over:?}",
        over.len()
    );
    assert_eq!(claimed, 3_000, "every task claimed once");
    assert!(most >= 60, "claims were filled: at most {most}");
    assert!(sleeps > 10, "the slow master slept {sleeps} times");
    assert_eq!(q.stats().await.unwrap().active, 0);
}
