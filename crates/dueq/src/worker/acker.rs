//! The acker is responsible for telling Redis how handlers of one queue ended.
//!
//! Reports are taken in batches (whatever has queued up over a few yields to the scheduler,
//! up to 1 000) and sent as one `ack` and one `nack` call, so under load one round trip
//! settles many tasks. When due work waits for the concurrency slots they free, the claimer
//! is told to claim right behind them. A failed call is
//! retried with a growing pause; a report whose lease was lost meanwhile is refused by
//! Redis (fencing) and only counted.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

use super::{Counters, Outcome, QueueRt, Report, Shared};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::leases::NackItem;
use crate::task::{AckOutcome, LeaseToken, NackOutcome, TaskId};

/// How long a report is retried while Redis is failing before it is given up (its lease
/// will have expired by then and recovery takes over).
const GIVE_UP_AFTER: Duration = Duration::from_secs(60);
/// Most yields to the scheduler while gathering one batch of reports.
const GATHER_YIELDS: usize = 4;

pub(super) async fn run(
    rt: Arc<QueueRt>,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    let mut stopping = false;
    while !stopping {
        let Some(first) = rx.recv().await else { return };
        // let handlers that finish in the same instant (a claim's batch of quick handlers)
        // report too, so they share one call instead of one call each: yield, take what
        // arrived, and yield again while more keeps arriving (a few times at most, so a
        // steady stream is not held up)
        let mut batch = Vec::new();
        let mut add = |r: Report, batch: &mut Vec<_>| match r {
            Report::Done { id, token, outcome } => batch.push((id, token, outcome)),
            Report::Stop => stopping = true,
        };
        add(first, &mut batch);
        for _ in 0..GATHER_YIELDS {
            tokio::task::yield_now().await;
            let before = batch.len();
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => add(r, &mut batch),
                    Err(_) => break,
                }
            }
            if batch.len() == before || batch.len() >= MAX_BATCH {
                break;
            }
        }
        settle(&rt, &shared, batch).await;
    }
}

async fn settle(rt: &QueueRt, shared: &Shared, batch: Vec<(TaskId, LeaseToken, Outcome)>) {
    let mut acks = Vec::new();
    let mut nacks = Vec::new();
    for (id, token, outcome) in batch {
        match outcome {
            Outcome::Success => acks.push((id, token)),
            other => nacks.push((id, token, other)),
        }
    }
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    if !acks.is_empty() {
        loop {
            match send_then_refill(rt, rt.queue.ack_batch(&acks)).await {
                Ok(v) => {
                    let ok = v.iter().filter(|o| **o == AckOutcome::Acked).count() as u64;
                    Counters::add(&shared.counters.succeeded, ok);
                    Counters::add(&shared.counters.lease_lost, v.len() as u64 - ok);
                    break;
                }
                Err(e) => {
                    if !retry(rt, shared, &e, &mut pause, started).await {
                        break;
                    }
                }
            }
        }
    }
    if !nacks.is_empty() {
        let items: Vec<NackItem<'_>> = nacks
            .iter()
            .map(|(id, token, o)| {
                let (error, retry_in_ms, permanent) = match o {
                    Outcome::Retry { error, after_ms } => (error.as_str(), *after_ms, false),
                    Outcome::Fail { error } => (error.as_str(), None, true),
                    Outcome::Success => ("", None, false),
                };
                NackItem {
                    id,
                    token,
                    retry_in_ms,
                    permanent,
                    error: crate::client::cut_error(error),
                }
            })
            .collect();
        loop {
            match send_then_refill(rt, rt.queue.nack_items(&items)).await {
                Ok(v) => {
                    for o in v {
                        let c = match o {
                            NackOutcome::Rescheduled { .. } => &shared.counters.retried,
                            NackOutcome::Dead => &shared.counters.dead,
                            _ => &shared.counters.lease_lost,
                        };
                        Counters::add(c, 1);
                    }
                    break;
                }
                Err(e) => {
                    if !retry(rt, shared, &e, &mut pause, started).await {
                        break;
                    }
                }
            }
        }
    }
}

/// Sends `call`; when the claimer's last claim saw due work waiting for a concurrency slot,
/// tells the claimer to claim at once. The call is polled once first, which puts its request
/// on the client's connection, so the claim goes down the same connection after it and Redis
/// runs it once the slots are free: the refill costs no extra round trip. (Should the order
/// ever differ, the claim finds nothing and the wake-up the ack publishes still comes.)
async fn send_then_refill<T>(rt: &QueueRt, call: impl Future<Output = T>) -> T {
    let mut call = std::pin::pin!(call);
    if rt.waits_for_slot.load(Ordering::Relaxed) {
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        rt.refill.notify_one();
        if let Poll::Ready(v) = first {
            return v;
        }
    }
    call.await
}

async fn retry(
    rt: &QueueRt,
    shared: &Shared,
    e: &crate::Error,
    pause: &mut Duration,
    started: Instant,
) -> bool {
    Counters::add(&shared.counters.redis_errors, 1);
    if started.elapsed() > GIVE_UP_AFTER {
        tracing::error!(queue = rt.queue.name(), error = %e,
            "giving up on acks/nacks; their leases expire and the tasks run again");
        return false;
    }
    tracing::warn!(queue = rt.queue.name(), error = %e, "ack/nack failed; retrying");
    sleep(crate::backoff::jittered(*pause)).await;
    *pause = (*pause * 2).min(Duration::from_secs(1));
    true
}
