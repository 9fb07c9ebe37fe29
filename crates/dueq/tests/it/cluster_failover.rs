//! A master of a Redis Cluster killed (kill -9) and its replica promoted
//! delays only the partitions on that master, and no partition waits on the client once the
//! cluster serves it again.
//!
//! A queue of 6 partitions on 3 masters with 2 replicas each. One probe per partition starts
//! an enqueue of a new keyed task every 10 ms without waiting for the previous one and logs
//! each call's round trip. A master that does not hold partition 0 (the layout every client
//! reads) is killed, twice:
//!
//! 1. with `cluster-require-full-coverage no`, durable enqueues (`WAIT 1`, so an acknowledged
//!    enqueue is on a replica and survives the promotion): the other masters' partitions stay
//!    fast and never fail;
//! 2. with Redis's default `cluster-require-full-coverage yes`, plain enqueues: once the
//!    killed master is flagged as failing, every node answers every command with
//!    `CLUSTERDOWN` until its replica is promoted (about 1 s here), so every partition waits
//!    that long, but no more.
//!
//! In both, the healthy partitions' calls end within [`AFTER_PROMOTION`] of the promotion (or
//! of their start, if later), the killed partitions take calls again and theirs end within
//! [`KILLED_AFTER_PROMOTION`], and every acknowledged enqueue is found afterwards.
//!
//! Before dueq routed cluster calls itself (`protocol/conn/cluster/`), redis-rs's cluster
//! connection paused 1.28 s at least before trying a refused call again, so in (2) every
//! partition's calls went on 1.2–1.3 s past the promotion, and the killed partitions' calls
//! 1.3–1.8 s; with shorter pauses, its connection hung for good (see that module).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Client, Queue, QueueKeys, SettingsPatch, TaskRef, TaskSpec, partition_of_key, slot_of};
use dueq_testkit::{RedisCluster, wait_until};
use futures_util::StreamExt;
use tokio::sync::watch;

const QUEUE: &str = "failover";
const PARTS: u16 = 6;
/// A probe starts a call this often, per partition.
const PERIOD: Duration = Duration::from_millis(10);
/// Measured before the kill (the baseline).
const BEFORE: Duration = Duration::from_secs(1);
/// Measured after the promotion.
const AFTER: Duration = Duration::from_secs(2);
/// Longest call of a partition on a healthy master while another master dies, with full
/// coverage off: a call takes ~2 ms; a wide margin for a loaded 2-core machine.
const HEALTHY_MAX: Duration = Duration::from_millis(500);
/// Longest a healthy partition's call may go on after the promotion (or after its start, if
/// later): the cluster serves every slot again then, so any longer wait is the client's
/// (~0.1 s measured: the pause before a refused call is tried again).
const AFTER_PROMOTION: Duration = Duration::from_millis(500);
/// The same for the killed partitions: the durable writes held up meanwhile drain one `WAIT`
/// (a round trip to the new master's replica) at a time (up to ~0.45 s measured after the
/// promotion; ~0.15 s with plain writes).
const KILLED_AFTER_PROMOTION: Duration = Duration::from_secs(1);

/// One probe call.
#[derive(Debug, Clone)]
struct Sample {
    start: Instant,
    end: Instant,
    key: String,
    error: Option<String>,
}

impl Sample {
    fn latency(&self) -> Duration {
        self.end - self.start
    }

    fn ok(&self) -> bool {
        self.error.is_none()
    }
}

type Log = Arc<Mutex<Vec<Sample>>>;

/// Keys `{tag}:{p}-{i}` that hash to partition `p`, in order.
fn keys_of(tag: &'static str, p: u16) -> impl Iterator<Item = String> {
    (0u64..)
        .map(move |i| format!("{tag}:{p}-{i}"))
        .filter(move |k| partition_of_key(k, PARTS) == p)
}

/// Every [`PERIOD`] until `stop`, starts an enqueue of a new keyed task into partition `p`
/// (not waiting for the calls before it) and logs it; returns once every call has ended.
async fn probe(q: Queue, tag: &'static str, p: u16, log: Log, mut stop: watch::Receiver<bool>) {
    let mut calls = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for key in keys_of(tag, p) {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let (q, log) = (q.clone(), log.clone());
        calls.spawn(async move {
            let start = Instant::now();
            let spec = TaskSpec::new(b"x".to_vec())
                .key(key.as_str())
                .delay_ms(3_600_000);
            let r = q.enqueue(spec).await;
            let end = Instant::now();
            log.lock().unwrap().push(Sample {
                start,
                end,
                key,
                error: r.err().map(|e| e.to_string()),
            });
        });
    }
    while calls.join_next().await.is_some() {}
}

/// `q`-quantile of sorted `v`.
fn quantile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// What one partition saw in a window of call starts.
struct Stats {
    calls: usize,
    failed: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls, {} failed, p50 {:?}, p99 {:?}, max {:?}",
            self.calls, self.failed, self.p50, self.p99, self.max
        )
    }
}

fn stats(log: &[Sample], from: Instant, to: Instant) -> Stats {
    let window: Vec<&Sample> = log
        .iter()
        .filter(|s| s.start >= from && s.start < to)
        .collect();
    let mut lat: Vec<Duration> = window.iter().map(|s| s.latency()).collect();
    lat.sort();
    Stats {
        calls: window.len(),
        failed: window.iter().filter(|s| !s.ok()).count(),
        p50: quantile(&lat, 0.5),
        p99: quantile(&lat, 0.99),
        max: lat.last().copied().unwrap_or_default(),
    }
}

/// The longest time in `[from, to]` without a successful call ending.
fn longest_gap(log: &[Sample], from: Instant, to: Instant) -> Duration {
    let mut ends: Vec<Instant> = log
        .iter()
        .filter(|s| s.ok() && s.end >= from && s.end <= to)
        .map(|s| s.end)
        .collect();
    ends.sort();
    let mut prev = from;
    let mut gap = Duration::ZERO;
    for e in ends {
        gap = gap.max(e - prev);
        prev = e;
    }
    gap.max(to - prev)
}

/// How long past the promotion (or its own start, if later) a call went on.
fn past_promotion(s: &Sample, promoted_at: Instant) -> Duration {
    s.end.saturating_duration_since(s.start.max(promoted_at))
}

/// One kill and what every partition saw.
struct Failover {
    /// Per partition: whether it was on the killed master.
    hit: Vec<bool>,
    logs: Vec<Vec<Sample>>,
    killed_at: Instant,
    promoted_at: Instant,
}

/// Which node serves each partition.
fn partition_masters(cluster: &RedisCluster) -> Vec<usize> {
    (0..PARTS)
        .map(|p| {
            let keys = QueueKeys::partition(QUEUE, p, PARTS).unwrap();
            cluster.master_of_slot(slot_of(&keys.sched))
        })
        .collect()
}

/// Probes every partition for [`BEFORE`], kills `victim`, waits for its replica's promotion,
/// probes [`AFTER`] more, and prints what each partition saw.
async fn kill_and_probe(
    cluster: RedisCluster,
    q: &Queue,
    tag: &'static str,
    victim: usize,
) -> (RedisCluster, Failover) {
    let mut cluster = cluster;
    let owner = partition_masters(&cluster);
    let hit: Vec<bool> = owner.iter().map(|&o| o == victim).collect();
    assert!(!hit[0], "partition 0 holds the layout: kill another master");

    let logs: Vec<Log> = (0..PARTS).map(|_| Log::default()).collect();
    let (stop_tx, stop_rx) = watch::channel(false);
    let probes: Vec<_> = (0..PARTS)
        .map(|p| {
            let log = logs[usize::from(p)].clone();
            tokio::spawn(probe(q.clone(), tag, p, log, stop_rx.clone()))
        })
        .collect();

    let started = Instant::now();
    tokio::time::sleep(BEFORE).await;
    let killed_at = Instant::now();
    cluster.kill9(victim);
    let (cluster, promoted) = tokio::task::spawn_blocking(move || {
        let promoted = cluster.wait_for_promotion(victim, Duration::from_secs(30));
        (cluster, promoted)
    })
    .await
    .unwrap();
    let promoted_at = Instant::now();
    tokio::time::sleep(AFTER).await;
    stop_tx.send(true).unwrap();
    for p in probes {
        p.await.unwrap();
    }
    let ended = Instant::now();

    let logs: Vec<Vec<Sample>> = logs
        .into_iter()
        .map(|l| std::mem::take(&mut *l.lock().unwrap()))
        .collect();
    eprintln!(
        "[{tag}] partition masters {owner:?}: node {victim} killed, node {promoted} promoted \
         {:?} after",
        promoted_at - killed_at
    );
    for (p, log) in logs.iter().enumerate() {
        let before = stats(log, started, killed_at);
        let during = stats(log, killed_at, ended);
        let worst = log
            .iter()
            .map(|s| past_promotion(s, promoted_at))
            .max()
            .unwrap_or_default();
        let first_error = log.iter().find_map(|s| s.error.as_deref()).unwrap_or("-");
        eprintln!(
            "[{tag}] partition {p} ({} master, node {}):\n    before the kill: {before}\n    \
             after the kill: {during}\n    longest without a successful call {:?}, longest \
             past the promotion {worst:?}, first error: {first_error}",
            if hit[p] { "killed" } else { "healthy" },
            owner[p],
            longest_gap(log, killed_at, ended),
        );
    }
    let failover = Failover {
        hit,
        logs,
        killed_at,
        promoted_at,
    };
    (cluster, failover)
}

/// The checks both kills share: the killed partitions take calls again, nothing waits long
/// after the promotion, the healthy partitions never fail, no acknowledged enqueue is lost
/// (`durable`: on any partition; else on the healthy ones: without `WAIT`, a write the killed
/// master acknowledged may not have reached the replica promoted, as Redis documents).
async fn check_common(q: &Queue, tag: &str, f: &Failover, durable: bool) {
    for (p, log) in f.logs.iter().enumerate() {
        assert!(
            log.iter().any(|s| s.ok() && s.start >= f.promoted_at),
            "[{tag}] partition {p} took no enqueue after the promotion"
        );
        let bound = if f.hit[p] {
            KILLED_AFTER_PROMOTION
        } else {
            AFTER_PROMOTION
        };
        let late: Vec<Duration> = log
            .iter()
            .map(|s| past_promotion(s, f.promoted_at))
            .filter(|&d| d >= bound)
            .collect();
        assert!(
            late.is_empty(),
            "[{tag}] partition {p} ({} master): {} calls went on {bound:?} or more past the \
             promotion (the longest {:?})",
            if f.hit[p] { "killed" } else { "healthy" },
            late.len(),
            late.iter().max().unwrap()
        );
        if !f.hit[p] {
            let failed: Vec<&Sample> = log.iter().filter(|s| !s.ok()).collect();
            assert!(
                failed.is_empty(),
                "[{tag}] partition {p} on a healthy master: {} calls failed, the first: {:?}",
                failed.len(),
                failed.first()
            );
        }
    }

    // every acknowledged enqueue is there after the failover
    let acked: Vec<String> = f
        .logs
        .iter()
        .enumerate()
        .filter(|(p, _)| durable || !f.hit[*p])
        .flat_map(|(_, log)| log)
        .filter(|s| s.ok())
        .map(|s| s.key.clone())
        .collect();
    let missing: Vec<String> = futures_util::stream::iter(acked.iter())
        .map(|k| async move {
            let t = q.get(&TaskRef::key(k).unwrap()).await.unwrap();
            t.is_none().then(|| k.clone())
        })
        .buffer_unordered(32)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    assert!(
        missing.is_empty(),
        "[{tag}] {} of {} acknowledged enqueues lost in the failover: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_delays_only_its_partitions() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
    let cluster = RedisCluster::builder(3)
        .replicas_per_master(2)
        .arg("--cluster-require-full-coverage")
        .arg("no")
        .start();
    let client = Client::connect(&cluster.cluster_url()).await.unwrap();
    let q = client.queue(QUEUE).unwrap();
    q.update_settings(&SettingsPatch::default().partitions(Some(PARTS)))
        .await
        .unwrap();
    let owner = partition_masters(&cluster);
    assert_eq!(
        owner
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3,
        "the partitions are on every master: {owner:?}"
    );

    // 1. full coverage off: only the killed master's partitions wait
    let victim = *owner.iter().find(|&&o| o != owner[0]).unwrap();
    let durable = q.clone().with_replicas(1, 1_000);
    let (cluster, f) = kill_and_probe(cluster, &durable, "partial", victim).await;
    check_common(&q, "partial coverage", &f, true).await;
    for (p, log) in f.logs.iter().enumerate() {
        if !f.hit[p] {
            let s = stats(log, f.killed_at, Instant::now());
            assert!(
                s.max < HEALTHY_MAX,
                "partition {p} on a healthy master waited {:?} for a call while another \
                 master died (bound {HEALTHY_MAX:?})",
                s.max
            );
        }
    }

    // 2. Redis's default, full coverage: everything waits for the promotion, no longer.
    // Plain writes: a backlog of durable ones drains one `WAIT` (a replica's round trip) at a
    // time per connection, which would add its own wait after the promotion.
    for i in 0..cluster.nodes().len() {
        if i != victim {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-require-full-coverage")
                .arg("yes")
                .query::<()>(&mut cluster.nodes()[i].conn())
                .unwrap();
        }
    }
    let owner = partition_masters(&cluster);
    let victim = *owner
        .iter()
        .find(|&&o| o != owner[0] && cluster.replicas_of(o).len() >= 2)
        .unwrap();
    let (cluster, f) = kill_and_probe(cluster, &q, "full", victim).await;
    check_common(&q, "full coverage", &f, false).await;
    drop(cluster);
}

/// Partition 0's master dead for good (no replica): the other partitions keep taking
/// enqueues and lookups by key, without waiting for the response timeout, after the client's
/// cached partition count has aged past [`dueq::LAYOUT_TTL`] (it cannot read the count again
/// from partition 0, and the count it read last still holds), and a client whose first seed
/// is that master still connects and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_partition_zero_stops_only_its_own_partitions() {
    let mut cluster = RedisCluster::builder(3)
        .arg("--cluster-require-full-coverage")
        .arg("no")
        .start();
    let client = Client::connect(&cluster.cluster_url()).await.unwrap();
    let q = client.queue(QUEUE).unwrap();
    q.update_settings(&SettingsPatch::default().partitions(Some(PARTS)))
        .await
        .unwrap();
    let owner = partition_masters(&cluster);
    let victim = owner[0];
    // a second client that lists the doomed master as its first seed (its wake-ups
    // subscribe there first)
    let mut ports = cluster.ports();
    let first = ports.remove(victim);
    ports.insert(0, first);
    let seeds: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let other = Client::connect(&format!("redis+cluster://{}", seeds.join(",")))
        .await
        .unwrap();
    let q2 = other.queue(QUEUE).unwrap();
    for (i, q) in [&q, &q2].into_iter().enumerate() {
        for p in 0..PARTS {
            let key = keys_of(if i == 0 { "warm" } else { "warm2" }, p)
                .next()
                .unwrap();
            q.enqueue(
                TaskSpec::new(b"x".to_vec())
                    .key(key.as_str())
                    .delay_ms(3_600_000),
            )
            .await
            .unwrap();
        }
    }

    cluster.kill9(victim);
    // the cached count is older than its TTL now: the next call would read it again
    tokio::time::sleep(dueq::LAYOUT_TTL + Duration::from_millis(200)).await;

    for (i, q) in [&q, &q2].into_iter().enumerate() {
        for p in 0..PARTS {
            let key = keys_of(if i == 0 { "after" } else { "after2" }, p)
                .next()
                .unwrap();
            let spec = TaskSpec::new(b"x".to_vec())
                .key(key.as_str())
                .delay_ms(3_600_000);
            if owner[usize::from(p)] == victim {
                // each such call waits out the response timeout (the node may come back):
                // once is enough
                if i == 0 {
                    let r = q.enqueue(spec).await;
                    assert!(r.is_err(), "partition {p} is on the dead master: {r:?}");
                }
                continue;
            }
            let started = Instant::now();
            let r = q.enqueue(spec).await;
            r.unwrap_or_else(|e| {
                panic!("client {i}: partition {p} on a live master refused an enqueue: {e}")
            });
            // the count is asked of the dead node for a moment only, not for the response
            // timeout (5 s)
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "client {i}: partition {p}'s enqueue took {:?}",
                started.elapsed()
            );
            let found = q.get(&TaskRef::key(&key).unwrap()).await.unwrap();
            assert!(found.is_some(), "client {i}: {key} not found");
        }
    }
}

/// Waits (at most 10 s) until every replica of `master` holds every write `master` took.
fn wait_replicated(cluster: &RedisCluster, master: usize) {
    let offset = |node: usize, field: &str| -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut cluster.nodes()[node].conn())
            .unwrap();
        info.lines()
            .find_map(|l| {
                l.strip_prefix(field)?
                    .strip_prefix(':')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no {field} in node {node}'s INFO: {info}"))
    };
    let target = offset(master, "master_repl_offset");
    let replicas = cluster.replicas_of(master);
    assert!(!replicas.is_empty(), "node {master} has no replica");
    for replica in replicas {
        wait_until(Duration::from_secs(10), "the replica caught up", || {
            offset(replica, "slave_repl_offset") >= target
        });
    }
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// A master stopped (SIGSTOP) past its replica's promotion answers, once it runs again, the
/// claim it took before it heard that it was replaced: those tasks stay in the new master's
/// queue and are handed out there too. The claim must fail (its outcome is unknown, and
/// what it leased is lost with the old master's data), so each task is handed out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_resumed_after_its_failover_hands_nothing_out_twice() {
    let mut cluster = RedisCluster::builder(3)
        .replicas_per_master(1)
        .node_timeout_ms(1000)
        .start();
    // the claim sent to the stopped master must still be waiting when it runs again
    let client = Client::builder(&cluster.cluster_url())
        .response_timeout_ms(30_000)
        .connect()
        .await
        .unwrap();
    let q = client.queue("stopped").unwrap();
    for i in 0..20 {
        q.enqueue(TaskSpec::new(b"x".to_vec()).key(format!("k{i}").as_str()))
            .await
            .unwrap();
    }
    let keys = QueueKeys::partition("stopped", 0, 1).unwrap();
    let victim = cluster.master_of_slot(slot_of(&keys.sched));
    let pid = cluster.nodes()[victim].pid();
    // replication is asynchronous: a master stopped right after the enqueues may not have
    // sent them yet, and the promoted replica would then have nothing to hand out
    wait_replicated(&cluster, victim);

    signal(pid, "-STOP");
    let waiting = {
        let q = q.clone();
        tokio::spawn(async move { q.claim(20, Some(60_000)).await })
    };
    let promoted = tokio::task::spawn_blocking(move || {
        let new = cluster.wait_for_promotion(victim, Duration::from_secs(30));
        (cluster, new)
    });
    let (cluster, _new) = promoted.await.unwrap();
    signal(pid, "-CONT");
    let first = waiting.await.unwrap();

    let mut handed: Vec<String> = match &first {
        Ok(c) => c.tasks.iter().map(|t| t.id.to_string()).collect(),
        Err(_) => Vec::new(),
    };
    // the new master hands out what it holds
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match q.claim(20, Some(60_000)).await {
            Ok(c) => handed.extend(c.tasks.iter().map(|t| t.id.to_string())),
            Err(e) => assert!(
                Instant::now() < deadline,
                "the new master never answered: {e}"
            ),
        }
        if handed.len() >= 20 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut distinct = handed.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        handed.len(),
        "a task was handed out twice; the stopped master's claim answered {:?}",
        first.as_ref().map(|c| c.tasks.len())
    );
    assert_eq!(distinct.len(), 20, "{handed:?}");
    drop(cluster);
}
