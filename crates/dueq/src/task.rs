//! Tasks and the values that name, schedule and report on them.
//!
//! Times are integer milliseconds: `*_at_ms` are Unix epoch milliseconds by the Redis
//! server's clock, `*_ms` alone are durations.

use std::fmt;

use crate::error::{Error, Result};

/// The latest due time dueq accepts: 9999-12-31T23:59:59.999Z, in epoch milliseconds.
pub const MAX_DUE_AT_MS: u64 = 253_402_300_799_999;
/// Longest delay accepted: 100 years. Longer delays could land past year 9999 only in the far
/// future, but refusing them up front keeps every batch check on the client, before any write.
pub const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600_000;
/// Longest business key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest task id, in bytes (ids are ASCII).
pub const MAX_ID_BYTES: usize = 64;
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

/// A task id: assigned by dueq at enqueue, unique in its queue, opaque ASCII of at most 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

impl TaskId {
    /// Wraps an id given by a caller (for example from a URL).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is empty, longer than
    /// 64 bytes or not printable ASCII.
    pub fn new(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_ID_BYTES || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(format!(
                "task id {id:?} is invalid: use 1 to {MAX_ID_BYTES} printable ASCII characters, no spaces"
            )));
        }
        Ok(Self(id))
    }

    pub(crate) fn from_redis(id: String) -> Self {
        Self(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a business key: 1 to 512 bytes of UTF-8, any characters.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when empty or too long.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(format!(
            "business key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

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

/// How an operation names its task: by id, or by the business key of a live task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskRef {
    /// By the id dueq assigned.
    Id(TaskId),
    /// By the producer's business key (only live tasks: scheduled or active).
    Key(String),
}

impl TaskRef {
    /// A reference by business key, validated.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty or over-long key.
    pub fn key(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        validate_key(&key)?;
        Ok(Self::Key(key))
    }

    /// A reference by id, validated.
    ///
    /// # Errors
    /// As [`TaskId::new`].
    pub fn id(id: impl Into<String>) -> Result<Self> {
        Ok(Self::Id(TaskId::new(id)?))
    }

    pub(crate) fn parts(&self) -> (&'static str, &str) {
        match self {
            Self::Id(id) => ("id", id.as_str()),
            Self::Key(k) => ("key", k.as_str()),
        }
    }
}

impl From<TaskId> for TaskRef {
    fn from(id: TaskId) -> Self {
        Self::Id(id)
    }
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
    /// running (then the answer is [`EnqueueOutcome::InProgress`]).
    Replace,
    /// As [`OnConflict::Replace`], but the due time never moves past the existing task's first
    /// enqueue + [`TaskSpec::debounce_max_ms`], so a key changed every 300 ms with a 1 s delay
    /// and a 3 s cap still runs about every 3 s. Needs `debounce_max_ms` and a key.
    Debounce,
}

/// Highest (last-served) priority; 0 is served first.
pub const MAX_PRIORITY: u8 = 9;

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

/// Longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 256;

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

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnqueueOutcome {
    /// A new task was created.
    Created,
    /// The key was live: the existing task was returned unchanged ([`OnConflict::Keep`]).
    Existing,
    /// The key was live: the existing task's payload and due time were replaced.
    Replaced,
    /// The key is live on a running task, so [`OnConflict::Replace`] was refused.
    InProgress,
}

/// The answer to one enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The task's id (new or existing).
    pub id: TaskId,
    /// Its due time, Unix epoch ms by the Redis clock (0 for [`EnqueueOutcome::InProgress`]).
    pub due_at_ms: u64,
    /// What happened.
    pub outcome: EnqueueOutcome,
}

impl Enqueued {
    /// Whether a new task was created.
    pub fn created(&self) -> bool {
        self.outcome == EnqueueOutcome::Created
    }
}

/// Where a task is in its life (DESIGN section 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Waiting for its due time (also between retries, with `attempt > 0`).
    Scheduled,
    /// Claimed by a worker under a lease.
    Active,
    /// Acknowledged (kept only when the queue retains succeeded tasks).
    Succeeded,
    /// Out of attempts or failed permanently: in the dead-letter queue.
    Dead,
    /// Cancelled before it ran (leaves no record; appears only in outcomes and metrics).
    Cancelled,
    /// Not started before its expiry (leaves no record unless the queue's `on_expire` is
    /// `dead`, which keeps it in the dead-letter queue; appears in metrics and stats).
    Expired,
}

impl TaskState {
    /// The lower-case name used in the HTTP API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Active => "active",
            Self::Succeeded => "succeeded",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
        }
    }
}

/// A task as [`Queue::get`](crate::Queue::get) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Task {
    /// Its id.
    pub id: TaskId,
    /// Its business key, if any.
    pub key: Option<String>,
    /// Its state.
    pub state: TaskState,
    /// Due time, epoch ms (for an active task: the due time it was claimed at).
    pub due_at_ms: u64,
    /// Attempts made so far (the running one included when active).
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Lease length a claim gets.
    pub lease_ms: u64,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its priority, 0 (first) to 9.
    pub priority: u8,
    /// When it expires unless started, epoch ms (only while it is scheduled and has one).
    pub expires_at_ms: Option<u64>,
    /// When the running attempt was claimed, Redis time, epoch ms (only while active).
    pub claimed_at_ms: Option<u64>,
    /// The worker holding it, when its claimer gave its id (only while active): a Rust
    /// worker's, or the `worker_id` of an HTTP claim.
    pub worker: Option<String>,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Text of the last failure.
    pub last_error: Option<String>,
    /// When it was first enqueued, epoch ms.
    pub created_at_ms: u64,
    /// For an active task its lease deadline, for a dead or succeeded one when it got there.
    pub state_at_ms: Option<u64>,
}

/// The answer to a cancel (DESIGN 2.7): exactly one of these, never a half-deleted task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// Removed before any worker got it; it will never run.
    Cancelled,
    /// A worker is running it; it was not touched.
    InProgress,
    /// No live task by that id or key (finished, dead, cancelled or never there).
    NotFound,
}

impl CancelOutcome {
    /// `cancelled`, `in_progress` or `not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::InProgress => "in_progress",
            Self::NotFound => "not_found",
        }
    }
}

/// The answer to a reschedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RescheduleOutcome {
    /// The task is now due at this epoch ms.
    Rescheduled {
        /// New due time.
        due_at_ms: u64,
    },
    /// A worker is running it; unchanged.
    InProgress,
    /// No scheduled task by that id or key.
    NotFound,
}

/// A lease token: proof of ownership of a claimed task (fencing, DESIGN 2.3). A token that is
/// no longer current is refused by ack, nack and extend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// Wraps a token received from a claim (for example over HTTP).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A task handed to a worker by a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimedTask {
    /// Its id.
    pub id: TaskId,
    /// Its business key, if any.
    pub key: Option<String>,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// This attempt, 1-based.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its priority, 0 (first) to 9.
    pub priority: u8,
    /// Due time it was claimed at, epoch ms.
    pub due_at_ms: u64,
    /// Redis time it was enqueued (for a schedule's task, when its tick fired), epoch ms.
    pub created_at_ms: u64,
    /// Proof of ownership for ack, nack and extend.
    pub lease_token: LeaseToken,
    /// When the lease runs out unless extended, epoch ms (Redis clock).
    pub lease_expires_at_ms: u64,
    /// Redis time of the claim, epoch ms. Never earlier than `due_at_ms`.
    pub claimed_at_ms: u64,
    /// Redis time when the handler started, epoch ms: the claim time plus the time elapsed
    /// locally since the claim was sent, up to the hand-out by the
    /// [`DueClaimer`](crate::DueClaimer) and, in a [`Worker`](crate::Worker), up to the
    /// handler start (so never before `due_at_ms`); from [`Queue::claim`](crate::Queue::claim)
    /// equal to `claimed_at_ms`.
    pub started_at_ms: u64,
    /// The last failure's text, if an earlier attempt failed.
    pub last_error: Option<String>,
}

/// The answer to an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckOutcome {
    /// Completed.
    Acked,
    /// The token is no longer current; nothing changed.
    LeaseLost,
}

/// The answer to a nack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NackOutcome {
    /// Back to scheduled for another attempt at this epoch ms.
    Rescheduled {
        /// When the next attempt is due.
        due_at_ms: u64,
    },
    /// Out of attempts or failed permanently: moved to the dead-letter queue.
    Dead,
    /// The token is no longer current; nothing changed.
    LeaseLost,
}

/// Counts and timings of one queue (DESIGN 4.2 stats).
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
    pub rate_limit: Option<crate::settings::RateLimit>,
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
/// the work of every worker in every language (DESIGN 4.4).
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

/// A task in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadTask {
    /// The task (state [`TaskState::Dead`]).
    pub task: Task,
    /// When it died, epoch ms.
    pub died_at_ms: u64,
}

/// One page of the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadPage {
    /// Dead tasks in the queue in all.
    pub total: u64,
    /// This page, newest first.
    pub tasks: Vec<DeadTask>,
}

/// The answer to retrying one dead task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadRetryOutcome {
    /// Scheduled again, due now, attempts counted afresh.
    Retried,
    /// Not in the dead-letter queue.
    NotFound,
    /// Its business key is live on another task; left dead.
    Conflict,
}
