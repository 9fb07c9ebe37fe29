//! The relay: is responsible for carrying committed rows into Redis (enqueue, cancel,
//! reschedule), removing the Redis tasks of rows deleted or finished by hand (`tombstones.rs`), and
//! writing what happened in Redis (succeeded, dead) back to the table.
//!
//! Every step takes a batch of rows with `FOR UPDATE SKIP LOCKED` in one PostgreSQL
//! transaction, does the Redis calls, writes the results with one `UPDATE ... FROM unnest()`
//! and commits; several relays therefore take disjoint batches, and a relay that dies before
//! its commit leaves the rows to be taken again (the Redis enqueue is idempotent by key, so
//! a repeat finds the task it already made).
//!
//! How outcomes are learnt: no worker-side hook exists, so the relay looks the task up by id
//! in Redis for relayed rows that are due (at most one lookup per row per `recheck_ms`). An
//! acknowledged task leaves no record in Redis unless the queue retains succeeded tasks, so
//! the relay sets the queues it serves to keep the newest `succeeded_retention` of them
//! (default 10 000). A task found neither live nor retained is left `relayed` for the
//! reconciler, which treats it as lost (see `reconciler.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dueq::{
    CancelOutcome, EnqueueOutcome, Enqueued, OnConflict, Queue, RescheduleOutcome, TaskRef,
    TaskSpec, TaskState,
};
use futures_util::future::join_all;
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::config::RelayConfig;
use crate::error::Result;
use crate::queues::{Queues, is_live};
use crate::reconciler::Reconciler;
use crate::report::{ReconcileReport, RelayReport};
use crate::rows::{Found, OutRow, ROW_COLUMNS, Update, apply, relay_mode};
use crate::task::{to_i64, to_u64};
use crate::tombstones;

/// The channel the table's triggers notify.
pub const CHANNEL: &str = "dueq_outbox";

/// Moves committed outbox rows into Redis and writes outcomes back; also runs the reconciler
/// ([`Relay::reconcile`]). Cheap to clone.
#[derive(Clone)]
pub struct Relay {
    pool: PgPool,
    cfg: RelayConfig,
    queues: Arc<Queues>,
    reconciler: Arc<Reconciler>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("cfg", &self.cfg).finish()
    }
}

impl Relay {
    /// A relay over this pool (the database holding the outbox table, migrated) and this
    /// Redis client.
    pub fn new(pool: PgPool, client: dueq::Client, cfg: RelayConfig) -> Self {
        let queues = Arc::new(Queues::new(client, cfg.succeeded_retention));
        let reconciler = Arc::new(Reconciler::new(pool.clone(), cfg.clone(), queues.clone()));
        Self {
            pool,
            cfg,
            queues,
            reconciler,
        }
    }

    /// The PostgreSQL pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Runs one reconciler pass now (the on-demand form; [`Relay::run_until`] runs one every
    /// `reconcile_interval_ms`). Safe to run beside relays and other reconcilers: rows are
    /// taken with `FOR UPDATE SKIP LOCKED`, and the owned queues' sweep cancels orphans by
    /// key and waits for a relay that holds a row it must repair (see `orphans.rs`).
    ///
    /// # Errors
    /// [`crate::Error::Postgres`] or [`crate::Error::Dueq`]; batches already committed stay
    /// done, the rest is picked up by the next pass.
    pub async fn reconcile(&self) -> Result<ReconcileReport> {
        self.reconciler.pass().await
    }

    /// One round of every relay duty: a batch of rows to carry into Redis, a batch of
    /// tombstones, a batch of outcome lookups.
    ///
    /// # Errors
    /// [`Error::Postgres`] or [`Error::Dueq`]; the failed batch's transaction is rolled back,
    /// so its rows are taken again by the next call (nothing lost).
    pub async fn relay_once(&self) -> Result<RelayReport> {
        let mut r = self.relay_batch().await?;
        r.add(tombstones::sweep(&self.pool, &self.queues, self.cfg.batch).await?);
        r.add(self.track_batch().await?);
        Ok(r)
    }

    /// Carries one batch of rows with a pending `relay_op` into Redis.
    async fn relay_batch(&self) -> Result<RelayReport> {
        let mut tx = self.pool.begin().await?;
        relay_mode(&mut tx).await?;
        let rows = sqlx::query(&format!(
            "SELECT {ROW_COLUMNS} FROM dueq_outbox WHERE relay_op IS NOT NULL
               AND NOT (relay_op = 'renew' AND coalesce(checked_at_ms, 0) > dueq_outbox_now_ms() - 1000)
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED"
        ))
        .bind(to_i64(self.cfg.batch as u64))
        .fetch_all(&mut *tx)
        .await?;
        let mut report = RelayReport {
            more: rows.len() >= self.cfg.batch,
            ..RelayReport::default()
        };
        if rows.is_empty() {
            return Ok(report);
        }
        let rows = rows
            .iter()
            .map(OutRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        let mut updates = Vec::with_capacity(rows.len());
        // enqueues: one batch per queue, in row order
        let mut by_queue: HashMap<&str, Vec<&OutRow>> = HashMap::new();
        let mut others = Vec::new();
        for r in &rows {
            if r.relay_op.as_deref() == Some("enqueue") {
                by_queue.entry(r.queue.as_str()).or_default().push(r);
            } else {
                others.push(r);
            }
        }
        for (queue, rows) in by_queue {
            let q = self.queues.get(queue).await?;
            // Replace, not keep: a task already under the key (this row's own, from a round
            // whose commit failed, or one the database no longer knows) takes the row's due
            // time and payload, since the row is the truth; the same task id comes back.
            let mut group = Vec::with_capacity(rows.len());
            let mut specs: Vec<TaskSpec> = Vec::with_capacity(rows.len());
            for r in rows {
                match r.spec() {
                    Ok(s) => {
                        group.push(r);
                        specs.push(s.on_conflict(OnConflict::Replace));
                    }
                    Err(why) => {
                        updates.push(Update::rejected(r, &why));
                        report.rejected += 1;
                    }
                }
            }
            if specs.is_empty() {
                continue;
            }
            match q.enqueue_batch(&specs).await {
                Ok(done) => {
                    for (r, e) in group.iter().zip(done) {
                        updates.push(enqueued(r, &e));
                    }
                    self.queues.record(|| {
                        for r in &group {
                            lag(queue, r.age_ms);
                        }
                    });
                    report.enqueued += specs.len() as u64;
                }
                Err(e) if e.is_retryable() => return Err(e.into()),
                // One bad row refuses the whole batch: find it (them) one by one.
                Err(_) => {
                    for (r, s) in group.iter().zip(specs) {
                        match q.enqueue(s).await {
                            Ok(e) => {
                                updates.push(enqueued(r, &e));
                                report.enqueued += 1;
                            }
                            Err(e) if e.is_retryable() => return Err(e.into()),
                            Err(e) => {
                                updates.push(Update::rejected(r, &e.to_string()));
                                report.rejected += 1;
                            }
                        }
                    }
                }
            }
            self.queues.record(|| {
                metrics::counter!("dueq_outbox_relayed_total", "queue" => queue.to_owned(), "op" => "enqueue")
                    .increment(group.len() as u64);
            });
        }
        // cancels and reschedules: one call each, all in flight at once
        let results = join_all(others.iter().map(|r| self.apply_op(r))).await;
        let mut waiting = Vec::new();
        for (r, res) in others.iter().zip(results) {
            let Some(u) = res? else {
                waiting.push(r.id);
                continue;
            };
            let op = match r.relay_op.as_deref() {
                Some("cancel") => {
                    report.cancels += 1;
                    "cancel"
                }
                Some("renew") => {
                    report.cancels += 1;
                    report.enqueued += 1;
                    "renew"
                }
                _ => {
                    report.reschedules += 1;
                    "reschedule"
                }
            };
            self.queues.record(|| {
                metrics::counter!("dueq_outbox_relayed_total", "queue" => r.queue.clone(), "op" => op)
                    .increment(1);
            });
            updates.push(u);
        }
        apply(&mut tx, &updates).await?;
        // a renew waiting for its old task's run is looked at again a second later, so it
        // neither holds back the rows behind it nor keeps the relay busy
        if !waiting.is_empty() {
            sqlx::query(
                "UPDATE dueq_outbox SET checked_at_ms = dueq_outbox_now_ms() WHERE id = ANY($1)",
            )
            .bind(&waiting)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(report)
    }

    /// Applies a row's cancel, renew or reschedule in Redis; returns the row's new state
    /// (`None`: left as it is for a later round).
    async fn apply_op(&self, r: &OutRow) -> Result<Option<Update>> {
        let q = self.queues.get(&r.queue).await?;
        let target = r.key_ref()?;
        if r.relay_op.as_deref() == Some("renew") {
            return self.renew(&q, r, &target).await;
        }
        if r.relay_op.as_deref() == Some("cancel") {
            let mut u = match q.cancel(&target).await? {
                CancelOutcome::Cancelled => Update::new(r.id, "cancelled"),
                CancelOutcome::InProgress => {
                    let mut u = Update::new(r.id, "relayed");
                    u.last_error = Some("cancel came while a worker was running the task".into());
                    // a row cancelled while pending knows no task id yet: the running one's,
                    // so its outcome is found by id once it ends
                    if r.task_id.is_none() {
                        u.task_id = q.get(&target).await?.map(|t| t.id.to_string());
                    }
                    u
                }
                _ => match self.queues.find(r).await? {
                    Found::Succeeded => Update::new(r.id, "succeeded"),
                    Found::Dead(e) => {
                        let mut u = Update::new(r.id, "dead");
                        u.last_error = e;
                        u
                    }
                    // Not live by key (the cancel just said so) and no record: it will not
                    // run, which is what the cancel asked for.
                    _ => Update::new(r.id, "cancelled"),
                },
            };
            u.checked = false;
            return Ok(Some(u));
        }
        let due = dueq::Due::AtMs(to_u64(r.due_at_ms));
        let mut u = Update::new(r.id, "relayed");
        // Not found: finished or lost; outcome tracking and the reconciler decide.
        if q.reschedule(&target, due).await? == RescheduleOutcome::InProgress {
            u.last_error = Some("reschedule came while a worker was running the task".into());
        }
        Ok(Some(u))
    }

    /// A new timer set under the key of a row being cancelled: the old timer's task (the
    /// row's `task_id`) is cancelled, then the row's payload and due time are enqueued as a
    /// task of its own. `None` (the row is left for a later round) while a worker runs the
    /// old task: the new timer is set once that run ends. A task under the key that is not
    /// the old one is the new timer's, from a round that failed to commit after Redis
    /// answered: it is kept (aligned to the row if it still waits), never made twice.
    async fn renew(&self, q: &Queue, r: &OutRow, target: &TaskRef) -> Result<Option<Update>> {
        // (a row that never knew its old task's id cannot tell the two apart)
        let ours = match &r.task_id {
            Some(old) => q
                .get(target)
                .await?
                .is_some_and(|t| is_live(&t) && t.id.as_str() != old),
            None => false,
        };
        if !ours && q.cancel(target).await? == CancelOutcome::InProgress {
            return Ok(None);
        }
        let spec = match r.spec() {
            Ok(s) => s.on_conflict(OnConflict::Replace),
            Err(why) => return Ok(Some(Update::rejected(r, &why))),
        };
        match q.enqueue(spec).await {
            Ok(e) => Ok(Some(enqueued(r, &e))),
            Err(e) if e.is_retryable() => Err(e.into()),
            Err(e) => Ok(Some(Update::rejected(r, &e.to_string()))),
        }
    }

    /// Looks up, in Redis, one batch of relayed rows that are due, and writes back those that
    /// finished.
    async fn track_batch(&self) -> Result<RelayReport> {
        let mut tx = self.pool.begin().await?;
        relay_mode(&mut tx).await?;
        let rows = sqlx::query(&format!(
            "SELECT {ROW_COLUMNS} FROM dueq_outbox
             WHERE state = 'relayed' AND relay_op IS NULL AND due_at_ms <= dueq_outbox_now_ms()
               AND (checked_at_ms IS NULL OR checked_at_ms <= dueq_outbox_now_ms() - $2)
             ORDER BY due_at_ms, id LIMIT $1 FOR UPDATE SKIP LOCKED"
        ))
        .bind(to_i64(self.cfg.batch as u64))
        .bind(to_i64(self.cfg.recheck_ms))
        .fetch_all(&mut *tx)
        .await?;
        // A full batch does not set `more`: lookups are paced by `recheck_ms`, not repeated
        // back to back.
        let mut report = RelayReport::default();
        if rows.is_empty() {
            return Ok(report);
        }
        let rows = rows
            .iter()
            .map(OutRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        let found = join_all(rows.iter().map(|r| self.queues.find(r))).await;
        let mut updates = Vec::with_capacity(rows.len());
        for (r, f) in rows.iter().zip(found) {
            let u = match f? {
                Found::Succeeded => self.queues.record(|| finished(r, "succeeded", None)),
                Found::Dead(e) => self.queues.record(|| finished(r, "dead", e)),
                Found::Missing => {
                    // Redis may have lost the queue's settings too (a wipe): set the
                    // succeeded retention again on the next use.
                    self.queues.forget(&r.queue);
                    let mut u = Update::new(r.id, "relayed");
                    u.checked = true;
                    u
                }
                Found::Live(id) => {
                    let mut u = Update::new(r.id, "relayed");
                    u.task_id = Some(id);
                    u.checked = true;
                    u
                }
            };
            if u.state != "relayed" {
                report.finished += 1;
            }
            updates.push(u);
        }
        apply(&mut tx, &updates).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// Runs the relay until `shutdown` completes: woken by `LISTEN dueq_outbox`, polling every
    /// `poll_ms` as a fallback, running a reconciler pass at start and every
    /// `reconcile_interval_ms`. PostgreSQL and Redis errors are logged and retried with
    /// backoff (100 ms doubling to 10 s); rows are never lost, only delayed.
    ///
    /// # Errors
    /// None at present: every failure is retried; the `Result` is kept for future settings
    /// errors.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) -> Result<()> {
        tokio::pin!(shutdown);
        let backoff = dueq::Backoff::new(100, 2.0, 10_000);
        let mut failures = 0u32;
        // the reconciler's own count: a healthy relay round must not reset its backoff
        let mut reconcile_failures = 0u32;
        let mut listener: Option<PgListener> = None;
        let interval = Duration::from_millis(self.cfg.reconcile_interval_ms);
        let mut next_reconcile = tokio::time::Instant::now();
        loop {
            if listener.is_none() {
                listener = match listen(&self.pool).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN failed; polling until it works");
                        None
                    }
                };
            }
            let mut more = false;
            if tokio::time::Instant::now() >= next_reconcile {
                match self.reconcile().await {
                    Ok(rep) => {
                        reconcile_failures = 0;
                        if rep.restored
                            + rep.removed
                            + rep.orphans_removed
                            + rep.gave_up
                            + rep.rejected
                            > 0
                        {
                            tracing::warn!(?rep, "reconciler repaired Redis");
                        } else {
                            tracing::info!(?rep, "reconciler pass");
                        }
                        more |= !rep.complete;
                        next_reconcile = tokio::time::Instant::now()
                            + if rep.complete {
                                interval
                            } else {
                                Duration::from_millis(self.cfg.poll_ms)
                            };
                    }
                    Err(e) => {
                        reconcile_failures = reconcile_failures.saturating_add(1);
                        let wait = backoff.delay_ms(reconcile_failures);
                        tracing::warn!(error = %e, retry_in_ms = wait, "reconciler pass failed");
                        next_reconcile = tokio::time::Instant::now() + Duration::from_millis(wait);
                    }
                }
            }
            match self.relay_once().await {
                Ok(r) => {
                    failures = 0;
                    more |= r.more;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = Duration::from_millis(backoff.delay_ms(failures));
                    tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "relay failed");
                    tokio::select! {
                        () = &mut shutdown => return Ok(()),
                        () = tokio::time::sleep(wait) => {}
                    }
                    continue;
                }
            }
            if more {
                tokio::task::yield_now().await;
                continue;
            }
            let until = next_reconcile
                .min(tokio::time::Instant::now() + Duration::from_millis(self.cfg.poll_ms));
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep_until(until) => {}
                n = recv(&mut listener) => {
                    if let Err(e) = n {
                        tracing::warn!(error = %e, "LISTEN connection lost; reconnecting");
                        listener = None;
                    }
                }
            }
        }
    }

    /// Whether PostgreSQL answers (`SELECT 1`) and Redis is ready (see
    /// [`dueq::Client::readiness`]); the first failure's text otherwise.
    pub async fn readiness(&self) -> std::result::Result<(), String> {
        postgres_readiness(&self.pool)
            .await
            .map_err(|e| format!("postgres: {e}"))?;
        let r = self.queues.client().readiness().await;
        if r.ready() {
            Ok(())
        } else {
            Err(r.error.unwrap_or_else(|| "redis not ready".into()))
        }
    }
}

/// Whether PostgreSQL answers a `SELECT 1` on `pool` (taking a pooled connection, or
/// opening one); the error's text otherwise. This is the `postgres` readiness check of `dueq
/// serve --postgres`, where Redis readiness is checked on its own (see [`Relay::readiness`]
/// for both at once).
///
/// # Errors
/// The PostgreSQL error, as text. Not bounded in time beyond the pool's acquire timeout: wrap
/// it in a timeout where an answer is needed soon (`dueq serve` waits at most 2 s).
pub async fn postgres_readiness(pool: &PgPool) -> std::result::Result<(), String> {
    sqlx::query("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The update of a row the relay enqueued as task `e`. A row whose key is in the unique
/// window of a task that already finished takes that task's outcome: nothing was enqueued for
/// it, and nothing will run.
fn enqueued(r: &OutRow, e: &Enqueued) -> Update {
    let mut u = match e.outcome {
        EnqueueOutcome::Finished(state) => {
            let (to, error) = match state {
                TaskState::Succeeded => ("succeeded", None),
                TaskState::Dead => ("dead", Some(format!("task {} under this key died", e.id))),
                s => (
                    "cancelled",
                    Some(format!("task {} under this key was {}", e.id, s.as_str())),
                ),
            };
            let mut u = finished(
                r,
                to,
                error.map(|m| format!("{m}; its unique window holds the key")),
            );
            u.checked = true;
            u
        }
        _ => Update::new(r.id, "relayed"),
    };
    u.task_id = Some(e.id.to_string());
    u
}

fn finished(r: &OutRow, state: &'static str, error: Option<String>) -> Update {
    metrics::counter!("dueq_outbox_finished_total", "queue" => r.queue.clone(), "outcome" => state)
        .increment(1);
    let mut u = Update::new(r.id, state);
    u.last_error = error;
    u
}

fn lag(queue: &str, age_ms: i64) {
    metrics::histogram!("dueq_outbox_relay_lag_seconds", "queue" => queue.to_owned())
        .record(age_ms.max(0) as f64 / 1000.0);
}

async fn listen(pool: &PgPool) -> Result<PgListener> {
    let mut l = PgListener::connect_with(pool).await?;
    l.listen(CHANNEL).await?;
    Ok(l)
}

/// Waits for a notification; never completes without a listener (the poll timer wakes).
async fn recv(listener: &mut Option<PgListener>) -> Result<()> {
    match listener {
        Some(l) => {
            l.recv().await?;
            // fold a burst of notifications into one wake-up
            while l.next_buffered().is_some() {}
            Ok(())
        }
        None => std::future::pending().await,
    }
}
