//! What the driver of a `dueq chaos` run does the same on one redis-server and on a cluster:
//! the ledgers as read while the run goes on, the producer, and the end of the run (drain,
//! stop the workers, read the final states, check).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{TaskRef, TaskSpec, TaskState};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::check::{self, Check, Final};
use super::config::Config;
use super::faults::Rng;
use super::ledger::{AckAnswer, EnqueueAnswer, Event, Reader, Writer, now_ms};
use super::procs::Workers;

/// Longest wait after a fault for the next successful ack (the time to recover).
const RECOVERY_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for the queue to drain after the faults stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the ledgers are read while waiting.
const POLL: Duration = Duration::from_millis(5);

/// Aborts a spawned task when dropped (an early return, Ctrl-C).
pub struct AbortOnDrop<T>(pub JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The ledgers as read so far, and the latest successful ack in them.
pub struct Ledgers {
    pub reader: Reader,
    pub events: Vec<Event>,
    last_ack_ms: u64,
}

impl Ledgers {
    pub fn new() -> Self {
        Self {
            reader: Reader::default(),
            events: Vec::new(),
            last_ack_ms: 0,
        }
    }

    /// Reads what was written since the last call; returns how many events came.
    pub fn poll(&mut self) -> Result<usize> {
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
    pub async fn recovery_after(&mut self, end_ms: u64) -> Result<Option<u64>> {
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

/// Where the ledgers go: `--ledger-dir` (new or empty, kept), or a temporary directory
/// (removed when the second value drops).
pub fn ledger_dir(cfg: &Config) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
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

/// The end of a run, after faults and producer stopped.
pub struct Finish {
    pub check: Check,
    pub drained: bool,
    pub drain_ms: u64,
}

/// Drains the queue (bounded), lets the last ack answers reach the ledgers, stops the
/// workers, reads the final state of every task the ledger does not show acked, and checks.
pub async fn finish(
    q: &dueq::Queue,
    ledgers: &mut Ledgers,
    workers: &mut Workers,
) -> Result<Finish> {
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
pub fn examples(c: &Check, events: &[Event]) -> BTreeMap<String, Vec<Event>> {
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
pub async fn produce(
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
