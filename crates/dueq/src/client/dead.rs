//! Dead-letter queue operations on a [`Queue`]: list, retry, delete.

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::dead;
use crate::task::{DeadPage, DeadRetryOutcome, TaskId};

/// Largest `offset` of [`Queue::dead_list`]: far beyond any dead-letter queue that fits in
/// memory; Redis and the script's arithmetic could not take every `u64`.
pub const MAX_DEAD_OFFSET: u64 = u32::MAX as u64;

/// Dead tasks read from each partition for one page of a partitioned queue: a page beyond
/// this depth (`offset + limit`) comes out short.
const MAX_DEAD_MERGE: u64 = 10_000;

impl Queue {
    /// One page of dead tasks, newest first: `limit` (1 to 1 000) from `offset` (0 to
    /// [`MAX_DEAD_OFFSET`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a limit or offset out of range,
    /// [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn dead_list(&self, offset: u64, limit: u64) -> Result<DeadPage> {
        if limit == 0 || limit > MAX_BATCH as u64 {
            return Err(Error::invalid(format!("limit must be 1 to {MAX_BATCH}")));
        }
        if offset > MAX_DEAD_OFFSET {
            return Err(Error::invalid(format!(
                "offset must be 0 to {MAX_DEAD_OFFSET}"
            )));
        }
        let Some(layout) = self.split_layout().await? else {
            return dead::dead_list(&mut self.client().conn(), self.keys(), offset, limit).await;
        };
        // the newest `offset + limit` of each partition hold the page of the whole queue
        let want = offset.saturating_add(limit);
        let pages = self
            .each_part(&layout, |q| async move {
                dead::dead_list(
                    &mut q.client().conn(),
                    q.keys(),
                    0,
                    want.min(MAX_DEAD_MERGE),
                )
                .await
            })
            .await?;
        let total = pages.iter().map(|p| p.total).sum();
        let mut tasks: Vec<_> = pages.into_iter().flat_map(|p| p.tasks).collect();
        tasks.sort_by_key(|t| std::cmp::Reverse(t.died_at_ms));
        let tasks = tasks
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect();
        Ok(DeadPage { total, tasks })
    }

    /// Moves dead tasks back to scheduled, due now, attempts counted afresh.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_retry(&self, ids: &[TaskId]) -> Result<Vec<DeadRetryOutcome>> {
        let retry = |q: Queue, mine: Vec<TaskId>| async move { q.dead_retry(&mine).await };
        if let Some(out) = self.by_id(ids, TaskId::as_str, retry).await? {
            return Ok(out);
        }
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(dead::dead_retry(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }

    /// Deletes dead tasks for good; `true` per task deleted.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_delete(&self, ids: &[TaskId]) -> Result<Vec<bool>> {
        let delete = |q: Queue, mine: Vec<TaskId>| async move { q.dead_delete(&mine).await };
        if let Some(out) = self.by_id(ids, TaskId::as_str, delete).await? {
            return Ok(out);
        }
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(dead::dead_delete(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }
}
