//! Queue-wide operations: stats, per-minute history, stored settings (pause, resume, caps)
//! and the `dueq:queues` registry used for listing.

use super::call::{Args, run};
use super::conn::Conn;
use super::keys::{QUEUES_KEY, QueueKeys};
use super::scripts;
use crate::error::Result;
use crate::task::{MinuteStats, QueueStats};

pub(crate) async fn stats(conn: &mut Conn, k: &QueueKeys) -> Result<QueueStats> {
    let keys = [&k.sched, &k.active, &k.dead, &k.done, &k.stats, &k.meta].map(String::as_str);
    let mut r = run(conn, "stats", &scripts::STATS, &keys, Vec::new()).await?;
    let mut s = QueueStats {
        queue: k.name.clone(),
        now_ms: r.u64()?,
        scheduled: r.u64()?,
        due: r.u64()?,
        active: r.u64()?,
        dead: r.u64()?,
        succeeded_kept: r.u64()?,
        next_due_at_ms: r.opt_u64()?,
        paused: r.i64()? == 1,
        ..QueueStats::default()
    };
    while r.remaining() > 0 {
        let name = r.string()?;
        let value = r.u64()?;
        match name.as_str() {
            "enqueued_total" => s.enqueued_total = value,
            "succeeded_total" => s.succeeded_total = value,
            "failed_total" => s.failed_total = value,
            "retried_total" => s.retried_total = value,
            "dead_total" => s.dead_total = value,
            "cancelled_total" => s.cancelled_total = value,
            "lease_expired_total" => s.lease_expired_total = value,
            _ => {}
        }
    }
    s.oldest_due_age_ms = s
        .next_due_at_ms
        .map_or(0, |due| s.now_ms.saturating_sub(due));
    Ok(s)
}

/// Minutes [`history`] returns.
pub(crate) const HISTORY_MINUTES: u64 = 60;

pub(crate) async fn history(conn: &mut Conn, k: &QueueKeys) -> Result<Vec<MinuteStats>> {
    let mut r = run(conn, "history", &scripts::HISTORY, &[&k.hist], Vec::new()).await?;
    let now_minute = r.u64()? / 60_000;
    let first = now_minute.saturating_sub(HISTORY_MINUTES - 1);
    let mut out: Vec<MinuteStats> = (first..=now_minute)
        .map(|m| MinuteStats {
            minute_start_ms: m * 60_000,
            ..MinuteStats::default()
        })
        .collect();
    while r.remaining() > 0 {
        let field = r.string()?;
        let value = r.i64()?.max(0) as u64;
        // fields are "<minute>:<counter>"; anything else (or outside the hour) is skipped
        let Some((minute, counter)) = field.split_once(':') else {
            continue;
        };
        let Ok(minute) = minute.parse::<u64>() else {
            continue;
        };
        let Some(slot) = minute
            .checked_sub(first)
            .and_then(|i| out.get_mut(i as usize))
        else {
            continue;
        };
        match counter {
            "c" => slot.claimed = value,
            "l" => slot.lateness_sum_ms = value,
            "x" => slot.lateness_max_ms = value,
            "s" => slot.succeeded = value,
            "r" => slot.retried = value,
            "d" => slot.dead = value,
            _ => {}
        }
    }
    Ok(out)
}

pub(crate) async fn configure(
    conn: &mut Conn,
    k: &QueueKeys,
    settings: &[(&str, String)],
) -> Result<()> {
    let mut a = Args::default();
    a.s(&k.wake);
    for (name, value) in settings {
        a.s(name).s(value);
    }
    run(conn, "configure", &scripts::CONFIGURE, &[&k.meta], a.take()).await?;
    Ok(())
}

pub(crate) async fn register_queue(conn: &mut Conn, name: &str) -> Result<()> {
    redis::cmd("SADD")
        .arg(QUEUES_KEY)
        .arg(name)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

pub(crate) async fn list_queues(conn: &mut Conn) -> Result<Vec<String>> {
    let mut names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(QUEUES_KEY)
        .query_async(conn)
        .await?;
    names.sort();
    Ok(names)
}
