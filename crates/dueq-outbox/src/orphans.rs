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
//! A keyed orphan is cancelled by its key, not its id: after a wipe Redis hands the same ids
//! out again, so an id may name a newer task by the time the cancel lands. Race with a row
//! committed for the same key while the sweep decides: the relay's enqueue finds the orphan
//! (idempotent by key) and takes it for its row's task, and the sweep then cancels it. So
//! after cancelling, the sweep restores the `relayed` rows whose task is one it cancelled,
//! as the reconciler restores a lost task (a new task, written to the row, under the row
//! lock, waiting for a relay that still holds the row to commit first).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use dueq::{CancelOutcome, TaskRef, TaskState};
use futures_util::future::join_all;
use sqlx::{PgPool, Row};

use crate::config::RelayConfig;
use crate::error::Result;
use crate::queues::Queues;
use crate::report::ReconcileReport;
use crate::rows::{OutRow, ROW_COLUMNS, Update, apply, lock, relay_mode, restorable};

/// Keys the tasks of a queue's schedules carry (`schedule:{name}:{fire_at_ms}`).
const SCHEDULE_KEY_PREFIX: &str = "schedule:";

/// Rows that own their key's Redis task: the live states.
const LIVE: &str = "state IN ('pending', 'relayed', 'cancelling')";

/// The sweep of the owned queues, with each queue's browse cursor between sweeps.
#[derive(Default)]
pub(crate) struct OrphanSweep {
    cursors: Mutex<HashMap<String, String>>,
}

impl OrphanSweep {
    /// Sweeps the owned queues' scheduled tasks, at most `budget` of them; each queue goes on
    /// from where the last sweep stopped. Returns the tasks looked at.
    pub(crate) async fn sweep(
        &self,
        pool: &PgPool,
        cfg: &RelayConfig,
        queues: &Queues,
        mut budget: usize,
        rep: &mut ReconcileReport,
    ) -> Result<usize> {
        let mut seen = 0;
        for name in &cfg.owned_queues {
            while budget > 0 {
                let after = lock(&self.cursors).get(name).cloned();
                let limit = cfg.batch.min(budget);
                let q = queues.get(name).await?;
                let page = q
                    .browse(TaskState::Scheduled, after.as_deref(), limit)
                    .await?;
                budget -= page.tasks.len().min(budget);
                seen += page.tasks.len();
                remove_orphans(pool, queues, name, &page.tasks, rep).await?;
                let done = page.next.is_none();
                match page.next {
                    Some(next) => lock(&self.cursors).insert(name.clone(), next),
                    None => lock(&self.cursors).remove(name),
                };
                if done {
                    break;
                }
            }
        }
        Ok(seen)
    }

    /// Whether every owned queue's last sweep reached the end of its scheduled tasks.
    pub(crate) fn is_done(&self) -> bool {
        lock(&self.cursors).is_empty()
    }
}

/// Cancels the tasks of one page that no live row owns, then restores the relayed rows
/// that took one of them for their task meanwhile.
async fn remove_orphans(
    pool: &PgPool,
    queues: &Queues,
    queue: &str,
    tasks: &[dueq::Task],
    rep: &mut ReconcileReport,
) -> Result<()> {
    // PostgreSQL text cannot hold a NUL: no row holds such a key
    let keys: Vec<&str> = tasks
        .iter()
        .filter_map(|t| t.key.as_deref())
        .filter(|k| !k.contains('\0'))
        .collect();
    let owned = live_keys(pool, queue, &keys).await?;
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
    let q = queues.get(queue).await?;
    let outcomes = join_all(orphans.iter().map(|t| cancel_orphan(&q, t))).await;
    let mut removed = Vec::new();
    let mut ids = Vec::new();
    for (t, o) in orphans.iter().zip(outcomes) {
        // a task claimed since the page was read is left to run (the next sweep sees it
        // again if it is retried)
        if let Some(id) = o? {
            tracing::info!(queue, task = %id, key = ?t.key, "removed a Redis task with no live row");
            removed.extend(t.key.as_deref().filter(|k| !k.contains('\0')));
            ids.push(id);
        }
    }
    let n = ids.len() as u64;
    rep.orphans_removed += n;
    queues.record(|| {
        metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.to_owned(),
                "direction" => "removed_from_redis")
        .increment(n);
    });
    if removed.is_empty() {
        return Ok(());
    }
    // A row committed for one of those keys after the lookup above may have taken the
    // orphan for its task (the relay's enqueue is idempotent by key): give it a task of
    // its own, as the reconciler restores a lost one. A relay may still hold such a row
    // (its batch not yet committed): wait for it (a batch takes well under a second;
    // `lock_timeout` bounds the wait), then read the row as the relay left it.
    let mut tx = pool.begin().await?;
    relay_mode(&mut tx).await?;
    sqlx::query("SET LOCAL lock_timeout = '10s'")
        .execute(&mut *tx)
        .await?;
    let rows = sqlx::query(&format!(
        "SELECT {ROW_COLUMNS} FROM dueq_outbox
             WHERE queue = $1 AND key = ANY($2) AND state IN ('pending', 'relayed')
             FOR UPDATE"
    ))
    .bind(queue)
    .bind(&removed)
    .fetch_all(&mut *tx)
    .await?;
    let rows = rows
        .iter()
        .map(OutRow::from_row)
        .filter(|r| {
            r.as_ref().map_or(true, |r| {
                r.relay_op.is_none() && r.task_id.as_ref().is_some_and(|id| ids.contains(id))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if !rows.is_empty() {
        let (rows, specs, mut updates) = restorable(&rows);
        rep.rejected += updates.len() as u64;
        let done = q.enqueue_batch(&specs).await?;
        for (r, e) in rows.iter().zip(done) {
            let mut u = Update::new(r.id, "relayed");
            u.task_id = Some(e.id.to_string());
            u.restored = true;
            updates.push(u);
        }
        apply(&mut tx, &updates).await?;
        rep.restored += rows.len() as u64;
        queues.record(|| {
            metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.to_owned(),
                    "direction" => "restored_to_redis")
            .increment(rows.len() as u64);
        });
    }
    tx.commit().await?;
    Ok(())
}

/// Of these keys, those a live row of the queue holds.
async fn live_keys(pool: &PgPool, queue: &str, keys: &[&str]) -> Result<HashSet<String>> {
    if keys.is_empty() {
        return Ok(HashSet::new());
    }
    let rows = sqlx::query(&format!(
        "SELECT key FROM dueq_outbox WHERE queue = $1 AND key = ANY($2) AND {LIVE}"
    ))
    .bind(queue)
    .bind(keys)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| Ok(r.try_get::<String, _>(0)?))
        .collect()
}

/// Cancels orphan `t`; returns the id of the task it removed. A keyed one is cancelled by
/// its key, which no wipe hands out again (the id it finds is the one to restore a row for,
/// below); a keyless one by id, if the id still names the task the page showed (same
/// creation time and no key): after a wipe Redis hands the same ids out again. That check
/// and the cancel are two calls, so a wipe between them may still let the cancel hit a new
/// task with a reused id; keyless tasks are never the outbox's own.
async fn cancel_orphan(q: &dueq::Queue, t: &dueq::Task) -> dueq::Result<Option<String>> {
    let report = match &t.key {
        Some(k) => q.cancel_report(&TaskRef::key(k.clone())?).await?,
        None => match q.get(&TaskRef::Id(t.id.clone())).await? {
            Some(now) if now.key.is_none() && now.created_at_ms == t.created_at_ms => {
                q.cancel_report(&TaskRef::Id(t.id.clone())).await?
            }
            _ => return Ok(None),
        },
    };
    Ok(match (report.outcome, report.id) {
        (CancelOutcome::Cancelled, Some(id)) => Some(id.to_string()),
        _ => None,
    })
}
