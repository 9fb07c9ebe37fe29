//! What to enqueue: [`TaskSpec`]: the payload, its due time and expiry, its business key and
//! what a live key does, and the task's [`TaskOptions`].
//!
//! Times are integer milliseconds: `*_at_ms` are Unix epoch milliseconds by the Redis
//! server's clock, `*_ms` alone are durations.

use super::id::validate_key;
use super::options::TaskOptions;
use crate::error::{Error, ErrorKind, Result};

/// The latest due time dueq accepts: 9999-12-31T23:59:59.999Z, in epoch milliseconds.
pub const MAX_DUE_AT_MS: u64 = 253_402_300_799_999;

/// Longest delay accepted: 100 years. Longer delays could land past year 9999 only in the far
/// future, but refusing them up front keeps every batch check on the client, before any write.
pub const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// When a task becomes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Due {
    /// After this many milliseconds (at most [`MAX_DELAY_MS`]), counted by the Redis server's
    /// clock when the write lands (so a producer's skewed clock cannot move it).
    DelayMs(u64),
    /// At this Unix epoch millisecond (at most [`MAX_DUE_AT_MS`]).
    AtMs(u64),
}

impl Due {
    pub(crate) fn parts(self) -> Result<(&'static str, u64)> {
        match self {
            Self::DelayMs(d) if d > MAX_DELAY_MS => Err(Error::invalid(format!(
                "delay_ms must be at most {MAX_DELAY_MS} (100 years)"
            ))),
            Self::DelayMs(d) => Ok(("delay", d)),
            Self::AtMs(t) if t > MAX_DUE_AT_MS => {
                Err(Error::invalid("due_at_ms is past year 9999"))
            }
            Self::AtMs(t) => Ok(("at", t)),
        }
    }
}

/// What enqueueing a business key that is already live does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnConflict {
    /// Return the existing task unchanged (`created: false`). The default: re-submitting after
    /// a timeout never makes a duplicate.
    #[default]
    Keep,
    /// Atomically replace the existing task's payload, due time and settings, unless it is
    /// running (then the answer is [`EnqueueOutcome::InProgress`](crate::EnqueueOutcome::InProgress)).
    Replace,
    /// As [`OnConflict::Replace`], but the due time never moves past the existing task's first
    /// enqueue + [`TaskSpec::debounce_max_ms`], so a key changed every 300 ms with a 1 s delay
    /// and a 3 s cap still runs about every 3 s. Needs `debounce_max_ms` and a key.
    Debounce,
}

/// When a task that has not started by then is given up (`expires_at_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expiry {
    /// This many milliseconds after the write lands, by the Redis clock (at most
    /// [`MAX_DELAY_MS`]).
    TtlMs(u64),
    /// At this Unix epoch millisecond (at most [`MAX_DUE_AT_MS`]).
    AtMs(u64),
}

/// A task to enqueue. Build with [`TaskSpec::new`] and the setting methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSpec {
    pub(crate) payload: Vec<u8>,
    pub(crate) due: Due,
    pub(crate) key: Option<String>,
    pub(crate) on_conflict: OnConflict,
    pub(crate) expiry: Option<Expiry>,
    pub(crate) debounce_max_ms: Option<u64>,
    pub(crate) options: TaskOptions,
    /// Made from a schedule's template (a trigger, a backfill): its runs link to the trace
    /// context of the template, never continue it.
    pub(crate) from_schedule: bool,
}

impl TaskSpec {
    /// A task with this payload (opaque bytes), due now, no key, queue defaults.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Self {
            payload: payload.into(),
            due: Due::DelayMs(0),
            key: None,
            on_conflict: OnConflict::Keep,
            expiry: None,
            debounce_max_ms: None,
            options: TaskOptions::default(),
            from_schedule: false,
        }
    }

    crate::task_option_setters!(options);

    /// Gives the task up if it has not started this many milliseconds after the write lands
    /// (Redis clock): it ends as expired (dropped, or in the dead-letter queue with the error
    /// `expired` when the queue's `on_expire` is `dead`) and its key is free again. A started
    /// task is not interrupted, and a retry after a failed attempt no longer expires. Default
    /// none; replaces an earlier [`TaskSpec::expires_at_ms`].
    pub fn ttl_ms(mut self, ttl_ms: u64) -> Self {
        self.expiry = Some(Expiry::TtlMs(ttl_ms));
        self
    }

    /// As [`TaskSpec::ttl_ms`], at this Unix epoch millisecond (Redis clock).
    pub fn expires_at_ms(mut self, expires_at_ms: u64) -> Self {
        self.expiry = Some(Expiry::AtMs(expires_at_ms));
        self
    }

    /// The cap of [`OnConflict::Debounce`]: the due time never moves past the task's first
    /// enqueue + this many milliseconds (1 to [`MAX_DELAY_MS`]). Only with `Debounce`.
    pub fn debounce_max_ms(mut self, debounce_max_ms: u64) -> Self {
        self.debounce_max_ms = Some(debounce_max_ms);
        self
    }

    /// Due this many milliseconds after the write lands, by the Redis clock. Default 0.
    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.due = Due::DelayMs(delay_ms);
        self
    }

    /// Due at this Unix epoch millisecond (Redis clock); a time in the past means due now.
    pub fn due_at_ms(mut self, due_at_ms: u64) -> Self {
        self.due = Due::AtMs(due_at_ms);
        self
    }

    /// Due as given.
    pub fn due(mut self, due: Due) -> Self {
        self.due = due;
        self
    }

    /// A business key (1 to 512 bytes of UTF-8), unique among the queue's live tasks.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// What happens when the key is already live. Default [`OnConflict::Keep`].
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = on_conflict;
        self
    }
}

/// Checks the expiry and the conflict policy of `spec`, each error naming its field.
fn check_expiry_and_conflict(spec: &TaskSpec) -> Result<()> {
    match spec.expiry {
        Some(Expiry::TtlMs(t)) if t == 0 || t > MAX_DELAY_MS => {
            return Err(Error::invalid(format!(
                "ttl_ms must be 1 to {MAX_DELAY_MS} (100 years)"
            )));
        }
        Some(Expiry::AtMs(t)) if t > MAX_DUE_AT_MS => {
            return Err(Error::invalid("expires_at_ms is past year 9999"));
        }
        _ => {}
    }
    // an expiry at or before the due time means the task can never run; when one time is
    // relative and the other absolute, the enqueue script judges it by the Redis clock
    match (spec.due, spec.expiry) {
        (Due::DelayMs(d), Some(Expiry::TtlMs(t))) if t <= d => {
            return Err(Error::invalid(format!(
                "ttl_ms ({t}) must be more than delay_ms ({d}): a task that expires at or \
                 before it is due can never run"
            )));
        }
        (Due::AtMs(d), Some(Expiry::AtMs(t))) if t <= d => {
            return Err(Error::invalid(format!(
                "expires_at_ms ({t}) must be after due_at_ms ({d}): a task that expires at \
                 or before it is due can never run"
            )));
        }
        _ => {}
    }
    let debounce = spec.on_conflict == OnConflict::Debounce;
    match spec.debounce_max_ms {
        None if debounce => Err(Error::invalid(
            "debounce_max_ms is required with on_conflict debounce",
        )),
        Some(_) if !debounce => Err(Error::invalid(
            "debounce_max_ms is only used with on_conflict debounce",
        )),
        Some(m) if m == 0 || m > MAX_DELAY_MS => Err(Error::invalid(format!(
            "debounce_max_ms must be 1 to {MAX_DELAY_MS} (100 years)"
        ))),
        _ if debounce && spec.key.is_none() => Err(Error::invalid(
            "on_conflict debounce needs a key: it acts on the live task of that key",
        )),
        _ => Ok(()),
    }
}

impl TaskSpec {
    /// Checks the whole spec before anything is written: payload size against `limit`
    /// (bytes), key, due time, the task options, expiry and conflict policy; each error names
    /// its field.
    pub(crate) fn check(&self, limit: usize) -> Result<()> {
        let spec = self;
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
        spec.options.check()?;
        if spec.options.unique_for_ms.is_some_and(|w| w > 0) && spec.key.is_none() {
            return Err(Error::invalid(
                "unique_for_ms needs a key: the window keeps the task's business key taken",
            ));
        }
        check_expiry_and_conflict(spec)
    }
}
