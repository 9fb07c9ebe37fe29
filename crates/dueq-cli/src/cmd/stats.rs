//! `stats`, `pause`, `resume`.

use anyhow::Result;
use dueq::{Client, QueueStats};
use serde_json::json;

use super::print_json;

fn stats_json(s: &QueueStats) -> serde_json::Value {
    json!({
        "queue": s.queue,
        "scheduled": s.scheduled,
        "due": s.due,
        "active": s.active,
        "dead": s.dead,
        "succeeded_total": s.succeeded_total,
        "failed_total": s.failed_total,
        "next_due_at_ms": s.next_due_at_ms,
        "oldest_due_age_ms": s.oldest_due_age_ms,
        "paused": s.paused,
        "enqueued_total": s.enqueued_total,
        "retried_total": s.retried_total,
        "dead_total": s.dead_total,
        "cancelled_total": s.cancelled_total,
        "expired_total": s.expired_total,
        "lease_expired_total": s.lease_expired_total,
        "groups_waiting": s.groups_waiting,
        "throttled": s.throttled,
        "concurrency_limit": s.concurrency_limit,
        "behind": s.behind,
    })
}

/// `dueq stats [QUEUE]`.
pub async fn stats(client: &Client, queue: Option<&str>, json_out: bool) -> Result<()> {
    let names = match queue {
        Some(q) => vec![q.to_owned()],
        None => client.queues().await?,
    };
    if !json_out {
        outln!(
            "{:<24} {:>10} {:>8} {:>10} {:>8} {:>12} {:>10} {:<8}",
            "queue",
            "scheduled",
            "due",
            "active",
            "dead",
            "succeeded",
            "failed",
            "state"
        );
    }
    for name in names {
        let s = client.queue(&name)?.stats().await?;
        if json_out {
            print_json(&stats_json(&s));
        } else {
            let active = match s.concurrency_limit {
                Some(limit) => format!("{}/{limit}", s.active),
                None => s.active.to_string(),
            };
            let mut state = match (s.paused, s.throttled) {
                (true, _) => "paused".to_owned(),
                (false, Some(limit)) => format!("throttled ({limit})"),
                (false, None) => "running".to_owned(),
            };
            if s.behind {
                state.push_str(", behind");
            }
            outln!(
                "{:<24} {:>10} {:>8} {:>10} {:>8} {:>12} {:>10} {:<8}",
                s.queue,
                s.scheduled,
                s.due,
                active,
                s.dead,
                s.succeeded_total,
                s.failed_total,
                state
            );
        }
    }
    Ok(())
}

/// `dueq pause` / `dueq resume`.
pub async fn pause(client: &Client, queue: &str, paused: bool, json_out: bool) -> Result<()> {
    let q = client.queue(queue)?;
    if paused {
        q.pause().await?;
    } else {
        q.resume().await?;
    }
    if json_out {
        print_json(&json!({"queue": queue, "paused": paused}));
    } else {
        outln!("{queue}: {}", if paused { "paused" } else { "resumed" });
    }
    Ok(())
}
