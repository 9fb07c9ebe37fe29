//! Tombstones: is responsible for removing from Redis the tasks of rows that were deleted, or
//! set to a finished state by hand (the table's guard trigger writes one tombstone per such
//! row, so no scan of Redis is needed).

use dueq::{CancelOutcome, TaskRef};
use futures_util::future::join_all;
use sqlx::{PgPool, Row};

use crate::error::{Error, Result};
use crate::queues::Queues;
use crate::report::RelayReport;
use crate::task::to_i64;

/// Cancels, by id, the Redis tasks of rows that were deleted or finished by hand: one batch of
/// at most `batch` tombstones.
pub(crate) async fn sweep(pool: &PgPool, queues: &Queues, batch: usize) -> Result<RelayReport> {
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(
        "SELECT id, queue, key, task_id FROM dueq_outbox_tombstones
             WHERE retry_at_ms <= dueq_outbox_now_ms()
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
    )
    .bind(to_i64(batch as u64))
    .fetch_all(&mut *tx)
    .await?;
    let mut report = RelayReport {
        more: rows.len() >= batch,
        ..RelayReport::default()
    };
    if rows.is_empty() {
        return Ok(report);
    }
    let mut stones = Vec::with_capacity(rows.len());
    for r in &rows {
        let id: i64 = r.try_get(0)?;
        let queue: String = r.try_get(1)?;
        let key: String = r.try_get(2)?;
        let task: String = r.try_get(3)?;
        stones.push((id, queue, key, task));
    }
    // Cancel by key, and only if the key's live task is the tombstone's task: after a
    // wipe Redis reuses ids, and a newer row may own the key by now.
    let results = join_all(stones.iter().map(|(_, queue, key, task)| async move {
        let q = queues.get(queue).await?;
        let target = TaskRef::key(key.clone())?;
        match q.get(&target).await? {
            Some(t) if t.id.as_str() == task => Ok::<_, Error>(q.cancel(&TaskRef::Id(t.id)).await?),
            _ => Ok(CancelOutcome::NotFound),
        }
    }))
    .await;
    let mut done = Vec::new();
    let mut later = Vec::new();
    for ((id, queue, _, _), res) in stones.iter().zip(results) {
        match res {
            Ok(CancelOutcome::Cancelled) => {
                report.removed += 1;
                queues.record(|| {
                    metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.clone(),
                            "direction" => "removed_from_redis")
                    .increment(1);
                });
                done.push(*id);
            }
            Ok(CancelOutcome::InProgress) => later.push(*id),
            Ok(_) => done.push(*id),
            Err(e) if e.is_retryable() => return Err(e),
            // a malformed task id or queue: nothing in Redis can match it
            Err(e) => {
                tracing::warn!(tombstone = id, error = %e, "dropping a tombstone");
                done.push(*id);
            }
        }
    }
    sqlx::query("DELETE FROM dueq_outbox_tombstones WHERE id = ANY($1)")
        .bind(&done)
        .execute(&mut *tx)
        .await?;
    // A running task cannot be cancelled; look again in a second (it may be retried).
    sqlx::query(
        "UPDATE dueq_outbox_tombstones SET retry_at_ms = dueq_outbox_now_ms() + 1000
             WHERE id = ANY($1)",
    )
    .bind(&later)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(report)
}
