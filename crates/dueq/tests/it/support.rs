//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use dueq::{AckOutcome, ClaimedTask, Client, Queue, ScheduleFirer, TaskSpec};
use dueq_testkit::RedisServer;
use tokio::sync::oneshot;

/// A fresh server and a client connected to it.
pub struct Ctx {
    pub server: RedisServer,
    pub client: Client,
}

impl Ctx {
    pub async fn new() -> Self {
        let server = RedisServer::start();
        let client = Client::connect(&server.url()).await.unwrap();
        Self { server, client }
    }

    pub fn queue(&self, name: &str) -> Queue {
        self.client.queue(name).unwrap()
    }

    /// Redis `TIME` in epoch ms.
    pub fn redis_now_ms(&self) -> u64 {
        let mut c = self.server.conn();
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        s * 1000 + us / 1000
    }

    pub fn raw(&self) -> redis::Connection {
        self.server.conn()
    }
}

/// A running schedule firer: the sender stops it, the handle ends after it.
pub type Firer = (oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Runs `firer` until the returned sender is used (or dropped).
pub fn spawn_firer(firer: ScheduleFirer) -> Firer {
    let (tx, rx) = oneshot::channel::<()>();
    let join = tokio::spawn(firer.run(async move {
        let _ = rx.await;
    }));
    (tx, join)
}

/// Runs a firer of queue `q` on `client` that looks again at least every `poll_ms`.
pub fn queue_firer(client: &Client, q: &Queue, poll_ms: u64) -> Firer {
    spawn_firer(ScheduleFirer::for_queues(client.clone(), vec![q.clone()]).poll_ms(poll_ms))
}

/// Stops a firer and waits for it to end.
pub async fn stop_firer(f: Firer) {
    let _ = f.0.send(());
    f.1.await.unwrap();
}

/// A client of the test's server whose Redis clock is frozen at `at` (debug builds).
#[cfg(debug_assertions)]
pub async fn frozen_client(ctx: &Ctx, at: u64) -> (dueq::FrozenClock, Client) {
    let clock = dueq::FrozenClock::frozen_at(at);
    let client = Client::builder(&ctx.server.url())
        .frozen_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    (clock, client)
}

/// Calls of dueq operations (`FCALL`) the server has run so far.
/// `(key, id)` of every `schedule:` entry of the queue's `keys` hash.
pub fn schedule_keys(ctx: &Ctx, q: &Queue) -> Vec<(String, String)> {
    let all: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&q.keys().keys)
        .query(&mut ctx.raw())
        .unwrap();
    all.into_iter()
        .filter(|(k, _)| k.starts_with("schedule:"))
        .collect()
}

pub fn script_calls(ctx: &Ctx) -> u64 {
    dueq_testkit::info_field(&mut ctx.raw(), "commandstats", "cmdstat_fcall")
        .unwrap_or_default()
        .split(',')
        .find_map(|f| f.strip_prefix("calls="))
        .map_or(0, |n| n.parse().unwrap())
}

/// Default deadline for conditions in tests.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Waits (with [`DEADLINE`]) until the queue's stats satisfy `f`.
pub async fn wait_stats(q: &Queue, f: impl Fn(&dueq::QueueStats) -> bool) {
    let start = std::time::Instant::now();
    loop {
        if f(&q.stats().await.unwrap()) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "queue stats never matched");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Enqueues `n` tasks due now, of `group` when given.
pub async fn due_tasks(q: &Queue, n: usize, group: Option<&str>) {
    let specs: Vec<TaskSpec> = (0..n)
        .map(|i| {
            let s = TaskSpec::new(format!("{i}").into_bytes());
            match group {
                Some(g) => s.group(g),
                None => s,
            }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
}

/// Acknowledges `tasks`, each of which must still hold its lease.
pub async fn ack_all(q: &Queue, tasks: &[ClaimedTask]) {
    let items: Vec<_> = tasks
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    for o in q.ack_batch(&items).await.unwrap() {
        assert_eq!(o, AckOutcome::Acked);
    }
}

/// A small random generator (xorshift64) for the randomized schedule tests, so they need no
/// rand API; seeded by [`seed`].
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The seed of a randomized test: `REVIEW_SEED` to repeat a run, else the time (printed, so a
/// failing run can be repeated).
pub fn seed() -> u64 {
    let s = std::env::var("REVIEW_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("REVIEW_SEED={s}");
    s
}

/// Sets `spec` on `q` and returns its next fire time (the schedule's first tick when new).
pub async fn set_first_tick(q: &Queue, spec: &dueq::ScheduleSpec) -> u64 {
    q.set_schedule(spec).await.unwrap().next_fire_at_ms.unwrap()
}
