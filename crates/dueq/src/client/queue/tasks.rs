//! One task by id or business key: read it, cancel it, move its due time.

use super::Queue;
use crate::error::Result;
use crate::protocol::{queues, tasks};
use crate::task::{CancelOutcome, Due, KeyWindow, RescheduleOutcome, Task, TaskId, TaskRef};

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

impl Queue {
    /// Reads a task by id or by business key; `None` when there is none (cancelled,
    /// acknowledged without retention, deleted).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn get(&self, target: &TaskRef) -> Result<Option<Task>> {
        let q = self.route(target).await?;
        tasks::get(&mut q.client.conn(), &q.keys, target).await
    }

    /// The finished task that holds business key `key` in its unique window
    /// ([`TaskOptions::unique_for_ms`](crate::TaskOptions::unique_for_ms)), with how it ended
    /// and when the window ends; `None` when the key is in no window. [`Queue::get`] finds live
    /// and dead tasks by key; this finds the ones that finished otherwise, while their window
    /// lasts.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn unique_window(&self, key: &str) -> Result<Option<KeyWindow>> {
        let target = TaskRef::Key(key.to_owned());
        let q = self.route(&target).await?;
        tasks::window(&mut q.client.conn(), &q.keys, key).await
    }

    /// Cancels a scheduled task by id or key, atomically with respect to claims.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn cancel(&self, target: &TaskRef) -> Result<CancelOutcome> {
        Ok(self.cancel_report(target).await?.outcome)
    }

    /// [`Queue::cancel`] with the task's id and the Redis time at which the cancel was applied
    /// (to order it against claims, as `dueq replay` does).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn cancel_report(&self, target: &TaskRef) -> Result<CancelReport> {
        let q = self.route(target).await?;
        let mut conn = q.client.conn();
        let (outcome, id, now_ms, window_ends_ms) =
            tasks::cancel(&mut conn, &q.keys, target).await?;
        if let Some(at) = window_ends_ms {
            // the key's unique window opened: the recoverer drops it when it ends (or on its
            // sweep of every queue, should this note fail: the cancel itself is done)
            if let Err(e) = queues::recovery_note(&mut conn, q.name(), at).await {
                tracing::debug!(queue = q.name(), error = %e, "unique window not noted");
            }
        }
        Ok(CancelReport {
            outcome,
            id,
            now_ms,
        })
    }

    /// Moves the due time of a scheduled task.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a due time past year 9999, [`ErrorKind::Redis`](crate::ErrorKind::Redis).
    pub async fn reschedule(&self, target: &TaskRef, due: Due) -> Result<RescheduleOutcome> {
        let q = self.route(target).await?;
        tasks::reschedule(&mut q.client.conn(), &q.keys, target, due).await
    }
}
