//! What to enqueue: [`TaskSpec`], its due time and its options (attempts, lease, priority,
//! group, expiry, conflict policy), with the limits and checks of each.
//!
//! Times are integer milliseconds: `*_at_ms` are Unix epoch milliseconds by the Redis
//! server's clock, `*_ms` alone are durations.

use super::id::validate_key;
use crate::error::{Error, ErrorKind, Result};

/// The latest due time dueq accepts: 9999-12-31T23:59:59.999Z, in epoch milliseconds.
pub const MAX_DUE_AT_MS: u64 = 253_402_300_799_999;

/// Longest delay accepted: 100 years. Longer delays could land past year 9999 only in the far
/// future, but refusing them up front keeps every batch check on the client, before any write.
pub const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// Most attempts a task may be given (`max_attempts`); stored in 16 bits.
pub const MAX_ATTEMPTS: u32 = 65_535;

/// Default attempts before a task goes to the dead-letter queue.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// Default lease (visibility timeout) of a claimed task.
pub const DEFAULT_LEASE_MS: u64 = 30_000;

/// Longest lease dueq accepts: about 49 days (it is stored in 32 bits).
pub const MAX_LEASE_MS: u64 = u32::MAX as u64;

/// Shortest lease dueq accepts (DESIGN 2.17): a worker renews a lease when less than half of it
/// is left, so a shorter one expires under a live worker on an ordinary network or
/// scheduling pause, and another worker runs the task at the same time.
pub const MIN_LEASE_MS: u64 = 1_000;

/// Highest (last-served) priority; 0 is served first.
pub const MAX_PRIORITY: u8 = 9;

/// Longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 256;

/// Checks a lease length: [`MIN_LEASE_MS`] to [`MAX_LEASE_MS`].
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) outside that range.
pub fn validate_lease_ms(lease_ms: u64) -> Result<()> {
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(Error::invalid(format!(
            "lease_ms must be {MIN_LEASE_MS} to {MAX_LEASE_MS}, got {lease_ms}: a shorter \
             lease expires before a worker can renew it, and the task runs twice at once"
        )));
    }
    Ok(())
}

/// Checks a group name: 1 to 256 bytes of UTF-8.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming `group`.
pub fn validate_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > MAX_GROUP_BYTES {
        return Err(Error::invalid(format!(
            "group: must be 1 to {MAX_GROUP_BYTES} bytes"
        )));
    }
    Ok(())
}

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

/// When a task that has not started by then is given up (DESIGN section 1, `expires_at_ms`).
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
    pub(crate) max_attempts: Option<u32>,
    pub(crate) lease_ms: Option<u64>,
    pub(crate) group: Option<String>,
    pub(crate) priority: u8,
    pub(crate) expiry: Option<Expiry>,
    pub(crate) debounce_max_ms: Option<u64>,
}

impl TaskSpec {
    /// A task with this payload (opaque bytes), due now, no key, queue defaults.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Self {
            payload: payload.into(),
            due: Due::DelayMs(0),
            key: None,
            on_conflict: OnConflict::Keep,
            max_attempts: None,
            lease_ms: None,
            group: None,
            priority: 0,
            expiry: None,
            debounce_max_ms: None,
        }
    }

    /// Priority 0 (served first, the default) to [`MAX_PRIORITY`] (9). Among tasks that are
    /// due, a lower number is claimed first; within one priority, due-time order, then
    /// enqueue order. Priority never makes a task claimable before its due time. With a
    /// [`TaskSpec::group`] it orders the group's own due tasks; groups are still served
    /// round-robin, whatever their tasks' priorities.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

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

    /// The group (a tenant, a customer; 1 to 256 bytes): the queue's `group_concurrency` and
    /// `group_rate_limit` apply to each group on its own, and due tasks of different groups
    /// are handed out round-robin. Default none. A replace keeps the group the task has.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
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

    /// Attempts before the task goes to the dead-letter queue (1 to 65 535). Default: the
    /// queue's `max_attempts` setting (else 5), read when an attempt fails.
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// How long a worker holds the task before it is presumed dead (1 000 ms to about 49
    /// days).
    /// Default: the queue's `lease_ms` setting (else 30 000), read at each claim.
    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = Some(lease_ms);
        self
    }
}

/// Checks the task options of `spec` (priority, expiry, debounce), each error naming its
/// field.
pub(crate) fn check_options(spec: &TaskSpec) -> Result<()> {
    if spec.priority > MAX_PRIORITY {
        return Err(Error::invalid(format!(
            "priority must be 0 to {MAX_PRIORITY}, got {}",
            spec.priority
        )));
    }
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
    /// (bytes), key, due time, group, attempts, lease and the task options; each error
    /// names its field.
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
}
