//! A task as read: its state, its record ([`Task`]), a claimed task ([`ClaimedTask`]) and
//! the pages of the dead-letter queue.

use super::headers::Headers;
use super::id::{LeaseToken, TaskId};

/// Where a task is in its life.
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

    /// The state named `name` ([`as_str`](Self::as_str) backwards), as the scripts answer it.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        [
            Self::Scheduled,
            Self::Active,
            Self::Succeeded,
            Self::Dead,
            Self::Cancelled,
            Self::Expired,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// A business key in the unique window of its finished task
/// ([`Queue::unique_window`](crate::Queue::unique_window)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyWindow {
    /// The finished task.
    pub id: TaskId,
    /// How it ended: succeeded, dead, cancelled or expired.
    pub state: TaskState,
    /// Its last due time, Unix epoch ms (Redis clock).
    pub due_at_ms: u64,
    /// When the window ends and the key is free, Unix epoch ms (Redis clock).
    pub ends_at_ms: u64,
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
    /// Its headers.
    pub headers: Headers,
    /// Text of the last failure.
    pub last_error: Option<String>,
    /// When it was first enqueued, epoch ms.
    pub created_at_ms: u64,
    /// For an active task its lease deadline, for a dead or succeeded one when it got there.
    pub state_at_ms: Option<u64>,
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
    /// Its headers.
    pub headers: Headers,
    /// Whether this run continues the producer's trace (a child of the span in its
    /// `traceparent` header): its first attempt, of a task enqueued due at once, not by a
    /// schedule. Otherwise the run starts a new trace linked to the producer's span, so a
    /// timer of days does not make a trace of days.
    pub continues_trace: bool,
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
