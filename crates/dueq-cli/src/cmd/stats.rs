//! `stats`, `pause`, `resume`.

use anyhow::{Result, bail};
use dueq::{Client, QueueStats};
use serde_json::json;

use super::{no_such_queue, print_json};
use crate::human::{now_ms, relative};

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

/// Whether `s` looks like a queue nobody used: then the registry decides whether it exists
/// (as `GET /v1/queues/{queue}` does; the common case costs no extra call).
fn looks_unused(s: &QueueStats) -> bool {
    s.scheduled == 0
        && s.active == 0
        && s.dead == 0
        && s.enqueued_total == 0
        && s.succeeded_total == 0
        && !s.paused
}

/// `dueq stats [QUEUE]`: a named queue that does not exist is an error (as HTTP's 404).
pub async fn stats(client: &Client, queue: Option<&str>, json_out: bool) -> Result<()> {
    let names = match queue {
        Some(q) => vec![q.to_owned()],
        None => client.queues().await?,
    };
    let mut all = Vec::with_capacity(names.len());
    for name in &names {
        let s = client.queue(name)?.stats().await?;
        if queue.is_some() && looks_unused(&s) && !client.has_queue(name).await? {
            return Err(no_such_queue(name));
        }
        all.push(s);
    }
    if !json_out {
        outln!(
            "{:<24} {:>10} {:>8} {:>10} {:>8} {:>12} {:>10} {:<14} {:<8}",
            "queue",
            "scheduled",
            "due",
            "active",
            "dead",
            "succeeded",
            "failed",
            "next_due",
            "state"
        );
    }
    let now = now_ms();
    for s in all {
        if json_out {
            print_json(&stats_json(&s))?;
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
            // the earliest due time: "in 5m" ahead, or how long the oldest due task waits
            let next_due = s
                .next_due_at_ms
                .map_or_else(|| "-".to_owned(), |t| relative(t, now));
            outln!(
                "{:<24} {:>10} {:>8} {:>10} {:>8} {:>12} {:>10} {:<14} {:<8}",
                s.queue,
                s.scheduled,
                s.due,
                active,
                s.dead,
                s.succeeded_total,
                s.failed_total,
                next_due,
                state
            );
        }
    }
    Ok(())
}

/// `dueq pause` / `dueq resume`: an unknown queue is an error, unless `create` (pause ahead of
/// a queue's first task).
pub async fn pause(
    client: &Client,
    queue: &str,
    paused: bool,
    create: bool,
    json_out: bool,
) -> Result<()> {
    let q = client.queue(queue)?;
    if !create && !client.has_queue(queue).await? {
        let e = no_such_queue(queue);
        if paused {
            bail!("{e} (pause --create pauses a queue ahead of its first task)");
        }
        return Err(e);
    }
    if paused {
        q.pause().await?;
    } else {
        q.resume().await?;
    }
    if json_out {
        print_json(&json!({"queue": queue, "paused": paused}))?;
    } else {
        outln!("{queue}: {}", if paused { "paused" } else { "resumed" });
    }
    Ok(())
}
