//! The claim path of one partition of a queue (see the module above for what it owns):
//! [`PartitionClaimer`] waits for and claims the due work of one partition; a
//! [`DueClaimer`](super::DueClaimer) runs one per partition, so a queue of one partition runs
//! exactly one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{Instant, sleep_until};

use super::MAX_POLL_MS;
use super::clock::RedisClock;
use super::recovery::LeaseRecovery;
use crate::client::{Claim, Queue, Throttle};
use crate::error::{ErrorKind, Result};
use crate::protocol::leases::ClaimTracking;
use crate::task::ClaimedTask;

/// Longest pause after a failed Redis call, growing from 10 ms (so a failing Redis is not
/// hammered, and a healthy one is asked again soon).
const MAX_ERROR_PAUSE: Duration = Duration::from_secs(1);
const FIRST_ERROR_PAUSE: Duration = Duration::from_millis(10);
/// Lost claim replies remembered for recovery; older ones are left to lease expiry.
const MAX_LOST_CLAIMS: usize = 16;
/// Lost claims resumed per call, so one call stays within its task cap.
const MAX_RESUME_PER_CALL: usize = 2;

/// The claim path of one partition (the whole of a queue of one partition): its timer,
/// wake-ups, fallback poll, lease recovery and lost-reply replay. [`DueClaimer`](super::DueClaimer)
/// runs one per partition.
pub(crate) struct PartitionClaimer {
    queue: Queue,
    lease_ms: Option<u64>,
    poll: Duration,
    clock: Arc<RedisClock>,
    wake: Wake,
    recovery: LeaseRecovery,
    tracking: Tracking,
    next_look: Instant,
    /// End of the pause after a failed call: wake-ups do not cut it short.
    pause_until: Instant,
    /// No look before this instant: the queue's rate limit has no slot until then.
    hold_until: Instant,
    error_pause: Duration,
    /// Whether claims are tracked for lost-reply replay.
    replay: bool,
    /// The id its leases name as holder.
    worker: Option<Arc<str>>,
    /// The last claim saw due work waiting for a concurrency slot.
    waits_for_slot: bool,
    /// From when the next claim can hand out work, as far as the last claim's answer (and
    /// wake-ups since) tell; `None`: nothing scheduled, paused, or held back by a queue limit.
    due_at: Option<Instant>,
    /// When the last claim's answer arrived.
    last_look: Instant,
}

/// The wake-up subscription of one claimer.
enum Wake {
    /// Not subscribed yet: the first [`DueClaimer::ready`] subscribes.
    Pending,
    Listening(broadcast::Receiver<u64>),
    /// Notifications off, the table full, or the hub gone: the timer and fallback poll work.
    Off,
}

impl std::fmt::Debug for PartitionClaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionClaimer")
            .field("queue", &self.queue.name())
            .field("lease_ms", &self.lease_ms)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl PartitionClaimer {
    /// A claimer of partition handle `queue` with the settings of the
    /// [`DueClaimer`](super::DueClaimer) that runs it (see its builder methods).
    pub(crate) fn new(
        queue: Queue,
        lease_ms: Option<u64>,
        poll_ms: u64,
        notifications: bool,
        replay: bool,
        worker: Option<Arc<str>>,
        clock: Arc<RedisClock>,
    ) -> Self {
        let poll = Duration::from_millis(poll_ms.clamp(1, MAX_POLL_MS));
        Self {
            queue,
            lease_ms,
            poll,
            clock,
            wake: if notifications {
                Wake::Pending
            } else {
                Wake::Off
            },
            recovery: LeaseRecovery::new(poll),
            tracking: Tracking::new(),
            next_look: Instant::now(),
            pause_until: Instant::now(),
            hold_until: Instant::now(),
            error_pause: FIRST_ERROR_PAUSE,
            replay,
            worker,
            waits_for_slot: false,
            due_at: None,
            last_look: Instant::now(),
        }
    }

    /// The queue it claims from.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Claims up to `max` due tasks (0 to 1 000; 0 only recovers and learns the timing),
    /// recovering expired leases first when one is due. Returns at once; tasks of an earlier
    /// call whose reply was lost may come first and make the list longer than `max`.
    ///
    /// Redis counts every task handed out and its lateness (the claim script,
    /// [`QueueStats::lateness`](crate::QueueStats::lateness)). Each task comes with
    /// `started_at_ms` set to the Redis time of the hand-out (a consumer that starts the
    /// handler later adds the delay; the worker does).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for `max` over 1 000 or a bad lease;
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails: the error is for logging; the
    /// next look is pushed back by a growing pause (10 ms to 1 s), so calling
    /// [`ready`](Self::ready) and then `claim` again is the right loop.
    ///
    /// # Cancel safety
    /// Not cancel safe: a claim dropped in flight may have leased tasks, which then come back
    /// only when their leases expire.
    pub async fn claim(&mut self, max: usize) -> Result<Vec<ClaimedTask>> {
        let mut recovered = false;
        if self.recovery.due(&self.clock) {
            self.recover().await?;
            recovered = true;
        }
        let mut tasks = self.claim_once(max).await?;
        // The claim saw an expired lease: recover it now and claim what it made due, instead
        // of answering "nothing" (an HTTP claim with `wait_ms` 0 would never see it). Tasks
        // already claimed are handed out even when this fails (the failure only delays).
        if !recovered && tasks.len() < max && self.recovery.due(&self.clock) {
            let more = match self.recover().await {
                Ok(n) if n > 0 => self.claim_once(max - tasks.len()).await,
                Ok(_) => Ok(Vec::new()),
                Err(e) => Err(e),
            };
            match more {
                Ok(more) => tasks.extend(more),
                Err(e) if tasks.is_empty() => return Err(e),
                Err(e) => tracing::warn!(queue = self.queue.name(), error = %e,
                    "recovering expired leases after a claim failed; retrying after a pause"),
            }
        }
        Ok(tasks)
    }

    /// One recover call; returns how many tasks it moved (to scheduled or dead).
    async fn recover(&mut self) -> Result<u64> {
        match self.queue.recover().await {
            Ok(r) => {
                self.clock.update(r.now_ms, Instant::now());
                self.recovery.recovered(&r, self.queue.name());
                Ok(r.recovered + r.dead)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// One claim call with lost-reply tracking; plans the next look.
    async fn claim_once(&mut self, max: usize) -> Result<Vec<ClaimedTask>> {
        let id = if self.replay {
            self.tracking.next_id()
        } else {
            String::new()
        };
        let sent = Instant::now();
        let mut ids = if self.replay {
            self.tracking.ids(&id)
        } else {
            ClaimTracking::default()
        };
        if let Some(w) = self.worker.as_deref() {
            crate::client::check_worker_id("worker_id", w)?;
            ids.holder = w;
        }
        let result = self.queue.claim_tracked(max, self.lease_ms, ids).await;
        let claim = match result {
            Ok(c) => c,
            Err(e) => {
                // Bad input wrote nothing; anything else may have run with its reply lost.
                if self.replay && e.kind() != ErrorKind::InvalidInput {
                    self.tracking.lost(id);
                }
                return Err(self.failed(e));
            }
        };
        if self.replay {
            self.tracking.arrived(id, !claim.tasks.is_empty());
        }
        self.error_pause = FIRST_ERROR_PAUSE;
        self.last_look = Instant::now();
        self.clock.update(claim.now_ms, self.last_look);
        self.recovery.saw_claim(&claim);
        self.next_look = self.plan_next_look(max, &claim);
        self.waits_for_slot = claim.waits_for_slot;
        let mut tasks = claim.tasks;
        let since_sent = sent.elapsed().as_millis() as u64;
        for t in &mut tasks {
            // Redis time at hand-out, from above: the claim's Redis time plus everything since
            // the claim was sent (the script's own time, the reply, decoding).
            t.started_at_ms = t.claimed_at_ms.saturating_add(since_sent);
        }
        Ok(tasks)
    }

    /// When the next claim can find work, after the claim that asked for `max` and got
    /// `claim`: at once after a full batch or when an orphaned lease waits to be swept, else
    /// the earliest of the next due time (when it asked for tasks and the queue is not
    /// paused), the next lease deadline (to recover it), and the fallback poll.
    ///
    /// This is the one place that turns a claim's answer into a sleep: a limit that holds
    /// work back belongs here: a full rate limit holds the next look (timer and wake-ups)
    /// until its next slot opens; a full concurrency limit waits for the wake-up an ending
    /// task publishes. It also notes from when work is due ([`has_due_work`](Self::has_due_work)):
    /// at once after a full batch, else at the next due time, never while paused or throttled.
    fn plan_next_look(&mut self, max: usize, claim: &Claim) -> Instant {
        let now = Instant::now();
        self.hold_until = now;
        let full = max > 0 && claim.tasks.len() >= max && claim.throttle.is_none();
        self.due_at = if claim.paused || claim.throttle.is_some() {
            None
        } else if full {
            Some(now)
        } else {
            claim.next_due_at_ms.map(|d| self.clock.instant_of(d))
        };
        if self.recovery.sweep_waiting() || full {
            return now;
        }
        let mut at = now + self.poll;
        match claim.throttle {
            // (at most the fallback poll, so a settings change that lifts the limit is seen
            // within it)
            Some(Throttle::Rate { opens_at_ms }) => {
                at = at.min(self.clock.instant_of(opens_at_ms));
                self.hold_until = at;
            }
            Some(Throttle::Concurrency) => {}
            // (here `due_at` is the next due time, `None` while paused)
            _ => {
                if max > 0
                    && let Some(due) = self.due_at
                {
                    at = at.min(due);
                }
            }
        }
        if let Some(d) = self.recovery.next_deadline_ms() {
            at = at.min(self.clock.instant_of(d.saturating_add(1)));
        }
        at
    }

    /// Whether the last claim saw due work waiting for a concurrency slot (the queue's
    /// limit, or a group parked at its `group_concurrency`): then the end of a task this
    /// process holds makes work claimable, and the process can claim right behind its own
    /// ack instead of waiting for the wake-up the ack publishes.
    pub fn waits_for_slot(&self) -> bool {
        self.waits_for_slot
    }

    /// Whether the next claim would hand out work, as far as this claimer knows without asking
    /// Redis: its last claim came back full, or the next due time it reported (or a wake-up
    /// since) has come by the Redis clock; never during the pause after a failed call, nor
    /// while the queue was paused or held back by its limits. A worker that serves several
    /// queues shares its slots among the queues for which this is true (`worker/share.rs`).
    pub(crate) fn has_due_work(&self) -> bool {
        let now = Instant::now();
        now >= self.pause_until && self.due_at.is_some_and(|at| at <= now)
    }

    /// Whether this partition knows of no work due before `t` (nothing scheduled, paused,
    /// held back by a limit, or its next due time at `t` or later): a look now that asks for
    /// nothing (`claim(0)`, which plans the next look at the fallback poll, not at the due
    /// time) then loses nothing as long as `t` is no earlier than that poll.
    pub(crate) fn idle_until(&self, t: Instant) -> bool {
        self.due_at.is_none_or(|d| d >= t)
    }

    /// The caller does not claim now although work is due ([`has_due_work`](Self::has_due_work)):
    /// a worker serving several queues gave its free slots to other queues. Moves the next look
    /// to the fallback poll after the last claim (or the next lease deadline, if sooner), so
    /// [`ready`](Self::ready) does not return at once while the work waits, and returns `true`.
    /// Returns `false` and changes nothing when that time has come (or expired or orphaned
    /// leases wait to be recovered): then the caller should `claim(0)`, which recovers them and
    /// learns the timing, as a claimer without free slots always does.
    pub(crate) fn hold(&mut self) -> bool {
        if self.recovery.due(&self.clock) {
            return false;
        }
        let mut at = self.last_look + self.poll;
        if let Some(d) = self.recovery.next_deadline_ms() {
            at = at.min(self.clock.instant_of(d.saturating_add(1)));
        }
        // "now" read after `instant_of`, which never answers before its own "now": a deadline
        // that has come must end the hold, not renew it for a few nanoseconds in a loop
        if at <= Instant::now() {
            return false;
        }
        self.next_look = self.next_look.max(at);
        true
    }

    /// Whether the last call failed (the partition's node may be away).
    pub(crate) fn failing(&self) -> bool {
        self.error_pause > FIRST_ERROR_PAUSE
    }

    /// The instant the next [`claim`](Self::claim) can find work (see
    /// [`ready`](Self::ready)); after a failed call, the end of the error pause.
    pub fn next_look_at(&self) -> Instant {
        self.next_look
    }

    /// Sleeps until [`next_look_at`](Self::next_look_at), or less when a wake-up says a task
    /// became due sooner (never less than the pause after a failed call). The first call
    /// starts the subscription to the queue's wake channel (in the background; once it is in
    /// effect a wake-up says "look") and returns at once, so the caller looks again and
    /// misses nothing enqueued before.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up received before the cancel has already moved the next look.
    pub async fn ready(&mut self) {
        if matches!(self.wake, Wake::Pending) {
            let hub = self.queue.client().wake_hub();
            self.wake = match hub.listen(&self.queue.keys().wake) {
                Some(rx) => Wake::Listening(rx),
                None => Wake::Off,
            };
            return;
        }
        loop {
            if self.next_look <= Instant::now() {
                return;
            }
            let msg = async {
                match &mut self.wake {
                    Wake::Listening(rx) => rx.recv().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep_until(self.next_look) => return,
                msg = msg => match msg {
                    Ok(due) => {
                        let at = self
                            .clock
                            .instant_of(due)
                            .max(self.pause_until)
                            .max(self.hold_until);
                        self.due_at = Some(self.due_at.map_or(at, |d| d.min(at)));
                        if at <= Instant::now() {
                            return;
                        }
                        self.next_look = self.next_look.min(at);
                    }
                    // messages were dropped: one of them may have been due now
                    Err(RecvError::Lagged(_)) => return,
                    // the hub is gone: the timer and fallback poll still work
                    Err(RecvError::Closed) => self.wake = Wake::Off,
                },
            }
        }
    }

    /// Ends the wake-up subscription at once when no other claimer of the client waits on
    /// this queue (a long-lived consumer that stops; otherwise an unused channel is dropped
    /// after a minute).
    pub fn close(mut self) {
        if let Wake::Listening(rx) = std::mem::replace(&mut self.wake, Wake::Off) {
            drop(rx);
            let hub = self.queue.client().wake_hub();
            hub.release(&self.queue.keys().wake);
        }
    }

    /// Pushes the next look back by the error pause (which doubles, up to 1 s; with jitter,
    /// so that every claimer does not come back at the same instant) and passes
    /// the error on.
    fn failed(&mut self, e: crate::Error) -> crate::Error {
        self.next_look = Instant::now() + crate::backoff::jittered(self.error_pause);
        self.pause_until = self.next_look;
        self.error_pause = (self.error_pause * 2).min(MAX_ERROR_PAUSE);
        e
    }
}

/// Claim ids for lost-reply recovery (see `protocol/leases/claim.lua`): each call has an id; a
/// call whose reply arrived is forgotten by the next one, and a call whose reply was lost is
/// asked for again.
struct Tracking {
    claimer_id: u64,
    calls: u64,
    last_claim: String,
    lost: Vec<String>,
}

impl Tracking {
    fn new() -> Self {
        Self {
            claimer_id: rand::random(),
            calls: 0,
            last_claim: String::new(),
            lost: Vec::new(),
        }
    }

    /// A fresh id for the next call.
    fn next_id(&mut self) -> String {
        self.calls += 1;
        format!("{:016x}-{}", self.claimer_id, self.calls)
    }

    /// What call `id` sends: itself, the last call to forget, a few lost calls to resume.
    fn ids<'a>(&'a self, id: &'a str) -> ClaimTracking<'a> {
        ClaimTracking {
            holder: "",
            id,
            forget: &self.last_claim,
            resume: &self.lost[..self.lost.len().min(MAX_RESUME_PER_CALL)],
        }
    }

    /// The call `id` failed: its reply may be lost, ask for its tasks again.
    fn lost(&mut self, id: String) {
        if self.lost.len() == MAX_LOST_CLAIMS {
            self.lost.remove(0);
        }
        self.lost.push(id);
    }

    /// The reply of call `id` arrived; only a call that handed something out left a record
    /// to forget next time.
    fn arrived(&mut self, id: String, handed_out: bool) {
        let n = self.lost.len().min(MAX_RESUME_PER_CALL);
        self.lost.drain(..n);
        self.last_claim = if handed_out { id } else { String::new() };
    }
}
