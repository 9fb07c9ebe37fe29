//! Cases C19, C21 and C22 of `shared/cases/CASES.md` (Redis restarts, failover, durable
//! writes), and the reconnect behaviour: a killed connection, an outage counted
//! once, retries with backoff rather than a hot loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Client, ErrorKind, Outcome, TaskRef, TaskSpec, TaskState, Worker};
use dueq_testkit::{RedisSentinels, RedisServer, wait_until_async};

use crate::support::DEADLINE;

/// How often each payload ran.
type Runs = Arc<Mutex<HashMap<Vec<u8>, u32>>>;

/// A worker on `queue` that records how often each payload ran.
fn counting_worker(client: &Client, queue: &str) -> (dueq::WorkerHandle, Runs) {
    let runs: Runs = Arc::default();
    let r2 = runs.clone();
    let w = Worker::builder(client.clone())
        .concurrency(32)
        .handle(queue, move |t| {
            let r2 = r2.clone();
            async move {
                *r2.lock().unwrap().entry(t.payload.clone()).or_default() += 1;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    (w, runs)
}

fn ran(runs: &Mutex<HashMap<Vec<u8>, u32>>) -> usize {
    runs.lock().unwrap().len()
}

/// Retries `f` until it succeeds or the deadline passes (a retryable error only).
async fn until_ok<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = dueq::Result<T>>,
{
    let start = Instant::now();
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) => {
                assert!(e.is_retryable(), "{what}: {e}");
                assert!(start.elapsed() < DEADLINE * 2, "{what}: still failing: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Case C19 in shared/cases/CASES.md: Redis restart.
///
/// Proves that with AOF (`appendfsync always`) 10 000 tasks in every state (2 500 each:
/// scheduled and due, active, retrying, dead) survive `kill -9` and a restart with the state
/// they had (or, for a lease that expired meanwhile, the transition expiry allows), that a
/// worker started before the crash reconnects by itself and runs every live task once the
/// queue is resumed, and that the dead ones stay dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c19_redis_restart() {
    let mut server = RedisServer::builder().appendonly(true).start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue("c19").unwrap();
    let specs: Vec<TaskSpec> = (0..10_000u32)
        .map(|i| TaskSpec::new(i.to_be_bytes().to_vec()).key(format!("k{i}")))
        .collect();
    let enqueued = q.enqueue_batch(&specs).await.unwrap();
    let mut claimed = Vec::new();
    while claimed.len() < 7_500 {
        let n = (7_500 - claimed.len()).min(1_000);
        claimed.extend(q.claim(n, Some(3_000)).await.unwrap().tasks);
    }
    let (retrying, rest) = claimed.split_at(2_500);
    let (dead, _active) = rest.split_at(2_500);
    let nacks: Vec<_> = retrying
        .iter()
        .map(|t| (&t.id, &t.lease_token, "retry later", Some(3_000), false))
        .chain(
            dead.iter()
                .map(|t| (&t.id, &t.lease_token, "broken", None, true)),
        )
        .collect();
    q.nack_batch(&nacks).await.unwrap();
    // the worker lives through the crash; the pause (kept in Redis) holds it back until the
    // states have been compared
    q.pause().await.unwrap();
    let (worker, runs) = counting_worker(&client, "c19");
    let before = q.stats().await.unwrap();
    assert_eq!(
        (before.scheduled, before.active, before.dead),
        (5_000, 2_500, 2_500),
        "{before:?}"
    );
    let mut states = Vec::with_capacity(enqueued.len());
    for e in &enqueued {
        let t = q.get(&TaskRef::from(e.id.clone())).await.unwrap().unwrap();
        states.push((t.state, t.attempt));
    }

    server.kill9();
    server.restart();

    for (e, (state, attempt)) in enqueued.iter().zip(&states) {
        let target = TaskRef::from(e.id.clone());
        let t = until_ok("get after restart", || q.get(&target))
            .await
            .unwrap_or_else(|| panic!("task {} lost in the restart", e.id));
        let expired_lease =
            *state == TaskState::Active && t.state == TaskState::Scheduled && t.attempt == *attempt;
        assert!(
            (t.state, t.attempt) == (*state, *attempt) || expired_lease,
            "task {}: {state:?}/{attempt} before, {:?}/{} after",
            e.id,
            t.state,
            t.attempt
        );
    }
    until_ok("resume", || q.resume()).await;
    wait_until_async(
        DEADLINE * 2,
        "every live task ran after the restart",
        || {
            let n = ran(&runs);
            async move { n == 7_500 }
        },
    )
    .await;
    // the last handlers' acks land after their runs are counted
    wait_until_async(DEADLINE, "the last acks landed", || async {
        q.stats().await.is_ok_and(|s| s.active == 0)
    })
    .await;
    let after = q.stats().await.unwrap();
    assert_eq!(
        (after.scheduled, after.active, after.dead),
        (0, 0, 2_500),
        "{after:?}"
    );
    assert!(runs.lock().unwrap().values().all(|&n| n == 1));
    let stats = worker.shutdown().await.unwrap();
    assert!(client.connection_health().outages >= 1);
    // retries are paced (doubling pauses with jitter), not a hot loop
    assert!(stats.redis_errors < 100, "{stats:?}");
}

/// Reconnect: an outage of a second is one outage (one warning, one count), calls
/// retry with backoff meanwhile (a bounded number of failed calls, not a loop), and a worker
/// that lived through it runs a task enqueued after it, as well as one that fell due while
/// Redis was away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_is_counted_once_and_paced() {
    let mut server = RedisServer::builder().appendonly(true).start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue("outage").unwrap();
    let (worker, runs) = counting_worker(&client, "outage");
    q.enqueue(TaskSpec::new(b"during".to_vec()).delay_ms(300))
        .await
        .unwrap();
    assert!(client.connection_health().up);

    server.kill9();
    // the outage starts with the first failed call
    assert!(client.ping().await.is_err());
    assert!(!client.connection_health().up);
    // the outage lasts while Redis is down; nothing is awaited here
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.restart();
    let back = Instant::now();
    until_ok("enqueue after the restart", || {
        q.enqueue(TaskSpec::new(b"after".to_vec()))
    })
    .await;
    wait_until_async(DEADLINE, "both tasks ran", || {
        let n = ran(&runs);
        async move { n == 2 }
    })
    .await;
    assert!(
        back.elapsed() < Duration::from_secs(3),
        "{:?}",
        back.elapsed()
    );
    let h = client.connection_health();
    assert!(h.up, "{h:?}");
    assert_eq!(h.outages, 1, "{h:?}");
    assert!(h.last_outage_ms.is_some_and(|ms| ms >= 1_000), "{h:?}");
    let stats = worker.shutdown().await.unwrap();
    assert!(stats.redis_errors < 60, "{stats:?}");
}

/// Reconnect: `CLIENT KILL` of every connection of the client (commands and the
/// wake-up subscription). The worker keeps going: tasks enqueued after the kill run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_reconnects() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue("killed").unwrap();
    let (worker, runs) = counting_worker(&client, "killed");
    q.enqueue(TaskSpec::new(b"1".to_vec())).await.unwrap();
    wait_until_async(DEADLINE, "the first task ran", || {
        let n = ran(&runs);
        async move { n == 1 }
    })
    .await;
    let mut raw = server.conn();
    for ty in ["normal", "pubsub"] {
        let _: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg(ty)
            .query(&mut raw)
            .unwrap();
    }
    until_ok("enqueue after CLIENT KILL", || {
        q.enqueue(TaskSpec::new(b"2".to_vec()).delay_ms(200))
    })
    .await;
    wait_until_async(DEADLINE, "the task enqueued after the kill ran", || {
        let n = ran(&runs);
        async move { n == 2 }
    })
    .await;
    worker.shutdown().await.unwrap();
}

/// Durable writes (DESIGN 2.14): with no replica to confirm, a durable enqueue
/// reports `NotReplicated` (an error, not success) after its timeout; the write itself is on
/// the primary (WAIT cannot undo it), and the same enqueue without `replicas` succeeds. Also
/// after `FUNCTION FLUSH`: the durable pipeline loads the library by itself.
#[tokio::test]
async fn durable_write_without_replica_is_not_replicated() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .replicas(1)
        .replica_timeout_ms(50)
        .connect()
        .await
        .unwrap();
    let q = client.queue("durable").unwrap();
    let started = Instant::now();
    let e = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("k"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(e.is_retryable());
    assert!(started.elapsed() >= Duration::from_millis(50));
    // reads do not wait
    let t = q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Scheduled);
    let again = q
        .clone()
        .with_replicas(0, 0)
        .enqueue(TaskSpec::new(b"x".to_vec()).key("k"))
        .await
        .unwrap();
    assert!(!again.created());
    // a durable write to a server without the library (`FUNCTION FLUSH`): the pipeline of
    // FCALL and WAIT loads it and is sent again, so the answer is the write's own
    let mut raw = server.conn();
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut raw)
        .unwrap();
    let e = q
        .enqueue(TaskSpec::new(b"y".to_vec()).key("k2"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(q.get(&TaskRef::key("k2").unwrap()).await.unwrap().is_some());
}

/// Case C21 in shared/cases/CASES.md: failover with durable enqueue.
///
/// Proves that with a replica and `replicas(1)` (WAIT 1), 1 000 keyed enqueues made while the
/// primary is failed over (Sentinel) either succeed or report an error; re-submitting every
/// key that errored, through the same client (which follows the new primary by itself),
/// leaves every key on the new primary, and a worker runs every key exactly once. Every
/// enqueue that returned success is on the new primary before anything is re-submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c21_failover_durable_enqueue() {
    let cluster = Arc::new(RedisSentinels::start(1, 1));
    let client = Client::builder(&cluster.url())
        .replicas(1)
        .replica_timeout_ms(500)
        .response_timeout_ms(1_000)
        .connect()
        .await
        .unwrap();
    let q = client.queue("c21").unwrap();
    let c2 = cluster.clone();
    let failover = tokio::task::spawn_blocking(move || c2.failover());
    let mut confirmed = Vec::new();
    let mut failed = Vec::new();
    for i in 0..1_000u32 {
        let spec = TaskSpec::new(i.to_be_bytes().to_vec()).key(format!("k{i}"));
        match q.enqueue(spec).await {
            Ok(_) => confirmed.push(i),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                failed.push(i);
            }
        }
        if i % 100 == 99 {
            // spread the enqueues over the failover
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let new_primary = failover.await.unwrap();
    assert_ne!(new_primary, 0);
    let mut raw = cluster.servers[new_primary].conn();
    let keys = dueq::QueueKeys::new("c21").unwrap();
    for i in &confirmed {
        let id: Option<String> = redis::cmd("HGET")
            .arg(&keys.keys)
            .arg(format!("k{i}"))
            .query(&mut raw)
            .unwrap();
        assert!(
            id.is_some(),
            "k{i}: enqueue confirmed, missing on the new primary"
        );
    }
    for i in &failed {
        let spec = TaskSpec::new(i.to_be_bytes().to_vec()).key(format!("k{i}"));
        until_ok("re-submit", || q.enqueue(spec.clone())).await;
    }
    let (worker, runs) = counting_worker(&client, "c21");
    wait_until_async(DEADLINE * 2, "every key ran", || {
        let n = ran(&runs);
        async move { n == 1_000 }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    let twice: Vec<_> = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n != 1)
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    assert!(twice.is_empty(), "ran more than once: {twice:?}");
    eprintln!(
        "c21: {} confirmed, {} errored and re-submitted; worker {stats:?}",
        confirmed.len(),
        failed.len()
    );
}

/// Case C22 in shared/cases/CASES.md: a worker resumes after a failover.
///
/// Proves that a worker draining 2 000 tasks (enqueued with `replicas: 1`) through a Sentinel
/// URL keeps running through `SENTINEL FAILOVER` and the kill of the old primary, finds the
/// new primary by itself (a `READONLY` reply or a dropped connection makes the client ask the
/// sentinels again), finishes the drain, and runs a task enqueued after the failover; failed
/// calls stay few (no stream of errors against the read-only replica). Tasks whose claim or
/// ack reached only the old primary run again (counted and printed: asynchronous
/// replication cannot keep them; see docs/RELIABILITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c22_worker_resumes_after_failover() {
    let mut cluster = RedisSentinels::start(1, 1);
    let client = Client::builder(&cluster.url())
        .response_timeout_ms(1_000)
        .connect()
        .await
        .unwrap();
    let q = client.queue("c22").unwrap();
    let durable = q.clone().with_replicas(1, 2_000);
    let specs: Vec<TaskSpec> = (0..2_000u32)
        .map(|i| TaskSpec::new(i.to_be_bytes().to_vec()).delay_ms(u64::from(i) * 3))
        .collect();
    durable.enqueue_batch(&specs).await.unwrap();
    let runs: Runs = Arc::default();
    let r2 = runs.clone();
    // claims and acks the old primary took between the promotion of the replica and its own
    // demotion are lost with it (asynchronous replication): those tasks run again, which
    // at-least-once allows (docs/RELIABILITY.md); short leases keep a redelivery after a
    // lease expiry inside the test
    let worker = Worker::builder(client.clone())
        .concurrency(8)
        .lease_ms(1_000)
        .handle("c22", move |t| {
            let r2 = r2.clone();
            async move {
                // a slow handler, so that the drain spans the failover
                tokio::time::sleep(Duration::from_millis(2)).await;
                *r2.lock().unwrap().entry(t.payload.clone()).or_default() += 1;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the drain started", || {
        let n = ran(&runs);
        async move { n >= 100 }
    })
    .await;
    let old = cluster.primary_index().unwrap();
    let new = cluster.failover();
    assert_ne!(old, new);
    cluster.servers[old].kill9();
    let after = TaskSpec::new(b"after".to_vec());
    until_ok("enqueue after the failover", || q.enqueue(after.clone())).await;
    // the last task is due 6 s after the enqueue; a failover on a loaded machine can take
    // several seconds more, so the deadline is generous and the panic says how far it got
    let start = Instant::now();
    while ran(&runs) < 2_001 {
        assert!(
            start.elapsed() < DEADLINE * 4,
            "the drain did not complete on the new primary: {} of 2 001 tasks ran; stats {:?}; \
             health {:?}",
            ran(&runs),
            q.stats().await,
            client.connection_health()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until_async(DEADLINE * 2, "nothing scheduled or active", || {
        let q = q.clone();
        async move {
            q.stats()
                .await
                .is_ok_and(|s| s.scheduled == 0 && s.active == 0)
        }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    assert!(stats.redis_errors < 100, "{stats:?}");
    let again = runs.lock().unwrap().values().filter(|&&n| n > 1).count();
    let s = q.stats().await.unwrap();
    eprintln!(
        "c22: {again} tasks ran again (claim or ack lost with the old primary); worker {stats:?}; \
         lease_expired_total {}; health {:?}",
        s.lease_expired_total,
        client.connection_health()
    );
    assert!(
        runs.lock().unwrap().len() == 2_001,
        "a task whose durable enqueue succeeded did not run"
    );
}

/// Durable acks across a failover: with two replicas and acks that wait for both
/// (`replicas(2)`, every replica there is), a `SENTINEL FAILOVER` during a drain loses no
/// confirmed ack: every task that ran twice had an ack that was not confirmed (the worker
/// counts it as `lease_lost`) or a lease that expired. (With `replicas(1)` the replica that
/// is *not* promoted can confirm an ack the promoted one never sees; docs/RELIABILITY.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_acks_for_every_replica_survive_failover() {
    let cluster = RedisSentinels::start(2, 1);
    let client = Client::builder(&cluster.url())
        .response_timeout_ms(1_000)
        .replicas(2)
        .replica_timeout_ms(300)
        .connect()
        .await
        .unwrap();
    let q = client.queue("acks").unwrap();
    let specs: Vec<TaskSpec> = (0..1_500u32)
        .map(|i| TaskSpec::new(i.to_be_bytes().to_vec()).delay_ms(u64::from(i) * 2))
        .collect();
    q.clone()
        .with_replicas(2, 5_000)
        .enqueue_batch(&specs)
        .await
        .unwrap();
    let runs: Runs = Arc::default();
    let r2 = runs.clone();
    let worker = Worker::builder(client.clone())
        .concurrency(8)
        .lease_ms(1_000)
        .handle("acks", move |t| {
            let r2 = r2.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                *r2.lock().unwrap().entry(t.payload.clone()).or_default() += 1;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the drain started", || {
        let n = ran(&runs);
        async move { n >= 100 }
    })
    .await;
    cluster.failover();
    wait_until_async(DEADLINE * 3, "the drain completed", || {
        let (q, n) = (q.clone(), ran(&runs));
        async move {
            n == 1_500
                && q.stats()
                    .await
                    .is_ok_and(|s| s.scheduled == 0 && s.active == 0)
        }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    let again = runs.lock().unwrap().values().filter(|&&n| n > 1).count() as u64;
    let s = q.stats().await.unwrap();
    eprintln!(
        "durable acks: {again} tasks ran again; worker {stats:?}; lease_expired_total {}",
        s.lease_expired_total
    );
    assert!(
        again <= stats.lease_lost + s.lease_expired_total,
        "{again} tasks ran again after a confirmed ack"
    );
}

/// A client (so a worker or `dueq serve`) started while Redis is still loading its data set
/// after a restart waits until loading ends, instead of failing with `LOADING` and making the
/// process exit. Loading is slowed to about 7.5 s (3 000 keys, 2.5 ms each): longer than the
/// connection's own retries (about 5 s), shorter than the testkit's 10 s start deadline.
#[tokio::test(flavor = "multi_thread")]
async fn connect_waits_while_redis_is_loading_its_data_set() {
    let mut server = RedisServer::slow_loading(3_000, 2_500);
    server.stop();
    let url = server.url();
    let restart = std::thread::spawn(move || {
        server.restart();
        server
    });
    let start = Instant::now();
    let (client, waited) = loop {
        let attempt = Instant::now();
        match Client::connect(&url).await {
            Ok(c) => break (c, attempt.elapsed()),
            // not listening yet
            Err(e) => {
                assert!(
                    !e.to_string().to_lowercase().contains("loading"),
                    "connect gave up while Redis was loading: {e}"
                );
                assert!(start.elapsed() < DEADLINE, "never connected: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let server = restart.join().unwrap();
    assert!(
        waited >= Duration::from_secs(1),
        "the connect that worked did not wait for loading ({waited:?}): the test missed it"
    );
    let mut c = server.conn();
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert!(n >= 3_000, "data set not loaded: {n} keys");
    let q = client.queue("after-loading").unwrap();
    q.enqueue(TaskSpec::new(b"x".to_vec())).await.unwrap();
    assert_eq!(q.stats().await.unwrap().scheduled, 1);
}

/// A worker already running when Redis restarts and spends seconds loading its data set
/// keeps going: the handler that was running is not stopped (its lease, kept in the AOF, is
/// still its own), its ack is accepted after loading, and a task enqueued after loading runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_worker_survives_a_restart_with_a_long_load() {
    let mut server = RedisServer::slow_loading(3_000, 2_500);
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue("loading").unwrap();
    q.enqueue(TaskSpec::new(b"long".to_vec())).await.unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let (r2, s2) = (release.clone(), started.clone());
    let worker = Worker::builder(client.clone())
        .lease_ms(30_000)
        .handle("loading", move |t| {
            let (r2, s2) = (r2.clone(), s2.clone());
            async move {
                s2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if t.payload == b"long" {
                    r2.notified().await;
                }
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the long handler starts", || async {
        started.load(std::sync::atomic::Ordering::SeqCst) == 1
    })
    .await;
    server.stop();
    let restart = std::thread::spawn(move || {
        server.restart();
        server
    });
    let server = tokio::task::spawn_blocking(move || restart.join().unwrap())
        .await
        .unwrap();
    // loading is over (restart waits for it); let the handler finish
    release.notify_one();
    q.enqueue(TaskSpec::new(b"after".to_vec())).await.unwrap();
    wait_until_async(Duration::from_secs(30), "both tasks succeed", || async {
        q.stats().await.is_ok_and(|s| s.succeeded_total == 2)
    })
    .await;
    assert_eq!(worker.stats().lease_lost, 0);
    assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 2);
    worker.shutdown().await.unwrap();
    drop(server);
}
