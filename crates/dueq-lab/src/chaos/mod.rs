//! `dueq chaos`: the fault-injection run of issue 11 as a command, with worker *processes*.
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
mod faults;
mod ledger;
mod procs;
mod windows;
pub mod worker;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{Client, TaskRef, TaskSpec, TaskState};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use self::check::{Check, Final};
use self::faults::{Kind, Rng, Schedule};
use self::ledger::{AckAnswer, EnqueueAnswer, Event, Reader, Writer, now_ms};
use self::procs::Workers;
use dueq_testkit::RedisServer;

use crate::servers;

/// The queue of a run (its Redis is its own).
const QUEUE: &str = "chaos";
/// Lease of every claim: short, so that a killed worker's tasks come back quickly.
pub const LEASE_MS: u64 = 1_000;
/// Longest wait after a fault for the next successful ack (the time to recover).
const RECOVERY_WAIT: Duration = Duration::from_secs(5);
/// Pause between the `kill -9` of the redis-server and its restart, jittered: the first
/// pause of a supervisor such as `dueq serve`'s before it restarts a redis-server that died.
const RESTART_PAUSE: Duration = Duration::from_millis(200);
/// Longest wait for the queue to drain after the faults stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a worker to exit once its stdin is closed, before SIGKILL.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Most faults in one run (a 600 s run with the shortest pauses injects fewer).
const MAX_FAULTS: u64 = 10_000;
/// How often the ledgers are read while waiting.
const POLL: Duration = Duration::from_millis(5);

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long tasks are enqueued and faults injected, ms.
    pub duration_ms: u64,
    /// Tasks enqueued over that time.
    pub tasks: u64,
    /// Worker processes.
    pub workers: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Where the ledgers go (kept); a temporary directory when `None`.
    pub ledger_dir: Option<PathBuf>,
    /// On a local Redis Cluster with master failovers ([`cluster`]) instead of one
    /// redis-server.
    pub cluster: bool,
    /// Durable writes of producer and workers (`--replicas`; `--cluster` only).
    pub replicas: u8,
}

/// One kind of fault in the report.
#[derive(Debug, Default, Clone, Serialize)]
pub struct FaultStats {
    /// Injected (the command answered, the process was killed).
    pub injected: u64,
    /// Tries that failed (the command was refused or timed out).
    pub failed: u64,
    /// From the fault's end to the next successful ack by any worker, ms: median. With
    /// `--cluster`: from the kill to the first successful ack of a task of the killed
    /// master's partitions claimed after the kill.
    pub recover_ms_p50: Option<u64>,
    /// The same, largest.
    pub recover_ms_max: Option<u64>,
    /// Faults after which no ack came within 5 s (with `--cluster`: before the next fault or
    /// the end of the run; not in the figures above).
    pub not_recovered: u64,
    #[serde(skip)]
    recover_ms: Vec<u64>,
}

/// The report of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seed of the run (`--seed` repeats its schedule).
    pub seed: u64,
    /// Fault and producer window, ms.
    pub duration_ms: u64,
    /// Tasks the producer enqueued (tried).
    pub tasks: u64,
    /// Worker processes running at a time.
    pub workers: u32,
    /// Worker processes started in all (one more per `worker_sigkill`).
    pub worker_processes: u32,
    /// Lease of each claim, ms.
    pub lease_ms: u64,
    /// The ledger's counts.
    #[serde(flatten)]
    pub check: Check,
    /// Per fault kind.
    pub faults: BTreeMap<&'static str, FaultStats>,
    /// From the start of the producer to the end of the last fault, ms (more than
    /// `duration_ms` when the last faults of the cycle came after the window).
    pub faults_ms: u64,
    /// How long the producer took, ms (more than `duration_ms` when enqueues were slower
    /// than its pace; faults stop at the end of the window all the same).
    pub producer_ms: u64,
    /// Whether the queue drained before the deadline (30 s).
    pub drained: bool,
    /// From the end of the faults and the producer to an empty queue, ms.
    pub drain_ms: u64,
    /// The whole run, ms.
    pub elapsed_ms: u64,
    /// Ledger lines cut short (a worker killed in the middle of a write) or unreadable.
    pub torn_lines: u64,
    /// Every ledger line of the example keys, so that a failure can be read without
    /// re-running.
    pub example_events: BTreeMap<String, Vec<Event>>,
    /// `--cluster`: the cluster, its faults and the per-partition figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<cluster::ClusterReport>,
    /// Whether lost, duplicated, unexpected and early are all 0 (with `--cluster`:
    /// duplicates are allowed when each is a task of a killed master's partition, claimed
    /// and acked within a lease before the kill, `cluster.duplicated_unexplained` 0).
    pub ok: bool,
}

/// Aborts a spawned task when dropped (an early return, Ctrl-C).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The ledgers as read so far, and the latest successful ack in them.
struct Ledgers {
    reader: Reader,
    events: Vec<Event>,
    last_ack_ms: u64,
}

impl Ledgers {
    fn new() -> Self {
        Self {
            reader: Reader::default(),
            events: Vec::new(),
            last_ack_ms: 0,
        }
    }

    /// Reads what was written since the last call; returns how many events came.
    fn poll(&mut self) -> Result<usize> {
        let before = self.events.len();
        self.reader
            .poll(&mut self.events)
            .context("reading the ledgers")?;
        for ev in &self.events[before..] {
            if let Event::Ack {
                answer: AckAnswer::Acked,
                at_ms,
                ..
            } = ev
            {
                self.last_ack_ms = self.last_ack_ms.max(*at_ms);
            }
        }
        Ok(self.events.len() - before)
    }

    /// Waits (at most `RECOVERY_WAIT`) for a successful ack after `end_ms`; its delay.
    async fn recovery_after(&mut self, end_ms: u64) -> Result<Option<u64>> {
        let deadline = Instant::now() + RECOVERY_WAIT;
        loop {
            self.poll()?;
            if self.last_ack_ms > end_ms {
                return Ok(Some(self.last_ack_ms - end_ms));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

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

/// Where the ledgers go: `--ledger-dir` (new or empty, kept), or a temporary directory
/// (removed when the second value drops).
fn ledger_dir(cfg: &Config) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    Ok(match &cfg.ledger_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("creating --ledger-dir {}", d.display()))?;
            if std::fs::read_dir(d)?.next().is_some() {
                anyhow::bail!("--ledger-dir {} is not empty", d.display());
            }
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new().prefix("dueq-chaos-").tempdir()?;
            (t.path().to_path_buf(), Some(t))
        }
    })
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

impl FaultStats {
    /// Fills the median and largest time to recover from the times collected.
    fn summarize(&mut self) {
        self.recover_ms.sort_unstable();
        self.recover_ms_p50 = self.recover_ms.get(self.recover_ms.len() / 2).copied();
        self.recover_ms_max = self.recover_ms.last().copied();
    }
}

/// The end of a run, after faults and producer stopped.
struct Finish {
    check: Check,
    drained: bool,
    drain_ms: u64,
}

/// Drains the queue (bounded), lets the last ack answers reach the ledgers, stops the
/// workers, reads the final state of every task the ledger does not show acked, and checks.
async fn finish(q: &dueq::Queue, ledgers: &mut Ledgers, workers: &mut Workers) -> Result<Finish> {
    // drain: the queue empties (dead tasks stay), bounded
    let drain_started = Instant::now();
    let drained = drain(q).await;
    let drain_ms = drain_started.elapsed().as_millis() as u64;
    // the last ack answers reach the ledgers (bounded): no new line for 100 ms
    let settle = Instant::now() + Duration::from_secs(2);
    let mut quiet_since = Instant::now();
    while Instant::now() < settle && quiet_since.elapsed() < Duration::from_millis(100) {
        if ledgers.poll()? > 0 {
            quiet_since = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
    workers.stop_all().await;
    ledgers.poll()?;

    // the final state of every task the ledger does not show acked
    let mut finals = HashMap::new();
    for key in check::unfinished(&ledgers.events) {
        let f = final_state(q, &key).await;
        finals.insert(key, f);
    }
    Ok(Finish {
        check: check::check(&ledgers.events, &finals),
        drained,
        drain_ms,
    })
}

/// Every ledger line of the example keys of `c`.
fn examples(c: &Check, events: &[Event]) -> BTreeMap<String, Vec<Event>> {
    let mut example_events: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for key in c.examples.values().flatten() {
        let evs = events
            .iter()
            .filter(|e| event_key(e) == Some(key.as_str()))
            .cloned()
            .collect();
        example_events.insert(key.clone(), evs);
    }
    example_events
}

fn event_key(e: &Event) -> Option<&str> {
    match e {
        Event::Start { .. } => None,
        Event::Enqueue { key, .. } | Event::Deliver { key, .. } | Event::Ack { key, .. } => {
            Some(key)
        }
    }
}

/// Enqueues `cfg.tasks` keyed tasks (`t0`, `t1`, ...; payload = key), due 0 to 999 ms after
/// the enqueue, at an even pace over the window, with at most `in_flight` enqueues waiting
/// for their answer at a time (1: one after the other); records each answer. Returns how long
/// it took, ms.
async fn produce(
    q: dueq::Queue,
    ledger: PathBuf,
    cfg: Config,
    mut rng: Rng,
    started: Instant,
    in_flight: usize,
) -> Result<u64> {
    let w =
        Arc::new(Mutex::new(Writer::create(&ledger).with_context(|| {
            format!("opening the ledger {}", ledger.display())
        })?));
    let ledger = Arc::new(ledger);
    let slots = Arc::new(Semaphore::new(in_flight.max(1)));
    let mut calls: JoinSet<Result<()>> = JoinSet::new();
    for i in 0..cfg.tasks {
        let key = format!("t{i}");
        let spec = TaskSpec::new(key.clone().into_bytes())
            .key(key.clone())
            .delay_ms(rng.range(0, 999));
        let slot = slots.clone().acquire_owned().await?;
        while let Some(done) = calls.try_join_next() {
            done.context("an enqueue task panicked")??;
        }
        let (q, w, ledger) = (q.clone(), w.clone(), ledger.clone());
        calls.spawn(async move {
            let _slot = slot;
            let (answer, id, due_at_ms, error) = match q.enqueue(spec).await {
                Ok(e) => (
                    EnqueueAnswer::Confirmed,
                    Some(e.id.as_str().to_owned()),
                    Some(e.due_at_ms),
                    None,
                ),
                Err(e) => (EnqueueAnswer::Unknown, None, None, Some(e.to_string())),
            };
            w.lock()
                .unwrap_or_else(|p| p.into_inner())
                .write(&Event::Enqueue {
                    key,
                    answer,
                    id,
                    due_at_ms,
                    error,
                    at_ms: now_ms(),
                })
                .with_context(|| format!("writing the ledger {}", ledger.display()))
        });
        let due = started + Duration::from_millis(cfg.duration_ms * (i + 1) / cfg.tasks);
        tokio::time::sleep_until(due).await;
    }
    while let Some(done) = calls.join_next().await {
        done.context("an enqueue task panicked")??;
    }
    Ok(started.elapsed().as_millis() as u64)
}

/// Waits until the queue holds no scheduled or active task (at most `DRAIN_TIMEOUT`);
/// whether it did.
async fn drain(q: &dueq::Queue) -> bool {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        if let Ok(s) = q.stats().await
            && s.scheduled == 0
            && s.active == 0
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What Redis holds for `key` (three tries: the faults have stopped, but a connection
/// killed by the last one may fail a first call).
async fn final_state(q: &dueq::Queue, key: &str) -> Final {
    let Ok(target) = TaskRef::key(key) else {
        return Final::Unreadable;
    };
    for _ in 0..3 {
        match q.get(&target).await {
            Ok(None) => return Final::Gone,
            Ok(Some(t)) if t.state == TaskState::Dead => return Final::Dead,
            Ok(Some(t)) if t.state == TaskState::Succeeded => return Final::Gone,
            Ok(Some(t)) => return Final::Live(t.state.as_str()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    Final::Unreadable
}
