//! The claimer is responsible for getting due tasks to handlers on time: it takes as many
//! tasks as there are free slots from each queue's [`DueClaimer`] (the one claim path, which
//! owns the timer, the wake-ups, the fallback poll, lease recovery and lost-reply replay) and
//! starts a handler for each, then waits for a claimer to be ready again, or for a freed slot
//! when all were busy, or for the acker's word that it sent an ack freeing concurrency slots
//! that due work waits for. A failed Redis call is counted and logged; the `DueClaimer` pauses
//! before the next look, so one bad tick never stops the loop (case C01).
//!
//! A worker with one queue runs [`run`], one claim loop. A worker with several runs
//! [`run_many`], one loop over all its queues: each round it asks the slot sharing
//! ([`share`](super::share)) how the free slots go to the queues that have due work (as each
//! `DueClaimer` knows from its last claim, without asking Redis), claims for all of them at
//! once, and holds back a queue that got no slot until slots free up. Rejected: one loop per
//! queue taking slots from the shared semaphore, where whichever loop runs first takes every
//! free slot, so weights could not mean anything.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::FutureExt;
use futures_util::future::{join_all, select_all};
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError};
use tokio::time::Instant;
use tracing::Instrument;

use super::share::Share;
use super::{Counters, Outcome, QueueRt, Report, Running, Shared};
use crate::due::{DueClaimer, any_of};
use crate::task::ClaimedTask;
use crate::trace;

/// The claim loop of a worker with one queue.
pub(super) async fn run(rt: Arc<QueueRt>, shared: Arc<Shared>, mut due: DueClaimer) {
    let mut stop = shared.stop.clone();
    loop {
        if *stop.borrow() {
            due.close();
            return;
        }
        let mut slots = Slots::take(&shared);
        let want = slots.len();
        match due.claim(want).await {
            Ok(tasks) => hand_out(&rt, &shared, tasks, &mut slots).await,
            Err(e) => failed(&rt, &shared, &e),
        }
        drop(slots);
        rt.waits_for_slot
            .store(due.waits_for_slot(), Ordering::Relaxed);
        tokio::select! {
            _ = stop.changed() => {}
            () = due.ready() => {}
            () = rt.refill.notified() => {}
            slot = shared.slots.clone().acquire_owned(), if want == 0 => drop(slot),
        }
    }
}

/// The claim loop of a worker with several queues (`lanes`, in the order of their weights in
/// `share`): shares the free slots of each round among the queues with due work.
pub(super) async fn run_many(
    lanes: Vec<(Arc<QueueRt>, DueClaimer)>,
    mut share: Share,
    shared: Arc<Shared>,
) {
    let mut stop = shared.stop.clone();
    let (rts, mut dues): (Vec<Arc<QueueRt>>, Vec<DueClaimer>) = lanes.into_iter().unzip();
    let mut wants = vec![false; rts.len()];
    let mut shares = vec![0; rts.len()];
    loop {
        if *stop.borrow() {
            for due in dues {
                due.close();
            }
            return;
        }
        let mut slots = Slots::take(&shared);
        let now = Instant::now();
        // a queue whose next look has come may have due work (its timer or a wake-up says
        // so): it takes part, and a claim that finds nothing costs what it costs alone
        for (w, due) in wants.iter_mut().zip(&dues) {
            *w = due.has_due_work() || due.next_look_at() <= now;
        }
        share.split(slots.len(), &wants, &mut shares);
        let mut calls = Vec::new();
        for ((due, rt), &n) in dues.iter_mut().zip(&rts).zip(&shares) {
            // without a slot: a queue with due work is held back (its next look moves to the
            // fallback poll); one whose look has come otherwise claims 0, to recover leases
            // and learn the timing, as the one-queue loop does without free slots
            let ask = n > 0 || (due.next_look_at() <= now && !(due.has_due_work() && due.hold()));
            if ask {
                let mine = slots.split_off(n);
                calls.push(async move {
                    let got = due.claim(n).await;
                    (rt, due, mine, got)
                });
            }
        }
        for (rt, due, mut mine, got) in join_all(calls).await {
            match got {
                Ok(tasks) => hand_out(rt, &shared, tasks, &mut mine).await,
                Err(e) => failed(rt, &shared, &e),
            }
            rt.waits_for_slot
                .store(due.waits_for_slot(), Ordering::Relaxed);
        }
        // slots a short claim left go back to the pool: a queue held back takes them next
        // round (the acquire below returns at once), else it waits for a handler to end
        drop(slots);
        let held = dues
            .iter()
            .zip(&shares)
            .any(|(due, &n)| n == 0 && due.has_due_work());
        let ready = any_of(dues.iter_mut().map(DueClaimer::ready));
        let refill = select_all(rts.iter().map(|rt| Box::pin(rt.refill.notified())));
        tokio::select! {
            _ = stop.changed() => {}
            _ = ready => {}
            _ = refill => {}
            slot = shared.slots.clone().acquire_owned(), if held => drop(slot),
        }
    }
}

/// Free slots of the worker, taken from its semaphore as one permit and handed out one per
/// task: a claim that asks for 1 000 and gets 5 then costs one acquire and one release of the
/// rest, not a thousand of each (which weighed on every claim of a worker under a limit).
struct Slots(Option<OwnedSemaphorePermit>);

impl Slots {
    /// Takes the free slots, up to a claim batch.
    fn take(shared: &Shared) -> Self {
        loop {
            let n = shared.slots.available_permits().min(shared.batch);
            if n == 0 {
                return Self(None);
            }
            // (n <= the claim batch, 1 000, so it fits a u32)
            match shared.slots.clone().try_acquire_many_owned(n as u32) {
                Ok(p) => return Self(Some(p)),
                // fewer free than counted (a handler started meanwhile): count again
                Err(TryAcquireError::NoPermits) => {}
                Err(TryAcquireError::Closed) => return Self(None),
            }
        }
    }

    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, OwnedSemaphorePermit::num_permits)
    }

    /// The last `n` slots (all when there are fewer), as slots of their own.
    fn split_off(&mut self, n: usize) -> Self {
        let n = n.min(self.len());
        match &mut self.0 {
            Some(p) if n > 0 => Self(p.split(n)),
            _ => Self(None),
        }
    }

    /// One slot, for one task.
    fn pop(&mut self) -> Option<OwnedSemaphorePermit> {
        self.0.as_mut().and_then(|p| p.split(1))
    }
}

/// Starts a handler for each claimed task, each holding one of `slots`.
async fn hand_out(rt: &Arc<QueueRt>, shared: &Shared, tasks: Vec<ClaimedTask>, slots: &mut Slots) {
    let handed_out = Instant::now();
    Counters::add(&shared.counters.claimed, tasks.len() as u64);
    let mut extra = Vec::new();
    for task in tasks {
        // At most as many new tasks as slots come back, but tasks of a lost claim may add
        // to them.
        match slots.pop() {
            Some(slot) => start(rt, task, slot, handed_out),
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

/// Counts and logs a failed claim (the `DueClaimer` pauses before its next look).
fn failed(rt: &QueueRt, shared: &Shared, e: &crate::Error) {
    Counters::add(&shared.counters.redis_errors, 1);
    tracing::warn!(queue = rt.queue.name(), error = %e,
        "claim loop: Redis call failed; retrying after a pause");
}

/// Runs one claimed task's handler on its own tokio task, holding one slot.
fn start(
    rt: &Arc<QueueRt>,
    mut task: ClaimedTask,
    slot: OwnedSemaphorePermit,
    handed_out: Instant,
) {
    let id = task.id.clone();
    let span = trace::consumer_span(rt.queue.name(), &task);
    rt.running().insert(
        id.clone(),
        Running {
            token: task.lease_token.clone(),
            lease_ms: task.lease_expires_at_ms.saturating_sub(task.claimed_at_ms),
            deadline_ms: task.lease_expires_at_ms,
            abort: None,
            reported: false,
            span: span.clone(),
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
        let last_attempt = task.attempt >= task.max_attempts;
        let fut = (rt2.handler)(task);
        let outcome = AssertUnwindSafe(fut)
            .catch_unwind()
            .instrument(span.clone())
            .await
            .unwrap_or_else(|_| Outcome::retry("handler panicked"));
        trace::record_handler_outcome(&span, &outcome, last_attempt);
        drop(span);
        // Mark the task reported and report under one lock: shutdown takes the unreported
        // tasks out of `running` under it too, so a task is either reported here or handed
        // back there, and the Stop that shutdown queues afterwards always comes after this
        // report. The entry stays (its lease kept alive) until the acker has settled it.
        {
            let mut running = rt2.running();
            if let Some(r) = running.get_mut(&id2)
                && r.token == token
            {
                r.reported = true;
                r.abort = None;
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
    if let Some(r) = rt.running().get_mut(&id)
        && !r.reported
    {
        r.abort = Some(handle.abort_handle());
    }
}
