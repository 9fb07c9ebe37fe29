//! `dueq replay --postgres URL`: the replay's producer side through the PostgreSQL outbox.
//!
//! Each batch of enqueues is one PostgreSQL transaction of `enqueue_in_tx` calls, each cancel
//! one transaction of `cancel_in_tx`; a relay in this process (`dueq_outbox::Relay`, polling
//! every 100 ms behind `LISTEN`, a reconciler pass every second) carries them into Redis,
//! where the replay's workers run them as before. The checking is the replay's own
//! (`run::check`); this module only turns what the rows say into the cancel outcomes it
//! needs.
//!
//! With `--flush-midway`, halfway through the steps the driver sends `FLUSHALL` to Redis
//! (the one raw command here, a deliberate wipe; it wipes the **whole** Redis the replay runs
//! against) and starts a reconciler pass at once; the relay's own passes, every second, catch
//! what that pass skipped (rows locked by a relay batch in flight). Tasks acknowledged before
//! the wipe whose success the relay had not yet recorded are restored and run again
//! (at-least-once: they show as `duplicate_runs`).
//!
//! Cancel times, for the checks that compare them with claims (see `run::check`): a cancel
//! that ended `cancelled` is dated when the driver committed it (the earliest it can have
//! reached Redis); one that found the task running or finished is dated by the relay's
//! write-back of the row (`updated_at`, after its Redis call; PostgreSQL and Redis share the
//! machine's clock), the latest it can have reached Redis.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use dueq::{CancelOutcome, Client};
use dueq_outbox::{OutboxCancel, OutboxTask, ReconcileReport, Relay, RelayConfig};
use serde::Serialize;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};
use tokio::task::JoinHandle;

use super::records::{CancelRecord, Lateness, NewTask};

/// Longest wait for the relay to apply every committed row and cancel, after the last step.
const SETTLE: Duration = Duration::from_secs(60);

/// What the outbox part of a replay did (the report's `outbox` object).
#[derive(Debug, Clone, Default, Serialize)]
pub struct OutboxReport {
    /// Rows written (one per task enqueued).
    pub rows: u64,
    /// Transactions committed by the driver (enqueue batches and cancels).
    pub transactions: u64,
    /// Redis time of the `FLUSHALL`, epoch ms (absent without `--flush-midway`).
    pub flushall_at_ms: Option<u64>,
    /// Tasks the reconciler pass started right after the `FLUSHALL` re-added to Redis.
    pub restored_first_pass: u64,
    /// How long that pass took, ms.
    pub first_pass_took_ms: u64,
    /// Tasks re-added by every reconciler pass of the run (the sum of the rows' `restores`).
    pub restored_total: u64,
    /// Commit to in-Redis of the rows the relay enqueued, ms (database clock).
    pub relay_lag_ms: Lateness,
    /// Keys of the rows the reconciler restored at least once (for the checks).
    #[serde(skip)]
    pub restored_keys: std::collections::HashSet<String>,
}

/// One cancel as the driver committed it.
struct Cancel {
    task: usize,
    key: String,
    issued_at_ms: u64,
    outcome: OutboxCancel,
}

/// The outbox producer of one replay: its pool, its relay (running), what it committed.
pub struct OutboxSink {
    pool: PgPool,
    relay: Relay,
    queue: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    relay_task: Option<JoinHandle<()>>,
    cancels: Vec<Cancel>,
    first_pass: Option<JoinHandle<dueq_outbox::Result<ReconcileReport>>>,
    report: OutboxReport,
}

impl OutboxSink {
    /// Connects (failing at once: a replay is a one-shot command), migrates and starts the
    /// relay. `horizon_ms` should cover the whole replay, `retention` its task count.
    pub async fn start(
        url: &str,
        client: Client,
        queue: &str,
        horizon_ms: u64,
        retention: u64,
    ) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(6)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await
            .context("connecting to PostgreSQL (--postgres)")?;
        dueq_outbox::migrate(&pool)
            .await
            .context("migrating the outbox table (--postgres)")?;
        let cfg = RelayConfig::default()
            .poll_ms(100)
            .reconcile_interval_ms(1_000)
            .horizon_ms(horizon_ms)
            .succeeded_retention(retention);
        let relay = Relay::new(pool.clone(), client, cfg);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let r = relay.clone();
        let relay_task = tokio::spawn(async move {
            let stopped = async {
                let _ = stopped.await;
            };
            if let Err(e) = r.run_until(stopped).await {
                tracing::error!(error = %e, "replay: outbox relay stopped");
            }
        });
        Ok(Self {
            pool,
            relay,
            queue: queue.to_owned(),
            stop: Some(stop),
            relay_task: Some(relay_task),
            cancels: Vec::new(),
            first_pass: None,
            report: OutboxReport::default(),
        })
    }

    /// Writes `batch` as rows in one transaction; returns, per task, whether a row was made.
    pub async fn enqueue(&mut self, batch: &[NewTask]) -> Result<Vec<bool>> {
        let mut tx = self.pool.begin().await?;
        let mut created = Vec::with_capacity(batch.len());
        for t in batch {
            let task = OutboxTask::new(t.key.clone(), t.payload.clone()).due_at_ms(t.due_at_ms);
            let e = dueq_outbox::enqueue_in_tx(&mut tx, &self.queue, &task)
                .await
                .context("writing a replay row")?;
            created.push(e.created);
        }
        tx.commit().await?;
        self.report.rows += created.iter().filter(|c| **c).count() as u64;
        self.report.transactions += 1;
        Ok(created)
    }

    /// Cancels `key`'s row in one transaction; `now_ms` dates the commit (Redis clock).
    pub async fn cancel(&mut self, task: usize, key: &str, now_ms: impl Fn() -> u64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        let outcome = dueq_outbox::cancel_in_tx(&mut tx, &self.queue, key).await?;
        tx.commit().await?;
        self.report.transactions += 1;
        self.cancels.push(Cancel {
            task,
            key: key.to_owned(),
            issued_at_ms: now_ms(),
            outcome,
        });
        Ok(())
    }

    /// `FLUSHALL` on `redis_url`, then a reconciler pass (in the background, so the driver
    /// keeps to its schedule). `now_ms` is the Redis clock.
    pub async fn wipe_redis(&mut self, redis_url: &str, now_ms: u64) -> Result<()> {
        let mut conn = redis::Client::open(redis_url)
            .context("--flush-midway needs a plain redis:// or redis+unix:// URL")?
            .get_multiplexed_async_connection()
            .await
            .context("connecting to Redis for the FLUSHALL")?;
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await
            .context("FLUSHALL")?;
        self.report.flushall_at_ms = Some(now_ms);
        let relay = self.relay.clone();
        self.first_pass = Some(tokio::spawn(async move { relay.reconcile().await }));
        Ok(())
    }

    /// Redis time of the `FLUSHALL`, once sent.
    pub fn wiped_at_ms(&self) -> Option<u64> {
        self.report.flushall_at_ms
    }

    /// Waits until the relay has applied every row and cancel of the queue, then returns the
    /// cancels' outcomes as Redis decided them.
    pub async fn settle(&mut self) -> Result<HashMap<usize, CancelRecord>> {
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let todo: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM dueq_outbox WHERE queue = $1 AND relay_op IS NOT NULL",
            )
            .bind(&self.queue)
            .fetch_one(&self.pool)
            .await?;
            if todo == 0 {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the relay left {todo} rows unapplied {SETTLE:?} after the last step");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let keys: Vec<&str> = self.cancels.iter().map(|c| c.key.as_str()).collect();
        let rows = sqlx::query(
            "SELECT key, state, coalesce(last_error, ''),
                    (extract(epoch FROM updated_at) * 1000)::bigint
             FROM dueq_outbox WHERE queue = $1 AND key = ANY($2)",
        )
        .bind(&self.queue)
        .bind(&keys)
        .fetch_all(&self.pool)
        .await?;
        let mut by_key: HashMap<String, (String, String, u64)> = HashMap::new();
        for r in rows {
            let updated: i64 = r.try_get(3)?;
            by_key.insert(
                r.try_get(0)?,
                (
                    r.try_get(1)?,
                    r.try_get(2)?,
                    u64::try_from(updated).unwrap_or(0),
                ),
            );
        }
        let mut out = HashMap::new();
        for c in &self.cancels {
            let issued = c.issued_at_ms;
            let rec = |outcome, at_ms| CancelRecord { outcome, at_ms };
            let record = match c.outcome {
                // the row had finished already: its task ran before the cancel
                OutboxCancel::NotFound => rec(CancelOutcome::NotFound, issued),
                _ => match by_key.get(&c.key) {
                    Some((state, _, _)) if state == "cancelled" => {
                        rec(CancelOutcome::Cancelled, issued)
                    }
                    Some((_, error, updated)) => {
                        let outcome = if error.contains("while a worker was running") {
                            CancelOutcome::InProgress
                        } else {
                            CancelOutcome::NotFound
                        };
                        rec(outcome, issued.max(*updated))
                    }
                    None => bail!("the row of {} is gone", c.key),
                },
            };
            out.insert(c.task, record);
        }
        Ok(out)
    }

    /// Stops the relay, gathers the figures and deletes the replay's rows (without
    /// tombstones: their Redis tasks are finished).
    pub async fn finish(mut self) -> Result<OutboxReport> {
        if let Some(pass) = self.first_pass.take() {
            let rep = pass.await.context("the reconciler pass panicked")??;
            self.report.restored_first_pass = rep.restored;
            self.report.first_pass_took_ms = rep.took_ms;
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.relay_task.take() {
            task.await.context("the outbox relay panicked")?;
        }
        let r = sqlx::query(
            "SELECT coalesce(sum(restores), 0)::bigint,
                    percentile_disc(0.5) WITHIN GROUP (ORDER BY lag),
                    percentile_disc(0.99) WITHIN GROUP (ORDER BY lag),
                    max(lag)
             FROM (SELECT restores,
                          (extract(epoch FROM relayed_at - created_at) * 1000)::bigint AS lag
                   FROM dueq_outbox WHERE queue = $1) AS t",
        )
        .bind(&self.queue)
        .fetch_one(&self.pool)
        .await?;
        let ms = |i: usize| -> Result<u64> {
            let v: Option<i64> = r.try_get(i)?;
            Ok(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
        };
        self.report.restored_total = ms(0)?;
        self.report.relay_lag_ms = Lateness {
            p50: ms(1)?,
            p99: ms(2)?,
            max: ms(3)?,
        };
        self.report.restored_keys =
            sqlx::query_scalar("SELECT key FROM dueq_outbox WHERE queue = $1 AND restores > 0")
                .bind(&self.queue)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .collect();
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM dueq_outbox WHERE queue = $1")
            .bind(&self.queue)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(std::mem::take(&mut self.report))
    }
}

impl Drop for OutboxSink {
    /// On an early return (an error mid-replay) the relay task is stopped too.
    fn drop(&mut self) {
        if let Some(t) = &self.relay_task {
            t.abort();
        }
    }
}
