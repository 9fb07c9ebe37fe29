//! The limits a queue setting holds: a rate limit and a retry backoff, each with its check.

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// Longest rate-limit window, ms (1 day).
pub const MAX_RATE_WINDOW_MS: u64 = 86_400_000;
/// Largest `max` of a rate limit and largest concurrency limit.
pub const MAX_LIMIT: u64 = 1_000_000;
/// Longest backoff delay, ms (30 days).
pub const MAX_BACKOFF_MS: u64 = 30 * 86_400_000;

/// At most `max` tasks handed out in any window of `per_ms` milliseconds (sliding, by the
/// Redis clock, counted over every process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimit {
    /// Tasks per window, 1 to 1 000 000.
    pub max: u64,
    /// Window length, 1 ms to 1 day.
    pub per_ms: u64,
}

impl RateLimit {
    /// `max` tasks per `per_ms` ms.
    pub fn new(max: u64, per_ms: u64) -> Self {
        Self { max, per_ms }
    }

    pub(super) fn validate(&self, field: &str) -> Result<()> {
        if self.max == 0 || self.max > MAX_LIMIT {
            return Err(Error::invalid(format!(
                "{field}.max must be 1 to {MAX_LIMIT}"
            )));
        }
        if self.per_ms == 0 || self.per_ms > MAX_RATE_WINDOW_MS {
            return Err(Error::invalid(format!(
                "{field}.per_ms must be 1 to {MAX_RATE_WINDOW_MS}"
            )));
        }
        Ok(())
    }
}

/// Retry delays of a queue: `min(max_ms, base_ms * factor^(attempt-1))`, with 20 % jitter
/// (see [`Backoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackoffSettings {
    /// Delay after the first failed attempt, 1 ms to 30 days.
    pub base_ms: u64,
    /// Growth per attempt, 1.0 to 100.0.
    pub factor: f64,
    /// Longest delay, `base_ms` to 30 days.
    pub max_ms: u64,
}

impl BackoffSettings {
    /// `base_ms`, growing by `factor`, capped at `max_ms`.
    pub fn new(base_ms: u64, factor: f64, max_ms: u64) -> Self {
        Self {
            base_ms,
            factor,
            max_ms,
        }
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.base_ms == 0 || self.base_ms > MAX_BACKOFF_MS {
            return Err(Error::invalid(format!(
                "backoff.base_ms must be 1 to {MAX_BACKOFF_MS}"
            )));
        }
        if !(1.0..=100.0).contains(&self.factor) {
            return Err(Error::invalid("backoff.factor must be 1.0 to 100.0"));
        }
        if self.max_ms < self.base_ms || self.max_ms > MAX_BACKOFF_MS {
            return Err(Error::invalid(format!(
                "backoff.max_ms must be base_ms ({}) to {MAX_BACKOFF_MS}",
                self.base_ms
            )));
        }
        Ok(())
    }

    /// The retry policy these settings describe.
    pub fn policy(&self) -> Backoff {
        Backoff::new(self.base_ms, self.factor, self.max_ms).jitter(0.2)
    }
}

/// Most partitions a queue can have (a partition's number is kept in its task ids above the
/// low 40 bits, see [`partition_of_id`](crate::partition_of_id); 1 024 << 40 stays below 2^53,
/// exact in a Lua number).
pub const MAX_PARTITIONS: u16 = 1024;
