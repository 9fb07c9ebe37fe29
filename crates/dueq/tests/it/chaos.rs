//! The fault-injection run, bounded: a producer and three consumers (each
//! with its own `Client`, claiming through `DueClaimer` and acking by hand) on a Redis with
//! `appendfsync always`, while a fault thread kills and restarts Redis, kills connections,
//! flushes scripts, pauses Redis (`DEBUG SLEEP`, `CLIENT PAUSE`) and the test crashes
//! consumers (their task aborted while holding leases, as a SIGKILL would leave them).
//!
//! A ledger outside Redis records every enqueue answer, delivery and ack; at the end it
//! reports, as Jepsen's total-queue checker does: lost (enqueue confirmed, never acked),
//! duplicated (delivered after a successful ack), recovered (enqueue answer unknown, task
//! ran), unexpected (never enqueued), early (claimed before its due time by the Redis clock),
//! and redeliveries of tasks not yet acked (lease expiry, crash: allowed, counted). The run
//! fails unless lost, duplicated, unexpected and early are 0.
//!
//! A second run, ignored in CI for its length, does the same on a primary, a replica and a
//! sentinel with durable enqueues and acks, failing over at random.
//!
//! A third injects a fault the first does not: Redis out of memory (`maxmemory` reached
//! under `noeviction`, then memory freed), over and over.
//!
//! `DUEQ_CHAOS_MS` (default 4 000) sets how long faults are injected; `DUEQ_CHAOS_TASKS`
//! (default 1 000) how many tasks the producer enqueues over that time.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{AckOutcome, Client, TaskSpec};
use dueq_testkit::{RedisSentinels, RedisServer};

#[derive(Default)]
struct Ledger {
    confirmed: HashSet<String>,
    unknown: HashSet<String>,
    delivered: HashMap<String, u32>,
    acked: HashSet<String>,
    duplicated: u64,
    unexpected: u64,
    early: u64,
    redelivered: u64,
    faults: HashMap<&'static str, u64>,
    last_ack: Option<Instant>,
    /// Per key: (claimed_at_ms, attempt, lease token, acked) of each delivery, for the report
    /// of a duplicate.
    history: HashMap<String, Vec<(u64, u32, String, bool)>>,
    /// Per fault: ms from its end to the next successful ack.
    recover_ms: HashMap<&'static str, Vec<u64>>,
    /// When the producer last had an enqueue confirmed.
    last_enqueue: Option<Instant>,
    /// Every enqueue that answered an error: key, kind, retryable, message.
    enqueue_errors: Vec<(String, dueq::ErrorKind, bool, String)>,
    /// Messages of failed claims and acks (the consumers go on after them).
    claim_errors: Vec<String>,
    ack_errors: Vec<String>,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One consumer: claim through a `DueClaimer`, record each delivery, ack it.
async fn consume(url: String, replicas: u8, ledger: Arc<Mutex<Ledger>>) {
    let client = loop {
        match Client::builder(&url)
            .response_timeout_ms(1_000)
            .replicas(replicas)
            .replica_timeout_ms(500)
            .connect()
            .await
        {
            Ok(c) => break c,
            // Redis may be down right now: a consumer (re)started mid-outage keeps trying
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let q = client.queue("chaos").unwrap();
    let mut claimer = q.due_claimer().lease_ms(Some(1_000));
    loop {
        claimer.ready().await;
        let tasks = match claimer.claim(50).await {
            Ok(tasks) => tasks,
            Err(e) => {
                ledger.lock().unwrap().claim_errors.push(e.to_string());
                continue;
            }
        };
        // every task of the batch is delivered now, when the claim answers (recording each
        // one only when its turn to be acked comes would count a task whose lease expired
        // while it waited in the batch, and that another consumer ran and acked meanwhile,
        // as delivered after its ack)
        {
            let mut l = ledger.lock().unwrap();
            for t in &tasks {
                let key = t.key.clone().unwrap_or_default();
                if !l.confirmed.contains(&key) && !l.unknown.contains(&key) {
                    l.unexpected += 1;
                }
                if l.acked.contains(&key) {
                    l.duplicated += 1;
                    eprintln!(
                        "duplicate delivery of {key}: attempt {}, claimed at {}; before: {:?}",
                        t.attempt,
                        t.claimed_at_ms,
                        l.history.get(&key)
                    );
                }
                l.history.entry(key.clone()).or_default().push((
                    t.claimed_at_ms,
                    t.attempt,
                    format!("{:?}", t.lease_token),
                    false,
                ));
                if t.claimed_at_ms < t.due_at_ms {
                    l.early += 1;
                }
                let n = l.delivered.entry(key).or_default();
                *n += 1;
                if *n > 1 {
                    l.redelivered += 1;
                }
            }
        }
        for t in tasks {
            let key = t.key.clone().unwrap_or_default();
            let answer = q.ack(&t.id, &t.lease_token).await;
            if let Err(e) = &answer {
                ledger.lock().unwrap().ack_errors.push(e.to_string());
            }
            if let Ok(AckOutcome::Acked) = answer {
                let mut l = ledger.lock().unwrap();
                if let Some(h) = l.history.get_mut(&key).and_then(|h| h.last_mut()) {
                    h.3 = true;
                }
                l.acked.insert(key);
                l.last_ack = Some(Instant::now());
            }
        }
    }
}

/// The Redis faults, one every 150 to 600 ms, until `stop`.
fn inject(
    mut server: RedisServer,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) -> RedisServer {
    while !stop.load(Ordering::Acquire) {
        let pause_ms = 150 + rand::random::<u64>() % 450;
        std::thread::sleep(Duration::from_millis(pause_ms));
        let fault = match rand::random::<u32>() % 5 {
            0 => {
                server.kill9();
                std::thread::sleep(Duration::from_millis(rand::random::<u64>() % 500));
                server.restart();
                "kill -9 + restart"
            }
            1 => {
                let mut c = server.conn();
                let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("normal")
                    .query(&mut c);
                let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query(&mut c);
                "CLIENT KILL"
            }
            2 => {
                let mut c = server.conn();
                let _: redis::RedisResult<()> = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c);
                "FUNCTION FLUSH"
            }
            3 => {
                let mut c = server.conn();
                let _: redis::RedisResult<()> =
                    redis::cmd("DEBUG").arg("SLEEP").arg("0.3").query(&mut c);
                "DEBUG SLEEP 0.3"
            }
            _ => {
                let mut c = server.conn();
                let _: redis::RedisResult<()> =
                    redis::cmd("CLIENT").arg("PAUSE").arg(300).query(&mut c);
                "CLIENT PAUSE 300"
            }
        };
        *ledger.lock().unwrap().faults.entry(fault).or_default() += 1;
        let end = Instant::now();
        let ms = loop {
            let acked_since = ledger.lock().unwrap().last_ack.is_some_and(|t| t > end);
            if acked_since || end.elapsed() > Duration::from_secs(5) || stop.load(Ordering::Acquire)
            {
                break end.elapsed().as_millis() as u64;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        ledger
            .lock()
            .unwrap()
            .recover_ms
            .entry(fault)
            .or_default()
            .push(ms);
    }
    server
}

/// The Sentinel variant's faults, one every 1 to 2 s, until `stop`: `SENTINEL FAILOVER`
/// (waiting for the new primary), `CLIENT KILL` and `FUNCTION FLUSH` on the primary of now.
fn inject_sentinel(
    cluster: RedisSentinels,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) -> RedisSentinels {
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1_000 + rand::random::<u64>() % 1_000));
        let Some(primary) = cluster.primary_index() else {
            continue;
        };
        let fault = match rand::random::<u32>() % 3 {
            0 => {
                cluster.failover();
                "SENTINEL FAILOVER"
            }
            1 => {
                let mut c = cluster.servers[primary].conn();
                for ty in ["normal", "pubsub"] {
                    let _: redis::RedisResult<u64> = redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg(ty)
                        .query(&mut c);
                }
                "CLIENT KILL"
            }
            _ => {
                let mut c = cluster.servers[primary].conn();
                let _: redis::RedisResult<()> = redis::cmd("FUNCTION").arg("FLUSH").query(&mut c);
                "FUNCTION FLUSH"
            }
        };
        *ledger.lock().unwrap().faults.entry(fault).or_default() += 1;
    }
    cluster
}

/// The bounded fault-injection run (module docs) on one Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_run_loses_and_duplicates_nothing() {
    let fault_ms = env_u64("DUEQ_CHAOS_MS", 4_000);
    let total = env_u64("DUEQ_CHAOS_TASKS", 1_000);
    let server = RedisServer::builder()
        .appendonly(true)
        .arg("--enable-debug-command")
        .arg("local")
        .start();
    let url = server.url();
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let faults = {
        let (stop, ledger) = (stop.clone(), ledger.clone());
        std::thread::spawn(move || -> Setup { Box::new(inject(server, stop, ledger)) })
    };
    run(
        Run {
            url,
            replicas: 0,
            fault_ms,
            total,
            min_faults: 5,
        },
        ledger,
        stop,
        faults,
    )
    .await;
}

/// The variant with a replica and Sentinel: durable writes for the one
/// replica there is (enqueues and acks wait for it), faults `SENTINEL FAILOVER`, `CLIENT
/// KILL`, `FUNCTION FLUSH` on the primary of the moment. No confirmed enqueue is lost and no
/// task is delivered after a confirmed ack. `DUEQ_CHAOS_SENTINEL_MS` (default 6 000) and
/// `DUEQ_CHAOS_SENTINEL_TASKS` (default 600) set its length.
///
/// Ignored in CI (run it with `--include-ignored`): with failovers it takes 30 s to over a
/// minute (durable writes stall while a demoted primary resyncs), and a forced failover is
/// sometimes refused for 20 s, which makes the testkit panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "30 s to over a minute, and Sentinel sometimes refuses a forced failover for 20 s (the testkit then panics): .ci/run runs it on its own, with retries; by hand: --include-ignored, see docs/RELIABILITY.md"]
async fn chaos_run_with_sentinel_failovers() {
    let fault_ms = env_u64("DUEQ_CHAOS_SENTINEL_MS", 6_000);
    let total = env_u64("DUEQ_CHAOS_SENTINEL_TASKS", 600);
    let cluster = RedisSentinels::start(1, 1);
    let url = cluster.url();
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let faults = {
        let (stop, ledger) = (stop.clone(), ledger.clone());
        std::thread::spawn(move || -> Setup { Box::new(inject_sentinel(cluster, stop, ledger)) })
    };
    run(
        Run {
            url,
            replicas: 1,
            fault_ms,
            total,
            min_faults: 2,
        },
        ledger,
        stop,
        faults,
    )
    .await;
}

/// Redis out of memory, a fault the runs above do not inject: `maxmemory` set 2 MiB above
/// what Redis uses now (`maxmemory-policy noeviction`, what dueq asks for), then ballast
/// keys written outside the queue until Redis refuses a write with `OOM`; held 200 to
/// 1 500 ms (often longer than the 1 s lease; whatever the queue frees meanwhile is written
/// over at once), then the ballast deleted (memory freed, the
/// limit left in place). One every 300 to 800 ms, until `stop`. After each: the time from
/// the free to the next successful ack and to the next confirmed enqueue.
fn inject_oom(
    server: RedisServer,
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) -> RedisServer {
    let mut c = server.conn();
    let chunk = vec![b'x'; 256 * 1024];
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(300 + rand::random::<u64>() % 500));
        let used: u64 = dueq_testkit::info_field(&mut c, "memory", "used_memory")
            .unwrap()
            .parse()
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(used + 2 * 1024 * 1024)
            .query(&mut c)
            .unwrap();
        let mut ballast = Vec::new();
        loop {
            let key = format!("oom-ballast:{}", ballast.len());
            match redis::cmd("SET").arg(&key).arg(&chunk).query::<()>(&mut c) {
                Ok(()) => ballast.push(key),
                Err(e) if e.code() == Some("OOM") => break,
                Err(e) => panic!("ballast write: {e}"),
            }
            assert!(ballast.len() < 400, "Redis never refused a write");
        }
        // held full: memory the queue frees meanwhile (acks are let through, their first
        // write deletes) is taken again at once, as by another writer on the same Redis
        let hold = Duration::from_millis(200 + rand::random::<u64>() % 1_300);
        let held = Instant::now();
        let small = vec![b'y'; 16 * 1024];
        while held.elapsed() < hold {
            let key = format!("oom-ballast:{}", ballast.len());
            if redis::cmd("SET")
                .arg(&key)
                .arg(&small)
                .query::<()>(&mut c)
                .is_ok()
            {
                ballast.push(key);
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _: u64 = redis::cmd("DEL").arg(&ballast).query(&mut c).unwrap();
        *ledger.lock().unwrap().faults.entry("OOM").or_default() += 1;
        let end = Instant::now();
        let (mut ack_ms, mut enq_ms) = (None, None);
        while (ack_ms.is_none() || enq_ms.is_none())
            && end.elapsed() < Duration::from_secs(5)
            && !stop.load(Ordering::Acquire)
        {
            let l = ledger.lock().unwrap();
            let ms = end.elapsed().as_millis() as u64;
            if ack_ms.is_none() && l.last_ack.is_some_and(|t| t > end) {
                ack_ms = Some(ms);
            }
            if enq_ms.is_none() && l.last_enqueue.is_some_and(|t| t > end) {
                enq_ms = Some(ms);
            }
            drop(l);
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut l = ledger.lock().unwrap();
        // a wait cut short by the end of the run is not a figure (but 5 s is: a failure)
        if !stop.load(Ordering::Acquire) || ack_ms.is_some() {
            let ms = ack_ms.unwrap_or(end.elapsed().as_millis() as u64);
            l.recover_ms.entry("OOM: to next ack").or_default().push(ms);
        }
        if !stop.load(Ordering::Acquire) || enq_ms.is_some() {
            let ms = enq_ms.unwrap_or(end.elapsed().as_millis() as u64);
            l.recover_ms
                .entry("OOM: to next enqueue")
                .or_default()
                .push(ms);
        }
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut c)
        .unwrap();
    server
}

/// A fault the run above does not inject (docs/RELIABILITY.md, "Redis out of memory"):
/// Redis refuses writes with `OOM` (`maxmemory` reached, `noeviction`) over and over
/// during the run, then frees the memory. Besides the run's own checks (lost, duplicated,
/// unexpected, early all 0, every confirmed task acked): every enqueue error is an OOM
/// refusal of kind `Redis`, retryable, naming `OOM`; no task whose enqueue was refused ever
/// ran (the script wrote nothing); and after each free the next ack and the next confirmed
/// enqueue come within the claimers' backoff cap (1 s) plus a margin.
/// `DUEQ_CHAOS_OOM_MS` (default 8 000) and `DUEQ_CHAOS_OOM_TASKS` (default 1 000) set its
/// length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_run_through_redis_out_of_memory() {
    // an episode takes up to about 2.4 s (a 0.8 s gap, filling, a 1.5 s hold), so 8 s of
    // faults hold at least three of them (4 s made two in some runs: too few faults)
    let fault_ms = env_u64("DUEQ_CHAOS_OOM_MS", 8_000);
    let total = env_u64("DUEQ_CHAOS_OOM_TASKS", 1_000);
    let server = RedisServer::builder()
        .appendonly(true)
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start();
    let url = server.url();
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let faults = {
        let (stop, ledger) = (stop.clone(), ledger.clone());
        std::thread::spawn(move || -> Setup { Box::new(inject_oom(server, stop, ledger)) })
    };
    run(
        Run {
            url,
            replicas: 0,
            fault_ms,
            total,
            min_faults: 3,
        },
        ledger.clone(),
        stop,
        faults,
    )
    .await;
    let l = ledger.lock().unwrap();
    let oom = |m: &str| m.contains("OOM");
    let count = |v: &[String]| v.iter().filter(|m| oom(m)).count();
    eprintln!(
        "OOM: {} episodes; refused with OOM: {} enqueues, {} claims, {} acks; \
         other errors: {} claims, {} acks; first refusal: {:?}",
        l.faults.get("OOM").copied().unwrap_or(0),
        l.enqueue_errors.iter().filter(|e| oom(&e.3)).count(),
        count(&l.claim_errors),
        count(&l.ack_errors),
        l.claim_errors.len() - count(&l.claim_errors),
        l.ack_errors.len() - count(&l.ack_errors),
        l.enqueue_errors.first().map(|e| &e.3),
    );
    for (key, kind, retryable, message) in &l.enqueue_errors {
        assert!(
            *kind == dueq::ErrorKind::Redis && *retryable && oom(message),
            "enqueue of {key}: {kind:?} (retryable {retryable}): {message}"
        );
        assert!(
            !l.delivered.contains_key(key),
            "{key}: its enqueue was refused ({message}), yet it ran"
        );
    }
    let episodes = l.faults.get("OOM").copied().unwrap_or(0) as usize;
    assert!(
        l.enqueue_errors.len() >= episodes,
        "{} enqueues refused in {episodes} episodes: the fault did not bite",
        l.enqueue_errors.len()
    );
    for what in ["OOM: to next ack", "OOM: to next enqueue"] {
        let max = l.recover_ms.get(what).into_iter().flatten().max().copied();
        assert!(
            max.is_some_and(|ms| ms < 2_500),
            "{what} after the memory was freed: max {max:?} ms"
        );
    }
}

/// The Redis processes of a run (dropping them kills them).
type Setup = Box<dyn std::any::Any + Send>;

/// What a run is made of.
struct Run {
    url: String,
    /// Durable writes (enqueues and acks) for this many replicas.
    replicas: u8,
    fault_ms: u64,
    total: u64,
    min_faults: u64,
}

/// Producer, consumers, crashes and the final check, for either setup.
async fn run(
    r: Run,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    faults: std::thread::JoinHandle<Setup>,
) {
    let Run {
        url,
        replicas,
        fault_ms,
        total,
        min_faults,
    } = r;
    let mut consumers: Vec<_> = (0..3)
        .map(|_| tokio::spawn(consume(url.clone(), replicas, ledger.clone())))
        .collect();

    // the fault thread is already running: a connect that meets a fault is tried again
    let connecting = Instant::now();
    let producer = loop {
        match Client::builder(&url)
            .response_timeout_ms(1_000)
            .replicas(replicas)
            .replica_timeout_ms(500)
            .connect()
            .await
        {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    connecting.elapsed() < Duration::from_secs(30),
                    "producer: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let q = producer.queue("chaos").unwrap();
    let started = Instant::now();
    let mut crashes = 0u64;
    for i in 0..total {
        let key = format!("t{i}");
        let spec = TaskSpec::new(key.clone().into_bytes())
            .key(key.clone())
            .delay_ms(rand::random::<u64>() % 1_000);
        // unknown until the answer comes (a consumer may get the task before that)
        ledger.lock().unwrap().unknown.insert(key.clone());
        match q.enqueue(spec).await {
            Ok(_) => {
                let mut l = ledger.lock().unwrap();
                l.unknown.remove(&key);
                l.confirmed.insert(key);
                l.last_enqueue = Some(Instant::now());
            }
            Err(e) => ledger.lock().unwrap().enqueue_errors.push((
                key,
                e.kind(),
                e.is_retryable(),
                e.to_string(),
            )),
        }
        // pace the enqueues over the fault window
        let due = started + Duration::from_millis(fault_ms * (i + 1) / total);
        tokio::time::sleep_until(due.into()).await;
        if i % (total / 8).max(1) == 0 && i > 0 {
            // a consumer crashes with whatever leases it holds, and a new one starts
            let k = (i as usize / 7) % consumers.len();
            consumers[k].abort();
            consumers[k] = tokio::spawn(consume(url.clone(), replicas, ledger.clone()));
            crashes += 1;
        }
    }
    stop.store(true, Ordering::Release);
    // the Redis processes live until the end of the check
    let _setup = tokio::task::spawn_blocking(move || faults.join().unwrap())
        .await
        .unwrap();
    let faulted = started.elapsed();

    // every confirmed task must be acked (or dead: a task whose attempts all ended in lease
    // expiries is dead, which DESIGN 2.1 allows; the report counts those apart)
    let drain_started = Instant::now();
    let mut dead = HashSet::new();
    // gone from Redis after a delivery whose ack answer was lost (the ack did land: an
    // acknowledged task leaves nothing behind), or gone without any delivery: lost
    let mut ack_unknown = HashSet::new();
    let mut vanished = HashSet::new();
    loop {
        let missing: Vec<String> = {
            let l = ledger.lock().unwrap();
            l.confirmed
                .iter()
                .filter(|k| {
                    !l.acked.contains(*k)
                        && !dead.contains(*k)
                        && !ack_unknown.contains(*k)
                        && !vanished.contains(*k)
                })
                .cloned()
                .collect()
        };
        if missing.is_empty() {
            break;
        }
        if drain_started.elapsed() > Duration::from_secs(30) {
            let mut states = Vec::new();
            for k in missing.iter().take(5) {
                let t = q.get(&dueq::TaskRef::key(k.clone()).unwrap()).await;
                states.push(format!("{k}: {t:?}"));
            }
            panic!("{} confirmed tasks never acked: {states:#?}", missing.len());
        }
        for k in missing.iter().take(50) {
            match q.get(&dueq::TaskRef::key(k.clone()).unwrap()).await {
                Ok(Some(t)) if t.state == dueq::TaskState::Dead => {
                    dead.insert(k.clone());
                }
                Ok(None) if ledger.lock().unwrap().delivered.contains_key(k) => {
                    ack_unknown.insert(k.clone());
                }
                Ok(None) => {
                    vanished.insert(k.clone());
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for c in &consumers {
        c.abort();
    }
    let l = ledger.lock().unwrap();
    // a task seen gone while its consumer, its ack answered, had not yet written that down
    // was acked with the answer in hand, not lost
    ack_unknown.retain(|k| !l.acked.contains(k));
    let lost = vanished.len();
    let recovered = l
        .unknown
        .iter()
        .filter(|k| l.delivered.contains_key(*k))
        .count();
    let mut faults: Vec<_> = l.faults.iter().collect();
    faults.sort();
    let mut recovery: Vec<String> = l
        .recover_ms
        .iter()
        .map(|(f, v)| {
            let mut v = v.clone();
            v.sort_unstable();
            format!("{f}: p50 {} ms, max {} ms", v[v.len() / 2], v[v.len() - 1])
        })
        .collect();
    recovery.sort();
    eprintln!(
        "chaos: {total} tasks over {faulted:?}; faults {faults:?}, consumer crashes {crashes}; \
         confirmed {}, unknown {}; dead (attempts used up) {}; acked with the answer lost {}; lost {lost}, duplicated {}, recovered {recovered}, \
         unexpected {}, early {}, redelivered (not yet acked) {}; fault end to next ack: {recovery:?}",
        l.confirmed.len(),
        l.unknown.len(),
        dead.len(),
        ack_unknown.len(),
        l.duplicated,
        l.unexpected,
        l.early,
        l.redelivered
    );
    assert_eq!(
        (lost, l.duplicated, l.unexpected, l.early),
        (0, 0, 0, 0),
        "lost, duplicated, unexpected, early"
    );
    assert!(
        l.faults.values().sum::<u64>() >= min_faults,
        "too few faults injected"
    );
}
