//! The lease keeper is responsible for keeping the leases this worker holds for one queue
//! alive: those of long-running handlers, and those of ended handlers whose report the acker
//! has not settled yet (an ack retried while its partition fails). When less than half of a
//! lease is left it extends it (all due ones in one call, a partition's failure failing only
//! that partition's extensions). It makes no Redis call while no lease needs it, so an idle
//! worker costs nothing here. When an extension is refused (the lease expired and was
//! recovered, or the task is gone), it stops the handler: its result would be refused, and
//! another worker may run the task.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Counters, QueueRt, Shared};
use crate::task::{LeaseToken, TaskId};
use crate::trace::{self, RunOutcome};

const TICK: Duration = Duration::from_millis(50);

pub(super) async fn run(rt: Arc<QueueRt>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let now = shared.clock.now_ms();
        let due: Vec<(TaskId, LeaseToken, u64)> = rt
            .running()
            .iter()
            .filter(|(_, r)| r.deadline_ms.saturating_sub(now) < r.lease_ms / 2)
            .map(|(id, r)| (id.clone(), r.token.clone(), r.lease_ms))
            .collect();
        if due.is_empty() {
            continue;
        }
        let items: Vec<_> = due.iter().map(|(i, t, l)| (i, t, *l)).collect();
        let answers = rt.queue.extend_each(&items).await;
        let mut running = rt.running();
        let mut failed = None;
        for ((id, token, _), d) in due.iter().zip(answers) {
            // The answer is about the lease `token`: the handler may have ended while the call
            // was out, and the task been claimed again (same id, new token, a new entry); that
            // entry and its handler are none of this answer's business.
            if !running.get(id).is_some_and(|r| r.token == *token) {
                continue;
            }
            match d {
                Ok(Some(d)) => {
                    if let Some(r) = running.get_mut(id) {
                        r.deadline_ms = d;
                    }
                }
                Ok(None) => {
                    let Some(r) = running.remove(id) else {
                        continue;
                    };
                    if r.reported {
                        // its report's ack will be refused as lease_lost and counted there
                        continue;
                    }
                    Counters::add(&shared.counters.lease_lost, 1);
                    tracing::warn!(queue = rt.queue.name(), id = %id,
                        "lease lost while the handler ran (it expired and was recovered, \
                         or the task is gone): handler stopped");
                    // Another worker may be running the task now, and this one's result
                    // would be refused (fencing): stop the handler (a `dueq work` command is
                    // killed with it) rather than run it twice at once.
                    trace::record_outcome(
                        &r.span,
                        RunOutcome::LeaseLost,
                        Some("the lease was lost while the handler ran; the handler was stopped"),
                    );
                    if let Some(a) = r.abort {
                        a.abort();
                    }
                }
                // tried again at the next tick while the lease lasts
                Err(e) => failed = Some(e),
            }
        }
        drop(running);
        if let Some(e) = failed {
            Counters::add(&shared.counters.redis_errors, 1);
            tracing::warn!(queue = rt.queue.name(), error = %e, "lease extension failed");
        }
    }
}
