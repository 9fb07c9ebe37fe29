//! The claimer is responsible for getting due tasks of one queue to handlers on time: it
//! takes as many tasks as there are free slots from the queue's [`DueClaimer`] (the one
//! claim path, which owns the timer, the wake-ups, the fallback poll, lease recovery and
//! lost-reply replay) and starts a handler for each, then waits for the claimer to be ready
//! again, or for a freed slot when all were busy, or for the acker's word that it sent an ack
//! freeing concurrency slots that due work waits for. A failed Redis call is counted and logged;
//! the `DueClaimer` pauses before the next look, so one bad tick never stops the loop (case
//! C01).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::{Counters, Outcome, QueueRt, Report, Running, Shared};
use crate::due::DueClaimer;
use crate::task::ClaimedTask;

pub(super) async fn run(rt: Arc<QueueRt>, shared: Arc<Shared>, mut due: DueClaimer) {
    let mut stop = shared.stop.clone();
    loop {
        if *stop.borrow() {
            due.close();
            return;
        }
        let mut slots: Vec<OwnedSemaphorePermit> = Vec::new();
        while slots.len() < shared.batch {
            match shared.slots.clone().try_acquire_owned() {
                Ok(p) => slots.push(p),
                Err(_) => break,
            }
        }
        let want = slots.len();
        match due.claim(want).await {
            Ok(tasks) => {
                let handed_out = Instant::now();
                Counters::add(&shared.counters.claimed, tasks.len() as u64);
                let mut extra = Vec::new();
                for task in tasks {
                    // At most `want` new tasks come back, but tasks of a lost claim may add
                    // to them.
                    match slots.pop() {
                        Some(slot) => start(&rt, task, slot, handed_out),
                        None => extra.push((task.id, task.lease_token)),
                    }
                }
                if !extra.is_empty()
                    && let Err(e) = rt.queue.release(&extra).await
                {
                    tracing::warn!(queue = rt.queue.name(), error = %e,
                        "could not hand back extra tasks; their leases will expire");
                }
            }
            Err(e) => {
                Counters::add(&shared.counters.redis_errors, 1);
                tracing::warn!(queue = rt.queue.name(), error = %e,
                    "claim loop: Redis call failed; retrying after a pause");
            }
        }
        drop(slots);
        rt.waits_for_slot
            .store(due.waits_for_slot(), std::sync::atomic::Ordering::Relaxed);
        tokio::select! {
            _ = stop.changed() => {}
            () = due.ready() => {}
            () = rt.refill.notified() => {}
            slot = shared.slots.clone().acquire_owned(), if want == 0 => drop(slot),
        }
    }
}

/// Runs one claimed task's handler on its own tokio task, holding one slot.
fn start(
    rt: &Arc<QueueRt>,
    mut task: ClaimedTask,
    slot: OwnedSemaphorePermit,
    handed_out: Instant,
) {
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
        // Redis time at handler start: the hand-out's estimate plus the wait for this task
        task.started_at_ms = task
            .started_at_ms
            .saturating_add(handed_out.elapsed().as_millis() as u64);
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
