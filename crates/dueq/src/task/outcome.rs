//! What each operation on a task did: one enum (or report) per operation.

use super::id::TaskId;
use super::view::TaskState;

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnqueueOutcome {
    /// A new task was created.
    Created,
    /// The key was live: the existing task was returned unchanged
    /// ([`OnConflict::Keep`](crate::OnConflict::Keep)).
    Existing,
    /// The key was live: the existing task's payload and due time were replaced.
    Replaced,
    /// The key is live on a running task, so [`OnConflict::Replace`](crate::OnConflict::Replace) was refused.
    InProgress,
    /// The key is in the unique window of a task that finished in this state
    /// ([`TaskOptions::unique_for_ms`](crate::TaskOptions::unique_for_ms)): nothing was
    /// written, and a replace or debounce was refused. The answer carries that task's id
    /// and due time.
    Finished(TaskState),
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

/// The answer to a cancel: exactly one of these, never a half-deleted task.
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

/// The answer to retrying one dead task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadRetryOutcome {
    /// Scheduled again, due now, attempts counted afresh.
    Retried,
    /// Not in the dead-letter queue.
    NotFound,
    /// Its business key is taken by another task (live, or in its unique window); left dead.
    Conflict,
}
