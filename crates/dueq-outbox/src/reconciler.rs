//! The reconciler: is responsible for repairing disagreements between the table (the truth)
//! and Redis, in both directions, with bounded work.
//!
//! * **Database → Redis.** Relayed rows due before now + `horizon_ms` whose task Redis does
//!   not know (neither live nor retained as succeeded or dead: a `FLUSHALL`, a failover that
//!   lost writes, a task cancelled in Redis behind the outbox's back) are enqueued again with
//!   their **original** due time and key; a row found finished is written back. A row whose
//!   task went missing `max_restores` times is given up (`dead`, with a `last_error`).
//! * **Redis → database.** Redis tasks whose row was deleted, or set to a finished state by
//!   anyone but the relay, are cancelled by id: the table's trigger leaves a tombstone for
//!   each, so no scan of Redis is needed. A Redis task with *no* live row and no tombstone
//!   (the database restored from an older backup) is found only in the queues declared
//!   owned by the outbox, by paging through their scheduled tasks (`orphans.rs`).
//!
//! A pass walks the rows in `(due_at_ms, id)` order, `batch` rows per PostgreSQL transaction
//! and one Redis lookup per row (pipelined), at most `max_rows_per_pass` rows; the next pass
//! goes on from where it stopped, so a million rows never hold either side for long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sqlx::{PgPool, Row};

use crate::config::RelayConfig;
use crate::error::Result;
use crate::orphans::OrphanSweep;
use crate::queues::Queues;
use crate::report::ReconcileReport;
use crate::rows::{Found, OutRow, ROW_COLUMNS, Update, apply, lock, relay_mode, restorable};
use crate::task::to_i64;
use crate::tombstones;

/// The reconciler of one relay: what it reads and writes, and where its last pass stopped.
pub(crate) struct Reconciler {
    pool: PgPool,
    cfg: RelayConfig,
    queues: Arc<Queues>,
    /// The `(due_at_ms, id)` the next pass goes on after, when the last one stopped early.
    cursor: Mutex<Option<(i64, i64)>>,
    orphans: OrphanSweep,
}

impl Reconciler {
    pub(crate) fn new(pool: PgPool, cfg: RelayConfig, queues: Arc<Queues>) -> Self {
        Self {
            pool,
            cfg,
            queues,
            cursor: Mutex::default(),
            orphans: OrphanSweep::default(),
        }
    }

    /// Runs one pass; see [`Relay::reconcile`](crate::Relay::reconcile).
    pub(crate) async fn pass(&self) -> Result<ReconcileReport> {
        let start = Instant::now();
        let mut rep = ReconcileReport::default();
        self.queues.forget_all();
        let horizon: i64 = sqlx::query_scalar("SELECT dueq_outbox_now_ms() + $1")
            .bind(to_i64(self.cfg.horizon_ms))
            .fetch_one(&self.pool)
            .await?;
        let mut cursor = lock(&self.cursor).take().unwrap_or((i64::MIN, i64::MIN));
        let mut examined = 0usize;
        rep.complete = loop {
            if examined >= self.cfg.max_rows_per_pass {
                *lock(&self.cursor) = Some(cursor);
                break false;
            }
            let n = self.cfg.batch.min(self.cfg.max_rows_per_pass - examined);
            let (seen, last) = self.reconcile_batch(horizon, cursor, n, &mut rep).await?;
            examined += seen;
            match last {
                Some(c) if seen >= n => cursor = c,
                _ => break true,
            }
        };
        rep.swept = self
            .orphans
            .sweep(
                &self.pool,
                &self.cfg,
                &self.queues,
                self.cfg.max_rows_per_pass,
                &mut rep,
            )
            .await? as u64;
        rep.complete &= self.orphans.is_done();
        loop {
            let r = tombstones::sweep(&self.pool, &self.queues, self.cfg.batch).await?;
            rep.removed += r.removed;
            if !r.more {
                break;
            }
        }
        let pending: i64 =
            sqlx::query_scalar("SELECT count(*) FROM dueq_outbox WHERE state = 'pending'")
                .fetch_one(&self.pool)
                .await?;
        rep.pending = u64::try_from(pending).unwrap_or(0);
        self.queues
            .record(|| metrics::gauge!("dueq_outbox_pending_rows").set(pending as f64));
        rep.took_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        Ok(rep)
    }

    /// One batch after `cursor`; returns rows seen and the last `(due_at_ms, id)`.
    async fn reconcile_batch(
        &self,
        horizon: i64,
        cursor: (i64, i64),
        n: usize,
        rep: &mut ReconcileReport,
    ) -> Result<(usize, Option<(i64, i64)>)> {
        let mut tx = self.pool.begin().await?;
        relay_mode(&mut tx).await?;
        let rows = sqlx::query(&format!(
            "SELECT {ROW_COLUMNS} FROM dueq_outbox
             WHERE state = 'relayed' AND relay_op IS NULL AND due_at_ms <= $1
               AND (due_at_ms, id) > ($2, $3)
             ORDER BY due_at_ms, id LIMIT $4 FOR UPDATE SKIP LOCKED"
        ))
        .bind(horizon)
        .bind(cursor.0)
        .bind(cursor.1)
        .bind(to_i64(n as u64))
        .fetch_all(&mut *tx)
        .await?;
        let seen = rows.len();
        let last = match rows.last() {
            Some(r) => Some((r.try_get::<i64, _>(4)?, r.try_get::<i64, _>(0)?)),
            None => None,
        };
        let rows = rows
            .iter()
            .map(OutRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        let found = futures_util::future::join_all(rows.iter().map(|r| self.queues.find(r))).await;
        let mut updates = Vec::with_capacity(rows.len());
        let mut missing: HashMap<&str, Vec<&OutRow>> = HashMap::new();
        for (r, f) in rows.iter().zip(found) {
            rep.examined += 1;
            match f? {
                Found::Live(id) => {
                    rep.in_sync += 1;
                    if r.task_id.as_deref() != Some(id.as_str()) {
                        let mut u = Update::new(r.id, "relayed");
                        u.task_id = Some(id);
                        updates.push(u);
                    }
                }
                Found::Succeeded => {
                    rep.finished += 1;
                    updates.push(Update::new(r.id, "succeeded"));
                }
                Found::Dead(e) => {
                    rep.finished += 1;
                    let mut u = Update::new(r.id, "dead");
                    u.last_error = e;
                    updates.push(u);
                }
                Found::Missing if r.restores >= self.cfg.max_restores => {
                    rep.gave_up += 1;
                    let mut u = Update::new(r.id, "dead");
                    u.last_error = Some(format!(
                        "missing in Redis after {} restores (lost again, or acknowledged \
                         beyond the queue's succeeded retention)",
                        r.restores
                    ));
                    updates.push(u);
                }
                Found::Missing => missing.entry(r.queue.as_str()).or_default().push(r),
            }
        }
        for (queue, group) in missing {
            let q = self.queues.get(queue).await?;
            let (group, specs, refused) = restorable(group);
            rep.rejected += refused.len() as u64;
            updates.extend(refused);
            let done = q.enqueue_batch(&specs).await?;
            for (r, e) in group.iter().zip(done) {
                let mut u = Update::new(r.id, "relayed");
                u.task_id = Some(e.id.to_string());
                u.restored = true;
                updates.push(u);
            }
            rep.restored += specs.len() as u64;
            self.queues.record(|| {
                metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.to_owned(),
                    "direction" => "restored_to_redis")
                .increment(specs.len() as u64);
            });
        }
        apply(&mut tx, &updates).await?;
        tx.commit().await?;
        Ok((seen, last))
    }
}
