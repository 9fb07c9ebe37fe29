//! Counts and timings of a queue ([`QueueStats`], [`Timings`]) and its per-minute history
//! ([`MinuteStats`]), as the scripts count them in Redis.

use crate::settings::RateLimit;

/// Counts and timings of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueStats {
    /// Queue name.
    pub queue: String,
    /// Redis time of the reading, epoch ms.
    pub now_ms: u64,
    /// Tasks waiting (including due ones and those waiting for a retry).
    pub scheduled: u64,
    /// Of those, how many are due now (overdue).
    pub due: u64,
    /// Tasks held by workers.
    pub active: u64,
    /// Tasks in the dead-letter queue.
    pub dead: u64,
    /// Succeeded tasks kept by retention.
    pub succeeded_kept: u64,
    /// Tasks acknowledged, ever.
    pub succeeded_total: u64,
    /// Attempts that failed (nack or expired lease), ever.
    pub failed_total: u64,
    /// Tasks enqueued (created), ever.
    pub enqueued_total: u64,
    /// Failed attempts that were rescheduled, ever.
    pub retried_total: u64,
    /// Tasks that went to the dead-letter queue, ever.
    pub dead_total: u64,
    /// Tasks cancelled, ever.
    pub cancelled_total: u64,
    /// Tasks that expired before they started, ever (dropped or dead-lettered by
    /// `on_expire`; not counted in `dead_total`).
    pub expired_total: u64,
    /// Leases that expired, ever.
    pub lease_expired_total: u64,
    /// Tasks handed out (claims and push deliveries), ever.
    pub claimed_total: u64,
    /// Lateness of every task handed out: claim time minus due time, Redis clock.
    pub lateness: Timings,
    /// Run time of every attempt that ended by an ack or a nack: that time minus its claim
    /// time, Redis clock (a lease that expired has none).
    pub run_time: Timings,
    /// Earliest due time of a scheduled task.
    pub next_due_at_ms: Option<u64>,
    /// How long the earliest due task has been waiting, 0 when none is overdue.
    pub oldest_due_age_ms: u64,
    /// Whether claims are paused.
    pub paused: bool,
    /// Groups with scheduled tasks (ready to be served, or waiting at their concurrency limit).
    pub groups_waiting: u64,
    /// The queue limit holding due work back right now (`"rate"` or `"concurrency"`), if any.
    pub throttled: Option<&'static str>,
    /// Time due work waited on each limit, ever (ms, summed over every process).
    pub throttled_ms: ThrottledMs,
    /// The queue's concurrency limit (compare with `active`), if set.
    pub concurrency_limit: Option<u64>,
    /// The per-group concurrency limit, if set.
    pub group_concurrency_limit: Option<u64>,
    /// The queue's rate limit, if set.
    pub rate_limit: Option<RateLimit>,
    /// Whether the queue is over an alert threshold (`alert_due_age_ms`, `alert_due_count`).
    pub behind: bool,
}

/// Upper bounds of the [`QueueStats::lateness`] buckets, ms: 0.5 ms to 1 day (a backlog
/// hours late lands in a bucket of its own, not in the last).
pub const LATENESS_BOUNDS_MS: &[f64] = &[
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    900_000.0,
    3_600_000.0,
    14_400_000.0,
    86_400_000.0,
];

/// Upper bounds of the [`QueueStats::run_time`] buckets, ms: 1 ms to 1 h.
pub const RUN_TIME_BOUNDS_MS: &[f64] = &[
    1.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    30_000.0,
    60_000.0,
    300_000.0,
    900_000.0,
    3_600_000.0,
];

/// A histogram counted in Redis by the scripts that hand work out and finish it, so it holds
/// the work of every worker in every language.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timings {
    /// Values per bucket, not cumulative: `counts[i]` are at most bound `i` (of
    /// [`LATENESS_BOUNDS_MS`] or [`RUN_TIME_BOUNDS_MS`]) and above bound `i - 1`; the last
    /// entry counts the values above every bound. One entry more than there are bounds.
    pub counts: Vec<u64>,
    /// Sum of the values, ms.
    pub sum_ms: u64,
}

impl Timings {
    /// Empty, for `bounds`.
    pub(crate) fn new(bounds: &[f64]) -> Self {
        Self {
            counts: vec![0; bounds.len() + 1],
            sum_ms: 0,
        }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds bucket `i` (1-based, as the scripts number them) `n` times; an index out of
    /// range counts in the last bucket.
    pub(crate) fn add_bucket(&mut self, i: usize, n: u64) {
        let last = self.counts.len().saturating_sub(1);
        if let Some(c) = self.counts.get_mut(i.saturating_sub(1).min(last)) {
            *c += n;
        }
    }

    /// Adds `other` (of the same bounds) into this one.
    pub(crate) fn merge(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_ms += other.sum_ms;
    }
}

/// Time due work waited on each kind of limit, ms (`dueq_queue_throttled_seconds_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottledMs {
    /// The queue's rate limit.
    pub rate: u64,
    /// The queue's concurrency limit.
    pub concurrency: u64,
    /// Group rate limits (summed over groups: the time each group was held).
    pub group_rate: u64,
    /// Group concurrency limits (summed over groups).
    pub group_concurrency: u64,
}

/// One minute of a queue's activity, as counted by the scripts by the Redis clock (see
/// [`Queue::history`](crate::Queue::history)). Counts cover every client and worker of the
/// queue, not just this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MinuteStats {
    /// Start of the minute, epoch ms (a multiple of 60 000).
    pub minute_start_ms: u64,
    /// Tasks handed out by claims (re-deliveries of a lost claim reply are not counted again).
    pub claimed: u64,
    /// Tasks acknowledged.
    pub succeeded: u64,
    /// Failed attempts rescheduled for a retry (nack or expired lease).
    pub retried: u64,
    /// Tasks moved to the dead-letter queue.
    pub dead: u64,
    /// Sum over the claimed tasks of claim time minus due time, ms; the mean lateness is
    /// `lateness_sum_ms / claimed`.
    pub lateness_sum_ms: u64,
    /// Largest claim time minus due time of the minute, ms.
    pub lateness_max_ms: u64,
}

impl MinuteStats {
    /// Mean lateness of the minute's claims in ms, `None` when nothing was claimed.
    pub fn lateness_mean_ms(&self) -> Option<f64> {
        (self.claimed > 0).then(|| self.lateness_sum_ms as f64 / self.claimed as f64)
    }
}
