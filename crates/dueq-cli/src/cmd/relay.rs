//! `dueq relay --postgres URL`: the PostgreSQL outbox's relay and reconciler.

use anyhow::{Context, Result};
use dueq_outbox::{ReconcileReport, Relay, RelayConfig};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

use super::print_json;
use crate::args::RelayArgs;

fn report_json(r: &ReconcileReport) -> serde_json::Value {
    json!({
        "examined": r.examined,
        "in_sync": r.in_sync,
        "restored": r.restored,
        "finished": r.finished,
        "gave_up": r.gave_up,
        "removed": r.removed,
        "pending": r.pending,
        "complete": r.complete,
        "took_ms": r.took_ms,
    })
}

/// Connects, migrates, then relays until SIGINT/SIGTERM (or one reconciler pass).
pub async fn run(client: dueq::Client, a: &RelayArgs, json_out: bool) -> Result<()> {
    let pool = PgPoolOptions::new()
        .max_connections(a.max_connections.max(2))
        .connect(&a.postgres)
        .await
        .context("connecting to PostgreSQL")?;
    let applied = dueq_outbox::migrate(&pool)
        .await
        .context("migrating the outbox table")?;
    if !applied.is_empty() {
        eprintln!("dueq relay: applied outbox migrations {applied:?}");
    }
    let cfg = RelayConfig::default()
        .batch(a.batch)
        .poll_ms(a.poll_ms)
        .reconcile_interval_ms(a.reconcile_interval_ms)
        .horizon_ms(a.horizon_ms)
        .max_rows_per_pass(a.max_rows_per_pass)
        .succeeded_retention(a.succeeded_retention);
    let relay = Relay::new(pool, client, cfg);
    if a.reconcile_once {
        let r = relay.reconcile().await?;
        if json_out {
            print_json(&report_json(&r));
        } else {
            outln!(
                "examined {} in_sync {} restored {} finished {} gave_up {} removed {} pending {} \
                 complete {} took_ms {}",
                r.examined,
                r.in_sync,
                r.restored,
                r.finished,
                r.gave_up,
                r.removed,
                r.pending,
                r.complete,
                r.took_ms
            );
        }
        return Ok(());
    }
    eprintln!(
        "dueq relay: running (reconciler every {} ms)",
        a.reconcile_interval_ms
    );
    relay.run_until(crate::shutdown_signal()).await?;
    Ok(())
}
