//! [`Queue`]: the operations on one queue (enqueue, look up, cancel, reschedule, stats, and the
//! claim / ack / nack / extend protocol that workers and the HTTP API use).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::Client;
use super::partitions::{each, merge_history, merge_stats};
use crate::backoff::Backoff;
use crate::due::DueClaimer;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::keys::QueueKeys;
pub use crate::protocol::leases::Throttle;
use crate::protocol::leases::{self, ClaimTracking, NackItem};
use crate::protocol::queues;
use crate::protocol::tasks::{self, EnqueueItem, EnqueueReply};
use crate::settings::{QueueSettings, RateLimit, SettingsPatch};
use crate::task::{
    AckOutcome, CancelOutcome, ClaimedTask, Due, Enqueued, LeaseToken, MAX_ATTEMPTS, MinuteStats,
    NackOutcome, QueueStats, RescheduleOutcome, Task, TaskId, TaskRef, TaskSpec, check_options,
    validate_group, validate_key, validate_lease_ms,
};

/// Longest `last_error` text kept, in bytes (longer texts are cut at a character boundary).
pub const MAX_ERROR_BYTES: usize = 4096;

/// A handle on one queue (all its partitions). Cheap to clone; no Redis call until an
/// operation runs.
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    keys: Arc<QueueKeys>,
    backoff: Backoff,
    /// A handle on one partition (`keys`), made by the routing of `client/partitions.rs`:
    /// its operations never route again.
    part: bool,
}

/// What a claim returned.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Claim {
    /// The claimed tasks: ungrouped ones by priority (0 first), then due time (FIFO among
    /// equal due times); grouped ones interleaved round-robin by group.
    pub tasks: Vec<ClaimedTask>,
    /// Redis time of the claim, epoch ms.
    pub now_ms: u64,
    /// Earliest due time still scheduled (after this claim), epoch ms.
    pub next_due_at_ms: Option<u64>,
    /// Earliest lease deadline of an active task, epoch ms.
    pub next_lease_deadline_ms: Option<u64>,
    /// Whether the queue is paused (then no tasks are handed out).
    pub paused: bool,
    /// Whether a lease without a deadline entry was seen (run [`Queue::recover`]).
    pub orphans: bool,
    /// A queue limit that held due work back, if any.
    pub throttle: Option<Throttle>,
    /// Whether due work waits for a concurrency slot (the queue's limit, or a group parked at
    /// its `group_concurrency`): the next ack, nack or release of an active task frees one.
    pub waits_for_slot: bool,
    /// Version of the queue's settings (changes with every settings change).
    pub settings_version: u64,
    /// The schedule of each missed tick this claim dropped instead of handing it out: a
    /// tick's task that had not started by its misfire deadline (DESIGN 2.16), one name per
    /// tick.
    pub missed_ticks: Vec<String>,
}

/// A cancel's outcome with its context.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CancelReport {
    /// What the cancel did.
    pub outcome: CancelOutcome,
    /// The task it found, if any.
    pub id: Option<TaskId>,
    /// Redis time at which it was applied, epoch ms.
    pub now_ms: u64,
}

/// What a recover pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoverReport {
    /// Expired tasks put back to scheduled.
    pub recovered: u64,
    /// Expired tasks out of attempts, moved to the dead-letter queue.
    pub dead: u64,
    /// Earliest lease deadline still active, epoch ms.
    pub next_lease_deadline_ms: Option<u64>,
    /// Redis time, epoch ms.
    pub now_ms: u64,
    /// Whether the sweep for leases without a deadline entry finished a full round in this
    /// call (it looks at up to 1 000 leases per call).
    pub swept: bool,
    /// Scheduled tasks whose expiry passed before they started, ended by this call (up to
    /// 100 per call).
    pub expired: u64,
    /// The call expired a full batch: more expired tasks may be waiting.
    pub expired_more: bool,
    /// Earliest expiry of a task still scheduled, epoch ms.
    pub next_expiry_at_ms: Option<u64>,
}

impl RecoverReport {
    /// When the queue next needs a recovery pass: its earliest lease deadline or expiry,
    /// epoch ms (`None`: neither).
    pub fn next_check_at_ms(&self) -> Option<u64> {
        earliest(self.next_lease_deadline_ms, self.next_expiry_at_ms)
    }
}

/// The earlier of two optional times.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

pub(crate) fn cut_error(e: &str) -> &str {
    if e.len() <= MAX_ERROR_BYTES {
        return e;
    }
    let mut end = MAX_ERROR_BYTES;
    while !e.is_char_boundary(end) {
        end -= 1;
    }
    &e[..end]
}

impl Queue {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Ok(Self {
            client,
            keys: Arc::new(QueueKeys::new(name)?),
            backoff: Backoff::default(),
            part: false,
        })
    }

    /// This handle bound to one partition's keys.
    pub(crate) fn on_keys(&self, keys: Arc<QueueKeys>) -> Self {
        Self {
            client: self.client.clone(),
            keys,
            backoff: self.backoff,
            part: true,
        }
    }

    pub(crate) fn is_part(&self) -> bool {
        self.part
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis keys of this queue (of its partition 0 when it has several; for operators
    /// and tests).
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// This handle with durable writes (DESIGN 2.14): its enqueues, acks, nacks, cancels,
    /// reschedules and dead-letter retries and deletes are followed by `WAIT replicas
    /// timeout_ms` and fail with [`ErrorKind::NotReplicated`] when fewer replicas confirm in
    /// time. 0 replicas turns it off (also when the client has it on). See
    /// [`ClientBuilder::replicas`](crate::ClientBuilder::replicas) for what it promises.
    pub fn with_replicas(mut self, replicas: u8, timeout_ms: u64) -> Self {
        self.client = self.client.with_replicas(replicas, timeout_ms);
        self
    }

    /// The backoff used when a nack gives no delay and when an expired lease is recovered.
    /// Default [`Backoff::default`].
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    fn check(&self, spec: &TaskSpec) -> Result<()> {
        let limit = self.client.payload_limit_bytes();
        if spec.payload.len() > limit {
            return Err(Error::new(
                ErrorKind::PayloadTooLarge,
                format!(
                    "payload is {} bytes; the limit is {limit}",
                    spec.payload.len()
                ),
            ));
        }
        if let Some(k) = &spec.key {
            validate_key(k)?;
            // refused at enqueue only (lookups of such keys made earlier still work): HTTP
            // clients remove `.` and `..` path segments, so the task could never be reached
            // by key over HTTP
            if k == "." || k == ".." {
                return Err(Error::invalid(format!(
                    "key {k:?} is refused: HTTP clients remove . and .. from URLs (dot \
                     segments), so the task could not be looked up or cancelled by key"
                )));
            }
        }
        spec.due.parts()?;
        if let Some(g) = &spec.group {
            validate_group(g)?;
        }
        if spec.max_attempts == Some(0) || spec.max_attempts > Some(MAX_ATTEMPTS) {
            return Err(Error::invalid(format!(
                "max_attempts must be 1 to {MAX_ATTEMPTS}"
            )));
        }
        if let Some(l) = spec.lease_ms {
            validate_lease_ms(l)?;
        }
        check_options(spec)
    }

    /// Enqueues one task.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] or [`ErrorKind::PayloadTooLarge`] (nothing written),
    /// [`ErrorKind::Redis`] when Redis fails. Repeating an enqueue with a key creates no
    /// duplicate while the first task is scheduled or running; once it has finished, the
    /// key is free and a repeat creates a second task.
    pub async fn enqueue(&self, spec: TaskSpec) -> Result<Enqueued> {
        let mut v = self.enqueue_batch(std::slice::from_ref(&spec)).await?;
        v.pop()
            .ok_or_else(|| Error::protocol("enqueue: empty reply"))
    }

    /// Enqueues many tasks; one result per task, in order. Every task is checked before
    /// anything is written, so one bad task refuses the whole batch. Each slice of 1 000
    /// tasks of a partition is one atomic script call; a larger batch, or one over several
    /// partitions, is several calls.
    ///
    /// # Errors
    /// As [`Queue::enqueue`]; the message names the index of the first bad task. When one of
    /// several calls fails, the others' tasks are written all the same: [`Queue::enqueue_each`]
    /// tells which.
    pub async fn enqueue_batch(&self, specs: &[TaskSpec]) -> Result<Vec<Enqueued>> {
        self.enqueue_each(specs).await?.into_iter().collect()
    }

    /// Enqueues many tasks and answers each on its own, in order: written, or the error that
    /// kept it out. A batch over several partitions, or of more than 1 000 tasks, is several
    /// calls; when some fail (a node unreachable, a durable write not confirmed), the tasks
    /// of the others are written and answered, so a caller re-sends only what failed.
    ///
    /// # Errors
    /// Only when nothing was written: a bad task ([`ErrorKind::InvalidInput`],
    /// [`ErrorKind::PayloadTooLarge`], the message names its index), or the queue registry
    /// could not be written.
    pub async fn enqueue_each(&self, specs: &[TaskSpec]) -> Result<Vec<Result<Enqueued>>> {
        for (i, s) in specs.iter().enumerate() {
            self.check(s).map_err(|e| {
                if specs.len() == 1 {
                    e
                } else {
                    Error::new(e.kind(), format!("task {i} of the batch (from 0): {e}"))
                }
            })?;
        }
        self.client.register(self.name()).await?;
        Ok(self.enqueue_routed(specs, 3).await)
    }

    /// Enqueues checked tasks, split over the partitions this client knows of. A partition
    /// above 0 refuses its share when its count is not the one it was routed by (after a
    /// FLUSHALL, or a change of the count, within the layout's cache time): the client then
    /// reads the layout again and routes that share anew, up to `tries` more times. When the
    /// count read again is the one the partition refused, the partition itself lost its
    /// settings (one node of a cluster wiped, partition 0's kept): the share goes there
    /// unchecked, as before the check existed.
    fn enqueue_routed<'a>(
        &'a self,
        specs: &'a [TaskSpec],
        tries: u8,
    ) -> BoxFuture<'a, Vec<Result<Enqueued>>> {
        Box::pin(async move {
            if !self.part {
                let layout = match self.layout().await {
                    Ok(l) => l,
                    Err(e) => return each(specs.len(), Err(e)),
                };
                if layout.n() > 1 {
                    let part_of = |s: &TaskSpec| match &s.key {
                        Some(k) => layout.of_key(k),
                        None => layout.next_keyless(),
                    };
                    return self
                        .scatter_each(&layout, specs, part_of, |q, mine| async move {
                            let (mut done, refused) = q.enqueue_here(&mine, true).await;
                            if refused {
                                let rest = &mine[done.len()..];
                                // (read afresh and cached for the routing below)
                                match self.layout_now().await {
                                    Ok(now) if now.n() == usize::from(q.keys().partitions) => {
                                        done.extend(q.enqueue_here(rest, false).await.0);
                                    }
                                    Ok(_) if tries > 0 => {
                                        done.extend(self.enqueue_routed(rest, tries - 1).await);
                                    }
                                    Ok(_) => done.extend(each(rest.len(), Err(layout_changed(&q)))),
                                    Err(e) => done.extend(each(rest.len(), Err(e))),
                                }
                            }
                            done
                        })
                        .await;
                }
            }
            let (mut done, refused) = self.enqueue_here(specs, true).await;
            if refused {
                let rest = specs.len() - done.len();
                done.extend(each(rest, Err(layout_changed(self))));
            }
            done
        })
    }

    /// Enqueues checked tasks into this handle's partition, a slice at a time; one answer per
    /// task, and whether the partition refused a slice because its count changed (then the
    /// answers stop there: the rest are not written). A slice that failed fails its tasks and
    /// the later ones (not sent). `checked`: a partition above 0 compares its count with the
    /// one it was routed by.
    async fn enqueue_here(
        &self,
        specs: &[TaskSpec],
        checked: bool,
    ) -> (Vec<Result<Enqueued>>, bool) {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(specs.len());
        for chunk in specs.chunks(MAX_BATCH) {
            let items: Vec<_> = chunk
                .iter()
                .map(|s| EnqueueItem {
                    key: s.key.as_deref(),
                    on_conflict: s.on_conflict,
                    due: s.due,
                    // 0: the queue's setting, read where it is used
                    max_attempts: s.max_attempts.unwrap_or(0),
                    lease_ms: s.lease_ms.unwrap_or(0),
                    group: s.group.as_deref(),
                    priority: s.priority,
                    expiry: s.expiry,
                    debounce_max_ms: s.debounce_max_ms,
                    payload: &s.payload,
                })
                .collect();
            let failed = match tasks::enqueue(&mut conn, &self.keys, &items, checked).await {
                Ok(EnqueueReply::Done(done, next_expiry)) => {
                    out.extend(done.into_iter().map(Ok));
                    match next_expiry {
                        Some(at) => queues::recovery_note(&mut conn, self.name(), at)
                            .await
                            .err(),
                        None => None,
                    }
                }
                Ok(EnqueueReply::LayoutChanged) => return (out, true),
                Err(e) => {
                    out.extend(each(chunk.len(), Err(e.again())));
                    Some(e)
                }
            };
            if let Some(e) = failed {
                // a task whose expiry was not noted is still expired by the recoverer's
                // sweep; later slices are not sent while Redis fails
                let sent = out.len();
                out.extend(each(specs.len() - sent, Err(e)));
                return (out, false);
            }
        }
        (out, false)
    }

    /// Reads a task by id or by business key; `None` when there is none (cancelled,
    /// acknowledged without retention, deleted).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn get(&self, target: &TaskRef) -> Result<Option<Task>> {
        let q = self.route(target).await?;
        tasks::get(&mut q.client.conn(), &q.keys, target).await
    }

    /// Cancels a scheduled task by id or key, atomically with respect to claims (DESIGN 2.7).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn cancel(&self, target: &TaskRef) -> Result<CancelOutcome> {
        Ok(self.cancel_report(target).await?.outcome)
    }

    /// [`Queue::cancel`] with the task's id and the Redis time at which the cancel was applied
    /// (to order it against claims, as `dueq replay` does).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn cancel_report(&self, target: &TaskRef) -> Result<CancelReport> {
        let q = self.route(target).await?;
        let (outcome, id, now_ms) = tasks::cancel(&mut q.client.conn(), &q.keys, target).await?;
        Ok(CancelReport {
            outcome,
            id,
            now_ms,
        })
    }

    /// Moves the due time of a scheduled task.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a due time past year 9999, [`ErrorKind::Redis`].
    pub async fn reschedule(&self, target: &TaskRef, due: Due) -> Result<RescheduleOutcome> {
        let q = self.route(target).await?;
        tasks::reschedule(&mut q.client.conn(), &q.keys, target, due).await
    }

    /// Counts and timings, in O(log n) (the sum over the partitions of a partitioned
    /// queue: see [`Queue::partition_stats`]).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn stats(&self) -> Result<QueueStats> {
        if !self.part {
            let parts = self.partition_stats().await?;
            return merge_stats(parts).ok_or_else(|| Error::protocol("stats: no partitions"));
        }
        queues::stats(&mut self.client.conn(), &self.keys).await
    }

    /// Per-minute activity of the last hour by the Redis clock: 60 entries, oldest first, the
    /// last one the current (partial) minute; minutes without activity are zero. Counted by
    /// the scripts for every client and worker of the queue (claimed, succeeded, retried,
    /// dead, claim lateness). The counters cost a few hash increments per claim or ack call
    /// and are kept for 61 minutes.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn history(&self) -> Result<Vec<MinuteStats>> {
        let layout = self.layout().await?;
        let parts = self
            .each_part(&layout, |q| async move {
                queues::history(&mut q.client.conn(), &q.keys).await
            })
            .await?;
        Ok(merge_history(parts))
    }

    /// Stops handing out tasks of this queue (enqueue, cancel and the rest still work).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn pause(&self) -> Result<()> {
        self.set_meta(&[("paused", "1".into())]).await
    }

    /// Hands out tasks again after [`Queue::pause`].
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn resume(&self) -> Result<()> {
        self.set_meta(&[("paused", "0".into())]).await
    }

    /// The queue's stored settings (see [`QueueSettings`]; `None` fields are defaults).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn settings(&self) -> Result<QueueSettings> {
        let first = queues::settings_get(&mut self.client.conn(), &self.keys)
            .await?
            .0;
        if first.partition_count() == 1 {
            return Ok(first);
        }
        // each partition holds its share of every limit: the queue's limit is their sum (the
        // partitions' keys from the layout, read now: the count may have just changed)
        let layout = self.layout_now().await?;
        let parts = self
            .each_part(&layout, |q| async move {
                Ok(queues::settings_get(&mut q.client.conn(), &q.keys).await?.0)
            })
            .await?;
        let mut total = first;
        for s in parts.iter().skip(1) {
            let add = |a: Option<u32>, b: Option<u32>| a.map(|a| a + b.unwrap_or(0));
            total.concurrency = add(total.concurrency, s.concurrency);
            total.group_concurrency = add(total.group_concurrency, s.group_concurrency);
            let add_rate = |a: Option<RateLimit>, b: Option<RateLimit>| {
                a.map(|a| RateLimit::new(a.max + b.map_or(0, |b| b.max), a.per_ms))
            };
            total.rate_limit = add_rate(total.rate_limit, s.rate_limit);
            total.group_rate_limit = add_rate(total.group_rate_limit, s.group_rate_limit);
        }
        Ok(total)
    }

    /// Changes the queue's settings: fields the patch leaves `None` stay as they are. Every
    /// process applies the change at its next claim. Returns the settings after the change.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the field, before anything is written;
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn update_settings(&self, patch: &SettingsPatch) -> Result<QueueSettings> {
        patch.validate()?;
        if patch.is_empty() {
            return self.settings().await;
        }
        let current = self.settings().await?;
        let target = current.patched(patch);
        let (old_n, new_n) = (current.partition_count(), target.partition_count());
        target.check_split(new_n)?;
        self.client.register(self.name()).await?;
        if old_n == 1 && new_n == 1 {
            let (set, clear) = patch.fields();
            queues::settings_set(&mut self.client.conn(), &self.keys, &set, &clear).await?;
            return self.settings().await;
        }
        let mut paused = false;
        if old_n != new_n {
            // keys are found by their hash over the partition count: refused while any
            // task (or dead or kept one) would be lost to lookups
            let mut held = 0;
            for p in 0..old_n {
                let k = Arc::new(QueueKeys::partition(self.name(), p, old_n)?);
                let s = queues::stats(&mut self.client.conn(), &k).await?;
                held += s.scheduled + s.active + s.dead + s.succeeded_kept;
                paused |= s.paused;
            }
            if held > 0 {
                let tasks = if held == 1 { "task" } else { "tasks" };
                return Err(Error::invalid(format!(
                    "partitions: the queue holds {held} {tasks} (scheduled, active, dead or \
                     kept); change its partitions only while it is empty"
                )));
            }
        }
        // the partitions above 0 of the old count (their keys depend on the count) forget it
        // first, so an enqueue routed by it is refused there (enqueue.lua) instead of
        // landing where no one looks
        if old_n != new_n {
            for p in 1..old_n {
                let k = QueueKeys::partition(self.name(), p, old_n)?;
                queues::settings_set(&mut self.client.conn(), &k, &[], &["partitions"]).await?;
            }
        }
        // partition 0 last: it holds the count, so no process routes to a partition whose
        // settings are not written yet
        for p in (0..new_n).rev() {
            let k = QueueKeys::partition(self.name(), p, new_n)?;
            let (mut set, clear) = target.share_for(p, new_n).as_patch().fields();
            if p > 0 {
                set.push((
                    "seq_floor",
                    (u64::from(p) << crate::protocol::keys::ID_PARTITION_SHIFT).to_string(),
                ));
            }
            if old_n != new_n {
                // (a partition's meta may be left from an earlier count, paused or not)
                set.push(("paused", if paused { "1" } else { "0" }.to_owned()));
            }
            queues::settings_set(&mut self.client.conn(), &k, &set, &clear).await?;
        }
        self.client.forget_layout(self.name());
        self.settings().await
    }

    /// Writes `meta` fields (of every partition); the queue is listed by [`Client::queues`]
    /// from then on, even before its first task (a queue paused ahead of time must show up).
    async fn set_meta(&self, fields: &[(&str, String)]) -> Result<()> {
        self.client.register(self.name()).await?;
        // read now, not from the cache: a count changed in the last seconds must be paused
        // whole
        let layout = self.layout_now().await?;
        self.each_part(&layout, |q| async move {
            queues::settings_set(&mut q.client.conn(), &q.keys, fields, &[]).await
        })
        .await?;
        Ok(())
    }

    /// The backoff table for a failed attempt: the queue's `backoff` setting when it has one
    /// (cached per client, read again when a claim shows a new settings version or after
    /// 10 s), else this handle's ([`Queue::with_backoff`]).
    async fn backoff_table(&self) -> Vec<u64> {
        let policy = match self.client.cached_backoff(&self.keys.meta) {
            Some(b) => b,
            None => match queues::settings_get(&mut self.client.conn(), &self.keys).await {
                Ok((s, version)) => {
                    let b = s.backoff.map(|b| b.policy());
                    self.client.store_backoff(&self.keys.meta, version, b);
                    b
                }
                // the failure itself will surface in the call that follows
                Err(_) => None,
            },
        };
        policy.unwrap_or(self.backoff).table_ms()
    }

    /// Claims up to `max` due tasks (1 to 1 000), each under a lease of its own `lease_ms`
    /// or of `lease_ms` when given. Returns at once (no waiting).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for `max` over 1 000 or a bad lease, [`ErrorKind::Redis`].
    ///
    /// A partitioned queue: each partition is asked for an even share of `max` at once (so
    /// priorities and due order hold within each partition's share), then the partitions that
    /// filled their share for what is left, again at once (two round trips, as a rule). The
    /// reply's times are the earliest over the partitions.
    pub async fn claim(&self, max: usize, lease_ms: Option<u64>) -> Result<Claim> {
        let layout = if self.part {
            None
        } else {
            Some(self.claim_layout().await?).filter(|l| l.n() > 1)
        };
        let Some(layout) = layout else {
            return self
                .claim_tracked(max, lease_ms, ClaimTracking::default())
                .await;
        };
        let n = layout.n();
        let first = layout.next_keyless();
        let share = |p: usize| max / n + usize::from((p + n - first % n) % n < max % n);
        let parts = self.parts(&layout);
        let calls = parts.iter().enumerate().map(|(p, q)| async move {
            (
                p,
                q.claim_tracked(share(p), lease_ms, ClaimTracking::default())
                    .await,
            )
        });
        let mut all: Option<Claim> = None;
        let mut full = Vec::new();
        for (p, c) in futures_util::future::join_all(calls).await {
            let c = c?;
            if c.tasks.len() >= share(p) && share(p) > 0 {
                full.push(p);
            }
            merge_into(&mut all, c);
        }
        // what is left, shared among the partitions that may have more, again at once, until
        // `max` is reached or none filled its share
        loop {
            let got = all.as_ref().map_or(0, |c| c.tasks.len());
            if got >= max || full.is_empty() {
                break;
            }
            let rest = max - got;
            let k = full.len();
            let asks: Vec<(usize, usize)> = full
                .iter()
                .enumerate()
                .map(|(j, &p)| (p, rest / k + usize::from(j < rest % k)))
                .filter(|&(_, n)| n > 0)
                .collect();
            let calls = asks.iter().map(|&(p, n)| {
                let q = &parts[p];
                async move {
                    (
                        p,
                        n,
                        q.claim_tracked(n, lease_ms, ClaimTracking::default()).await,
                    )
                }
            });
            // those not asked this time (`rest` below their number) stay candidates
            full.retain(|p| !asks.iter().any(|(a, _)| a == p));
            for (p, n, c) in futures_util::future::join_all(calls).await {
                let c = c?;
                if c.tasks.len() >= n {
                    full.push(p);
                }
                merge_into(&mut all, c);
            }
        }
        all.ok_or_else(|| Error::protocol("claim: no partitions"))
    }

    /// [`Queue::claim`] with lost-reply recovery (used by the worker).
    pub(crate) async fn claim_tracked(
        &self,
        max: usize,
        lease_ms: Option<u64>,
        tracking: ClaimTracking<'_>,
    ) -> Result<Claim> {
        if max > MAX_BATCH {
            return Err(Error::invalid(format!("max must be 0 to {MAX_BATCH}")));
        }
        if let Some(l) = lease_ms {
            validate_lease_ms(l)?;
        }
        let r = leases::claim(
            &mut self.client.conn(),
            &self.keys,
            max,
            lease_ms.unwrap_or(0),
            tracking,
        )
        .await?;
        self.note_leases(&r.tasks);
        self.client
            .settings_seen(&self.keys.meta, r.settings_version);
        Ok(Claim {
            tasks: r.tasks,
            now_ms: r.now_ms,
            next_due_at_ms: r.next_due_ms,
            next_lease_deadline_ms: r.next_deadline_ms,
            paused: r.paused,
            orphans: r.orphans,
            throttle: r.throttle,
            waits_for_slot: r.waits_for_slot,
            settings_version: r.settings_version,
            missed_ticks: r.missed_ticks,
        })
    }

    /// Notes the earliest lease deadline of `tasks`, just handed out, in the recovery index,
    /// so that a recoverer finds them should this process die before it acknowledges them.
    /// Sent without waiting for the answer (the claim's tasks go to their handlers at once):
    /// a process that dies before the note lands leaves leases a recoverer's sweep of every
    /// queue finds (see `due/recovery.rs`).
    fn note_leases(&self, tasks: &[ClaimedTask]) {
        let Some(at) = tasks.iter().map(|t| t.lease_expires_at_ms).min() else {
            return;
        };
        let mut conn = self.client.conn();
        let name = self.name().to_owned();
        tokio::spawn(async move {
            if let Err(e) = queues::recovery_note(&mut conn, &name, at).await {
                tracing::warn!(queue = name, error = %e, "could not note leases for recovery");
            }
        });
    }

    /// Acknowledges (completes) a claimed task.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn ack(&self, id: &TaskId, token: &LeaseToken) -> Result<AckOutcome> {
        let v = self.ack_batch(&[(id.clone(), token.clone())]).await?;
        v.into_iter()
            .next()
            .ok_or_else(|| Error::protocol("ack: empty reply"))
    }

    /// Acknowledges many claimed tasks; one outcome per task, in order.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails (on a queue of several partitions, the tasks of
    /// the partitions that answered are acknowledged: [`Queue::ack_each`] tells which).
    pub async fn ack_batch(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<AckOutcome>> {
        self.ack_each(items).await.into_iter().collect()
    }

    /// Acknowledges many claimed tasks; one answer per task, in order. On a queue of several
    /// partitions each partition is one call of its own, and a partition that failed (its
    /// node unreachable, a durable write not confirmed) fails its own tasks only.
    pub async fn ack_each(&self, items: &[(TaskId, LeaseToken)]) -> Vec<Result<AckOutcome>> {
        let ack =
            |q: Queue, mine: Vec<(TaskId, LeaseToken)>| async move { q.ack_here(&mine).await };
        self.by_id_each(items, |i| i.0.as_str(), ack).await
    }

    /// Acknowledges tasks of this handle's partition, a script call per 1 000.
    async fn ack_here(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<AckOutcome>> {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::ack(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }

    /// Fails the current attempt: the task is due again after `retry_in_ms` (or the queue's
    /// backoff when `None`), or goes to the dead-letter queue when `permanent` or out of
    /// attempts. `error` is kept as `last_error` (cut to 4 KiB).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn nack(
        &self,
        id: &TaskId,
        token: &LeaseToken,
        error: &str,
        retry_in_ms: Option<u64>,
        permanent: bool,
    ) -> Result<NackOutcome> {
        let item = NackItem {
            id,
            token,
            retry_in_ms,
            permanent,
            error: cut_error(error),
        };
        let v = self.nack_items(&[item]).await?;
        v.into_iter()
            .next()
            .ok_or_else(|| Error::protocol("nack: empty reply"))
    }

    /// Fails the current attempt of many claimed tasks, one script call per 1 000; one
    /// outcome per task, in order (a stale token refuses only its own task). Each item is
    /// `(id, lease_token, error, retry_in_ms, permanent)` with the meaning of [`Queue::nack`]:
    /// `error` is kept as `last_error` (cut to 4 KiB), `retry_in_ms` `None` uses the queue's
    /// backoff, `permanent` sends the task straight to the dead-letter queue.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn nack_batch(
        &self,
        items: &[(&TaskId, &LeaseToken, &str, Option<u64>, bool)],
    ) -> Result<Vec<NackOutcome>> {
        self.nack_each(items).await.into_iter().collect()
    }

    /// [`Queue::nack_batch`] with one answer per task: on a queue of several partitions a
    /// partition that failed fails its own tasks only (as [`Queue::ack_each`]).
    pub async fn nack_each(
        &self,
        items: &[(&TaskId, &LeaseToken, &str, Option<u64>, bool)],
    ) -> Vec<Result<NackOutcome>> {
        let batch: Vec<NackItem<'_>> = items
            .iter()
            .map(|&(id, token, error, retry_in_ms, permanent)| NackItem {
                id,
                token,
                retry_in_ms,
                permanent,
                error: cut_error(error),
            })
            .collect();
        self.nack_items_each(&batch).await
    }

    pub(crate) async fn nack_items(&self, items: &[NackItem<'_>]) -> Result<Vec<NackOutcome>> {
        self.nack_items_each(items).await.into_iter().collect()
    }

    /// Fails attempts, one answer per item (a failed partition fails its own items only).
    pub(crate) async fn nack_items_each(&self, items: &[NackItem<'_>]) -> Vec<Result<NackOutcome>> {
        self.by_id_each(
            items,
            |i| i.id.as_str(),
            |q, mine| async move { q.nack_here(&mine).await },
        )
        .await
    }

    /// Fails attempts of tasks of this handle's partition, a script call per 1 000.
    async fn nack_here(&self, items: &[NackItem<'_>]) -> Result<Vec<NackOutcome>> {
        let backoff = self.backoff_table().await;
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::nack(&mut conn, &self.keys, chunk, &backoff).await?);
        }
        Ok(out)
    }

    /// Extends a lease to `lease_ms` from now; returns the new deadline (epoch ms), or `None`
    /// when the lease was lost.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad lease, [`ErrorKind::Redis`].
    pub async fn extend(
        &self,
        id: &TaskId,
        token: &LeaseToken,
        lease_ms: u64,
    ) -> Result<Option<u64>> {
        validate_lease_ms(lease_ms)?;
        let v = self.extend_items(&[(id, token, lease_ms)]).await?;
        Ok(v.into_iter().next().flatten())
    }

    pub(crate) async fn extend_items(
        &self,
        items: &[(&TaskId, &LeaseToken, u64)],
    ) -> Result<Vec<Option<u64>>> {
        self.extend_each(items).await.into_iter().collect()
    }

    /// Extends leases, one answer per item: a failed partition fails its own items only, so
    /// the leases of the other partitions are kept.
    pub(crate) async fn extend_each(
        &self,
        items: &[(&TaskId, &LeaseToken, u64)],
    ) -> Vec<Result<Option<u64>>> {
        self.by_id_each(
            items,
            |i| i.0.as_str(),
            |q, mine| async move { q.extend_here(&mine).await },
        )
        .await
    }

    /// Extends leases of tasks of this handle's partition, a script call per 1 000.
    async fn extend_here(&self, items: &[(&TaskId, &LeaseToken, u64)]) -> Result<Vec<Option<u64>>> {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::extend(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }

    /// Hands leases back unfinished: each task is due again at once (its old due time) and
    /// the attempt is not counted. `true` per task released.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn release(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<bool>> {
        let release =
            |q: Queue, mine: Vec<(TaskId, LeaseToken)>| async move { q.release(&mine).await };
        if let Some(out) = self.by_id(items, |i| i.0.as_str(), release).await? {
            return Ok(out);
        }
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::release(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }

    /// Returns tasks whose lease expired to scheduled (or dead), at most 1 000 per call.
    /// Workers call this by themselves; it is public for servers and tools.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn recover(&self) -> Result<RecoverReport> {
        if let Some(layout) = self.split_layout().await? {
            let parts = self
                .each_part(&layout, |q| async move { q.recover().await })
                .await?;
            let mut all = RecoverReport {
                swept: true,
                ..RecoverReport::default()
            };
            for r in parts {
                all.recovered += r.recovered;
                all.dead += r.dead;
                all.expired += r.expired;
                all.expired_more |= r.expired_more;
                all.swept &= r.swept;
                all.now_ms = all.now_ms.max(r.now_ms);
                all.next_lease_deadline_ms =
                    earliest(all.next_lease_deadline_ms, r.next_lease_deadline_ms);
                all.next_expiry_at_ms = earliest(all.next_expiry_at_ms, r.next_expiry_at_ms);
            }
            return Ok(all);
        }
        let r = leases::recover(
            &mut self.client.conn(),
            &self.keys,
            MAX_BATCH,
            &self.backoff_table().await,
        )
        .await?;
        Ok(RecoverReport {
            recovered: r.recovered,
            dead: r.dead,
            next_lease_deadline_ms: r.next_deadline_ms,
            now_ms: r.now_ms,
            swept: r.swept,
            expired: r.expired,
            expired_more: r.expired_more,
            next_expiry_at_ms: r.next_expiry_ms,
        })
    }

    /// The component that waits until this queue's work is due and claims it: the one claim
    /// path of workers, the HTTP long-poll and push delivery.
    pub fn due_claimer(&self) -> DueClaimer {
        DueClaimer::new(self.clone())
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The partitions, when this is a handle on a queue of several (else `None`: work on
    /// this handle's keys).
    pub(crate) async fn split_layout(&self) -> Result<Option<Arc<super::Layout>>> {
        if self.part {
            return Ok(None);
        }
        let layout = self.layout().await?;
        Ok((layout.n() > 1).then_some(layout))
    }
}

fn merge_into(all: &mut Option<Claim>, c: Claim) {
    match all {
        None => *all = Some(c),
        Some(a) => a.merge(c),
    }
}

impl Claim {
    /// Adds the answer of another partition's claim.
    fn merge(&mut self, o: Claim) {
        let min = earliest;
        self.tasks.extend(o.tasks);
        self.now_ms = self.now_ms.max(o.now_ms);
        self.next_due_at_ms = min(self.next_due_at_ms, o.next_due_at_ms);
        self.next_lease_deadline_ms = min(self.next_lease_deadline_ms, o.next_lease_deadline_ms);
        self.paused &= o.paused;
        self.orphans |= o.orphans;
        self.throttle = self.throttle.or(o.throttle);
        self.waits_for_slot |= o.waits_for_slot;
        self.missed_ticks.extend(o.missed_ticks);
    }
}

/// A partition kept refusing an enqueue: the count changed again and again while this
/// client read the layout. Nothing of the refused share was written; the other partitions'
/// shares of the batch may have been.
fn layout_changed(q: &Queue) -> Error {
    Error::new(
        ErrorKind::Redis,
        format!(
            "queue {}: partition {} refused its share of the enqueue, the queue's partition \
             count kept changing; that share was not written (other partitions' shares may \
             have been: keyless tasks sent again are created again)",
            q.name(),
            q.keys().partition
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::cut_error;

    #[test]
    fn errors_are_cut_on_char_boundaries() {
        let long = "é".repeat(5000);
        let cut = cut_error(&long);
        assert!(cut.len() <= super::MAX_ERROR_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(cut_error("short"), "short");
    }
}
