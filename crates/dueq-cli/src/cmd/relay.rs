//! `dueq relay --postgres URL`: the PostgreSQL outbox's relay and reconciler. The same code
//! runs inside `dueq serve --postgres URL` ([`Outbox::prepare`], [`Outbox::run`]), so the
//! two ways to run it share their flags, their start-up and their retry rules.
//!
//! Start-up never gives up on PostgreSQL: the pool is opened lazily, and the migration is
//! retried with backoff (a log line each time) until it succeeds or the process is told to
//! stop, so a database that is down at start delays relaying instead of crash-looping the
//! process. Only `--reconcile-once`, a one-shot command, fails at once.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use dueq_outbox::{ReconcileReport, Relay, RelayConfig};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use super::print_json;
use crate::args::{OutboxArgs, RelayArgs};

/// How long a pooled connection is waited for (or tried to be opened) before the call fails
/// and is retried: short, so an outage shows in the log within seconds.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A checked relay setup: the (lazily connecting) pool and the settings.
#[derive(Debug)]
pub struct Outbox {
    /// The database holding the outbox table; connects on first use.
    pub pool: PgPool,
    /// The relay's settings.
    pub cfg: RelayConfig,
    /// Time between reconciler passes, ms (for the start-up line).
    pub reconcile_interval_ms: u64,
}

impl Outbox {
    /// Checks the flags and the URL (no connection yet). Errors name the flag.
    pub fn prepare(url: &str, a: &OutboxArgs) -> Result<Self> {
        if a.reconcile_interval_ms < 1_000 {
            bail!(
                "--reconcile-interval-ms must be at least 1000 (got {})",
                a.reconcile_interval_ms
            );
        }
        if !(1..=1_000).contains(&a.batch) {
            bail!("--batch must be 1 to 1000 (got {})", a.batch);
        }
        if a.poll_ms < 10 {
            bail!("--poll-ms must be at least 10 (got {})", a.poll_ms);
        }
        if a.max_rows_per_pass == 0 {
            bail!("--max-rows-per-pass must be at least 1");
        }
        if a.max_connections < 2 {
            bail!(
                "--max-connections must be at least 2 (got {}): the relay and the reconciler \
                 each hold one",
                a.max_connections
            );
        }
        let pool = PgPoolOptions::new()
            .max_connections(a.max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy(url)
            .context("--postgres: not a usable PostgreSQL URL")?;
        let mut cfg = RelayConfig::default()
            .batch(a.batch)
            .poll_ms(a.poll_ms)
            .reconcile_interval_ms(a.reconcile_interval_ms)
            .horizon_ms(a.horizon_ms)
            .max_rows_per_pass(a.max_rows_per_pass)
            .succeeded_retention(a.succeeded_retention);
        for q in &a.owned_queues {
            cfg = cfg
                .owned_queue(q)
                .map_err(|e| anyhow::anyhow!("--owned-queue {q:?}: {e}"))?;
        }
        Ok(Self {
            pool,
            cfg,
            reconcile_interval_ms: a.reconcile_interval_ms,
        })
    }

    /// Migrates (retrying with backoff while PostgreSQL fails), then relays and reconciles
    /// until `shutdown` completes. `who` prefixes the log lines (`dueq relay`, `dueq serve`).
    /// The relay is built on `client`, and records its metrics where the client does.
    pub async fn run(self, who: &str, client: dueq::Client, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let backoff = dueq::Backoff::new(100, 2.0, 10_000);
        let mut failures = 0u32;
        loop {
            match dueq_outbox::migrate(&self.pool).await {
                Ok(applied) => {
                    if !applied.is_empty() {
                        crate::logging::status(
                            "INFO",
                            &format!("{who}: applied outbox migrations {applied:?}"),
                        );
                    }
                    break;
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait_ms = backoff.delay_ms(failures);
                    tracing::warn!(error = %e, retry_in_ms = wait_ms,
                        "outbox: migrating the table failed (is PostgreSQL up?); retrying");
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
                    }
                }
            }
        }
        crate::logging::status(
            "INFO",
            &format!(
                "{who}: outbox relay running (reconciler every {})",
                crate::human::duration(self.reconcile_interval_ms)
            ),
        );
        let relay = Relay::new(self.pool, client, self.cfg);
        // run_until retries every failure itself; its error is reserved for settings
        if let Err(e) = relay.run_until(shutdown).await {
            tracing::error!(error = %e, "outbox relay stopped");
        }
    }
}

fn report_json(r: &ReconcileReport) -> serde_json::Value {
    json!({
        "examined": r.examined,
        "in_sync": r.in_sync,
        "restored": r.restored,
        "finished": r.finished,
        "gave_up": r.gave_up,
        "rejected": r.rejected,
        "removed": r.removed,
        "swept": r.swept,
        "orphans_removed": r.orphans_removed,
        "pending": r.pending,
        "complete": r.complete,
        "took_ms": r.took_ms,
    })
}

/// Relays until SIGINT/SIGTERM (migrating first), or runs one reconciler pass.
pub async fn run(client: dueq::Client, a: &RelayArgs, json_out: bool) -> Result<()> {
    let outbox = Outbox::prepare(&a.postgres, &a.outbox)?;
    if !a.reconcile_once {
        outbox
            .run("dueq relay", client, crate::shutdown_signal())
            .await;
        return Ok(());
    }
    let applied = dueq_outbox::migrate(&outbox.pool)
        .await
        .context("migrating the outbox table (--postgres)")?;
    if !applied.is_empty() {
        crate::logging::status(
            "INFO",
            &format!("dueq relay: applied outbox migrations {applied:?}"),
        );
    }
    let r = Relay::new(outbox.pool, client, outbox.cfg)
        .reconcile()
        .await?;
    if json_out {
        print_json(&report_json(&r))?;
    } else {
        outln!(
            "examined {} in_sync {} restored {} finished {} gave_up {} rejected {} removed {} \
             swept {} orphans_removed {} pending {} complete {} took_ms {}",
            r.examined,
            r.in_sync,
            r.restored,
            r.finished,
            r.gave_up,
            r.rejected,
            r.removed,
            r.swept,
            r.orphans_removed,
            r.pending,
            r.complete,
            r.took_ms
        );
    }
    Ok(())
}
