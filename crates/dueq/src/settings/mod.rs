//! Queue settings: stored in Redis beside the queue (the `meta` hash), read by every producer,
//! worker and server, so one change applies everywhere at the next claim, without restarts.
//!
//! [`QueueSettings`] is what is stored (every field optional: absent means the built-in
//! default); [`SettingsPatch`] is a change (fields left out stay, `null` clears). Both are
//! the JSON bodies of `GET` / `PATCH /v1/queues/{queue}/settings`, so the HTTP API and the
//! library share one definition and one validation.
//!
//! Where each setting applies:
//! * `max_attempts`, `lease_ms`: to every task enqueued without its own value, read when the
//!   value is used (a claim takes the queue's `lease_ms`, a failure compares with its
//!   `max_attempts`), so a change applies to tasks already waiting too;
//! * `backoff`: to the next failed attempt (nack without a delay, expired lease), replacing
//!   the backoff a worker was built with;
//! * `dead_max`, `succeeded_max`: retention caps, at the next death or ack;
//! * `rate_limit`, `concurrency`, `group_rate_limit`, `group_concurrency`: inside the claim
//!   script (DESIGN 2.12), for every process at once;
//! * `alert_due_age_ms`, `alert_due_count`: when [`QueueStats::behind`](crate::QueueStats) is
//!   set;
//! * `on_expire`: when a task's expiry passes before it started (claim or recovery);
//! * `unique_for_ms`: to every keyed task enqueued (or fired by a schedule) without its own
//!   window, read at the enqueue.
//!
//! Files: `limits.rs` (rate limits and backoff, with their checks), `patch.rs` (a change and
//! its validation), `stored.rs` (the `meta` hash fields).

mod limits;
mod patch;
mod stored;

pub use limits::{
    BackoffSettings, MAX_BACKOFF_MS, MAX_LIMIT, MAX_PARTITIONS, MAX_RATE_WINDOW_MS, RateLimit,
};
pub use patch::SettingsPatch;
pub(crate) use stored::STORED_FIELDS;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Largest retention cap (`dead_max`, `succeeded_max`).
pub const MAX_RETENTION: u64 = 100_000_000;

/// A queue's stored settings; `None` is the built-in default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueSettings {
    /// Attempts for tasks enqueued without their own. Default 5.
    pub max_attempts: Option<u32>,
    /// Lease for tasks enqueued without their own, ms. Default 30 000.
    pub lease_ms: Option<u64>,
    /// Retry delays. Default: the worker's ([`Backoff::default`](crate::Backoff::default): 1 s doubling to 1 h).
    pub backoff: Option<BackoffSettings>,
    /// Dead-letter cap: the newest this many dead tasks are kept. Default 10 000.
    pub dead_max: Option<u64>,
    /// Succeeded tasks kept for lookup. Default 0 (an ack leaves nothing behind).
    pub succeeded_max: Option<u64>,
    /// Tasks handed out per window, over the whole queue. Default none.
    pub rate_limit: Option<RateLimit>,
    /// Tasks handed out per window, for each group on its own. Default none.
    pub group_rate_limit: Option<RateLimit>,
    /// Most tasks active at once over the whole queue. Default none.
    pub concurrency: Option<u32>,
    /// Most tasks of one group active at once. Default none.
    pub group_concurrency: Option<u32>,
    /// The queue is behind when its oldest due task has waited this long, ms. Default none.
    pub alert_due_age_ms: Option<u64>,
    /// The queue is behind when this many tasks are due. Default none.
    pub alert_due_count: Option<u64>,
    /// What happens to a task whose expiry passed before it started. Default
    /// [`OnExpire::Drop`].
    pub on_expire: Option<OnExpire>,
    /// Partitions the queue is split into, each under its own hash tag, 1 to
    /// [`MAX_PARTITIONS`](crate::MAX_PARTITIONS). Default 1. Changed only while the queue
    /// holds no task; every limit is then split over the partitions (see
    /// docs/SCALING.md).
    pub partitions: Option<u16>,
    /// Unique window of keyed tasks enqueued without their own, ms
    /// ([`TaskOptions::unique_for_ms`](crate::TaskOptions::unique_for_ms)). Default none.
    pub unique_for_ms: Option<u64>,
}

/// What happens to a task not started before its expiry (`expires_at_ms` / `ttl_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnExpire {
    /// Dropped with its record; its key is free again. The default.
    #[default]
    Drop,
    /// Kept in the dead-letter queue with the error `expired` (its key is free again).
    Dead,
}

impl OnExpire {
    /// The name used in JSON and in the `meta` hash.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Dead => "dead",
        }
    }
}

impl QueueSettings {
    /// These settings with `patch` applied.
    pub fn patched(mut self, patch: &SettingsPatch) -> Self {
        macro_rules! apply {
            ($($f:ident),*) => { $( if let Some(v) = patch.$f { self.$f = v; } )* };
        }
        apply!(
            max_attempts,
            lease_ms,
            backoff,
            dead_max,
            succeeded_max,
            rate_limit,
            group_rate_limit,
            concurrency,
            group_concurrency,
            alert_due_age_ms,
            alert_due_count,
            on_expire,
            partitions,
            unique_for_ms
        );
        self
    }

    /// The number of partitions (1 when not set).
    pub fn partition_count(&self) -> u16 {
        self.partitions.unwrap_or(1).max(1)
    }

    /// Checks that every limit can be split over `n` partitions: each partition enforces
    /// its share ([`limit_share`]), so a limit below `n` would leave a partition none.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the limit.
    pub(crate) fn check_split(&self, n: u16) -> Result<()> {
        if n <= 1 {
            return Ok(());
        }
        let limits = [
            ("concurrency", self.concurrency.map(u64::from)),
            ("group_concurrency", self.group_concurrency.map(u64::from)),
            ("rate_limit.max", self.rate_limit.map(|r| r.max)),
            ("group_rate_limit.max", self.group_rate_limit.map(|r| r.max)),
        ];
        for (name, v) in limits {
            if let Some(v) = v
                && v < u64::from(n)
            {
                return Err(Error::invalid(format!(
                    "{name} must be at least partitions ({n}): each partition enforces its \
                     share of the limit"
                )));
            }
        }
        Ok(())
    }

    /// The settings partition `p` of `n` stores: these, with every limit cut to the
    /// partition's share.
    pub(crate) fn share_for(&self, p: u16, n: u16) -> Self {
        let mut s = *self;
        let cut = |v: u64| limit_share(v, p, n);
        s.concurrency = s.concurrency.map(|v| cut(u64::from(v)) as u32);
        s.group_concurrency = s.group_concurrency.map(|v| cut(u64::from(v)) as u32);
        s.rate_limit = s.rate_limit.map(|r| RateLimit::new(cut(r.max), r.per_ms));
        s.group_rate_limit = s
            .group_rate_limit
            .map(|r| RateLimit::new(cut(r.max), r.per_ms));
        s
    }

    /// The whole patch that turns any stored settings into these: every field set or cleared.
    pub(crate) fn as_patch(&self) -> SettingsPatch {
        SettingsPatch {
            max_attempts: Some(self.max_attempts),
            lease_ms: Some(self.lease_ms),
            backoff: Some(self.backoff),
            dead_max: Some(self.dead_max),
            succeeded_max: Some(self.succeeded_max),
            rate_limit: Some(self.rate_limit),
            group_rate_limit: Some(self.group_rate_limit),
            concurrency: Some(self.concurrency),
            group_concurrency: Some(self.group_concurrency),
            alert_due_age_ms: Some(self.alert_due_age_ms),
            alert_due_count: Some(self.alert_due_count),
            on_expire: Some(self.on_expire),
            partitions: Some(self.partitions),
            unique_for_ms: Some(self.unique_for_ms),
        }
    }
}

/// Partition `p`'s share of a limit `total` split over `n` partitions: `total / n`, one more
/// for the first `total % n` partitions, so the shares add up to `total` exactly.
pub(crate) fn limit_share(total: u64, p: u16, n: u16) -> u64 {
    let n = u64::from(n.max(1));
    total / n + u64::from(u64::from(p) < total % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_split_exactly_over_partitions() {
        for total in [6u64, 7, 100, 1_000_000] {
            for n in [1u16, 2, 3, 6, 1024] {
                if total < u64::from(n) {
                    continue;
                }
                let shares: Vec<u64> = (0..n).map(|p| limit_share(total, p, n)).collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {n}");
                assert!(shares.iter().all(|&s| s >= 1));
                let (lo, hi) = (shares.iter().min(), shares.iter().max());
                assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{shares:?}");
            }
        }
        let s = QueueSettings {
            concurrency: Some(5),
            ..QueueSettings::default()
        };
        assert!(s.check_split(5).is_ok());
        let e = s.check_split(6).unwrap_err().to_string();
        assert!(
            e.contains("concurrency must be at least partitions (6)"),
            "{e}"
        );
        assert_eq!(s.share_for(4, 5).concurrency, Some(1));
        assert_eq!(s.share_for(0, 2).concurrency, Some(3));
    }
}
