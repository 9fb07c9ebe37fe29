//! The claimer is responsible for getting due tasks of one queue to handlers on time.
//!
//! It claims as many tasks as there are free slots, then sleeps until the earliest of: the
//! next due time (by the Redis clock), the next lease deadline (to recover expired leases),
//! a wake-up notification, a freed slot (when all were busy), and the fallback poll (at most
//! 1 s). A failed Redis call is counted, logged and retried after a short, growing pause, so
//! one bad tick never stops the loop (case C01).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::{Instant, sleep, sleep_until};

use super::{Counters, Outcome, QueueRt, Report, Running, Shared};
use crate::protocol::ops::ClaimTracking;
use crate::task::ClaimedTask;

const FIRST_ERROR_PAUSE: Duration = Duration::from_millis(10);
const MAX_ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Lost claim replies remembered for recovery; older ones are left to lease expiry.
const MAX_LOST_CLAIMS: usize = 16;
/// Lost claims resumed per call.
const MAX_RESUME_PER_CALL: usize = 2;

pub(super) async fn run(
    rt: Arc<QueueRt>,
    shared: Arc<Shared>,
    mut wake: mpsc::UnboundedReceiver<u64>,
) {
    let mut stop = shared.stop.clone();
    let mut error_pause = FIRST_ERROR_PAUSE;
    let mut next_deadline: Option<u64> = None;
    let mut orphans = false;
    let mut sweeping = false;
    // so that the first orphan a claim reports is swept for at once
    let mut last_sweep = Instant::now()
        .checked_sub(shared.poll)
        .unwrap_or_else(Instant::now);
    // deadline of an orphaned lease (no `active` entry) not yet expired, from the last sweep
    let mut orphan_due: Option<u64> = None;
    let worker_id: u64 = rand::random();
    let mut calls: u64 = 0;
    let mut last_claim = String::new();
    let mut lost_claims: Vec<String> = Vec::new();
    // Whether the wake listener is still there (it is gone without notifications, and at stop).
    let mut wake_open = true;
    loop {
        if *stop.borrow() {
            return;
        }
        // Recover expired leases when one is due, and sweep for lost deadline entries now
        // and then when a claim saw one.
        let sweep = sweeping || (orphans && last_sweep.elapsed() >= shared.poll);
        if sweep || next_deadline.is_some_and(|d| shared.clock.now_ms() >= d) {
            last_sweep = Instant::now();
            match rt.queue.recover().await {
                Ok(r) => {
                    shared.clock.update(r.now_ms, Instant::now());
                    next_deadline = r.next_lease_deadline_ms;
                    // the earliest orphan deadline over all calls of one sweep round
                    orphan_due = match (
                        sweeping.then_some(orphan_due).flatten(),
                        orphans || sweeping,
                    ) {
                        (_, false) => None,
                        (Some(a), true) => Some(r.next_lease_deadline_ms.map_or(a, |b| a.min(b))),
                        (None, true) => r.next_lease_deadline_ms,
                    };
                    // once a claim saw an orphaned lease, keep sweeping back to back until
                    // the sweep has come full circle
                    sweeping = (orphans || sweeping) && !r.swept;
                    orphans = false;
                    if r.recovered + r.dead > 0 {
                        tracing::info!(
                            queue = rt.queue.name(),
                            recovered = r.recovered,
                            dead = r.dead,
                            "recovered expired leases"
                        );
                    }
                }
                Err(e) => {
                    failed(&rt, &shared, &e, &mut error_pause).await;
                    continue;
                }
            }
        }

        let mut slots: Vec<OwnedSemaphorePermit> = Vec::new();
        while slots.len() < shared.batch {
            match shared.slots.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        let want = slots.len();
        calls += 1;
        let claim_id = format!("{worker_id:016x}-{calls}");
        let tracking = ClaimTracking {
            id: &claim_id,
            forget: &last_claim,
            // a few lost claims per call, so one call stays within its task cap
            resume: &lost_claims[..lost_claims.len().min(MAX_RESUME_PER_CALL)],
        };
        let sent = Instant::now();
        let claim = match rt
            .queue
            .claim_tracked(want, shared.lease_ms, tracking)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                // The call may have run in Redis with its reply lost: ask for its tasks again
                // on the next call instead of waiting for their leases to expire (case C01).
                if lost_claims.len() == MAX_LOST_CLAIMS {
                    lost_claims.remove(0);
                }
                lost_claims.push(claim_id);
                drop(slots);
                failed(&rt, &shared, &e, &mut error_pause).await;
                continue;
            }
        };
        lost_claims.drain(..lost_claims.len().min(MAX_RESUME_PER_CALL));
        // only a claim that handed something out left a record to forget next time
        last_claim = if claim.tasks.is_empty() {
            String::new()
        } else {
            claim_id
        };
        error_pause = FIRST_ERROR_PAUSE;
        let received = Instant::now();
        shared.clock.update(claim.now_ms, received);
        orphans |= claim.orphans;
        if !claim.orphans {
            orphan_due = None;
        }
        next_deadline = match (claim.next_lease_deadline_ms, orphan_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let got = claim.tasks.len();
        Counters::add(&shared.counters.claimed, got as u64);
        let mut extra = Vec::new();
        for task in claim.tasks {
            // At most `want` new tasks come back, but tasks of a lost claim may add to them.
            match slots.pop() {
                Some(slot) => start(&rt, task, slot, sent),
                None => extra.push((task.id, task.lease_token)),
            }
        }
        if !extra.is_empty()
            && let Err(e) = rt.queue.release(&extra).await
        {
            tracing::warn!(queue = rt.queue.name(), error = %e,
                "could not hand back extra tasks; their leases will expire");
        }
        drop(slots);
        if want > 0 && got == want {
            continue; // a full batch: more may be due right now
        }
        if orphans && last_sweep.elapsed() >= shared.poll {
            continue; // sweep for the orphaned lease now, not after a sleep
        }

        let mut wake_at = Instant::now() + shared.poll;
        if want > 0
            && !claim.paused
            && let Some(due) = claim.next_due_at_ms
        {
            wake_at = wake_at.min(shared.clock.instant_of(due));
        }
        if let Some(d) = next_deadline {
            wake_at = wake_at.min(shared.clock.instant_of(d.saturating_add(1)));
        }
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = sleep_until(wake_at) => break,
                msg = wake.recv(), if wake_open => match msg {
                    Some(due) => {
                        let at = shared.clock.instant_of(due);
                        if at <= Instant::now() {
                            break;
                        }
                        wake_at = wake_at.min(at);
                    }
                    // the wake listener is gone: the timer and fallback poll still work,
                    // and so must the stop signal and freed slots (no blind sleep here)
                    None => wake_open = false,
                },
                slot = shared.slots.clone().acquire_owned(), if want == 0 => {
                    drop(slot);
                    break;
                }
            }
        }
    }
}

async fn failed(rt: &QueueRt, shared: &Shared, e: &crate::Error, pause: &mut Duration) {
    Counters::add(&shared.counters.redis_errors, 1);
    tracing::warn!(queue = rt.queue.name(), error = %e, retry_in_ms = pause.as_millis() as u64,
        "claim loop: Redis call failed");
    let mut stop = shared.stop.clone();
    tokio::select! {
        _ = sleep(*pause) => {}
        _ = stop.changed() => {}
    }
    *pause = (*pause * 2).min(MAX_ERROR_PAUSE);
}

/// Runs one claimed task's handler on its own tokio task, holding one slot.
fn start(rt: &Arc<QueueRt>, mut task: ClaimedTask, slot: OwnedSemaphorePermit, sent: Instant) {
    let id = task.id.clone();
    rt.running().insert(
        id.clone(),
        Running {
            token: task.lease_token.clone(),
            lease_ms: task.lease_expires_at_ms.saturating_sub(task.claimed_at_ms),
            deadline_ms: task.lease_expires_at_ms,
            abort: None,
        },
    );
    let rt2 = rt.clone();
    let id2 = id.clone();
    let handle = tokio::spawn(async move {
        // Redis time at handler start, from above: the claim's Redis time plus everything
        // since the claim was sent (the script's own time, the reply, decoding, spawning).
        task.started_at_ms = task.claimed_at_ms + sent.elapsed().as_millis() as u64;
        let token = task.lease_token.clone();
        let fut = (rt2.handler)(task);
        let outcome = AssertUnwindSafe(fut)
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Outcome::retry("handler panicked"));
        // Leave `running` and report under one lock: shutdown drains `running` under it
        // too, so a task is either reported here or handed back there, and the Stop that
        // shutdown queues afterwards always comes after this report.
        {
            let mut running = rt2.running();
            if running.remove(&id2).is_some() {
                let _ = rt2.reports.send(Report::Done {
                    id: id2.clone(),
                    token,
                    outcome,
                });
            }
        }
        drop(slot);
    });
    // The handler may already be done (then its entry is gone and there is nothing to abort).
    if let Some(r) = rt.running().get_mut(&id) {
        r.abort = Some(handle.abort_handle());
    }
}
