//! `dueq workers [--queue Q]`: the live worker processes and servers (heartbeats), as
//! `GET /v1/workers` shows them.

use anyhow::Result;
use dueq::{Client, WorkerInfo};
use serde_json::json;

use super::print_json;

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
    })
}

/// How long ago `then_ms` was at `now_ms`, short (`3s`, `5m`, `2h`, `4d`).
fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `dueq workers`: one line (or JSON object) per live worker, oldest first.
pub async fn list(client: &Client, queue: Option<&str>, json_out: bool) -> Result<()> {
    let workers = match queue {
        Some(q) => client.workers_of(q).await?,
        None => client.workers().await?,
    };
    if json_out {
        print_json(&json!({"workers": workers.iter().map(worker_json).collect::<Vec<_>>()}));
        return Ok(());
    }
    // "now" for the ages: the newest heartbeat, so the Redis clock, not this machine's
    let now_ms = workers.iter().map(|w| w.last_seen_ms).max().unwrap_or(0);
    outln!(
        "{:<40} {:<6} {:>8} {:>8} {:>11} {:>7} {:>9}  queues",
        "id",
        "kind",
        "pid",
        "in_hand",
        "concurrency",
        "started",
        "last_seen"
    );
    for w in &workers {
        outln!(
            "{:<40} {:<6} {:>8} {:>8} {:>11} {:>7} {:>9}  {}",
            w.id,
            w.kind.as_str(),
            w.pid,
            w.in_hand,
            w.concurrency,
            ago(now_ms, w.started_at_ms),
            ago(now_ms, w.last_seen_ms),
            w.queues.join(",")
        );
    }
    if workers.is_empty() {
        eprintln!("no live workers");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ago;

    #[test]
    fn ages_are_short() {
        assert_eq!(ago(10_000, 7_000), "3s");
        assert_eq!(ago(400_000, 0), "6m");
        assert_eq!(ago(7_300_000, 0), "2h");
        assert_eq!(ago(90_000_000, 0), "1d");
        assert_eq!(ago(0, 5), "0s");
    }
}
