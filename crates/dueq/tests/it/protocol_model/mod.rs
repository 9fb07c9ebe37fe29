//! A model-based test of the queue protocol: random sequences of enqueue
//! (one task or a batch, keyed or not, grouped or not, keep or replace), claim, ack, nack
//! (retry and permanent), extend, release, cancel and reschedule (by id and by key), dead-letter retry
//! and delete, time passing, lease expiry, a worker crash and a Redis restart (`kill -9` under
//! AOF `appendfsync always`), run against the real scripts on a real Redis and against a
//! reference model of DESIGN sections 1 and 2 (`model.rs`).
//!
//! Every answer is compared with the model's, and after every step `check.rs` verifies: every
//! task in exactly one state, by `get` (id and key), by `stats` and by the raw keys; the key
//! index and the tasks agree; counts are conserved; and, at each claim, nothing handed out
//! early. Calls with stale lease tokens are part of the mix: they must be refused and change
//! nothing (the checks after the step see the model unchanged).
//!
//! Time is the frozen test clock (`dueq::FrozenClock`, debug builds only): nothing happens by
//! itself, "now" moves only by the `Advance` / expiry / crash steps, so a sequence replays
//! exactly and shrinks to a short readable list. `PROPTEST_CASES` (default 64) and
//! `DUEQ_MODEL_STEPS` (default 40) set the run's size.

mod check;
mod model;
mod ops;
mod run;

use std::sync::Mutex;

use dueq::{Backoff, FrozenClock, SettingsPatch};
use dueq_testkit::RedisServer;
use proptest::prelude::*;

use model::{Model, Settings};
use ops::{Op, op, settings};
use run::{Env, TALLY, Worker, connect, tally};

/// Business keys and groups the sequences draw from (few, so they collide).
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
const GROUPS: [&str; 2] = ["g0", "g1"];
/// Worker processes, each with its own client.
const WORKERS: usize = 2;
/// The queue's settings in every sequence.
const MAX_ATTEMPTS: u32 = 2;
const LEASE_MS: u64 = 1_000;

fn backoff() -> Backoff {
    // no jitter: the model knows every retry time; short, so a task whose lease expired is
    // soon claimed again (and its old token becomes a stale one to try)
    Backoff::new(5, 4.0, 800)
}

async fn run_case(
    server: &Mutex<RedisServer>,
    clock: &FrozenClock,
    name: String,
    settings: &Settings,
    ops: &[Op],
) {
    let url = server.lock().unwrap().url();
    let (producer, q) = connect(&url, clock, &name).await;
    q.update_settings(
        &SettingsPatch::default()
            .max_attempts(Some(settings.max_attempts))
            .lease_ms(Some(settings.lease_ms))
            .succeeded_max(settings.succeeded_max)
            .dead_max(settings.dead_max),
    )
    .await
    .unwrap();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (client, queue) = connect(&url, clock, &name).await;
        workers.push(Worker {
            client,
            queue,
            incarnation: 0,
        });
    }
    let mut env = Env {
        server,
        url,
        clock: clock.clone(),
        name,
        producer,
        q,
        workers,
        model: Model::new(settings, backoff()),
        leases: Vec::new(),
        seq: 0,
    };
    check::all(&env, "start").await;
    for (i, op) in ops.iter().enumerate() {
        env.step(op).await;
        tally(|t| t.steps += 1);
        check::all(&env, &format!("step {i}: {op:?}")).await;
    }
    tally(|t| t.dead_trimmed += env.model.c.dead_trimmed);
}

fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn protocol_matches_the_model() {
    let server = Mutex::new(RedisServer::builder().appendonly(true).start());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // frozen at the Redis time of the start; it only moves forward, across sequences too
    let start_ms = {
        let mut c = server.lock().unwrap().conn();
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        s * 1_000 + us / 1_000
    };
    let clock = FrozenClock::frozen_at(start_ms);
    let case = std::sync::atomic::AtomicU32::new(0);
    let steps = env_or("DUEQ_MODEL_STEPS", 40) as usize;
    let config = ProptestConfig {
        cases: env_or("PROPTEST_CASES", 64),
        failure_persistence: None,
        // a case takes ~0.1 s: enough tries to shrink to a few steps
        max_shrink_iters: 1_024,
        ..ProptestConfig::default()
    };
    proptest!(config, |(s in settings(), ops in prop::collection::vec(op(), 1..=steps))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(run_case(&server, &clock, format!("model-{n}"), &s, &ops));
    });
    eprintln!(
        "protocol model: {:?}",
        TALLY.lock().unwrap().take().unwrap_or_default()
    );
}
