//! `dueq workers [--queue Q]`: the live worker processes and servers (heartbeats), as
//! `GET /v1/workers` shows them.

use anyhow::Result;
use dueq::{Client, WorkerInfo};
use serde_json::json;

use super::print_json;
use crate::human::{relative, when_from};

/// The same fields as `GET /v1/workers`.
fn worker_json(w: &WorkerInfo) -> serde_json::Value {
    json!({
        "id": w.id,
        "kind": w.kind.as_str(),
        "host": w.host,
        "pid": w.pid,
        "version": w.version,
        "queues": w.queues,
        "concurrency": w.concurrency,
        "in_hand": w.in_hand,
        "started_at_ms": w.started_at_ms,
        "last_seen_ms": w.last_seen_ms,
        "expires_at_ms": w.expires_at_ms,
        "language": w.language,
    })
}

/// `dueq workers`: one line (or JSON object) per live worker, oldest first.
pub async fn list(client: &Client, queue: Option<&str>, json_out: bool) -> Result<()> {
    let workers = match queue {
        Some(q) => client.workers_of(q).await?,
        None => client.workers().await?,
    };
    if json_out {
        print_json(&json!({"workers": workers.iter().map(worker_json).collect::<Vec<_>>()}))?;
        return Ok(());
    }
    // "now" for the ages: the newest heartbeat, so the Redis clock, not this machine's
    let now_ms = workers.iter().map(|w| w.last_seen_ms).max().unwrap_or(0);
    outln!(
        "{:<40} {:<6} {:<10} {:>8} {:>8} {:>11} {:<38} {:<10} queues",
        "id",
        "kind",
        "language",
        "pid",
        "in_hand",
        "concurrency",
        "started",
        "last_seen"
    );
    for w in &workers {
        // an HTTP worker need not say its language
        let language = if w.language.is_empty() {
            "-"
        } else {
            &w.language
        };
        outln!(
            "{:<40} {:<6} {:<10} {:>8} {:>8} {:>11} {:<38} {:<10} {}",
            w.id,
            w.kind.as_str(),
            language,
            w.pid,
            w.in_hand,
            w.concurrency,
            when_from(w.started_at_ms, now_ms),
            relative(w.last_seen_ms, now_ms),
            w.queues.join(",")
        );
    }
    if workers.is_empty() {
        eprintln!("no live workers");
    }
    Ok(())
}
