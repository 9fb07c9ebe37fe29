//! `dueq chaos-worker` (hidden): one worker process of a `dueq chaos` run. It claims through
//! the library's `DueClaimer` and acks each task by hand, appending every delivery and every
//! ack answer to its own ledger file before going on.
//!
//! It stops when its stdin closes (the parent stopped it, or died: a worker never outlives
//! its run) or on SIGINT/SIGTERM. The parent kills it with SIGKILL as a fault.

use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{AckOutcome, Client};
use tokio::sync::Notify;

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

/// Runs the worker until stdin closes or a signal comes.
pub async fn run(url: &str, a: &ChaosWorkerArgs) -> Result<()> {
    let closed = stdin_closed();
    let stop = async {
        tokio::select! {
            () = closed.notified() => {}
            () = crate::shutdown_signal() => {}
        }
    };
    tokio::select! {
        r = work(url, a) => r,
        () = stop => Ok(()),
    }
}

async fn work(url: &str, a: &ChaosWorkerArgs) -> Result<()> {
    let mut ledger = Writer::create(&a.ledger)
        .with_context(|| format!("opening the ledger {}", a.ledger.display()))?;
    let w = |ledger: &mut Writer, ev: &Event| {
        ledger
            .write(ev)
            .with_context(|| format!("writing the ledger {}", a.ledger.display()))
    };
    w(
        &mut ledger,
        &Event::Start {
            pid: std::process::id(),
            at_ms: now_ms(),
        },
    )?;
    // Redis may be down right now (a worker started in the middle of a restart)
    let client = loop {
        match Client::builder(url)
            .response_timeout_ms(1_000)
            .connect()
            .await
        {
            Ok(c) => break c,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let q = client.queue(&a.queue)?;
    let mut claimer = q.due_claimer().lease_ms(Some(a.lease_ms));
    loop {
        claimer.ready().await;
        // a failed claim pushes the next look back by itself (10 ms doubling to 1 s)
        let Ok(tasks) = claimer.claim(BATCH).await else {
            continue;
        };
        // the whole batch is delivered now, when the claim answers, before any ack
        let at_ms = now_ms();
        for t in &tasks {
            w(
                &mut ledger,
                &Event::Deliver {
                    id: t.id.as_str().to_owned(),
                    key: t.key.clone().unwrap_or_default(),
                    token: t.lease_token.as_str().to_owned(),
                    attempt: t.attempt,
                    due_at_ms: t.due_at_ms,
                    claimed_at_ms: t.claimed_at_ms,
                    at_ms,
                },
            )?;
        }
        for t in tasks {
            let (answer, error) = match q.ack(&t.id, &t.lease_token).await {
                Ok(AckOutcome::Acked) => (AckAnswer::Acked, None),
                Ok(AckOutcome::LeaseLost) => (AckAnswer::LeaseLost, None),
                // AckOutcome is non_exhaustive: an answer this code does not know proves
                // nothing either way
                Ok(other) => (AckAnswer::Unknown, Some(format!("{other:?}"))),
                Err(e) => (AckAnswer::Unknown, Some(e.to_string())),
            };
            w(
                &mut ledger,
                &Event::Ack {
                    id: t.id.as_str().to_owned(),
                    key: t.key.unwrap_or_default(),
                    token: t.lease_token.as_str().to_owned(),
                    answer,
                    error,
                    at_ms: now_ms(),
                },
            )?;
        }
    }
}
