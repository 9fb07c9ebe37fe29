//! Partitions (DESIGN 3): one queue split into N full queue layouts, each under its own hash
//! tag, so a large queue spreads over the masters of a Redis Cluster.
//!
//! A [`Queue`] handle is the whole queue. Each operation finds the partition it concerns
//! here and runs on a partition handle (a `Queue` bound to one partition's keys, which never
//! routes again): by business key ([`partition_of_key`]), by task id (an id carries its
//! partition, [`partition_of_id`]), keyless tasks in turn; batches are split by partition and
//! the parts sent at once ([`Queue::scatter`]); queue-wide reads ask every partition and add
//! up ([`merge_stats`]). The number of partitions is the `partitions` setting in partition
//! 0's `meta` (and in each partition's); each client caches it per queue ([`Layout`]) and
//! reads it again after [`LAYOUT_TTL`], at once when a claim of partition 0 shows a new
//! settings version, or when a partition above 0 refuses an enqueue routed by another count
//! (`enqueue.lua`; [`Queue::enqueue_batch`] then routes the refused tasks again).
//! A queue of one partition takes the plain path: one call on the keys under `{name}`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::keys::{QueueKeys, partition_of_id, partition_of_key};
use crate::protocol::queues;
use crate::stats::{MinuteStats, QueueStats};
use crate::task::TaskRef;

/// How long a client trusts the partition count it read when no claim has shown a settings
/// change: the longest its lookups by key or id (and its enqueues into partition 0, which
/// are not checked) go on with an old count.
pub const LAYOUT_TTL: Duration = Duration::from_secs(5);

/// Longest wait for partition 0 to answer a read of the count when one read before can
/// serve instead (see [`Queue::layout`]).
const STALE_READ_WAIT: Duration = Duration::from_millis(200);

/// The partitions of one queue as a client last read them.
#[derive(Debug)]
pub(crate) struct Layout {
    /// The keys of each partition (index = partition).
    pub(crate) keys: Vec<Arc<QueueKeys>>,
    /// Settings version of partition 0 when the count was read.
    pub(crate) version: u64,
    pub(crate) read_at: Instant,
    /// Turn of the next keyless task.
    next: AtomicUsize,
}

impl Layout {
    pub(crate) fn new(keys: Vec<Arc<QueueKeys>>, version: u64) -> Self {
        Self {
            keys,
            version,
            read_at: Instant::now(),
            next: AtomicUsize::new(rand::random::<u32>() as usize),
        }
    }

    /// Number of partitions.
    pub(crate) fn n(&self) -> usize {
        self.keys.len()
    }

    fn n16(&self) -> u16 {
        // at most MAX_PARTITIONS (1 024) keys are ever built
        u16::try_from(self.keys.len()).unwrap_or(u16::MAX)
    }

    pub(crate) fn of_key(&self, key: &str) -> usize {
        usize::from(partition_of_key(key, self.n16()))
    }

    pub(crate) fn of_id(&self, id: &str) -> usize {
        usize::from(partition_of_id(id, self.n16()))
    }

    pub(crate) fn of_ref(&self, target: &TaskRef) -> usize {
        match target {
            TaskRef::Id(id) => self.of_id(id.as_str()),
            TaskRef::Key(k) => self.of_key(k),
        }
    }

    /// The partition of the next keyless task (in turn, from a random start per client).
    pub(crate) fn next_keyless(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.keys.len().max(1)
    }
}

impl Queue {
    /// The partitions of this queue, read again when older than [`LAYOUT_TTL`] or when a
    /// claim showed a newer settings version.
    pub(crate) async fn layout(&self) -> Result<Arc<Layout>> {
        self.layout_within(Some(LAYOUT_TTL)).await
    }

    /// The partitions as Redis holds them now (read again whatever the cache says): for
    /// operations that must reach every partition of the current count (pause, resume).
    pub(crate) async fn layout_now(&self) -> Result<Arc<Layout>> {
        self.layout_within(Some(Duration::ZERO)).await
    }

    /// As [`Queue::layout`] without the age limit: for the claim path, which learns of a
    /// change from the settings version its claims of partition 0 return (so an idle worker
    /// makes no extra call to keep the count fresh).
    pub(crate) async fn claim_layout(&self) -> Result<Arc<Layout>> {
        self.layout_within(None).await
    }

    async fn layout_within(&self, ttl: Option<Duration>) -> Result<Arc<Layout>> {
        let client = self.client();
        if let Some(l) = client.cached_layout(self.name(), &self.keys().meta)
            && ttl.is_none_or(|t| l.read_at.elapsed() < t)
        {
            return Ok(l);
        }
        // with a count read before (and no need for the count of now, as `layout_now` has),
        // partition 0's node may be away: the count changes only while the queue is empty,
        // so the count read last still routes the other partitions' work. It is asked for
        // STALE_READ_WAIT at most, and kept for another TTL when it does not answer, so a
        // dead partition 0 holds the other partitions' calls up that long every TTL.
        let old = client
            .cached_layout_any(self.name())
            .filter(|_| ttl != Some(Duration::ZERO));
        let mut conn = client.conn();
        let read = queues::partitions(&mut conn, self.keys());
        let (n, version) = match old {
            None => read.await?,
            Some(old) => match tokio::time::timeout(STALE_READ_WAIT, read).await {
                Ok(Ok(read)) => read,
                _ => {
                    let kept = Arc::new(Layout::new(old.keys.clone(), old.version));
                    client.store_layout(self.name(), kept.clone());
                    return Ok(kept);
                }
            },
        };
        let layout = Arc::new(match client.cached_layout_any(self.name()) {
            // same count: the tags are computed already
            Some(old) if old.n() == usize::from(n) => Layout::new(old.keys.clone(), version),
            _ => {
                let mut keys = Vec::with_capacity(usize::from(n));
                keys.push(Arc::new(self.keys().clone()));
                for p in 1..n {
                    keys.push(Arc::new(QueueKeys::partition(self.name(), p, n)?));
                }
                Layout::new(keys, version)
            }
        });
        client.store_layout(self.name(), layout.clone());
        Ok(layout)
    }

    /// A handle on partition `p` of `layout`: its operations act on that partition alone.
    pub(crate) fn part(&self, layout: &Layout, p: usize) -> Queue {
        self.on_keys(layout.keys[p].clone())
    }

    /// Every partition's handle.
    pub(crate) fn parts(&self, layout: &Layout) -> Vec<Queue> {
        (0..layout.n()).map(|p| self.part(layout, p)).collect()
    }

    /// The handle that holds `target`: this one when the queue has one partition.
    pub(crate) async fn route(&self, target: &TaskRef) -> Result<Queue> {
        if self.is_part() {
            return Ok(self.clone());
        }
        let layout = self.layout().await?;
        Ok(if layout.n() == 1 {
            self.clone()
        } else {
            self.part(&layout, layout.of_ref(target))
        })
    }

    /// Runs `run` on the items of each partition (as `part_of` says), the partitions at
    /// once, and returns one answer per item in the order of `items`: a partition that failed
    /// fails its own items only (each gets its error), so one failing node stays one
    /// partition's problem.
    pub(crate) async fn scatter_each<T, R, Fut>(
        &self,
        layout: &Layout,
        items: &[T],
        part_of: impl Fn(&T) -> usize,
        run: impl Fn(Queue, Vec<T>) -> Fut,
    ) -> Vec<Result<R>>
    where
        T: Clone,
        Fut: Future<Output = Vec<Result<R>>>,
    {
        let mut by_part: Vec<Vec<usize>> = vec![Vec::new(); layout.n()];
        for (i, t) in items.iter().enumerate() {
            by_part[part_of(t)].push(i);
        }
        let calls: Vec<_> = by_part
            .iter()
            .enumerate()
            .filter(|(_, ix)| !ix.is_empty())
            .map(|(p, ix)| {
                let q = self.part(layout, p);
                let mine: Vec<T> = ix.iter().map(|&i| items[i].clone()).collect();
                let fut = run(q, mine);
                async move { (p, fut.await) }
            })
            .collect();
        let mut out: Vec<Option<Result<R>>> = (0..items.len()).map(|_| None).collect();
        for (p, got) in join_all(calls).await {
            let mut got = got.into_iter();
            for &i in &by_part[p] {
                out[i] = Some(
                    got.next()
                        .unwrap_or_else(|| Err(Error::protocol("partition reply too short"))),
                );
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::protocol("partition reply missing"))))
            .collect()
    }

    /// [`scatter_each`](Self::scatter_each) for a `run` that answers a partition's items
    /// together: one answer per item, a failed partition's error on each of its items.
    pub(crate) async fn scatter_calls<T, R, Fut>(
        &self,
        layout: &Layout,
        items: &[T],
        part_of: impl Fn(&T) -> usize,
        run: impl Fn(Queue, Vec<T>) -> Fut,
    ) -> Vec<Result<R>>
    where
        T: Clone,
        Fut: Future<Output = Result<Vec<R>>>,
    {
        self.scatter_each(layout, items, part_of, |q, mine| {
            let n = mine.len();
            let fut = run(q, mine);
            async move { each(n, fut.await) }
        })
        .await
    }

    /// Runs `run` on the items of each partition, the partitions at once; the results in the
    /// order of `items`. One partition's failure fails the call (the other partitions' items
    /// may have been applied, as with a batch of several calls).
    pub(crate) async fn scatter<T, R, Fut>(
        &self,
        layout: &Layout,
        items: &[T],
        part_of: impl Fn(&T) -> usize,
        run: impl Fn(Queue, Vec<T>) -> Fut,
    ) -> Result<Vec<R>>
    where
        T: Clone,
        Fut: Future<Output = Result<Vec<R>>>,
    {
        self.scatter_calls(layout, items, part_of, run)
            .await
            .into_iter()
            .collect()
    }

    /// On a queue of several partitions: `run` on each partition's share of `items` (by the
    /// task id `id_of` gives), the partitions at once, results in the order of `items`.
    /// `None` on a handle of one partition: the caller works on its own keys.
    pub(crate) async fn by_id<T, R, Fut>(
        &self,
        items: &[T],
        id_of: impl Fn(&T) -> &str,
        run: impl Fn(Queue, Vec<T>) -> Fut,
    ) -> Result<Option<Vec<R>>>
    where
        T: Clone,
        Fut: Future<Output = Result<Vec<R>>>,
    {
        let Some(layout) = self.split_layout().await? else {
            return Ok(None);
        };
        let part_of = |t: &T| layout.of_id(id_of(t));
        self.scatter(&layout, items, part_of, run).await.map(Some)
    }

    /// [`by_id`](Self::by_id) with one answer per item: a failed partition fails its own
    /// items only. On a handle of one partition, `run` on all of them.
    pub(crate) async fn by_id_each<T, R, Fut>(
        &self,
        items: &[T],
        id_of: impl Fn(&T) -> &str,
        run: impl Fn(Queue, Vec<T>) -> Fut,
    ) -> Vec<Result<R>>
    where
        T: Clone,
        Fut: Future<Output = Result<Vec<R>>>,
    {
        match self.split_layout().await {
            Ok(Some(layout)) => {
                let part_of = |t: &T| layout.of_id(id_of(t));
                self.scatter_calls(&layout, items, part_of, run).await
            }
            Ok(None) => each(items.len(), run(self.clone(), items.to_vec()).await),
            Err(e) => each(items.len(), Err(e)),
        }
    }

    /// Runs `run` on every partition at once; the results in partition order.
    pub(crate) async fn each_part<R, Fut>(
        &self,
        layout: &Layout,
        run: impl Fn(Queue) -> Fut,
    ) -> Result<Vec<R>>
    where
        Fut: Future<Output = Result<R>>,
    {
        join_all(self.parts(layout).into_iter().map(run))
            .await
            .into_iter()
            .collect()
    }

    /// Counts and timings of each partition, in partition order (one entry for a queue of
    /// one partition); [`Queue::stats`] is their sum.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn partition_stats(&self) -> Result<Vec<QueueStats>> {
        let layout = self.layout().await?;
        self.each_part(&layout, |q| async move {
            queues::stats(&mut q.client().conn(), q.keys()).await
        })
        .await
    }
}

/// One queue's stats from its partitions': counts and totals add up, the earliest next due
/// time wins, limits add up (each partition holds its share), a throttle or alert anywhere
/// shows.
pub(crate) fn merge_stats(parts: Vec<QueueStats>) -> Option<QueueStats> {
    let mut it = parts.into_iter();
    let mut s = it.next()?;
    for p in it {
        s.now_ms = s.now_ms.max(p.now_ms);
        s.scheduled += p.scheduled;
        s.due += p.due;
        s.active += p.active;
        s.dead += p.dead;
        s.succeeded_kept += p.succeeded_kept;
        s.succeeded_total += p.succeeded_total;
        s.failed_total += p.failed_total;
        s.enqueued_total += p.enqueued_total;
        s.retried_total += p.retried_total;
        s.dead_total += p.dead_total;
        s.cancelled_total += p.cancelled_total;
        s.expired_total += p.expired_total;
        s.lease_expired_total += p.lease_expired_total;
        s.claimed_total += p.claimed_total;
        s.lateness.merge(&p.lateness);
        s.run_time.merge(&p.run_time);
        s.next_due_at_ms = match (s.next_due_at_ms, p.next_due_at_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        s.oldest_due_age_ms = s.oldest_due_age_ms.max(p.oldest_due_age_ms);
        s.paused |= p.paused;
        s.groups_waiting += p.groups_waiting;
        s.throttled = s.throttled.or(p.throttled);
        s.throttled_ms.rate += p.throttled_ms.rate;
        s.throttled_ms.concurrency += p.throttled_ms.concurrency;
        s.throttled_ms.group_rate += p.throttled_ms.group_rate;
        s.throttled_ms.group_concurrency += p.throttled_ms.group_concurrency;
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        s.concurrency_limit = add(s.concurrency_limit, p.concurrency_limit);
        s.group_concurrency_limit = add(s.group_concurrency_limit, p.group_concurrency_limit);
        s.rate_limit = match (s.rate_limit, p.rate_limit) {
            (Some(a), Some(b)) => Some(crate::settings::RateLimit::new(a.max + b.max, a.per_ms)),
            (a, b) => a.or(b),
        };
        s.behind |= p.behind;
    }
    Some(s)
}

/// Per-minute activity of the partitions added up, minute by minute.
pub(crate) fn merge_history(parts: Vec<Vec<MinuteStats>>) -> Vec<MinuteStats> {
    let mut it = parts.into_iter();
    let mut out = it.next().unwrap_or_default();
    for p in it {
        for m in p {
            if let Some(o) = out
                .iter_mut()
                .find(|o| o.minute_start_ms == m.minute_start_ms)
            {
                o.claimed += m.claimed;
                o.succeeded += m.succeeded;
                o.retried += m.retried;
                o.dead += m.dead;
                o.lateness_sum_ms += m.lateness_sum_ms;
                o.lateness_max_ms = o.lateness_max_ms.max(m.lateness_max_ms);
            }
        }
    }
    out
}

/// `n` answers from one call's: its answers, or its error on each item (an answer of the
/// wrong length is a broken invariant on each item).
pub(crate) fn each<R>(n: usize, got: Result<Vec<R>>) -> Vec<Result<R>> {
    match got {
        Ok(v) if v.len() == n => v.into_iter().map(Ok).collect(),
        Ok(_) => (0..n)
            .map(|_| Err(Error::protocol("partition reply has the wrong length")))
            .collect(),
        Err(e) => (0..n).map(|_| Err(e.again())).collect(),
    }
}

/// `max` shared evenly among the partitions that want work (`wants`), the odd ones going to
/// the wanting partitions from `turn` on.
pub(crate) fn split(max: usize, wants: &[bool], turn: usize) -> Vec<usize> {
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
