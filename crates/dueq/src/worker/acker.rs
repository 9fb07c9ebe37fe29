//! The acker is responsible for telling Redis how handlers of one queue ended.
//!
//! Reports are taken in batches (whatever has queued up after one yield to the scheduler, up
//! to 1 000) and sent as one `ack`
//! and one `nack` call, so under load one round trip settles many tasks. A failed call is
//! retried with a growing pause; a report whose lease was lost meanwhile is refused by
//! Redis (fencing) and only counted.

use std::sync::Arc;
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

pub(super) async fn run(
    rt: Arc<QueueRt>,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    let mut stopping = false;
    while !stopping {
        let Some(first) = rx.recv().await else { return };
        // let handlers that finish in the same instant (a claim's batch of quick handlers)
        // report too, so they share one call instead of one call each
        tokio::task::yield_now().await;
        let mut batch = Vec::new();
        let mut next = Some(first);
        while let Some(r) = next.take() {
            match r {
                Report::Done { id, token, outcome } => batch.push((id, token, outcome)),
                Report::Stop => stopping = true,
            }
            if batch.len() < MAX_BATCH && !stopping {
                next = rx.try_recv().ok();
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
            match rt.queue.ack_batch(&acks).await {
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
            match rt.queue.nack_items(&items).await {
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
