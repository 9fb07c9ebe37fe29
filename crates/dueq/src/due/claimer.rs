//! Building a [`DueClaimer`], keeping its partition claimers in line with the queue, and
//! waiting until its next claim can find work.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::clock::RedisClock;
use super::partition::PartitionClaimer;
use super::round::hand_back;
use super::{DueClaimer, MAX_LAYOUT_PAUSE, MAX_POLL_MS, any_of};
use crate::client::Queue;
use crate::error::Result;
use crate::task::ClaimedTask;

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
            out: Vec::new(),
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
    pub(super) async fn sync_layout(&mut self) -> Result<()> {
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
        self.out = vec![(0, Instant::now()); self.parts.len()];
        self.layout = Some(layout);
        Ok(())
    }

    /// The claimers of the partitions whose claim is not out.
    pub(super) fn idle(&self) -> impl Iterator<Item = &PartitionClaimer> {
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
