//! `dueq chaos-worker` (hidden): one worker process of a `dueq chaos` run. It claims through
//! the library's `DueClaimer` and acks each task by hand, appending every delivery and every
//! ack answer to its own ledger file. On a queue of one partition it acks one task after the
//! other before the next claim; on a partitioned queue (`--cluster`) it sends one ack call
//! per partition at once (`Queue::ack_each`) and claims again without waiting for them.
//!
//! It stops when its stdin closes (the parent stopped it, or died: a worker never outlives
//! its run) or on SIGINT/SIGTERM. The parent kills it with SIGKILL as a fault.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{AckOutcome, ClaimedTask, Client};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::ledger::{AckAnswer, Event, Writer, now_ms};
use crate::args::ChaosWorkerArgs;

/// Tasks per claim.
const BATCH: usize = 50;

/// Completes when stdin reaches its end (or fails). A plain thread, not tokio's stdin: a
/// blocking read cannot be cancelled, and tokio's would hold up the runtime's shutdown.
fn stdin_closed() -> Arc<Notify> {
    let closed = Arc::new(Notify::new());
    let c = closed.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok(n) = std::io::stdin().read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        // notify_one keeps a permit if nobody waits yet
        c.notify_one();
    });
    closed
}

/// Runs the worker until stdin closes or a signal comes; its client does durable writes to
/// `replicas` replicas.
pub async fn run(url: &str, replicas: u8, a: &ChaosWorkerArgs) -> Result<()> {
    let closed = stdin_closed();
    let stop = async {
        tokio::select! {
            () = closed.notified() => {}
            () = crate::shutdown_signal() => {}
        }
    };
    tokio::select! {
        r = work(url, replicas, a) => r,
        () = stop => Ok(()),
    }
}

/// The ledger, shared by the claim loop and the acks in flight (one `write` per line, under
/// the lock, so lines never interleave).
#[derive(Clone)]
struct Ledger {
    writer: Arc<Mutex<Writer>>,
    path: Arc<std::path::PathBuf>,
}

impl Ledger {
    fn write(&self, ev: &Event) -> Result<()> {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write(ev)
            .with_context(|| format!("writing the ledger {}", self.path.display()))
    }

    fn ack(&self, t: &ClaimedTask, answer: Result<AckOutcome, dueq::Error>) -> Result<()> {
        let (answer, error) = match answer {
            Ok(AckOutcome::Acked) => (AckAnswer::Acked, None),
            Ok(AckOutcome::LeaseLost) => (AckAnswer::LeaseLost, None),
            // AckOutcome is non_exhaustive: an answer this code does not know proves
            // nothing either way
            Ok(other) => (AckAnswer::Unknown, Some(format!("{other:?}"))),
            Err(e) => (AckAnswer::Unknown, Some(e.to_string())),
        };
        self.write(&Event::Ack {
            id: t.id.as_str().to_owned(),
            key: t.key.clone().unwrap_or_default(),
            token: t.lease_token.as_str().to_owned(),
            answer,
            error,
            at_ms: now_ms(),
        })
    }
}

async fn work(url: &str, replicas: u8, a: &ChaosWorkerArgs) -> Result<()> {
    let ledger = Ledger {
        writer: Arc::new(Mutex::new(
            Writer::create(&a.ledger)
                .with_context(|| format!("opening the ledger {}", a.ledger.display()))?,
        )),
        path: Arc::new(a.ledger.clone()),
    };
    ledger.write(&Event::Start {
        pid: std::process::id(),
        at_ms: now_ms(),
    })?;
    // Redis may be down right now (a worker started in the middle of a restart)
    let client = loop {
        match Client::builder(url)
            .response_timeout_ms(1_000)
            .replicas(replicas)
            .connect()
            .await
        {
            Ok(c) => break c,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let q = client.queue(&a.queue)?;
    let mut claimer = q.due_claimer().lease_ms(Some(a.lease_ms));
    // acks in flight (several partitions): each answers into the ledger by itself
    let mut acks: JoinSet<Result<()>> = JoinSet::new();
    loop {
        while let Some(done) = acks.try_join_next() {
            done.context("an ack task panicked")??;
        }
        claimer.ready().await;
        // a failed claim pushes the next look back by itself (10 ms doubling to 1 s)
        let Ok(tasks) = claimer.claim(BATCH).await else {
            continue;
        };
        // the whole batch is delivered now, when the claim answers, before any ack
        let at_ms = now_ms();
        for t in &tasks {
            ledger.write(&Event::Deliver {
                id: t.id.as_str().to_owned(),
                key: t.key.clone().unwrap_or_default(),
                token: t.lease_token.as_str().to_owned(),
                attempt: t.attempt,
                due_at_ms: t.due_at_ms,
                claimed_at_ms: t.claimed_at_ms,
                at_ms,
            })?;
        }
        if a.partitions <= 1 {
            // one partition: one ack after the other, the next claim after the last
            for t in tasks {
                let answer = q.ack(&t.id, &t.lease_token).await;
                ledger.ack(&t, answer)?;
            }
            continue;
        }
        // several: one call per partition, all at once, and the next claim without waiting
        // for them (a partition whose node is down or whose writes are not replicated
        // answers late, and holds up only its own tasks' answers)
        let mut by_partition: BTreeMap<u16, Vec<ClaimedTask>> = BTreeMap::new();
        for t in tasks {
            by_partition
                .entry(dueq::partition_of_id(t.id.as_str(), a.partitions))
                .or_default()
                .push(t);
        }
        for (_, mine) in by_partition {
            let (q, ledger) = (q.clone(), ledger.clone());
            acks.spawn(async move {
                let items: Vec<_> = mine
                    .iter()
                    .map(|t| (t.id.clone(), t.lease_token.clone()))
                    .collect();
                let answers = q.ack_each(&items).await;
                for (t, answer) in mine.iter().zip(answers) {
                    ledger.ack(t, answer)?;
                }
                Ok(())
            });
        }
    }
}
