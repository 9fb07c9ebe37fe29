//! The one claim path: waiting until work is due, then claiming it.
//!
//! [`DueClaimer`] is the only code that decides when a queue is asked for work. The Rust
//! [`Worker`](crate::Worker), the HTTP long-poll claim of `dueq serve` and push delivery all
//! take tasks through it, so a rule about handing out work (a rate limit, a priority, a
//! schedule) is written once, here. It owns:
//!
//! * the timer to the next due time, by the Redis clock ([`clock`]): the claim script returns
//!   the server's time and the earliest due time, and the claimer sleeps for their difference;
//! * the wake-up subscription ([`wake`]): one pub/sub connection per [`Client`], shared by all
//!   its claimers, with a bounded table of queues; an earlier task ends the sleep at once;
//! * the fallback poll (at most every second) for lost notifications (DESIGN 2.6, case C02);
//! * lease recovery of its queue ([`recovery`]): when a lease deadline passes, or a claim saw a
//!   lease without a deadline entry, it recovers before claiming;
//! * replay of a lost claim reply: a claim whose reply never arrived is asked for again by id
//!   on the next call, so its tasks are not stuck until their leases expire (case C01);
//!
//! Its answer to "no work" is [`DueClaimer::next_look_at`]: the instant the next claim can
//! find some. [`DueClaimer::ready`] sleeps until then (or until a wake-up says sooner), so no
//! caller computes a sleep. `PartitionClaimer::plan_next_look` ([`partition`]) is the single
//! function that decides that instant: a limiter that must hold work back until a slot opens
//! hooks in there.
//!
//! All of the above is per partition of the queue ([`partition::PartitionClaimer`]; a queue of
//! one partition has one): the `DueClaimer` shares each claim among its partitions and
//! sleeps until the first of them is ready (docs/SCALING.md). A partition's claim runs as a
//! task of its own, so a partition whose node hangs holds up only its own tasks: a claim
//! returns what the partitions that answered handed out, and a late answer is handed out by
//! the next claim (or handed back when the claimer is gone).
//!
//! Rejected alternative: Redis blocking commands (`BZPOPMIN`), which fire on the server's
//! `hz` tick (100 ms by default) and cannot express "due at T".

pub(crate) mod clock;
pub(crate) mod heartbeat;
pub(crate) mod partition;
pub(crate) mod recovery;
pub(crate) mod schedules;
pub(crate) mod wake;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::client::{Layout, Queue};
use crate::error::Result;
use crate::task::ClaimedTask;
use clock::RedisClock;
use partition::PartitionClaimer;

pub use heartbeat::{Heartbeat, WorkerLoad, validate_heartbeat_ms};
pub use recovery::{DEFAULT_RECOVER_INTERVAL_MS, DEFAULT_SWEEP_MS, LeaseRecoverer};
pub use schedules::{DEFAULT_SCHEDULE_POLL_MS, ScheduleFirer};

/// Default and largest fallback poll, ms (DESIGN 2.6).
pub const MAX_POLL_MS: u64 = 1_000;

/// Longest pause after the partitions of a queue could not be read (the first call).
const MAX_LAYOUT_PAUSE: Duration = Duration::from_secs(1);

/// Longest a claim round waits for the partitions still out once one has answered: the
/// others' answers of a healthy round come within about as long again; a partition slower
/// than this (its node hanging) answers into a later claim.
const MAX_ROUND_WAIT: Duration = Duration::from_millis(50);

/// What a partition's claim, run as a task of its own, sends back: the partition's index,
/// its claimer and the claim's answer.
type Answer = (usize, PartitionClaimer, Result<Vec<ClaimedTask>>);

/// A partition's claimer, or `None` while its claim is out (the task running it owns it).
type Slot = Option<PartitionClaimer>;

/// Waits until work of one queue is due, then claims it. Build with [`Queue::due_claimer`].
///
/// Use it as a loop: [`claim`](Self::claim) (which may hand out nothing), then
/// [`ready`](Self::ready) to sleep until the next claim can find work; or
/// [`claim_within`](Self::claim_within) for a long-poll. Not shared: one per consumer loop.
///
/// A partitioned queue gets one [`PartitionClaimer`] per partition, each with its own timer,
/// wake-ups and lease recovery (so a task is never early and is as punctual as in a queue of
/// one partition); a claim shares its `max` among the partitions that have due work, and
/// the fallback polls of idle partitions go out together (one round of calls per poll).
pub struct DueClaimer {
    queue: Queue,
    lease_ms: Option<u64>,
    poll_ms: u64,
    notifications: bool,
    replay: bool,
    worker: Option<Arc<str>>,
    clock: Arc<RedisClock>,
    /// The partitions the claimers below are for (`None` before the first claim).
    layout: Option<Arc<Layout>>,
    parts: Vec<Slot>,
    /// Answers of partition claims that ran as tasks of their own (several partitions).
    answers_tx: mpsc::UnboundedSender<Answer>,
    answers: mpsc::UnboundedReceiver<Answer>,
    /// Tasks of late answers, for the next claim.
    late: Vec<ClaimedTask>,
    /// Which partition gets the first of an uneven split of `max`.
    turn: usize,
    /// Reading the partitions failed before any was known: no look before this.
    retry_at: Instant,
    error_pause: Duration,
}

impl std::fmt::Debug for DueClaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DueClaimer")
            .field("queue", &self.queue.name())
            .field("lease_ms", &self.lease_ms)
            .field("poll_ms", &self.poll_ms)
            .field("partitions", &self.parts.len())
            .finish_non_exhaustive()
    }
}

impl DueClaimer {
    pub(crate) fn new(queue: Queue) -> Self {
        let (answers_tx, answers) = mpsc::unbounded_channel();
        Self {
            queue,
            lease_ms: None,
            poll_ms: MAX_POLL_MS,
            notifications: true,
            replay: true,
            worker: None,
            clock: Arc::new(RedisClock::new()),
            layout: None,
            parts: Vec::new(),
            answers_tx,
            answers,
            late: Vec::new(),
            turn: 0,
            retry_at: Instant::now(),
            error_pause: Duration::from_millis(10),
        }
    }

    /// The lease every claimed task gets, overriding each task's own `lease_ms`. Default:
    /// the task's. A lease out of range makes [`claim`](Self::claim) fail with
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) (nothing claimed).
    pub fn lease_ms(mut self, lease_ms: Option<u64>) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Longest sleep before asking Redis again (the fallback for lost notifications), ms.
    /// Default and most 1 000; lower values cost more idle Redis calls.
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll_ms = ms.clamp(1, MAX_POLL_MS);
        self
    }

    /// Whether to listen for wake-up notifications. Default `true`. Without them an idle
    /// claimer still finds an earlier task by its fallback poll.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Whether each claim leaves a record in Redis so that a reply lost on the way is handed
    /// out again by this claimer's next call. Default `true`. Turn it off for a claimer that
    /// makes one call and is gone (an HTTP claim): its record could never be asked for, and
    /// would wait for the hourly clean-up.
    pub fn replay_lost_replies(mut self, on: bool) -> Self {
        self.replay = on;
        self
    }

    /// The worker id its leases name as holder (shown with each active task, [`Task::worker`]):
    /// 1 to [`MAX_WORKER_ID_BYTES`](crate::MAX_WORKER_ID_BYTES) bytes of printable ASCII
    /// without spaces, as in the live workers list, else [`claim`](Self::claim) fails with
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind). Default: none.
    ///
    /// [`Task::worker`]: crate::Task::worker
    pub fn worker_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.worker = Some(id.into());
        self
    }

    /// Shares the Redis clock reading with other duties of a worker (its lease keeper).
    pub(crate) fn clock(mut self, clock: Arc<RedisClock>) -> Self {
        self.clock = clock;
        self
    }

    /// The queue it claims from.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Brings the partition claimers in line with the queue's partitions (read once, then
    /// again only when a claim of partition 0 shows a settings change). A failed read keeps
    /// the claimers there are; with none yet, it fails after a pause. While a partition's
    /// claim is out the claimers stay as they are (a change of partitions needs an empty
    /// queue, and is taken at a later claim).
    async fn sync_layout(&mut self) -> Result<()> {
        let layout = match self.queue.claim_layout().await {
            Ok(l) => l,
            Err(e) if self.parts.is_empty() => {
                self.retry_at = Instant::now() + crate::backoff::jittered(self.error_pause);
                self.error_pause = (self.error_pause * 2).min(MAX_LAYOUT_PAUSE);
                return Err(e);
            }
            Err(e) => {
                tracing::warn!(queue = self.queue.name(), error = %e,
                    "could not read the queue's partitions; claiming from those known");
                return Ok(());
            }
        };
        if self
            .layout
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, &layout))
            || self.parts.iter().any(|s| s.is_none())
        {
            return Ok(());
        }
        let mut old: Vec<PartitionClaimer> = std::mem::take(&mut self.parts)
            .into_iter()
            .flatten()
            .collect();
        for p in 0..layout.n() {
            let keys = &*layout.keys[p];
            let part = match old.iter().position(|c| c.queue().keys() == keys) {
                Some(i) => old.swap_remove(i),
                None => PartitionClaimer::new(
                    self.queue.part(&layout, p),
                    self.lease_ms,
                    self.poll_ms,
                    self.notifications,
                    self.replay,
                    self.worker.clone(),
                    self.clock.clone(),
                ),
            };
            self.parts.push(Some(part));
        }
        for gone in old {
            gone.close();
        }
        self.layout = Some(layout);
        Ok(())
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
    /// A partitioned queue: `max` is shared among the partitions whose work is due (as each
    /// one's last answer and wake-ups tell), their claims sent at once, each as a task of its
    /// own; an idle partition (no work due within a poll) whose fallback poll comes within
    /// half a poll is asked for nothing at the same time, so idle partitions cost one round
    /// of calls per poll, not one each. The claim waits for the first answer and then for
    /// the others about as long again (at most [`MAX_ROUND_WAIT`] in all), never for a
    /// partition whose last call failed, and no longer than until a partition not asked has
    /// work (its timer or a wake-up): a partition whose node hangs holds up only its own
    /// tasks, which a later claim hands out when they come (its answer ends
    /// [`ready`](Self::ready)). A late answer may make the list longer than `max`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for `max` over 1 000 or a bad lease;
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails: the error is for logging; the
    /// next look is pushed back by a growing pause (10 ms to 1 s), so calling
    /// [`ready`](Self::ready) and then `claim` again is the right loop. (With partitions, the
    /// tasks of the partitions that answered are handed out and a failure is only logged.)
    ///
    /// # Cancel safety
    /// Not cancel safe: a claim dropped in flight may have leased tasks, which then come back
    /// only when their leases expire.
    pub async fn claim(&mut self, max: usize) -> Result<Vec<ClaimedTask>> {
        self.sync_layout().await?;
        if let [Some(one)] = self.parts.as_mut_slice() {
            return one.claim(max).await;
        }
        let mut tasks = std::mem::take(&mut self.late);
        let mut failed = None;
        // a partition that answered late is not asked again in this call
        let mut short = vec![false; self.parts.len()];
        while let Ok(a) = self.answers.try_recv() {
            self.take_answer(a, None, &mut short, &mut tasks, &mut failed);
        }
        // rounds: a partition held back for want of a share takes, in the next round, what
        // the short claims of the others left (else the freed slots would wait for its poll);
        // a partition that came back short is not asked again in this call
        while tasks.len() < max || tasks.is_empty() {
            let held = self
                .claim_round(
                    max - tasks.len().min(max),
                    &mut short,
                    &mut tasks,
                    &mut failed,
                )
                .await;
            if !held || tasks.len() >= max || failed.is_some() {
                break;
            }
        }
        match failed {
            Some(e) if tasks.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(queue = self.queue.name(), error = %e,
                    "claim of one partition failed; retrying it after a pause");
                Ok(tasks)
            }
            None => Ok(tasks),
        }
    }

    /// One round of a partitioned claim of up to `max` (see [`claim`](Self::claim)), leaving
    /// out the partitions marked in `short` (they came back with less than their share in an
    /// earlier round of this call, and are marked so here) and those whose claim is still
    /// out. The claimed tasks go to `tasks`, the first failure to `failed`. Returns whether a
    /// partition with due work got no share (was held back).
    async fn claim_round(
        &mut self,
        max: usize,
        short: &mut [bool],
        tasks: &mut Vec<ClaimedTask>,
        failed: &mut Option<crate::Error>,
    ) -> bool {
        let now = Instant::now();
        let poll = Duration::from_millis(self.poll_ms);
        let soon = now + poll / 2;
        let wants: Vec<bool> = self
            .parts
            .iter()
            .zip(short.iter())
            .map(|(s, &short)| {
                s.as_ref()
                    .is_some_and(|p| !short && (p.has_due_work() || p.next_look_at() <= now))
            })
            .collect();
        let shares = split(max, &wants, self.turn);
        self.turn = self.turn.wrapping_add(1);
        let mut held = false;
        let mut asked: Vec<Option<usize>> = vec![None; self.parts.len()];
        // asked partitions whose last call failed: their node may be gone, so no wait
        let mut failing = vec![false; self.parts.len()];
        for (i, ((slot, &n), &want)) in self.parts.iter_mut().zip(&shares).zip(&wants).enumerate() {
            let Some(part) = slot else { continue };
            let look = part.next_look_at();
            held |= n == 0 && want && part.has_due_work();
            let ask = n > 0
                || (!short[i] && look <= now && !(want && part.has_due_work() && part.hold()))
                || (!short[i] && look <= soon && part.idle_until(now + poll));
            if ask {
                let Some(part) = slot.take() else { continue };
                asked[i] = Some(n);
                failing[i] = part.failing();
                tokio::spawn(claim_out(i, part, n, self.answers_tx.clone()));
            }
        }
        if asked.iter().all(Option::is_none) {
            return held;
        }
        // the first answer, then the others about as long again, at most MAX_ROUND_WAIT;
        // only for partitions asked now and not failing, and only until a partition not
        // asked has work (its timer, a wake-up): a hanging node's claim never holds up the
        // due tasks of the others
        let sent = Instant::now();
        let mut until = sent + MAX_ROUND_WAIT;
        let mut first = true;
        let watched: Vec<bool> = self
            .parts
            .iter()
            .map(|s| s.as_ref().is_some_and(|p| p.next_look_at() > sent))
            .collect();
        let awaited = |parts: &[Option<PartitionClaimer>]| {
            (0..parts.len()).any(|i| asked[i].is_some() && !failing[i] && parts[i].is_none())
        };
        while awaited(&self.parts) {
            let others = self
                .parts
                .iter_mut()
                .zip(&watched)
                .filter(|(_, w)| **w)
                .filter_map(|(s, _)| s.as_mut())
                .map(PartitionClaimer::ready);
            let a = tokio::select! {
                a = self.answers.recv() => a,
                () = sleep_until(until) => None,
                () = any_of(others) => None,
            };
            let Some(a) = a else { break };
            let i = a.0;
            self.take_answer(a, asked.get(i).copied().flatten(), short, tasks, failed);
            if first {
                first = false;
                until = until.min(Instant::now() + sent.elapsed() + Duration::from_millis(1));
            }
        }
        held
    }

    /// Puts a partition's claimer back from its answer; its tasks go to `tasks`, a failure to
    /// `failed`; it counts as short unless it filled `asked`, its share of this round.
    fn take_answer(
        &mut self,
        (i, part, got): Answer,
        asked: Option<usize>,
        short: &mut [bool],
        tasks: &mut Vec<ClaimedTask>,
        failed: &mut Option<crate::Error>,
    ) {
        if let Some(slot) = self.parts.get_mut(i) {
            *slot = Some(part);
        }
        let short = short.get_mut(i);
        match got {
            Ok(t) => {
                if let Some(s) = short {
                    *s |= asked.is_none_or(|n| n == 0 || t.len() < n);
                }
                tasks.extend(t);
            }
            Err(e) => {
                if let Some(s) = short {
                    *s = true;
                }
                *failed = failed.take().or(Some(e));
            }
        }
    }

    /// The claimers of the partitions whose claim is not out.
    fn idle(&self) -> impl Iterator<Item = &PartitionClaimer> {
        self.parts.iter().flatten()
    }

    /// Whether the last claim saw due work waiting for a concurrency slot (the queue's
    /// limit, or a group parked at its `group_concurrency`): then the end of a task this
    /// process holds makes work claimable, and the process can claim right behind its own
    /// ack instead of waiting for the wake-up the ack publishes.
    pub fn waits_for_slot(&self) -> bool {
        self.idle().any(PartitionClaimer::waits_for_slot)
    }

    /// Whether the next claim would hand out work, as far as this claimer knows without asking
    /// Redis (see [`PartitionClaimer::has_due_work`]; any partition, or a late answer's
    /// tasks). A worker that serves several queues shares its slots among the queues for
    /// which this is true (`worker/share.rs`).
    pub(crate) fn has_due_work(&self) -> bool {
        !self.late.is_empty() || self.idle().any(PartitionClaimer::has_due_work)
    }

    /// The caller does not claim now although work is due: see [`PartitionClaimer::hold`];
    /// `true` when every partition with due work could be held.
    pub(crate) fn hold(&mut self) -> bool {
        if !self.late.is_empty() {
            return false;
        }
        let mut all = true;
        for s in &mut self.parts {
            if let Some(p) = s
                && p.has_due_work()
            {
                all &= p.hold();
            }
        }
        all
    }

    /// The instant the next [`claim`](Self::claim) can find work (see
    /// [`ready`](Self::ready)); after a failed call, the end of the error pause. A late
    /// answer's tasks wait: now.
    pub fn next_look_at(&self) -> Instant {
        if !self.late.is_empty() {
            return Instant::now();
        }
        self.idle()
            .map(PartitionClaimer::next_look_at)
            .min()
            .unwrap_or(self.retry_at)
    }

    /// Sleeps until [`next_look_at`](Self::next_look_at), or less when a wake-up says a task
    /// became due sooner (never less than the pause after a failed call), or a partition's
    /// claim that was still out answers. The first call starts the subscription to the
    /// queue's wake channel (in the background; once it is in effect a wake-up says "look")
    /// and returns at once, so the caller looks again and misses nothing enqueued before.
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up received before the cancel has already moved the next look,
    /// and an answer received is kept for the next claim.
    pub async fn ready(&mut self) {
        if !self.late.is_empty() {
            return;
        }
        let answer = match self.parts.as_mut_slice() {
            [] => {
                sleep_until(self.retry_at).await;
                None
            }
            [Some(one)] => {
                one.ready().await;
                None
            }
            parts => {
                let waits = parts.iter_mut().flatten().map(PartitionClaimer::ready);
                tokio::select! {
                    () = any_of(waits) => None,
                    a = self.answers.recv() => a,
                }
            }
        };
        if let Some(a) = answer {
            let (mut tasks, mut failed) = (Vec::new(), None);
            let mut short = vec![false; self.parts.len()];
            self.take_answer(a, None, &mut short, &mut tasks, &mut failed);
            if let Some(e) = failed {
                tracing::warn!(queue = self.queue.name(), error = %e,
                    "claim of one partition failed; retrying it after a pause");
            }
            self.late = tasks;
        }
    }

    /// A long-poll: claims up to `max` tasks, waiting until `deadline` for the first one;
    /// returns an empty list at the deadline or when `stop` completes (checked only while
    /// waiting, so a claim in flight is never dropped).
    ///
    /// # Errors
    /// The first failed Redis call, as [`claim`](Self::claim).
    pub async fn claim_within(
        &mut self,
        max: usize,
        deadline: Instant,
        stop: impl Future<Output = ()>,
    ) -> Result<Vec<ClaimedTask>> {
        let mut stop = std::pin::pin!(stop);
        loop {
            let tasks = self.claim(max).await?;
            if !tasks.is_empty() || Instant::now() >= deadline {
                return Ok(tasks);
            }
            tokio::select! {
                () = self.ready() => {}
                () = sleep_until(deadline) => {}
                () = &mut stop => return Ok(Vec::new()),
            }
        }
    }

    /// Ends the wake-up subscriptions at once when no other claimer of the client waits on
    /// this queue (a long-lived consumer that stops; otherwise an unused channel is dropped
    /// after a minute). Tasks of partition claims that answer later are handed back.
    pub fn close(mut self) {
        for p in std::mem::take(&mut self.parts).into_iter().flatten() {
            p.close();
        }
    }
}

impl Drop for DueClaimer {
    /// Hands back the tasks of late answers no claim took: claimed, but never handed out.
    fn drop(&mut self) {
        let late = std::mem::take(&mut self.late);
        if !late.is_empty()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(hand_back(self.queue.clone(), late));
        }
    }
}

/// A partition's claim as a task of its own: sends its answer to its `DueClaimer`, or,
/// when that is gone, hands the tasks back.
async fn claim_out(
    i: usize,
    mut part: PartitionClaimer,
    n: usize,
    answers: mpsc::UnboundedSender<Answer>,
) {
    let got = part.claim(n).await;
    if let Err(mpsc::error::SendError((_, part, got))) = answers.send((i, part, got))
        && let Ok(tasks) = got
        && !tasks.is_empty()
    {
        hand_back(part.queue().clone(), tasks).await;
    }
}

/// Releases `tasks` (due again at once, the attempt not counted).
async fn hand_back(queue: Queue, tasks: Vec<ClaimedTask>) {
    let items: Vec<_> = tasks.into_iter().map(|t| (t.id, t.lease_token)).collect();
    if let Err(e) = queue.release(&items).await {
        tracing::warn!(queue = queue.name(), error = %e,
            "could not hand back tasks claimed for a claimer that is gone; their leases expire");
    }
}

/// `max` shared evenly among the partitions that want work (`wants`), the odd ones going to
/// the wanting partitions from `turn` on.
fn split(max: usize, wants: &[bool], turn: usize) -> Vec<usize> {
    let k = wants.iter().filter(|&&w| w).count();
    let mut out = vec![0; wants.len()];
    if k == 0 {
        return out;
    }
    let (base, extra) = (max / k, max % k);
    let wanting: Vec<usize> = (0..wants.len()).filter(|&i| wants[i]).collect();
    for (j, &i) in wanting.iter().enumerate() {
        let rank = (j + k - turn % k) % k;
        out[i] = base + usize::from(rank < extra);
    }
    out
}

/// Completes when any of `waits` completes. Every one is polled each time, not only up to
/// the first that is ready (as `select_all` does), so each claimer waiting beside a busy
/// one still starts its wake-up subscription and reads its wake-ups. Cancel safe when each
/// wait is.
pub(crate) async fn any_of<F: Future<Output = ()>>(waits: impl IntoIterator<Item = F>) {
    let mut waits: Vec<Pin<Box<F>>> = waits.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        // (none of them has completed before: the first round with one ready ends this)
        let mut any = false;
        for w in &mut waits {
            any |= w.as_mut().poll(cx).is_ready();
        }
        if any { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn max_is_shared_among_the_partitions_that_want_work() {
        assert_eq!(split(10, &[true, false, true], 0), vec![5, 0, 5]);
        assert_eq!(split(7, &[true, true, true], 0), vec![3, 2, 2]);
        assert_eq!(split(7, &[true, true, true], 1), vec![2, 3, 2]);
        assert_eq!(split(7, &[true, true, true], 2), vec![2, 2, 3]);
        assert_eq!(split(1, &[true, true], 1), vec![0, 1]);
        assert_eq!(split(5, &[false, false], 0), vec![0, 0]);
        for turn in 0..12 {
            let s = split(100, &[true, false, true, true, false, true], turn);
            assert_eq!(s.iter().sum::<usize>(), 100);
            assert_eq!((s[1], s[4]), (0, 0));
        }
    }
}
