//! Cases C17 and C18 of `shared/cases/CASES.md`: the script cache (and dueq's function
//! library) and the eviction policy.
//! Also Redis out of memory under `noeviction` (docs/RELIABILITY.md).

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{AckOutcome, Client, EvictionCheck, Queue, TaskId, TaskRef, TaskSpec};
use dueq_testkit::{RedisServer, info_field};
use tracing::instrument::WithSubscriber;

use crate::support::{Ctx, DEADLINE};

fn cached_scripts(conn: &mut redis::Connection) -> u64 {
    info_field(conn, "memory", "number_of_cached_scripts")
        .unwrap()
        .parse()
        .unwrap()
}

/// Function libraries the server holds (dueq's is one library).
fn libraries(conn: &mut redis::Connection) -> usize {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION").arg("LIST").query(conn).unwrap();
    list.len()
}

fn function_flush(conn: &mut redis::Connection) {
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(conn)
        .unwrap();
    assert_eq!(libraries(conn), 0);
}

/// Claims every due task and returns their payloads, sorted.
async fn claim_all(q: &Queue) -> Vec<Vec<u8>> {
    let c = q.claim(100, None).await.unwrap();
    let mut v: Vec<_> = c.tasks.into_iter().map(|t| t.payload).collect();
    v.sort();
    v
}

/// Case C17 in shared/cases/CASES.md: script cache flushed (`SCRIPT FLUSH`), and its
/// counterpart for dueq's operations, which are Redis functions: `FUNCTION FLUSH`.
///
/// Proves that `SCRIPT FLUSH` does not touch dueq (it keeps nothing in the script cache), and
/// that the client loads its function library by itself after `FUNCTION FLUSH`: a task
/// enqueued before a flush and one enqueued after it are both claimed, and enqueue, claim and
/// ack each work right after a flush (the library is checked gone before and there again after
/// each call). Readiness stays ready, and reports `scripts: false` only while the library
/// cannot be loaded (here: the `FUNCTION` command is taken away by ACL, while Redis still
/// answers, after a flush); a user without `FUNCTION` is fine once the library is there.
#[tokio::test]
async fn c17_script_flush() {
    let ctx = Ctx::new().await;
    let mut raw = ctx.raw();
    let q = ctx.queue("flushed");
    q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap();
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut raw)
        .unwrap();
    q.enqueue(TaskSpec::new(b"A2".to_vec())).await.unwrap();
    assert_eq!(cached_scripts(&mut raw), 0, "dueq uses the script cache");
    function_flush(&mut raw);
    q.enqueue(TaskSpec::new(b"B".to_vec())).await.unwrap();
    assert_eq!(libraries(&mut raw), 1, "enqueue did not load the library");
    function_flush(&mut raw);
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(libraries(&mut raw), 1, "claim did not load the library");
    let mut payloads: Vec<_> = c.tasks.iter().map(|t| t.payload.clone()).collect();
    payloads.sort();
    assert_eq!(payloads, vec![b"A".to_vec(), b"A2".to_vec(), b"B".to_vec()]);
    function_flush(&mut raw);
    let items: Vec<_> = c
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    assert_eq!(
        q.ack_batch(&items).await.unwrap(),
        vec![AckOutcome::Acked; 3]
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.succeeded_total, s.scheduled, s.active), (3, 0, 0));

    function_flush(&mut raw);
    let r = ctx.client.readiness().await;
    assert!(r.ready(), "{r:?}");
    assert!(r.redis && r.scripts && r.error.is_none(), "{r:?}");
    assert_eq!(libraries(&mut raw), 1, "readiness did not load the library");

    // a user without `FUNCTION` (ACL) but with `FCALL`: a server that has the library is
    // ready, a client starts, and the library runs
    acl(&mut raw, "-function");
    let r = ctx.client.readiness().await;
    assert!(r.ready(), "{r:?}");
    let late = Client::connect(&ctx.server.url()).await.unwrap();
    late.queue("flushed")
        .unwrap()
        .enqueue(TaskSpec::new(b"C".to_vec()))
        .await
        .unwrap();

    // a library that cannot be loaded while Redis answers: readiness fails on that field
    // only, and a client does not start, with an error that says what it needs
    acl(&mut raw, "+function");
    function_flush(&mut raw);
    acl(&mut raw, "-function");
    let r = ctx.client.readiness().await;
    assert!(r.redis, "{r:?}");
    assert!(!r.scripts && !r.ready(), "{r:?}");
    let error = r.error.clone().unwrap_or_default();
    assert!(
        error.contains("function library") && error.contains("+function|load"),
        "{r:?}"
    );
    let refused = Client::connect(&ctx.server.url()).await.err();
    let refused = refused.map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("+function|load"), "{refused}");
    acl(&mut raw, "+function");
    let r = ctx.client.readiness().await;
    assert!(r.ready(), "{r:?}");
    assert_eq!(libraries(&mut raw), 1, "readiness did not load the library");
    assert_eq!(claim_all(&q).await, vec![b"C".to_vec()]);
}

/// Gives (`+...`) or takes (`-...`) a command of the default user (ACL).
fn acl(conn: &mut redis::Connection, rule: &str) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg(rule)
        .query::<()>(conn)
        .unwrap();
}

/// The user guide's rules for a Redis ACL user (keys and channels `dueq:*`, no `+@all`): with
/// them a client loads the library, enqueues, a worker drains (claim, ack, wake-up
/// subscription, heartbeat), and readiness is ready; without `function|load` the same holds
/// once the library is there.
#[tokio::test]
async fn acl_user_with_the_readme_rules() {
    let server = RedisServer::builder().tcp().start();
    let mut raw = server.conn();
    let mut rules = vec!["reset".to_owned(), "on".to_owned(), ">app-pw".to_owned()];
    rules.extend(guide_acl_rules());
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg(&rules)
        .query::<()>(&mut raw)
        .unwrap();
    let url = server.url().replace("redis://", "redis://app:app-pw@");
    let client = Client::connect(&url).await.unwrap();
    assert_eq!(
        libraries(&mut raw),
        1,
        "the ACL user did not load the library"
    );
    let q = client.queue("acl").unwrap();
    for i in 0..3 {
        q.enqueue(TaskSpec::new(b"t".to_vec()).key(format!("order:{i}")))
            .await
            .unwrap();
    }
    let worker = dueq::Worker::builder(client.clone())
        .handle("acl", |_| async { dueq::Outcome::Success })
        .build()
        .unwrap()
        .start();
    crate::support::wait_stats(&q, |s| s.succeeded_total == 3).await;
    assert_eq!(worker.shutdown().await.unwrap().succeeded, 3);
    let r = client.readiness().await;
    assert!(r.ready(), "{r:?}");

    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("-function|load")
        .query::<()>(&mut raw)
        .unwrap();
    let late = Client::connect(&url).await.unwrap();
    assert!(late.readiness().await.ready());
    late.queue("acl")
        .unwrap()
        .enqueue(TaskSpec::new(b"u".to_vec()))
        .await
        .unwrap();
    assert_eq!(claim_all(&q).await, vec![b"u".to_vec()]);
}

/// The ACL rules the user guide gives for a dueq user (operations/redis.md): the first code
/// block after "A Redis ACL user for dueq needs" (the test above checks that they suffice).
fn guide_acl_rules() -> Vec<String> {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/guide/src/operations/redis.md"
    ))
    .unwrap();
    let after = page
        .split_once("A Redis ACL user for dueq needs")
        .expect("the guide says what a Redis ACL user needs")
        .1;
    let rules = after.split("```").nth(1).unwrap();
    let rules = rules.strip_prefix("text").unwrap_or(rules);
    let rules: Vec<String> = rules.split_whitespace().map(str::to_owned).collect();
    assert!(rules.iter().any(|r| r == "+fcall"), "{rules:?}");
    rules
}

/// Retries `f` until it succeeds (the client reconnects by itself after a restart).
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
                assert!(start.elapsed() < DEADLINE, "{what}: still failing: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Case C17 in shared/cases/CASES.md: Redis restarted with AOF (the script cache is empty; the
/// AOF keeps function libraries, so the test flushes dueq's after the restart).
///
/// Proves the client reconnects and loads its library by itself after `kill -9` and restart:
/// the task enqueued before the crash survives (AOF) and the one enqueued after it is written,
/// both are claimed, and readiness is ready again. While Redis is down, readiness says so
/// (`redis: false`, not ready) within a few seconds, without hanging.
#[tokio::test]
async fn c17_restart_with_aof() {
    let mut server = RedisServer::builder().appendonly(true).start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queue("restarted").unwrap();
    let a = q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap();

    server.kill9();
    let started = Instant::now();
    let r = client.readiness().await;
    let took = started.elapsed();
    assert!(!r.redis && !r.ready(), "{r:?}");
    assert!(r.error.is_some(), "{r:?}");
    assert!(took < Duration::from_secs(8), "readiness took {took:?}");

    server.restart();
    let mut raw = server.conn();
    function_flush(&mut raw);
    let b = until_ok("enqueue after restart", || {
        q.enqueue(TaskSpec::new(b"B".to_vec()))
    })
    .await;
    assert!(b.created());
    assert_ne!(a.id, b.id, "the id sequence went back after the restart");
    let r = client.readiness().await;
    assert!(r.ready(), "{r:?}");
    assert_eq!(claim_all(&q).await, vec![b"A".to_vec(), b"B".to_vec()]);
    let ids: Vec<TaskId> = vec![a.id, b.id];
    for id in &ids {
        let t = q.get(&id.clone().into()).await.unwrap().unwrap();
        assert_eq!(t.state, dueq::TaskState::Active);
    }
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Connects to `url` and returns the client with what it logged meanwhile.
async fn connect_logged(url: &str) -> (Client, String) {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let client = Client::connect(url)
        .with_subscriber(subscriber)
        .await
        .unwrap();
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    (client, text)
}

/// Case C18 in shared/cases/CASES.md: eviction policy.
///
/// Proves that against `maxmemory-policy allkeys-lru` the client logs a loud warning at
/// connect (naming the policy and the fix) and readiness reports `Unsafe("allkeys-lru")`,
/// not ready; that readiness re-reads the policy (after `CONFIG SET ... noeviction` it is
/// ready); that against `noeviction` nothing is warned and readiness is `Safe` and ready; and
/// that when the policy cannot be read (`CONFIG` renamed away) a clear warning is logged and
/// readiness reports `Unknown(..)` but stays ready.
#[tokio::test]
async fn c18_eviction_policy() {
    // allkeys-lru: loud warning, not ready
    let lru = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let (client, logs) = connect_logged(&lru.url()).await;
    let warning = logs
        .lines()
        .find(|l| l.contains("WARN") && l.contains("maxmemory-policy"))
        .unwrap_or_else(|| panic!("no warning logged; logs:\n{logs}"));
    assert!(
        warning.contains("allkeys-lru") && warning.contains("noeviction"),
        "{warning}"
    );
    let r = client.readiness().await;
    assert_eq!(r.eviction, EvictionCheck::Unsafe("allkeys-lru".into()));
    assert!(r.redis && r.scripts, "{r:?}");
    assert!(!r.ready(), "{r:?}");
    // readiness reads the policy each time
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query::<()>(&mut lru.conn())
        .unwrap();
    let r = client.readiness().await;
    assert_eq!(r.eviction, EvictionCheck::Safe);
    assert!(r.ready(), "{r:?}");

    // noeviction: no warning, ready
    let safe = RedisServer::start();
    let (client, logs) = connect_logged(&safe.url()).await;
    assert!(
        !logs.contains("WARN") && !logs.contains("maxmemory-policy"),
        "unexpected warning:\n{logs}"
    );
    let r = client.readiness().await;
    assert_eq!(r.eviction, EvictionCheck::Safe);
    assert!(r.ready(), "{r:?}");

    // the policy cannot be read: clear warning, Unknown, still ready
    let hidden = RedisServer::builder()
        .arg("--rename-command")
        .arg("CONFIG")
        .arg("")
        .start();
    let (client, logs) = connect_logged(&hidden.url()).await;
    let warning = logs
        .lines()
        .find(|l| l.contains("WARN") && l.contains("maxmemory-policy"))
        .unwrap_or_else(|| panic!("no warning logged; logs:\n{logs}"));
    assert!(
        warning.contains("could not read") && warning.contains("noeviction"),
        "{warning}"
    );
    let r = client.readiness().await;
    let EvictionCheck::Unknown(why) = &r.eviction else {
        panic!("{r:?}")
    };
    assert!(!why.is_empty());
    assert!(r.ready(), "{r:?}");
    // the queue itself works there
    let q = client.queue("q").unwrap();
    q.enqueue(TaskSpec::new(b"x".to_vec())).await.unwrap();
    assert_eq!(claim_all(&q).await, vec![b"x".to_vec()]);
}

fn set_maxmemory(conn: &mut redis::Connection, bytes: u64) {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query::<()>(conn)
        .unwrap();
}

/// Redis out of memory (`maxmemory` reached, `noeviction`) in the middle of a batch of
/// 2 500 (docs/RELIABILITY.md, "Redis out of memory"): the batch is three script calls; the
/// first goes in below the limit and takes Redis over it, the next is refused with `OOM`.
/// The caller gets `ErrorKind::Redis` (retryable) naming `OOM`, and the 1 000 tasks of the
/// first call are there although the batch failed: a batch over 1 000 is not atomic, and
/// the error does not say how much went in. Once memory is freed, the same batch re-sent by
/// key creates only the rest (unkeyed, it would create the first 1 000 again).
#[tokio::test]
async fn oom_mid_batch_keeps_the_calls_before_it() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("oom");
    let specs: Vec<TaskSpec> = (0..2_500)
        .map(|i| TaskSpec::new(vec![b'p'; 2_000]).key(format!("k{i}")))
        .collect();
    let mut c = ctx.raw();
    let used: u64 = info_field(&mut c, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    // the limit counts the call's own arguments while they wait in the query buffer (about
    // 2 MB a call here): 3 MiB above now lets the first call in; its 1 000 tasks (more than
    // 2 MB) and the next call's arguments take Redis over
    set_maxmemory(&mut c, used + 3 * 1024 * 1024);
    let err = q.enqueue_batch(&specs).await.unwrap_err();
    assert_eq!(err.kind(), dueq::ErrorKind::Redis, "{err}");
    assert!(
        err.is_retryable() && err.to_string().contains("OOM"),
        "{err}"
    );
    // whole calls went in before the refusal (the first; the first two if the memory adds
    // up otherwise)
    let written = q.stats().await.unwrap().scheduled;
    assert!(
        written == 1_000 || written == 2_000,
        "{written} tasks written before the refusal"
    );

    set_maxmemory(&mut c, 0);
    let again = q.enqueue_batch(&specs).await.unwrap();
    let created = again.iter().filter(|e| e.created()).count() as u64;
    assert_eq!(created, 2_500 - written);
    assert!(again[..written as usize].iter().all(|e| !e.created()));
    let s = q.stats().await.unwrap();
    assert_eq!(s.scheduled, 2_500);

    // far over the limit: an enqueue is refused and writes nothing; a claim and an ack go
    // through (their functions are flagged `allow-oom`, scripts.rs: draining frees memory)
    set_maxmemory(&mut c, 1);
    let err = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("one"))
        .await
        .unwrap_err();
    assert!(
        err.is_retryable() && err.to_string().contains("OOM"),
        "{err}"
    );
    assert!(
        q.get(&TaskRef::key("one").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let held = q.claim(10, None).await.map(|c| c.tasks);
    let held = held.map_err(|e| e.to_string()).unwrap();
    assert_eq!(held.len(), 10);
    for t in &held {
        assert_eq!(
            q.ack(&t.id, &t.lease_token).await.unwrap(),
            AckOutcome::Acked
        );
    }
    assert_eq!(q.stats().await.unwrap().scheduled, 2_490);

    // Redis refuses FUNCTION LOAD itself at its limit: a client started now (a worker, `dueq
    // serve`) still connects and is ready, since the server holds the library, and its reads
    // run (the stats function only reads)
    let late = Client::connect(&ctx.server.url()).await.unwrap();
    let r = late.readiness().await;
    assert!(r.redis && r.scripts, "{r:?}");
    let late_q = late.queue("oom").unwrap();
    assert_eq!(late_q.stats().await.unwrap().scheduled, 2_490);
    set_maxmemory(&mut c, 0);
}
