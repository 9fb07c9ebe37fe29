//! The live workers list: heartbeats register, describe, expire and are
//! removed on a graceful stop; the registry is trimmed and capped. The SIGKILL of a real
//! `dueq work` process is in `crates/dueq-cli/tests/it/work.rs`.

use std::time::{Duration, Instant};

use dueq::{ErrorKind, Heartbeat, Outcome, TaskSpec, Worker, WorkerKind, WorkerLoad};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE};

async fn listed(ctx: &Ctx, id: &str) -> bool {
    ctx.client
        .workers()
        .await
        .unwrap()
        .iter()
        .any(|w| w.id == id)
}

#[tokio::test]
async fn a_worker_lists_itself_with_its_load_and_leaves_at_once_on_shutdown() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("wl");
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(7)
        .heartbeat_ms(100)
        .handle("wl", move |_t| {
            let mut rx = release_rx.clone();
            async move {
                let _ = rx.wait_for(|r| *r).await;
                Outcome::Success
            }
        })
        .handle("wl2", |_t| async { Outcome::Success })
        .build()
        .unwrap();
    let id = worker.id().unwrap().to_owned();
    let before = ctx.redis_now_ms();
    let handle = worker.start();
    assert_eq!(handle.id(), Some(id.as_str()));
    wait_until_async(DEADLINE, "the worker is listed", || listed(&ctx, &id)).await;
    let w = ctx.client.workers().await.unwrap().remove(0);
    assert_eq!(w.kind, WorkerKind::Worker);
    assert_eq!(w.pid, std::process::id());
    assert_eq!(w.version, env!("CARGO_PKG_VERSION"));
    assert!(!w.host.is_empty() && id.starts_with(&format!("{}:{}:", w.host, w.pid)));
    assert_eq!(w.queues, ["wl", "wl2"]);
    assert_eq!((w.concurrency, w.in_hand), (7, 0));
    assert!(w.started_at_ms >= before && w.last_seen_ms >= w.started_at_ms);
    assert_eq!(
        w.expires_at_ms,
        w.last_seen_ms + 300,
        "3 missed beats of 100 ms"
    );

    // two handlers running show as tasks in hand at a later beat
    q.enqueue(TaskSpec::new(b"a".to_vec())).await.unwrap();
    q.enqueue(TaskSpec::new(b"b".to_vec())).await.unwrap();
    wait_until_async(DEADLINE, "2 tasks in hand", || async {
        ctx.client
            .workers()
            .await
            .unwrap()
            .first()
            .map(|w| w.in_hand)
            == Some(2)
    })
    .await;
    let later = ctx.client.workers().await.unwrap().remove(0);
    assert_eq!(
        later.started_at_ms, w.started_at_ms,
        "a beat keeps the start"
    );
    assert!(later.last_seen_ms > w.last_seen_ms);
    assert_eq!(ctx.client.workers_of("wl2").await.unwrap().len(), 1);
    assert!(ctx.client.workers_of("other").await.unwrap().is_empty());

    let _ = release_tx.send(true);
    handle.shutdown().await.unwrap();
    // removed by the shutdown itself, not by expiry: gone the moment shutdown returns
    assert!(ctx.client.workers().await.unwrap().is_empty());
    let mut raw = ctx.raw();
    let len: u64 = redis::cmd("HLEN")
        .arg(dueq::protocol::keys::WORKERS_KEY)
        .query(&mut raw)
        .unwrap();
    assert_eq!(len, 0);
}

#[tokio::test]
async fn a_heartbeat_that_stops_without_removal_expires_by_the_redis_clock() {
    let ctx = Ctx::new().await;
    let hb = Heartbeat::new(ctx.client.clone(), WorkerKind::Server)
        .interval_ms(100)
        .unwrap()
        .load(|| WorkerLoad::new(vec!["a".into()], 3, 1));
    let id = hb.id().to_owned();
    assert_eq!(hb.ttl_ms(), 300);
    // a process that dies mid-run: the task is aborted, nothing removes the entry
    let task = tokio::spawn(hb.run(std::future::pending()));
    wait_until_async(DEADLINE, "the server is listed", || listed(&ctx, &id)).await;
    let w = ctx.client.workers().await.unwrap().remove(0);
    assert_eq!(
        (w.kind, w.concurrency, w.in_hand),
        (WorkerKind::Server, 3, 1)
    );
    task.abort();
    let _ = task.await;
    let died = Instant::now();
    wait_until_async(DEADLINE, "the dead entry leaves the list", || async {
        !listed(&ctx, &id).await
    })
    .await;
    assert!(
        died.elapsed() < Duration::from_millis(300 + 1_500),
        "left after {:?}, expiry is 300 ms after the last beat",
        died.elapsed()
    );
    // a later beat of another process trims it from the hash
    let mut raw = ctx.raw();
    assert!(
        redis::cmd("HEXISTS")
            .arg(dueq::protocol::keys::WORKERS_KEY)
            .arg(&id)
            .query::<bool>(&mut raw)
            .unwrap(),
        "skipped by readers, still stored"
    );
    let other = Heartbeat::new(ctx.client.clone(), WorkerKind::Worker)
        .interval_ms(100)
        .unwrap();
    let other_id = other.id().to_owned();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let t2 = tokio::spawn(other.run(async move {
        let _ = stop_rx.await;
    }));
    wait_until_async(DEADLINE, "the expired entry is trimmed", || async {
        let mut raw = ctx.raw();
        !redis::cmd("HEXISTS")
            .arg(dueq::protocol::keys::WORKERS_KEY)
            .arg(&id)
            .query::<bool>(&mut raw)
            .unwrap()
    })
    .await;
    assert!(listed(&ctx, &other_id).await);
    let _ = stop_tx.send(());
    t2.await.unwrap();
    assert!(
        !listed(&ctx, &other_id).await,
        "a stopped heartbeat removes its entry"
    );
}

fn fill(ctx: &Ctx, prefix: &str, n: usize, expires_at_ms: u64) {
    let mut raw = ctx.raw();
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("HSET")
            .arg(dueq::protocol::keys::WORKERS_KEY)
            .arg(format!("{prefix}:{i}"))
            .arg(format!(
                "{} {expires_at_ms} {} 0\n{{\"kind\":\"worker\",\"host\":\"h\",\"pid\":1,\
                 \"version\":\"0\",\"queues\":[],\"concurrency\":1}}",
                expires_at_ms - 15_000,
                expires_at_ms - 30_000
            ))
            .ignore();
    }
    pipe.query::<()>(&mut raw).unwrap();
}

fn stored(ctx: &Ctx) -> usize {
    redis::cmd("HLEN")
        .arg(dueq::protocol::keys::WORKERS_KEY)
        .query(&mut ctx.raw())
        .unwrap()
}

/// Runs one beat of a new heartbeat and returns whether it was listed right after it (the
/// stop future is first polled once the first beat is done), then lets it remove itself.
async fn one_beat_listed(ctx: &Ctx) -> bool {
    let hb = Heartbeat::new(ctx.client.clone(), WorkerKind::Worker);
    let id = hb.id().to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let client = ctx.client.clone();
    hb.run(async move {
        let live = client.workers().await.unwrap();
        let _ = tx.send(live.iter().any(|w| w.id == id));
    })
    .await;
    rx.await.unwrap()
}

#[tokio::test]
async fn a_full_registry_sweeps_expired_entries_and_refuses_only_live_overflow() {
    let ctx = Ctx::new().await;
    let now = ctx.redis_now_ms();
    let half = dueq::MAX_WORKERS / 2;
    // half live, the rest (and more than one beat samples) long expired: at the cap
    fill(&ctx, "live", half, now + 3_600_000);
    fill(&ctx, "dead", dueq::MAX_WORKERS - half + 16, now - 45_000);
    assert_eq!(
        ctx.client.workers().await.unwrap().len(),
        half,
        "expired ones are skipped"
    );
    assert!(
        one_beat_listed(&ctx).await,
        "a newcomer is listed once expired entries are swept"
    );
    assert_eq!(
        stored(&ctx),
        half,
        "every expired entry was swept; the newcomer removed itself"
    );
    // full of live entries: a newcomer is refused and nothing is removed
    fill(&ctx, "more", dueq::MAX_WORKERS - half, now + 3_600_000);
    assert_eq!(stored(&ctx), dueq::MAX_WORKERS);
    assert!(!one_beat_listed(&ctx).await, "refused beyond the cap");
    assert_eq!(stored(&ctx), dueq::MAX_WORKERS);
    assert_eq!(ctx.client.workers().await.unwrap().len(), dueq::MAX_WORKERS);
}

#[tokio::test]
async fn bad_heartbeat_settings_and_queue_names_are_refused() {
    let ctx = Ctx::new().await;
    for ms in [0, 99, 60_001] {
        let e = Worker::builder(ctx.client.clone())
            .heartbeat_ms(ms)
            .handle("q", |_t| async { Outcome::Success })
            .build()
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("heartbeat_ms"), "{e}");
        let e = Heartbeat::new(ctx.client.clone(), WorkerKind::Worker)
            .interval_ms(ms)
            .unwrap_err();
        assert!(e.to_string().contains("100 to 60000"), "{e}");
    }
    let e = ctx.client.workers_of("a{b}").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    // entries changed by hand (live by their expiry, unreadable otherwise) hide nothing
    let mut raw = ctx.raw();
    for (id, v) in [
        ("junk-json", "9999999999999 9999999999999 1 0\nnot json"),
        ("junk-head", "9999999999999 9999999999999 zz"),
        ("junk-all", "hello"),
    ] {
        redis::cmd("HSET")
            .arg(dueq::protocol::keys::WORKERS_KEY)
            .arg(id)
            .arg(v)
            .query::<()>(&mut raw)
            .unwrap();
    }
    assert!(ctx.client.workers().await.unwrap().is_empty());
    fill(&ctx, "ok", 1, ctx.redis_now_ms() + 60_000);
    assert_eq!(ctx.client.workers().await.unwrap().len(), 1);
    redis::cmd("DEL")
        .arg(dueq::protocol::keys::WORKERS_KEY)
        .query::<()>(&mut raw)
        .unwrap();
    // without a heartbeat a worker is not listed
    let w = Worker::builder(ctx.client.clone())
        .heartbeat(false)
        .handle("q", |_t| async { Outcome::Success })
        .build()
        .unwrap();
    assert_eq!(w.id(), None);
    let h = w.start();
    h.shutdown().await.unwrap();
    assert!(ctx.client.workers().await.unwrap().is_empty());
}
