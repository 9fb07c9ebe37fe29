//! Writing timers in the application's transaction: [`enqueue_in_tx`], [`cancel_in_tx`],
//! [`reschedule_in_tx`], and reading the table's counts ([`stats`]).
//!
//! These only touch PostgreSQL; the relay carries the change to Redis after the transaction
//! commits, so a rolled-back transaction leaves nothing anywhere.

use dueq::TaskOptions;
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::error::{Error, Result};

/// Largest payload accepted, bytes: dueq's default payload limit (1 MiB), also a `CHECK` on
/// the table so writers in other languages are held to it.
pub const MAX_PAYLOAD_BYTES: usize = dueq::DEFAULT_PAYLOAD_LIMIT_BYTES;

/// Longest delay accepted, ms (100 years, as dueq).
pub const MAX_DELAY_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// A timer to write into the outbox: a business key (required: it is how rows and Redis tasks
/// are matched), a payload, a due time and dueq's [`TaskOptions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTask {
    key: String,
    payload: Vec<u8>,
    due: OutboxDue,
    options: TaskOptions,
}

/// When an outbox task is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutboxDue {
    /// This many ms after the INSERT statement, by the **database** clock (the row must carry
    /// an absolute time so the reconciler can restore it with its original due time).
    DelayMs(u64),
    /// At this Unix epoch ms.
    AtMs(u64),
}

impl OutboxTask {
    /// A task with this business key and payload, due now, dueq's default options.
    pub fn new(key: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            payload: payload.into(),
            due: OutboxDue::DelayMs(0),
            options: TaskOptions::default(),
        }
    }

    dueq::task_option_setters!(options);

    /// Due this many ms after the row is written, by the database clock (0 to 100 years).
    /// Default 0.
    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.due = OutboxDue::DelayMs(delay_ms);
        self
    }

    /// Due at this Unix epoch ms (up to the end of year 9999).
    pub fn due_at_ms(mut self, due_at_ms: u64) -> Self {
        self.due = OutboxDue::AtMs(due_at_ms);
        self
    }

    /// The business key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Checks every field; the error names the first bad one.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `key`, `payload`, `delay_ms`, `due_at_ms` or the
    /// option.
    pub fn validate(&self) -> Result<()> {
        validate_key(&self.key)?;
        if self.payload.len() > MAX_PAYLOAD_BYTES {
            return Err(Error::invalid(
                "payload",
                format!(
                    "{} bytes; the limit is {MAX_PAYLOAD_BYTES}",
                    self.payload.len()
                ),
            ));
        }
        match self.due {
            OutboxDue::DelayMs(d) if d > MAX_DELAY_MS => {
                return Err(Error::invalid(
                    "delay_ms",
                    format!("must be at most {MAX_DELAY_MS} (100 years)"),
                ));
            }
            OutboxDue::AtMs(t) if t > dueq::MAX_DUE_AT_MS => {
                return Err(Error::invalid("due_at_ms", "past year 9999"));
            }
            _ => {}
        }
        self.options.check().map_err(|e| {
            let text = e.to_string();
            let field = TaskOptions::FIELDS
                .iter()
                .find(|f| text.starts_with(&format!("{f}: ")))
                .copied()
                .unwrap_or("options");
            let why = text.strip_prefix(field).unwrap_or(&text);
            Error::invalid(field, why.trim_start_matches(": "))
        })
    }
}

/// The `options` column's text: dueq's [`TaskOptions`] as JSON, without the two that have
/// columns of their own (`max_attempts`, `lease_ms`).
/// The `options` column: every option but the two with columns of their own, with the
/// caller's trace context in the headers (unless they carry one), so the task's run links to
/// the span that wrote the row.
fn options_json(options: &TaskOptions) -> String {
    let mut rest = options.clone();
    rest.max_attempts = None;
    rest.lease_ms = None;
    dueq::trace::inject_current(&mut rest.headers);
    // a struct of numbers and strings always serializes
    serde_json::to_string(&rest).unwrap_or_else(|_| "{}".to_owned())
}

pub(crate) fn validate_queue(queue: &str) -> Result<()> {
    dueq::validate_queue_name(queue).map_err(|e| Error::invalid("queue", e.to_string()))
}

fn validate_key(key: &str) -> Result<()> {
    dueq::validate_key(key).map_err(|e| Error::invalid("key", e.to_string()))
}

/// What [`enqueue_in_tx`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxEnqueued {
    /// The row's id (new, or the live row that already holds the key).
    pub row_id: i64,
    /// Its due time, epoch ms.
    pub due_at_ms: u64,
    /// Whether this call set a new timer: `false` when the key was already live in this queue
    /// (pending or relayed): the existing row is kept unchanged, as dueq's default enqueue
    /// keeps a live key (use [`reschedule_in_tx`] to move it). A row being cancelled
    /// ([`cancel_in_tx`] committed or in this transaction, the relay has not carried the
    /// cancel yet) takes the new timer: it keeps its key and its cancel, gets the new payload,
    /// due time and options and `relay_op = 'renew'` (`created: true`, that row's id), and the
    /// relay cancels the old timer's Redis task, then enqueues the new one (a task of its own:
    /// attempts from 0). If a worker is running the old task by then, the relay sets the new
    /// timer once that run ends.
    pub created: bool,
}

/// Writes a timer in the caller's transaction: it reaches Redis (through the relay) only if
/// the transaction commits, and never if it rolls back.
///
/// # Errors
/// [`Error::InvalidInput`] naming the bad field (nothing written), [`Error::Postgres`].
pub async fn enqueue_in_tx(
    tx: &mut Transaction<'_, Postgres>,
    queue: &str,
    task: &OutboxTask,
) -> Result<OutboxEnqueued> {
    validate_queue(queue)?;
    task.validate()?;
    let (due_at, delay) = match task.due {
        OutboxDue::AtMs(t) => (Some(to_i64(t)), 0),
        OutboxDue::DelayMs(d) => (None, to_i64(d)),
    };
    // A live row keeps the key, except one whose cancel the relay has not carried yet: it takes
    // the new timer. Each statement sees the rows committed when it starts (and an UPDATE
    // waits for a relay holding the row), so a row that finishes between two of them is met
    // by the next round, where the INSERT no longer conflicts.
    for _ in 0..3 {
        // ON CONFLICT on the partial unique index: nothing written when a live row holds it
        let inserted = sqlx::query(
            "INSERT INTO dueq_outbox
                 (queue, key, payload, due_at_ms, max_attempts, lease_ms, options)
             VALUES ($1, $2, $3, coalesce($4, dueq_outbox_now_ms() + $5), $6, $7, $8::jsonb)
             ON CONFLICT (queue, key) WHERE state IN ('pending', 'relayed', 'cancelling')
             DO NOTHING
             RETURNING id, due_at_ms",
        );
        // The row keeps its key and its cancel: the relay cancels the old timer's task in
        // Redis (if it still waits), then enqueues this row's payload and due time as a new
        // task. The row keeps the old task id until then (a tombstone needs it, should the
        // row be deleted by hand), and starts the new timer's clock and restore count afresh.
        let replaced = sqlx::query(
            "UPDATE dueq_outbox SET
                 relay_op = 'renew', payload = $3,
                 due_at_ms = coalesce($4, dueq_outbox_now_ms() + $5),
                 max_attempts = $6, lease_ms = $7, options = $8::jsonb,
                 last_error = NULL, checked_at_ms = NULL,
                 restores = 0, created_at = clock_timestamp()
             WHERE queue = $1 AND key = $2 AND state = 'cancelling' AND relay_op = 'cancel'
             RETURNING id, due_at_ms",
        );
        for q in [inserted, replaced] {
            let row = q
                .bind(queue)
                .bind(&task.key)
                .bind(&task.payload)
                .bind(due_at)
                .bind(delay)
                .bind(task.options.max_attempts.map(i64::from))
                .bind(task.options.lease_ms.map(to_i64))
                .bind(options_json(&task.options))
                .fetch_optional(&mut **tx)
                .await?;
            if let Some(r) = row {
                return Ok(OutboxEnqueued {
                    row_id: r.try_get(0)?,
                    due_at_ms: to_u64(r.try_get(1)?),
                    created: true,
                });
            }
        }
        // a timer set again (renew) is live like a pending one
        if let Some(kept) = live_row(tx, queue, &task.key, LIVE_TIMER).await? {
            return Ok(kept);
        }
    }
    // three rounds each lost a race for the key: answer as the row found now
    live_row(
        tx,
        queue,
        &task.key,
        "state IN ('pending', 'relayed', 'cancelling')",
    )
    .await?
    .ok_or_else(|| sqlx::Error::RowNotFound.into())
}

/// The rows that hold a live timer: waiting for the relay, in Redis, or set again after a
/// cancel.
const LIVE_TIMER: &str = "(state IN ('pending', 'relayed') OR relay_op = 'renew')";

/// The row of `key` that matches `rows` (an SQL condition), as a kept timer.
async fn live_row(
    tx: &mut Transaction<'_, Postgres>,
    queue: &str,
    key: &str,
    rows: &str,
) -> Result<Option<OutboxEnqueued>> {
    let r = sqlx::query(&format!(
        "SELECT id, due_at_ms FROM dueq_outbox WHERE queue = $1 AND key = $2 AND {rows}"
    ))
    .bind(queue)
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?;
    r.map(|r| {
        Ok(OutboxEnqueued {
            row_id: r.try_get(0)?,
            due_at_ms: to_u64(r.try_get(1)?),
            created: false,
        })
    })
    .transpose()
}

/// What [`cancel_in_tx`] did to the live row of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutboxCancel {
    /// The row is now `cancelling`, and the relay cancels its task in Redis after commit
    /// (also for a row still `pending`: a relay round may have enqueued it and then failed to
    /// commit, leaving a task the row does not know of). The row ends `cancelled`; if a
    /// worker is already running the task, it goes back to `relayed` and ends as the run
    /// ends (its `last_error` says the cancel came too late).
    Requested,
    /// No live row with that key.
    NotFound,
}

/// Cancels the live timer of `key` in the caller's transaction.
///
/// # Errors
/// [`Error::InvalidInput`] for a bad queue or key, [`Error::Postgres`].
pub async fn cancel_in_tx(
    tx: &mut Transaction<'_, Postgres>,
    queue: &str,
    key: &str,
) -> Result<OutboxCancel> {
    validate_queue(queue)?;
    validate_key(key)?;
    // If a relay is moving the row into Redis, this UPDATE waits for its commit. A renew the
    // relay has not carried is dropped with its new timer (the row keeps the old timer's task
    // id, so a tombstone can still remove that task should the row be deleted by hand; if
    // the old timer had already run, the row ends with its outcome).
    let found: Option<i64> = sqlx::query_scalar(
        "UPDATE dueq_outbox SET state = 'cancelling', relay_op = 'cancel'
         WHERE queue = $1 AND key = $2 AND state IN ('pending', 'relayed', 'cancelling')
         RETURNING id",
    )
    .bind(queue)
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(if found.is_some() {
        OutboxCancel::Requested
    } else {
        OutboxCancel::NotFound
    })
}

/// Moves the due time of the live timer of `key` in the caller's transaction. Returns the
/// new due time (epoch ms), or `None` when no row is pending or relayed under that key. The
/// relay applies it in Redis after commit; if the task is already running there, the move
/// has no effect on that run (the row's `last_error` says so).
///
/// # Errors
/// [`Error::InvalidInput`] for a bad queue, key or due time, [`Error::Postgres`].
pub async fn reschedule_in_tx(
    tx: &mut Transaction<'_, Postgres>,
    queue: &str,
    key: &str,
    due: OutboxDue,
) -> Result<Option<u64>> {
    validate_queue(queue)?;
    OutboxTask::new(key, Vec::new()).due(due).validate()?;
    let (due_at, delay) = match due {
        OutboxDue::AtMs(t) => (Some(to_i64(t)), 0),
        OutboxDue::DelayMs(d) => (None, to_i64(d)),
    };
    let v: Option<i64> = sqlx::query_scalar(
        "UPDATE dueq_outbox SET
             due_at_ms = coalesce($3, dueq_outbox_now_ms() + $4),
             relay_op = CASE WHEN state = 'pending' THEN 'enqueue'
                             WHEN relay_op = 'renew' THEN 'renew' ELSE 'reschedule' END,
             checked_at_ms = NULL
         WHERE queue = $1 AND key = $2
           AND (state IN ('pending', 'relayed') OR (state = 'cancelling' AND relay_op = 'renew'))
         RETURNING due_at_ms",
    )
    .bind(queue)
    .bind(key)
    .bind(due_at)
    .bind(delay)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(v.map(to_u64))
}

impl OutboxTask {
    fn due(mut self, due: OutboxDue) -> Self {
        self.due = due;
        self
    }
}

/// Rows of one queue by state. `pending` counts rows committed but not yet in Redis: add it
/// to Redis's `scheduled` for the number of timers waiting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxStats {
    /// Waiting for the relay (not in Redis yet).
    pub pending: u64,
    /// In Redis, not finished.
    pub relayed: u64,
    /// Cancel requested, not yet applied in Redis (also rows whose key got a new timer
    /// meanwhile, `relay_op = 'renew'`: the relay sets it after the cancel).
    pub cancelling: u64,
    /// Finished: acknowledged.
    pub succeeded: u64,
    /// Finished: dead-lettered.
    pub dead: u64,
    /// Finished: cancelled.
    pub cancelled: u64,
    /// Refused by Redis; never ran.
    pub rejected: u64,
}

/// Counts the rows of `queue` by state (a scan of the queue's rows: for dashboards and
/// reports, not for every request).
///
/// # Errors
/// [`Error::InvalidInput`] for a bad queue name, [`Error::Postgres`].
pub async fn stats(pool: &PgPool, queue: &str) -> Result<OutboxStats> {
    validate_queue(queue)?;
    let rows = sqlx::query("SELECT state, count(*) FROM dueq_outbox WHERE queue = $1 GROUP BY 1")
        .bind(queue)
        .fetch_all(pool)
        .await?;
    let mut s = OutboxStats::default();
    for r in rows {
        let n = to_u64(r.try_get(1)?);
        match r.try_get::<String, _>(0)?.as_str() {
            "pending" => s.pending = n,
            "relayed" => s.relayed = n,
            "cancelling" => s.cancelling = n,
            "succeeded" => s.succeeded = n,
            "dead" => s.dead = n,
            "cancelled" => s.cancelled = n,
            _ => s.rejected += n,
        }
    }
    Ok(s)
}

/// `u64` → `i64` for a BIGINT column; every value here is validated to be far below
/// `i64::MAX` (due times end in year 9999, ~2.5e14), so saturating never changes one.
pub(crate) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// BIGINT → `u64`; the table's CHECKs keep times and counts non-negative.
pub(crate) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
