//! `dueq chaos`: the fault-injection run as a command, with worker *processes*.
//!
//! It starts its own redis-server ([`crate::servers::chaos_server`]: `appendfsync always` and
//! `DEBUG` allowed, on a unix socket in a temporary directory) and `--workers` processes of
//! this binary (`dueq chaos-worker`, hidden). The producer, in this process, enqueues keyed
//! tasks due 0 to 1 s ahead at an even pace; a fault loop injects the faults of
//! [`faults::Kind`] at seeded random times; every process appends what it saw to its own
//! ledger file ([`ledger`]). At the end faults and producer stop, the workers drain the
//! queue (bounded), stop, and [`check`] reads the ledgers and Redis.
//!
//! With `--cluster` ([`cluster`]) the run is on a local Redis Cluster of 3 masters and 3
//! replicas instead, the queue split into 6 partitions, and the faults are master failovers
//! (the same producer, worker processes, ledgers and check, plus the per-partition figures
//! of [`windows`]).
//!
//! Nothing outlives the run: the worker processes are killed on drop (an early return, a
//! panic, Ctrl-C) and stop by themselves when their stdin closes (this process died); the
//! redis-server is killed on every return and on drop; the temporary directories are
//! removed. Only a SIGKILL of this process can leave the redis-server behind.

mod check;
mod cluster;
pub mod command;
mod config;
mod driver;
mod faults;
mod ledger;
mod procs;
mod report;
mod windows;
pub mod worker;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::Client;
use dueq_testkit::RedisServer;
use tokio::time::Instant;

pub use self::config::{Config, LEASE_MS};
use self::config::{MAX_FAULTS, QUEUE};
use self::driver::{AbortOnDrop, Ledgers, examples, finish, ledger_dir, produce};
use self::faults::{Kind, Rng, Schedule};
use self::ledger::now_ms;
use self::procs::Workers;
pub use self::report::{FaultStats, Report};

use crate::servers;

/// Pause between the `kill -9` of the redis-server and its restart, jittered: the first
/// pause of a supervisor such as `dueq serve`'s before it restarts a redis-server that died.
const RESTART_PAUSE: Duration = Duration::from_millis(200);

/// Runs `cfg` on a redis-server of its own; the report, or an error when the run itself
/// could not be carried out (a failed check is a report with `ok: false`).
///
/// # Errors
/// When redis-server or a worker cannot start, Redis stays away, a ledger cannot be read,
/// or SIGINT/SIGTERM interrupts the run.
pub async fn run(cfg: &Config) -> Result<Report> {
    if cfg.cluster {
        return cluster::run(cfg).await;
    }
    let mut server = servers::chaos_server()?;
    let r = tokio::select! {
        r = drive(&mut server, cfg) => r,
        () = crate::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    drop(server);
    r
}

/// `kill -9` of the redis-server, then, after [`RESTART_PAUSE`], a new one on the same AOF
/// and socket, waited for until it answers `PING` (its AOF loaded).
///
/// # Errors
/// When the new server does not answer within 10 s.
async fn kill_and_restart(server: &mut RedisServer) -> Result<()> {
    servers::blocking(|| server.kill9());
    tokio::time::sleep(dueq::backoff::jittered(RESTART_PAUSE)).await;
    servers::blocking(|| server.try_restart()).context("restarting the killed redis-server")
}

async fn drive(server: &mut RedisServer, cfg: &Config) -> Result<Report> {
    let t0 = Instant::now();
    let url = server.url();
    // a temporary directory (removed at the end) unless the caller keeps the ledgers
    let (dir, _temp) = ledger_dir(cfg)?;
    let mut ledgers = Ledgers::new();
    let producer_ledger = dir.join("producer.jsonl");
    ledgers.reader.add(producer_ledger.clone());
    let mut workers = Workers {
        exe: std::env::current_exe().context("finding this executable")?,
        url: url.clone(),
        dir: dir.clone(),
        procs: Vec::new(),
        started: 0,
        replicas: 0,
        partitions: 1,
    };
    for _ in 0..cfg.workers {
        let w = workers.spawn(&mut ledgers.reader)?;
        workers.procs.push(w);
    }
    let client = Client::builder(&url)
        .response_timeout_ms(1_000)
        .connect()
        .await
        .context("connecting to the run's redis-server")?;
    let q = client.queue(QUEUE)?;

    let started = Instant::now();
    let producer = AbortOnDrop(tokio::spawn(produce(
        q.clone(),
        producer_ledger,
        cfg.clone(),
        // its own stream, so the fault schedule does not depend on the producer's progress
        Rng::new(cfg.seed ^ 0x5eed_f00d_7a5c),
        started,
        1,
    )));

    // the faults, until the window ends and every kind has come once
    let mut schedule = Schedule::new(Rng::new(cfg.seed), cfg.duration_ms);
    let window = Duration::from_millis(cfg.duration_ms);
    let mut stats: BTreeMap<&'static str, FaultStats> = Kind::ALL
        .iter()
        .map(|k| (k.name(), FaultStats::default()))
        .collect();
    let mut count = 0u64;
    while (started.elapsed() < window || !schedule.cycle_done()) && count < MAX_FAULTS {
        count += 1;
        let (gap, kind) = schedule.next();
        if started.elapsed() < window {
            tokio::time::sleep(gap).await;
        }
        let injected = match kind {
            Kind::WorkerKill => {
                let i = schedule.pick(0, u64::from(cfg.workers) - 1) as usize;
                workers.kill(i, &mut ledgers.reader).await
            }
            Kind::RedisRestart => kill_and_restart(server).await,
            _ => faults::redis_fault(&url, kind).await,
        };
        let s = stats.entry(kind.name()).or_default();
        if let Err(e) = injected {
            tracing::warn!(error = %format!("{e:#}"), "a fault could not be injected");
            s.failed += 1;
            continue;
        }
        s.injected += 1;
        // a pause ends 300 ms after the command's answer
        let end_ms = now_ms() + if kind == Kind::ClientPause { 300 } else { 0 };
        match ledgers.recovery_after(end_ms).await? {
            Some(ms) => s.recover_ms.push(ms),
            None => s.not_recovered += 1,
        }
    }
    let faults_ms = started.elapsed().as_millis() as u64;
    let mut producer = producer;
    let producer_ms = (&mut producer.0).await.context("the producer panicked")??;

    let end = finish(&q, &mut ledgers, &mut workers).await?;
    let c = end.check;
    for s in stats.values_mut() {
        s.summarize();
    }
    let example_events = examples(&c, &ledgers.events);
    Ok(Report {
        seed: cfg.seed,
        duration_ms: cfg.duration_ms,
        tasks: cfg.tasks,
        workers: cfg.workers,
        worker_processes: workers.started,
        lease_ms: LEASE_MS,
        ok: c.ok(),
        check: c,
        faults: stats,
        faults_ms,
        producer_ms,
        drained: end.drained,
        drain_ms: end.drain_ms,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        torn_lines: ledgers.reader.torn_lines() + ledgers.reader.bad_lines,
        example_events,
        cluster: None,
    })
}
