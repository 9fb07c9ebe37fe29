//! Orphans: is responsible for removing the Redis tasks of *owned* queues (queues written only
//! through the outbox, [`RelayConfig::owned_queue`](crate::RelayConfig::owned_queue)) that
//! have no live row and left no tombstone: after the database was restored from an older
//! backup, or rows were deleted without the table's trigger (`TRUNCATE`, the relay's own
//! mode).
//!
//! A sweep pages through each owned queue's scheduled tasks in due order
//! ([`dueq::Queue::browse`]), looks the page's keys up in one query, and cancels by id each
//! task whose key has no live row (`pending`, `relayed` or `cancelling`), and each task with
//! no key (the outbox never writes one). Tasks of the queue's own schedules (keys
//! `schedule:...`) are kept; running tasks are not browsed (a cancel cannot stop them).
//!
//! Race with a row committed for the same key while the sweep decides: the relay's enqueue
//! finds the orphan (idempotent by key) and takes it for its row's task; the sweep then
//! cancels it. So after cancelling, the sweep looks the cancelled keys up again and enqueues
//! the live rows it now finds (idempotent by key), counted as restored.

use std::collections::{HashMap, HashSet};

use dueq::{CancelOutcome, TaskRef, TaskState};
use futures_util::future::join_all;
use sqlx::Row;

use crate::error::Result;
use crate::reconciler::ReconcileReport;
use crate::relay::Relay;
use crate::rows::{OutRow, ROW_COLUMNS, lock};

/// Keys the tasks of a queue's schedules carry (`schedule:{name}:{fire_at_ms}`).
const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// Rows that own their key's Redis task: the live states.
const LIVE: &str = "state IN ('pending', 'relayed', 'cancelling')";

impl Relay {
    /// Sweeps the owned queues' scheduled tasks, at most `budget` of them; each queue goes on
    /// from where the last sweep stopped. Returns the tasks looked at.
    pub(crate) async fn sweep_orphans(
        &self,
        mut budget: usize,
        rep: &mut ReconcileReport,
    ) -> Result<usize> {
        let mut seen = 0;
        for name in &self.cfg.owned_queues {
            while budget > 0 {
                let after = lock(&self.orphan_cursors).get(name).cloned();
                let limit = self.cfg.batch.min(budget);
                let q = self.queue(name).await?;
                let page = q
                    .browse(TaskState::Scheduled, after.as_deref(), limit)
                    .await?;
                budget -= page.tasks.len().min(budget);
                seen += page.tasks.len();
                self.remove_orphans(name, &page.tasks, rep).await?;
                let done = page.next.is_none();
                match page.next {
                    Some(next) => lock(&self.orphan_cursors).insert(name.clone(), next),
                    None => lock(&self.orphan_cursors).remove(name),
                };
                if done {
                    break;
                }
            }
        }
        Ok(seen)
    }

    /// Cancels the tasks of one page that no live row owns, then restores rows committed for
    /// their keys meanwhile.
    async fn remove_orphans(
        &self,
        queue: &str,
        tasks: &[dueq::Task],
        rep: &mut ReconcileReport,
    ) -> Result<()> {
        let keys: Vec<&str> = tasks.iter().filter_map(|t| t.key.as_deref()).collect();
        let owned = self.live_keys(queue, &keys).await?;
        let orphans: Vec<&dueq::Task> = tasks
            .iter()
            .filter(|t| match t.key.as_deref() {
                None => true,
                Some(k) => !k.starts_with(SCHEDULE_KEY_PREFIX) && !owned.contains(k),
            })
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        let q = self.queue(queue).await?;
        let targets: Vec<TaskRef> = orphans.iter().map(|t| TaskRef::Id(t.id.clone())).collect();
        let outcomes = join_all(targets.iter().map(|t| q.cancel(t))).await;
        let mut removed = Vec::new();
        let mut n = 0u64;
        for (t, o) in orphans.iter().zip(outcomes) {
            // a task claimed since the page was read is left to run: the next sweep sees it
            // again if it is retried
            if o? == CancelOutcome::Cancelled {
                tracing::info!(queue, task = %t.id, key = ?t.key, "removed a Redis task with no live row");
                removed.extend(t.key.as_deref());
                n += 1;
            }
        }
        rep.orphans_removed += n;
        self.record(|| {
            metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.to_owned(),
                "direction" => "removed_from_redis")
            .increment(n);
        });
        if removed.is_empty() {
            return Ok(());
        }
        // rows committed for those keys after the lookup above
        let rows = sqlx::query(&format!(
            "SELECT {ROW_COLUMNS} FROM dueq_outbox
             WHERE queue = $1 AND key = ANY($2) AND {LIVE} AND relay_op IS DISTINCT FROM 'cancel'"
        ))
        .bind(queue)
        .bind(&removed)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Ok(());
        }
        let rows = rows
            .iter()
            .map(OutRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        let specs: Vec<_> = rows.iter().map(OutRow::spec).collect();
        q.enqueue_batch(&specs).await?;
        rep.restored += specs.len() as u64;
        Ok(())
    }

    /// Of these keys, those a live row of the queue holds.
    async fn live_keys(&self, queue: &str, keys: &[&str]) -> Result<HashSet<String>> {
        if keys.is_empty() {
            return Ok(HashSet::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT key FROM dueq_outbox WHERE queue = $1 AND key = ANY($2) AND {LIVE}"
        ))
        .bind(queue)
        .bind(keys)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<String, _>(0)?))
            .collect()
    }
}

/// Each owned queue's browse cursor between sweeps.
pub(crate) type OrphanCursors = HashMap<String, String>;
