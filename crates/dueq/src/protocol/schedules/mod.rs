//! Redis operations on a queue's schedules (`schedules`, `schedule_state`, `schedule_next`)
//! and on the `dueq:schedules` registry that lets `dueq serve` find queues with schedules.
//!
//! Every change is one script; `schedule_fire.lua` claims a tick by comparing the stored next
//! fire time, so any number of processes firing at once enqueue each tick once. Set adds the
//! queue to `dueq:schedules` *before* its script runs and nothing removes it (the set lives
//! outside the queue's hash tag, so one script cannot write both on a cluster).

use super::call::{Args, Reply, run};
use super::conn::Conn;
use super::keys::{QueueKeys, SCHEDULES_KEY, SCHEDULES_WAKE};
use super::scripts;
use crate::error::{Error, Result};
use crate::schedule::{MAX_TICKS_AHEAD, REFILL_AT};

/// A schedule as stored: its definition bytes, state text and fired ticks (`schedule_fired`,
/// '' for none).
pub(crate) struct Raw {
    pub name: String,
    pub def: Vec<u8>,
    pub state: String,
    pub ticks: String,
}

fn raws(r: &mut Reply) -> Result<Vec<Raw>> {
    let mut out = Vec::with_capacity(r.remaining() / 4);
    while r.remaining() >= 4 {
        out.push(Raw {
            name: r.string()?,
            def: r.bytes()?,
            state: r.string()?,
            ticks: r.string()?,
        });
    }
    Ok(out)
}

/// Stores a schedule; `upcoming` are its next fire times after a recent Redis time.
/// Returns (outcome text, next fire ms or -1).
pub(crate) async fn set(
    conn: &mut Conn,
    k: &QueueKeys,
    name: &str,
    def: &[u8],
    fingerprint: &str,
    lead_ms: u64,
    upcoming: &[u64],
) -> Result<(String, i64)> {
    let joined: i64 = redis::cmd("SADD")
        .arg(SCHEDULES_KEY)
        .arg(&k.name)
        .query_async(conn)
        .await?;
    let mut a = Args::default();
    a.s(name)
        .s(def)
        .s(fingerprint)
        .s(&k.schedule_wake)
        .n(lead_ms);
    a.n(REFILL_AT);
    for t in upcoming {
        a.n(t);
    }
    let mut r = run(conn, &scripts::SCHEDULE_SET, k, a.take()).await?;
    r.u64()?;
    let answer = (r.string()?, r.i64()?);
    if joined == 1 {
        // after the schedule is stored, so the firer that hears this finds it
        redis::cmd("PUBLISH")
            .arg(SCHEDULES_WAKE)
            .arg(&k.name)
            .query_async::<()>(conn)
            .await?;
    }
    Ok(answer)
}

/// Removes a schedule; whether there was one.
pub(crate) async fn delete(conn: &mut Conn, k: &QueueKeys, name: &str) -> Result<bool> {
    let mut a = Args::default();
    a.s(name);
    let mut r = run(conn, &scripts::SCHEDULE_DELETE, k, a.take()).await?;
    r.u64()?;
    Ok(r.i64()? == 1)
}

/// What a pause or resume found.
pub(crate) enum Paused {
    /// No such schedule.
    Missing,
    /// Done; the next fire ms (-1 none).
    Done(i64),
    /// A resume whose offered fire times were all past by the script's clock: nothing
    /// written, offer newer ones.
    Stale,
}

/// Pauses or resumes.
pub(crate) async fn pause(
    conn: &mut Conn,
    k: &QueueKeys,
    name: &str,
    paused: bool,
    lead_ms: u64,
    upcoming: &[u64],
) -> Result<Paused> {
    let mut a = Args::default();
    a.s(name)
        .n(u8::from(paused))
        .s(&k.schedule_wake)
        .n(lead_ms)
        .n(REFILL_AT);
    for t in upcoming {
        a.n(t);
    }
    let mut r = run(conn, &scripts::SCHEDULE_PAUSE, k, a.take()).await?;
    r.u64()?;
    let code = r.i64()?;
    let next = r.i64()?;
    Ok(match code {
        0 => Paused::Missing,
        2 => Paused::Stale,
        _ => Paused::Done(next),
    })
}

/// One schedule, with the Redis time.
pub(crate) async fn get(conn: &mut Conn, k: &QueueKeys, name: &str) -> Result<(u64, Option<Raw>)> {
    let mut a = Args::default();
    a.s(name);
    let mut r = run(conn, &scripts::SCHEDULE_GET, k, a.take()).await?;
    let now = r.u64()?;
    if r.remaining() == 0 {
        return Ok((now, None));
    }
    Ok((
        now,
        Some(Raw {
            name: name.to_owned(),
            def: r.bytes()?,
            state: r.string()?,
            ticks: r.string()?,
        }),
    ))
}

/// The names of the queue's schedules (no definitions read), in no order.
pub(crate) async fn names(conn: &mut Conn, k: &QueueKeys) -> Result<Vec<String>> {
    Ok(redis::cmd("HKEYS")
        .arg(&k.schedules)
        .query_async(conn)
        .await?)
}

/// One page of schedules: (Redis time, next cursor ("0" at the end), schedules).
pub(crate) async fn list_page(
    conn: &mut Conn,
    k: &QueueKeys,
    cursor: &str,
    count: usize,
) -> Result<(u64, String, Vec<Raw>)> {
    let mut a = Args::default();
    a.s(cursor).n(count);
    let mut r = run(conn, &scripts::SCHEDULE_LIST, k, a.take()).await?;
    let now = r.u64()?;
    let next = r.string()?;
    Ok((now, next, raws(&mut r)?))
}

/// What `schedule_due` answered.
pub(crate) struct Due {
    pub now_ms: u64,
    /// When a firer should next act on the queue's unpaused schedules (a tick due, or one
    /// that may fire ahead).
    pub earliest_ms: Option<u64>,
    pub due: Vec<Raw>,
}

/// The schedules due now (at most `max`), with the Redis time and the earliest next fire.
/// Up to `max` due schedules; with more due, the batch at a random place among them, so that
/// processes firing at once mostly take different ones (`schedule_due.lua`).
pub(crate) async fn due(conn: &mut Conn, k: &QueueKeys, max: usize) -> Result<Due> {
    let mut a = Args::default();
    a.n(max).n(rand::random::<u32>().max(1));
    let mut r = run(conn, &scripts::SCHEDULE_DUE, k, a.take()).await?;
    Ok(Due {
        now_ms: r.u64()?,
        earliest_ms: r.opt_u64()?,
        due: raws(&mut r)?,
    })
}

/// One planned step of one schedule (see `schedule_fire.lua`).
pub(crate) struct FireItem<'a> {
    pub name: &'a str,
    pub expect_next: i64,
    pub missed: u64,
    /// The ticks to fire, ascending.
    pub ticks: &'a [u64],
    /// Their tasks' spec ([`record::spec`](crate::protocol::record::spec)) with an empty key:
    /// the script puts each tick's business key in.
    pub spec: &'a [u8],
    /// The stored definition the step was planned from (a replace since refuses the step).
    pub def: &'a [u8],
    pub next: Option<u64>,
    pub overlap_skip: bool,
    /// The tasks' group, '' for none.
    pub group: &'a str,
    /// How far ahead of its tick a tick may fire, ms.
    pub lead_ms: u64,
    /// Misfire `fire_once` (else `skip`): which tick's time a task's misfire deadline
    /// counts from (the next tick's, or its own).
    pub fire_once: bool,
    /// `misfire_grace_ms`: a tick's task not started this long after that time is missed.
    pub grace_ms: u64,
    /// The ticks' unique window, ms (`None`: the queue's `unique_for_ms` setting).
    pub unique_for_ms: Option<u64>,
}

/// What `schedule_fire` did with one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fired {
    /// 1 applied, 0 stale, -1 gone, -2 paused, -3 not due yet.
    pub code: i64,
    pub created: u64,
    pub skipped: u64,
}

pub(crate) async fn fire(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[FireItem<'_>],
) -> Result<(u64, Vec<Fired>)> {
    let mut a = Args::default();
    a.s(&k.wake).n(items.len()).n(MAX_TICKS_AHEAD).n(REFILL_AT);
    for it in items {
        a.s(it.name)
            .n(it.expect_next)
            .n(it.missed)
            .n(it.ticks.len());
        for at in it.ticks {
            a.n(at);
        }
        a.n(it.next.map_or(-1, |n| n as i64))
            .s(if it.overlap_skip { "s" } else { "a" })
            .s(it.group)
            .n(it.lead_ms)
            .s(it.spec)
            .s(it.def)
            .s(if it.fire_once { "o" } else { "s" })
            .n(it.grace_ms);
        match it.unique_for_ms {
            Some(w) => a.n(w),
            None => a.s(""),
        };
    }
    let mut r = run(conn, &scripts::SCHEDULE_FIRE, k, a.take()).await?;
    let now = r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    while r.remaining() >= 3 {
        out.push(Fired {
            code: r.i64()?,
            created: r.u64()?,
            skipped: r.u64()?,
        });
    }
    if out.len() != items.len() {
        return Err(Error::protocol(
            "schedule_fire: one answer per item expected",
        ));
    }
    Ok((now, out))
}

/// Names in `dueq:schedules`, sorted: every queue with a schedule, and queues that had one.
pub(crate) async fn registry(conn: &mut Conn) -> Result<Vec<String>> {
    let mut names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(SCHEDULES_KEY)
        .query_async(conn)
        .await?;
    names.sort();
    Ok(names)
}
