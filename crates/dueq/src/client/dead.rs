//! Dead-letter queue operations on a [`Queue`]: list, retry, delete.

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::ops::{self, MAX_BATCH};
use crate::task::{DeadPage, DeadRetryOutcome, TaskId};

impl Queue {
    /// One page of dead tasks, newest first: `limit` (1 to 1 000) from `offset`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a limit out of range,
    /// [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn dead_list(&self, offset: u64, limit: u64) -> Result<DeadPage> {
        if limit == 0 || limit > MAX_BATCH as u64 {
            return Err(Error::invalid(format!("limit must be 1 to {MAX_BATCH}")));
        }
        ops::dead_list(&mut self.client().conn(), self.keys(), offset, limit).await
    }

    /// Moves dead tasks back to scheduled, due now, attempts counted afresh.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_retry(&self, ids: &[TaskId]) -> Result<Vec<DeadRetryOutcome>> {
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(ops::dead_retry(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }

    /// Deletes dead tasks for good; `true` per task deleted.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_delete(&self, ids: &[TaskId]) -> Result<Vec<bool>> {
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(ops::dead_delete(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }
}
