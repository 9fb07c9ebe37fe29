//! The relay: is responsible for carrying committed rows into Redis (enqueue, cancel,
//! reschedule), removing the Redis tasks of rows deleted or finished by hand (tombstones), and
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dueq::{CancelOutcome, Queue, RescheduleOutcome, TaskId, TaskRef, TaskSpec, TaskState};
use futures_util::future::join_all;
use sqlx::postgres::{PgListener, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::error::{Error, Result};
use crate::task::{to_i64, to_u64};

/// The channel the table's triggers notify.
pub const CHANNEL: &str = "dueq_outbox";

/// Settings of a [`Relay`] (and of its reconciler). Build with `RelayConfig::default()` and
/// the setting methods.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub(crate) batch: usize,
    pub(crate) poll_ms: u64,
    pub(crate) recheck_ms: u64,
    pub(crate) succeeded_retention: u64,
    pub(crate) reconcile_interval_ms: u64,
    pub(crate) horizon_ms: u64,
    pub(crate) max_rows_per_pass: usize,
    pub(crate) max_restores: i32,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch: 1_000,
            poll_ms: 1_000,
            recheck_ms: 1_000,
            succeeded_retention: 10_000,
            reconcile_interval_ms: 300_000,
            horizon_ms: 3_600_000,
            max_rows_per_pass: 100_000,
            max_restores: 3,
        }
    }
}

impl RelayConfig {
    /// Rows per batch (one PostgreSQL transaction, one Redis script call per queue for
    /// enqueues), 1 to 1 000. Default 1 000.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, 1_000);
        self
    }

    /// Fallback poll when no notification arrives, ms (at least 10). Default 1 000: a lost
    /// `NOTIFY` delays a row by at most this.
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll_ms = ms.max(10);
        self
    }

    /// Shortest time between two outcome lookups of one relayed row, ms. Default 1 000.
    pub fn recheck_ms(mut self, ms: u64) -> Self {
        self.recheck_ms = ms;
        self
    }

    /// Succeeded tasks each served queue keeps in Redis so the relay can tell "acknowledged"
    /// from "lost" (set on the queue's settings when the relay first meets the queue; 0 leaves
    /// the queue's setting alone). Default 10 000. An acknowledged task pushed out of the
    /// retention before the relay looked it up is taken for lost and run again (at most
    /// `max_restores` times).
    pub fn succeeded_retention(mut self, n: u64) -> Self {
        self.succeeded_retention = n;
        self
    }

    /// Time between two reconciler passes of [`Relay::run_until`], ms (at least 1 000).
    /// Default 300 000 (5 minutes).
    pub fn reconcile_interval_ms(mut self, ms: u64) -> Self {
        self.reconcile_interval_ms = ms.max(1_000);
        self
    }

    /// The reconciler checks relayed rows due before now plus this, ms. Default 3 600 000
    /// (1 hour); keep it above the interval so a task lost in Redis is restored before it is
    /// due.
    pub fn horizon_ms(mut self, ms: u64) -> Self {
        self.horizon_ms = ms;
        self
    }

    /// Rows one reconciler pass looks at, at most (in batches of `batch`); the next pass goes
    /// on from where this one stopped. Default 100 000.
    pub fn max_rows_per_pass(mut self, n: usize) -> Self {
        self.max_rows_per_pass = n.max(1);
        self
    }

    /// Times the reconciler re-adds one row's task before giving up on it (the row is then
    /// `dead` with a `last_error` saying so). Default 3.
    pub fn max_restores(mut self, n: u32) -> Self {
        self.max_restores = i32::try_from(n).unwrap_or(i32::MAX);
        self
    }
}

/// What one [`Relay::relay_once`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayReport {
    /// Rows enqueued into Redis.
    pub enqueued: u64,
    /// Cancels applied in Redis (whatever their outcome).
    pub cancels: u64,
    /// Reschedules applied in Redis.
    pub reschedules: u64,
    /// Rows Redis refused (now `rejected`).
    pub rejected: u64,
    /// Redis tasks removed for deleted or finished rows (tombstones).
    pub removed: u64,
    /// Rows found finished in Redis and written back (succeeded or dead).
    pub finished: u64,
    /// Whether a batch of rows to relay or of tombstones was full (more work is likely
    /// waiting).
    pub more: bool,
}

impl RelayReport {
    fn add(&mut self, o: RelayReport) {
        self.enqueued += o.enqueued;
        self.cancels += o.cancels;
        self.reschedules += o.reschedules;
        self.rejected += o.rejected;
        self.removed += o.removed;
        self.finished += o.finished;
        self.more |= o.more;
    }
}

/// Moves committed outbox rows into Redis and writes outcomes back; also runs the reconciler
/// ([`Relay::reconcile`]). Cheap to clone.
#[derive(Clone)]
pub struct Relay {
    pub(crate) pool: PgPool,
    pub(crate) client: dueq::Client,
    pub(crate) cfg: RelayConfig,
    queues: Arc<Mutex<HashMap<String, Queue>>>,
    pub(crate) cursor: Arc<Mutex<Option<(i64, i64)>>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("cfg", &self.cfg).finish()
    }
}

/// A row update: the state a step decided, written back in one statement per batch.
#[derive(Debug)]
pub(crate) struct Update {
    pub id: i64,
    pub state: &'static str,
    pub task_id: Option<String>,
    pub last_error: Option<String>,
    pub checked: bool,
    pub restored: bool,
}

impl Update {
    pub(crate) fn new(id: i64, state: &'static str) -> Self {
        Self {
            id,
            state,
            task_id: None,
            last_error: None,
            checked: false,
            restored: false,
        }
    }
}

/// A row as the relay reads it.
#[derive(Debug)]
pub(crate) struct OutRow {
    pub id: i64,
    pub queue: String,
    pub key: String,
    pub payload: Vec<u8>,
    pub due_at_ms: i64,
    pub max_attempts: Option<i32>,
    pub lease_ms: Option<i64>,
    pub relay_op: Option<String>,
    pub task_id: Option<String>,
    pub restores: i32,
    pub age_ms: i64,
}

/// The columns [`OutRow::from_row`] reads, in order.
pub(crate) const ROW_COLUMNS: &str = "id, queue, key, payload, due_at_ms, max_attempts, lease_ms, \
     relay_op, task_id, restores, \
     dueq_outbox_now_ms() - (extract(epoch FROM created_at) * 1000)::bigint AS age_ms";

impl OutRow {
    pub(crate) fn from_row(r: &PgRow) -> Result<Self> {
        Ok(Self {
            id: r.try_get(0)?,
            queue: r.try_get(1)?,
            key: r.try_get(2)?,
            payload: r.try_get(3)?,
            due_at_ms: r.try_get(4)?,
            max_attempts: r.try_get(5)?,
            lease_ms: r.try_get(6)?,
            relay_op: r.try_get(7)?,
            task_id: r.try_get(8)?,
            restores: r.try_get(9)?,
            age_ms: r.try_get(10)?,
        })
    }

    /// The row's live Redis task: by key, since the row is the one live row of its key (task
    /// ids are not used here: a wiped Redis hands out the same ids again).
    pub(crate) fn key_ref(&self) -> Result<TaskRef> {
        Ok(TaskRef::key(self.key.clone())?)
    }

    /// The dueq task for this row, due at its stored (original) due time.
    pub(crate) fn spec(&self) -> TaskSpec {
        let mut s = TaskSpec::new(self.payload.clone())
            .key(self.key.clone())
            .due_at_ms(to_u64(self.due_at_ms));
        if let Some(n) = self.max_attempts.and_then(|n| u32::try_from(n).ok()) {
            s = s.max_attempts(n);
        }
        if let Some(l) = self.lease_ms {
            s = s.lease_ms(to_u64(l));
        }
        s
    }
}

/// Marks the transaction as the relay's, so the table's guard trigger leaves no tombstone
/// for the state changes it writes.
pub(crate) async fn relay_mode(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
    sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Writes a batch of [`Update`]s in one statement.
pub(crate) async fn apply(tx: &mut Transaction<'_, Postgres>, updates: &[Update]) -> Result<()> {
    if updates.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = updates.iter().map(|u| u.id).collect();
    let states: Vec<&str> = updates.iter().map(|u| u.state).collect();
    let task_ids: Vec<Option<&str>> = updates.iter().map(|u| u.task_id.as_deref()).collect();
    let errors: Vec<Option<&str>> = updates.iter().map(|u| u.last_error.as_deref()).collect();
    let checked: Vec<bool> = updates.iter().map(|u| u.checked).collect();
    let restored: Vec<bool> = updates.iter().map(|u| u.restored).collect();
    sqlx::query(
        "UPDATE dueq_outbox AS o SET
             state = u.state,
             relay_op = NULL,
             task_id = coalesce(u.task_id, o.task_id),
             last_error = coalesce(u.last_error, o.last_error),
             relayed_at = CASE WHEN o.state = 'pending' AND u.state = 'relayed'
                               THEN clock_timestamp() ELSE o.relayed_at END,
             finished_at = CASE WHEN u.state IN ('succeeded', 'dead', 'cancelled', 'rejected')
                                THEN clock_timestamp() ELSE o.finished_at END,
             checked_at_ms = CASE WHEN u.checked THEN dueq_outbox_now_ms() END,
             restores = o.restores + CASE WHEN u.restored THEN 1 ELSE 0 END
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::bool[])
              AS u(id, state, task_id, last_error, checked, restored)
         WHERE o.id = u.id",
    )
    .bind(&ids)
    .bind(&states)
    .bind(&task_ids)
    .bind(&errors)
    .bind(&checked)
    .bind(&restored)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// What a lookup by id says about a row's task.
pub(crate) enum Found {
    /// Scheduled or active, with this id.
    Live(String),
    Succeeded,
    Dead(Option<String>),
    Missing,
}

impl Relay {
    /// A relay over this pool (the database holding the outbox table, migrated) and this
    /// Redis client.
    pub fn new(pool: PgPool, client: dueq::Client, cfg: RelayConfig) -> Self {
        Self {
            pool,
            client,
            cfg,
            queues: Arc::default(),
            cursor: Arc::default(),
        }
    }

    /// The PostgreSQL pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The queue handle for a name, setting its succeeded retention on first use.
    pub(crate) async fn queue(&self, name: &str) -> Result<Queue> {
        if let Some(q) = lock(&self.queues).get(name) {
            return Ok(q.clone());
        }
        let q = self.client.queue(name)?;
        if self.cfg.succeeded_retention > 0 {
            q.configure(dueq::QueueSettings::default().succeeded_max(self.cfg.succeeded_retention))
                .await?;
        }
        lock(&self.queues).insert(name.to_owned(), q.clone());
        Ok(q)
    }

    /// Forgets the queue handles, so each queue's retention is set again on next use (Redis
    /// may have lost its settings).
    pub(crate) fn forget_queues(&self) {
        lock(&self.queues).clear();
    }

    /// Looks up a row's task in Redis: live by key, else finished by its id (a task found by
    /// id counts only if it carries the row's key: after a wipe Redis reuses ids).
    pub(crate) async fn find(&self, row: &OutRow) -> Result<Found> {
        let q = self.queue(&row.queue).await?;
        if let Some(t) = q.get(&row.key_ref()?).await? {
            return Ok(Found::Live(t.id.to_string()));
        }
        let Some(id) = &row.task_id else {
            return Ok(Found::Missing);
        };
        let Ok(id) = TaskId::new(id.clone()) else {
            return Ok(Found::Missing);
        };
        Ok(match q.get(&TaskRef::Id(id)).await? {
            Some(t) if t.key.as_deref() == Some(row.key.as_str()) => match t.state {
                TaskState::Succeeded => Found::Succeeded,
                TaskState::Dead => Found::Dead(t.last_error),
                _ => Found::Live(t.id.to_string()),
            },
            _ => Found::Missing,
        })
    }

    /// One round of every relay duty: a batch of rows to carry into Redis, a batch of
    /// tombstones, a batch of outcome lookups.
    ///
    /// # Errors
    /// [`Error::Postgres`] or [`Error::Dueq`]; the failed batch's transaction is rolled back,
    /// so its rows are taken again by the next call (nothing lost).
    pub async fn relay_once(&self) -> Result<RelayReport> {
        let mut r = self.relay_batch().await?;
        r.add(self.sweep_tombstones().await?);
        r.add(self.track_batch().await?);
        Ok(r)
    }

    /// Carries one batch of rows with a pending `relay_op` into Redis.
    async fn relay_batch(&self) -> Result<RelayReport> {
        let mut tx = self.pool.begin().await?;
        relay_mode(&mut tx).await?;
        let rows = sqlx::query(&format!(
            "SELECT {ROW_COLUMNS} FROM dueq_outbox WHERE relay_op IS NOT NULL
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
        for (queue, group) in by_queue {
            let q = self.queue(queue).await?;
            let specs: Vec<TaskSpec> = group.iter().map(|r| r.spec()).collect();
            match q.enqueue_batch(&specs).await {
                Ok(done) => {
                    for (r, e) in group.iter().zip(done) {
                        let mut u = Update::new(r.id, "relayed");
                        u.task_id = Some(e.id.to_string());
                        updates.push(u);
                        lag(queue, r.age_ms);
                    }
                    report.enqueued += specs.len() as u64;
                }
                Err(e) if e.is_retryable() => return Err(e.into()),
                // One bad row refuses the whole batch: find it (them) one by one.
                Err(_) => {
                    for (r, s) in group.iter().zip(specs) {
                        match q.enqueue(s).await {
                            Ok(e) => {
                                let mut u = Update::new(r.id, "relayed");
                                u.task_id = Some(e.id.to_string());
                                updates.push(u);
                                report.enqueued += 1;
                            }
                            Err(e) if e.is_retryable() => return Err(e.into()),
                            Err(e) => {
                                tracing::warn!(row = r.id, queue, error = %e, "row refused by Redis");
                                let mut u = Update::new(r.id, "rejected");
                                u.last_error = Some(format!("refused by dueq: {e}"));
                                updates.push(u);
                                report.rejected += 1;
                            }
                        }
                    }
                }
            }
            metrics::counter!("dueq_outbox_relayed_total", "queue" => queue.to_owned(), "op" => "enqueue")
                .increment(group.len() as u64);
        }
        // cancels and reschedules: one call each, all in flight at once
        let results = join_all(others.iter().map(|r| self.apply_op(r))).await;
        for (r, res) in others.iter().zip(results) {
            let u = res?;
            if r.relay_op.as_deref() == Some("cancel") {
                report.cancels += 1;
            } else {
                report.reschedules += 1;
            }
            metrics::counter!("dueq_outbox_relayed_total", "queue" => r.queue.clone(),
                "op" => if r.relay_op.as_deref() == Some("cancel") { "cancel" } else { "reschedule" })
            .increment(1);
            updates.push(u);
        }
        apply(&mut tx, &updates).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// Applies a row's cancel or reschedule in Redis; returns the row's new state.
    async fn apply_op(&self, r: &OutRow) -> Result<Update> {
        let q = self.queue(&r.queue).await?;
        let target = r.key_ref()?;
        if r.relay_op.as_deref() == Some("cancel") {
            let mut u = match q.cancel(&target).await? {
                CancelOutcome::Cancelled => Update::new(r.id, "cancelled"),
                CancelOutcome::InProgress => {
                    let mut u = Update::new(r.id, "relayed");
                    u.last_error = Some("cancel came while a worker was running the task".into());
                    u
                }
                _ => match self.find(r).await? {
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
            return Ok(u);
        }
        let due = dueq::Due::AtMs(to_u64(r.due_at_ms));
        let mut u = Update::new(r.id, "relayed");
        // Not found: finished or lost; outcome tracking and the reconciler decide.
        if q.reschedule(&target, due).await? == RescheduleOutcome::InProgress {
            u.last_error = Some("reschedule came while a worker was running the task".into());
        }
        Ok(u)
    }

    /// Cancels, by id, the Redis tasks of rows that were deleted or finished by hand.
    pub(crate) async fn sweep_tombstones(&self) -> Result<RelayReport> {
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(
            "SELECT id, queue, key, task_id FROM dueq_outbox_tombstones
             WHERE retry_at_ms <= dueq_outbox_now_ms()
             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
        )
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
            let q = self.queue(queue).await?;
            let target = TaskRef::key(key.clone())?;
            match q.get(&target).await? {
                Some(t) if t.id.as_str() == task => {
                    Ok::<_, Error>(q.cancel(&TaskRef::Id(t.id)).await?)
                }
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
                    metrics::counter!("dueq_outbox_reconciled_total", "queue" => queue.clone(),
                        "direction" => "removed_from_redis")
                    .increment(1);
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
        let found = join_all(rows.iter().map(|r| self.find(r))).await;
        let mut updates = Vec::with_capacity(rows.len());
        for (r, f) in rows.iter().zip(found) {
            let u = match f? {
                Found::Succeeded => finished(r, "succeeded", None),
                Found::Dead(e) => finished(r, "dead", e),
                Found::Missing => {
                    // Redis may have lost the queue's settings too (a wipe): set the
                    // succeeded retention again on the next use.
                    lock(&self.queues).remove(&r.queue);
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
                        if rep.restored + rep.removed + rep.gave_up > 0 {
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
                        tracing::warn!(error = %e, "reconciler pass failed; retrying");
                        next_reconcile = tokio::time::Instant::now()
                            + Duration::from_millis(backoff.delay_ms(failures + 1));
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
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|e| format!("postgres: {e}"))?;
        let r = self.client.readiness().await;
        if r.ready() {
            Ok(())
        } else {
            Err(r.error.unwrap_or_else(|| "redis not ready".into()))
        }
    }
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

/// Locks a mutex, recovering from poisoning (the maps hold plain handles, valid either way).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
