//! Queue-wide operations: stats, per-minute history, due-time counts, stored settings (pause, resume,
//! defaults, caps, limits), the `dueq:queues` registry used for listing, and the
//! `dueq:recovery` index of queues with leases or expiries to watch.

use super::call::{Args, MAX_BATCH, run, run_global};
use super::conn::Conn;
use super::keys::{
    MAX_PARTITIONS, QUEUES_KEY, QueueKeys, RECOVERY_KEY, SCHEDULES_KEY, WEBHOOKS_KEY,
};
use super::scripts;
use crate::error::Result;
use crate::settings::{QueueSettings, RateLimit, STORED_FIELDS};
use crate::stats::{LATENESS_BOUNDS_MS, MinuteStats, QueueStats, RUN_TIME_BOUNDS_MS, Timings};

pub(crate) async fn stats(conn: &mut Conn, k: &QueueKeys) -> Result<QueueStats> {
    let mut r = run(conn, &scripts::STATS, k, Vec::new()).await?;
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
        groups_waiting: r.u64()?,
        lateness: Timings::new(LATENESS_BOUNDS_MS),
        run_time: Timings::new(RUN_TIME_BOUNDS_MS),
        ..QueueStats::default()
    };
    let mut since = [None, None];
    let (mut rate, mut alert) = ((None, None), (None, None));
    while r.remaining() > 0 {
        let name = r.string()?;
        let value = r.u64()?;
        match name.as_str() {
            "throttled_ms_rate" => s.throttled_ms.rate += value,
            "throttled_ms_concurrency" => s.throttled_ms.concurrency += value,
            "throttled_ms_group_rate" => s.throttled_ms.group_rate += value,
            "throttled_ms_group_concurrency" => s.throttled_ms.group_concurrency += value,
            "meta:thr_rate" => since[0] = Some(value),
            "meta:thr_concurrency" => since[1] = Some(value),
            "meta:concurrency" => s.concurrency_limit = Some(value),
            "meta:group_concurrency" => s.group_concurrency_limit = Some(value),
            "meta:rate_max" => rate.0 = Some(value),
            "meta:rate_per_ms" => rate.1 = Some(value),
            "meta:alert_due_age_ms" => alert.0 = Some(value),
            "meta:alert_due_count" => alert.1 = Some(value),
            "enqueued_total" => s.enqueued_total = value,
            "succeeded_total" => s.succeeded_total = value,
            "failed_total" => s.failed_total = value,
            "retried_total" => s.retried_total = value,
            "dead_total" => s.dead_total = value,
            "cancelled_total" => s.cancelled_total = value,
            "expired_total" => s.expired_total = value,
            "lease_expired_total" => s.lease_expired_total = value,
            "claimed_total" => s.claimed_total = value,
            "lateness_sum_ms" => s.lateness.sum_ms = value,
            "run_time_sum_ms" => s.run_time.sum_ms = value,
            other => {
                // histogram buckets: "lateness:<i>", "run_time:<i>" (lib/stats.lua)
                let bucket = |prefix: &str| {
                    other
                        .strip_prefix(prefix)
                        .and_then(|i| i.parse::<usize>().ok())
                };
                if let Some(i) = bucket("lateness:") {
                    s.lateness.add_bucket(i, value);
                } else if let Some(i) = bucket("run_time:") {
                    s.run_time.add_bucket(i, value);
                }
            }
        }
    }
    s.oldest_due_age_ms = s
        .next_due_at_ms
        .map_or(0, |due| s.now_ms.saturating_sub(due));
    if let (Some(max), Some(per_ms)) = rate {
        s.rate_limit = Some(RateLimit::new(max, per_ms));
    }
    s.behind = alert
        .0
        .is_some_and(|age| s.due > 0 && s.oldest_due_age_ms >= age)
        || alert.1.is_some_and(|count| s.due >= count);
    // a throttle still going on counts up to now
    if let Some(t) = since[0] {
        s.throttled_ms.rate += s.now_ms.saturating_sub(t);
        s.throttled = Some("rate");
    }
    if let Some(t) = since[1] {
        s.throttled_ms.concurrency += s.now_ms.saturating_sub(t);
        s.throttled = Some("concurrency");
    }
    Ok(s)
}

/// Minutes [`history`] returns.
pub(crate) const HISTORY_MINUTES: u64 = 60;

pub(crate) async fn history(conn: &mut Conn, k: &QueueKeys) -> Result<Vec<MinuteStats>> {
    let mut r = run(conn, &scripts::HISTORY, k, Vec::new()).await?;
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

/// Minute buckets of [`due_counts`] (the next hour).
pub(crate) const DUE_MINUTES: usize = 60;
/// Hour buckets of [`due_counts`] (the next day).
pub(crate) const DUE_HOURS: usize = 24;

/// The reply of `due_counts.lua`, read (see `client::browse::DueHistogram` for the meaning).
#[derive(Debug)]
pub(crate) struct DueCounts {
    pub now_ms: u64,
    pub due: u64,
    pub later: u64,
    pub minutes: Vec<u64>,
    pub hours: Vec<u64>,
}

/// How many scheduled tasks fall due in each of the next [`DUE_MINUTES`] minutes and
/// [`DUE_HOURS`] hours, by the Redis clock.
pub(crate) async fn due_counts(conn: &mut Conn, k: &QueueKeys) -> Result<DueCounts> {
    let mut r = run(conn, &scripts::DUE_COUNTS, k, Vec::new()).await?;
    let (now_ms, due, later) = (r.u64()?, r.u64()?, r.u64()?);
    let mut read = |n: usize| (0..n).map(|_| r.u64()).collect::<Result<Vec<u64>>>();
    let minutes = read(DUE_MINUTES)?;
    let hours = read(DUE_HOURS)?;
    Ok(DueCounts {
        now_ms,
        due,
        later,
        minutes,
        hours,
    })
}

/// Sets and clears `meta` fields; returns the new settings version.
pub(crate) async fn settings_set(
    conn: &mut Conn,
    k: &QueueKeys,
    set: &[(&str, String)],
    clear: &[&str],
) -> Result<u64> {
    let mut a = Args::default();
    a.s(&k.wake).n(set.len());
    for (name, value) in set {
        a.s(name).s(value);
    }
    for name in clear {
        a.s(name);
    }
    let mut r = run(conn, &scripts::SETTINGS_SET, k, a.take()).await?;
    r.u64()?;
    r.u64()
}

/// The queue's stored settings and their version.
pub(crate) async fn settings_get(conn: &mut Conn, k: &QueueKeys) -> Result<(QueueSettings, u64)> {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(&k.meta).arg(&STORED_FIELDS[..]).arg("settings_v");
    let mut v: Vec<Option<String>> = cmd.query_async(conn).await?;
    let version = v.pop().flatten().and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((QueueSettings::from_fields(&v), version))
}

/// The queue's partition count (partition 0's `partitions` setting; 1 when unset or out of
/// range) and its settings version.
pub(crate) async fn partitions(conn: &mut Conn, k: &QueueKeys) -> Result<(u16, u64)> {
    let (n, v): (Option<String>, Option<String>) = redis::cmd("HMGET")
        .arg(&k.meta)
        .arg("partitions")
        .arg("settings_v")
        .query_async(conn)
        .await?;
    let n = n
        .and_then(|n| n.parse::<u16>().ok())
        .filter(|n| (1..=MAX_PARTITIONS).contains(n))
        .unwrap_or(1);
    Ok((n, v.and_then(|v| v.parse().ok()).unwrap_or(0)))
}

pub(crate) async fn register_queue(conn: &mut Conn, name: &str) -> Result<()> {
    redis::cmd("SADD")
        .arg(QUEUES_KEY)
        .arg(name)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// Whether the registry names queue `name`.
pub(crate) async fn is_registered(conn: &mut Conn, name: &str) -> Result<bool> {
    Ok(redis::cmd("SISMEMBER")
        .arg(QUEUES_KEY)
        .arg(name)
        .query_async(conn)
        .await?)
}

pub(crate) async fn list_queues(conn: &mut Conn) -> Result<Vec<String>> {
    let mut names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(QUEUES_KEY)
        .query_async(conn)
        .await?;
    names.sort();
    Ok(names)
}

/// Notes in the recovery index that queue `name` needs a look at `at_ms` (its earliest new
/// lease deadline or expiry), unless it is down for an earlier one.
/// How many business keys of partition `k` are in a unique window (ended ones not yet
/// dropped included).
pub(crate) async fn window_count(conn: &mut Conn, k: &QueueKeys) -> Result<u64> {
    Ok(redis::cmd("HLEN").arg(&k.uniq).query_async(conn).await?)
}

pub(crate) async fn recovery_note(conn: &mut Conn, name: &str, at_ms: u64) -> Result<()> {
    redis::cmd("ZADD")
        .arg(RECOVERY_KEY)
        .arg("LT")
        .arg(at_ms)
        .arg(name)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}

/// What `recovery_due` handed out: the Redis time, the mark each taken entry now holds (to
/// give back to [`recovery_done`]) and the queues to look at.
pub(crate) struct RecoveryDue {
    pub now_ms: u64,
    pub mark: String,
    pub queues: Vec<String>,
}

/// Takes up to `max` queues due for a look off the recovery index, holding each for
/// `hold_ms` (see `recovery_due.lua`).
pub(crate) async fn recovery_due(conn: &mut Conn, max: usize, hold_ms: u64) -> Result<RecoveryDue> {
    let mut a = Args::default();
    a.n(max).n(hold_ms);
    let mut r = run_global(conn, &scripts::RECOVERY_DUE, a.take()).await?;
    let now_ms = r.u64()?;
    let mark = r.string()?;
    let mut queues = Vec::with_capacity(r.remaining());
    while r.remaining() > 0 {
        queues.push(r.string()?);
    }
    Ok(RecoveryDue {
        now_ms,
        mark,
        queues,
    })
}

/// Reports what a recoverer found: each queue's next lease deadline or expiry (`None`: the
/// queue leaves the index unless a claim moved its entry meanwhile).
pub(crate) async fn recovery_done(
    conn: &mut Conn,
    mark: &str,
    found: &[(String, Option<u64>)],
) -> Result<()> {
    for chunk in found.chunks(MAX_BATCH) {
        let mut a = Args::default();
        a.s(mark);
        for (name, next) in chunk {
            a.s(name).n(next.map_or(-1, |t| t as i64));
        }
        run_global(conn, &scripts::RECOVERY_DONE, a.take()).await?;
    }
    Ok(())
}

/// A slice of the queue registry for a sweep: (next cursor, "0" at the end; names), by
/// `SSCAN` with `count` as its hint.
pub(crate) async fn scan_queues(
    conn: &mut Conn,
    cursor: &str,
    count: usize,
) -> Result<(String, Vec<String>)> {
    let (next, names): (String, Vec<String>) = redis::cmd("SSCAN")
        .arg(QUEUES_KEY)
        .arg(cursor)
        .arg("COUNT")
        .arg(count)
        .query_async(conn)
        .await?;
    Ok((next, names))
}

/// How many queues the registry names.
pub(crate) async fn count_queues(conn: &mut Conn) -> Result<u64> {
    Ok(redis::cmd("SCARD")
        .arg(QUEUES_KEY)
        .query_async(conn)
        .await?)
}

/// Which tasks a purge drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PurgeState {
    Scheduled,
    Dead,
    Succeeded,
}

/// Drops up to `max` tasks of `state` from partition `k`; (dropped, left).
pub(crate) async fn purge(
    conn: &mut Conn,
    k: &QueueKeys,
    state: PurgeState,
    max: usize,
) -> Result<(u64, u64)> {
    let mut a = Args::default();
    a.s(match state {
        PurgeState::Scheduled => "scheduled",
        PurgeState::Dead => "dead",
        PurgeState::Succeeded => "succeeded",
    })
    .n(max.clamp(1, MAX_BATCH));
    let mut r = run(conn, &scripts::PURGE, k, a.take()).await?;
    r.u64()?;
    Ok((r.u64()?, r.u64()?))
}

/// Deletes partition `k`'s keys (every state, settings, counters, schedules, webhook);
/// without `force` only when no task is scheduled or active. Whether it deleted.
pub(crate) async fn queue_delete(conn: &mut Conn, k: &QueueKeys, force: bool) -> Result<bool> {
    let mut a = Args::default();
    a.n(u8::from(force));
    let mut r = run(conn, &scripts::QUEUE_DELETE, k, a.take()).await?;
    r.u64()?;
    Ok(r.u64()? == 1)
}

/// Takes queue `name` off every registry (queues, schedules, webhooks, recovery index),
/// after its keys are gone (one command each: on a cluster they live on different nodes).
pub(crate) async fn unregister_queue(conn: &mut Conn, name: &str) -> Result<()> {
    for set in [QUEUES_KEY, SCHEDULES_KEY, WEBHOOKS_KEY] {
        redis::cmd("SREM")
            .arg(set)
            .arg(name)
            .query_async::<()>(conn)
            .await?;
    }
    redis::cmd("ZREM")
        .arg(RECOVERY_KEY)
        .arg(name)
        .query_async::<()>(conn)
        .await?;
    Ok(())
}
