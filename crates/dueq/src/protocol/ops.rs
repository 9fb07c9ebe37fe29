//! One typed function per script: key names and arguments in, typed reply out.

use redis::Value;
use redis::aio::ConnectionLike;

use super::conn::Conn;
use super::keys::{QUEUES_KEY, QueueKeys};
use super::record::{self, Record};
use super::reply::Reply;
use super::scripts;
use crate::error::{Error, ErrorKind, Result};
use crate::task::{
    AckOutcome, CancelOutcome, ClaimedTask, DeadPage, DeadRetryOutcome, DeadTask, Due,
    EnqueueOutcome, Enqueued, LeaseToken, MinuteStats, NackOutcome, OnConflict, QueueStats,
    RescheduleOutcome, Task, TaskId, TaskRef, TaskState,
};

/// Most tasks one script call handles (DESIGN 3: bounded work per call).
pub(crate) const MAX_BATCH: usize = 1000;

pub(super) async fn run(
    conn: &mut Conn,
    name: &'static str,
    script: &redis::Script,
    keys: &[&str],
    args: Vec<Vec<u8>>,
) -> Result<Reply> {
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(*k);
    }
    for a in args {
        inv.arg(a);
    }
    let v: Value = inv.invoke_async(conn).await?;
    Reply::new(name, v)
}

/// Argument list builder.
#[derive(Default)]
pub(super) struct Args(Vec<Vec<u8>>);

impl Args {
    pub(super) fn s(&mut self, v: impl AsRef<[u8]>) -> &mut Self {
        self.0.push(v.as_ref().to_vec());
        self
    }
    pub(super) fn n(&mut self, v: impl std::fmt::Display) -> &mut Self {
        self.0.push(v.to_string().into_bytes());
        self
    }
    pub(super) fn take(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.0)
    }
}

/// A validated task ready for the enqueue script.
pub(crate) struct EnqueueItem<'a> {
    pub key: Option<&'a str>,
    pub on_conflict: OnConflict,
    pub due: Due,
    pub max_attempts: u32,
    pub lease_ms: u64,
    pub payload: &'a [u8],
}

pub(crate) async fn enqueue(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[EnqueueItem<'_>],
) -> Result<Vec<Enqueued>> {
    let mut a = Args::default();
    a.s(&k.wake).n(items.len());
    for it in items {
        let (kind, value) = it.due.parts()?;
        let mode = match (it.on_conflict, kind) {
            (OnConflict::Replace, "delay") => "rd",
            (OnConflict::Replace, _) => "ra",
            (_, "delay") => "kd",
            _ => "ka",
        };
        let key = it.key.unwrap_or("");
        a.s(key).s(mode).n(value).0.push(record::spec(
            it.max_attempts,
            it.lease_ms,
            key,
            it.payload,
        ));
    }
    let keys = [&k.sched, &k.tasks, &k.keys, &k.meta, &k.stats, &k.leases].map(String::as_str);
    let mut r = run(conn, "enqueue", &scripts::ENQUEUE, &keys, a.take()).await?;
    let status = r.string()?;
    let _now = r.u64()?;
    if status == "bad_due" {
        // unreachable from this client (delays are capped before sending), kept for safety
        let index = r.u64()?;
        return Err(Error::invalid(format!(
            "task {} of the slice: due time lands past year 9999",
            index.saturating_sub(1)
        )));
    }
    let mut out = Vec::with_capacity(items.len());
    while r.remaining() > 0 {
        let code = r.i64()?;
        let id = TaskId::from_redis(r.string()?);
        let due_at_ms = r.u64()?;
        let outcome = match code {
            1 => EnqueueOutcome::Created,
            0 => EnqueueOutcome::Existing,
            2 => EnqueueOutcome::Replaced,
            -1 => EnqueueOutcome::InProgress,
            c => return Err(Error::protocol(format!("enqueue: unknown code {c}"))),
        };
        out.push(Enqueued {
            id,
            due_at_ms,
            outcome,
        });
    }
    Ok(out)
}

/// What a claim returns besides the tasks: the Redis clock and what to wait for next.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimReply {
    pub now_ms: u64,
    pub paused: bool,
    pub next_due_ms: Option<u64>,
    pub next_deadline_ms: Option<u64>,
    pub orphans: bool,
    pub tasks: Vec<ClaimedTask>,
}

/// Claim ids a caller uses to recover from lost replies (see `lua/claim.lua`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClaimTracking<'a> {
    /// This call's id ('' = untracked).
    pub id: &'a str,
    /// The previous call whose reply arrived.
    pub forget: &'a str,
    /// Calls whose replies were lost.
    pub resume: &'a [String],
}

pub(crate) async fn claim(
    conn: &mut Conn,
    k: &QueueKeys,
    max: usize,
    lease_override_ms: u64,
    tracking: ClaimTracking<'_>,
) -> Result<ClaimReply> {
    let mut a = Args::default();
    a.n(max.min(MAX_BATCH))
        .n(lease_override_ms)
        .s(tracking.id)
        .s(tracking.forget)
        .n(tracking.resume.len());
    for r in tracking.resume {
        a.s(r);
    }
    let keys = [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.meta, &k.claims, &k.errors, &k.dead, &k.stats,
        &k.hist,
    ]
    .map(String::as_str);
    let mut r = run(conn, "claim", &scripts::CLAIM, &keys, a.take()).await?;
    let now_ms = r.u64()?;
    let mut reply = ClaimReply {
        now_ms,
        paused: r.i64()? == 1,
        next_due_ms: r.opt_u64()?,
        next_deadline_ms: r.opt_u64()?,
        orphans: r.i64()? == 1,
        tasks: Vec::new(),
    };
    while r.remaining() > 0 {
        let id = TaskId::from_redis(r.string()?);
        let lease_token = LeaseToken::new(r.string()?);
        let due_at_ms = r.u64()?;
        let lease_expires_at_ms = r.u64()?;
        let rec = Record::decode(r.bytes()?)?;
        let last_error = r.opt_string()?;
        let attempt = rec.attempt.saturating_add(1);
        reply.tasks.push(ClaimedTask {
            id,
            key: rec.key,
            payload: rec.payload,
            attempt,
            max_attempts: rec.max_attempts,
            due_at_ms,
            lease_token,
            lease_expires_at_ms,
            claimed_at_ms: now_ms,
            started_at_ms: now_ms,
            last_error,
        });
    }
    Ok(reply)
}

pub(crate) async fn ack(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(TaskId, LeaseToken)],
) -> Result<Vec<AckOutcome>> {
    let mut a = Args::default();
    a.n(items.len());
    for (id, token) in items {
        a.s(id.as_str()).s(token.as_str());
    }
    let keys = [
        &k.active, &k.leases, &k.tasks, &k.keys, &k.done, &k.stats, &k.meta, &k.errors, &k.hist,
    ]
    .map(String::as_str);
    let mut r = run(conn, "ack", &scripts::ACK, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        out.push(match r.i64()? {
            1 => AckOutcome::Acked,
            _ => AckOutcome::LeaseLost,
        });
    }
    Ok(out)
}

/// One failed attempt to report.
pub(crate) struct NackItem<'a> {
    pub id: &'a TaskId,
    pub token: &'a LeaseToken,
    /// `None`: the backoff table decides by attempt.
    pub retry_in_ms: Option<u64>,
    pub permanent: bool,
    pub error: &'a str,
}

pub(crate) async fn nack(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[NackItem<'_>],
    backoff_ms: &[u64],
) -> Result<Vec<NackOutcome>> {
    let mut a = Args::default();
    a.s(&k.wake).n(backoff_ms.len());
    for d in backoff_ms {
        a.n(d);
    }
    a.n(items.len());
    for it in items {
        a.s(it.id.as_str())
            .s(it.token.as_str())
            .n(it.retry_in_ms.map_or(-1, |d| d.min(i64::MAX as u64) as i64))
            .s(if it.permanent { "1" } else { "0" })
            .s(it.error);
    }
    let keys = [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.keys, &k.dead, &k.stats, &k.meta, &k.errors,
        &k.hist,
    ]
    .map(String::as_str);
    let mut r = run(conn, "nack", &scripts::NACK, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        let code = r.i64()?;
        let due_at_ms = r.u64()?;
        out.push(match code {
            1 => NackOutcome::Rescheduled { due_at_ms },
            2 => NackOutcome::Dead,
            _ => NackOutcome::LeaseLost,
        });
    }
    Ok(out)
}

pub(crate) async fn extend(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(&TaskId, &LeaseToken, u64)],
) -> Result<Vec<Option<u64>>> {
    let mut a = Args::default();
    a.n(items.len());
    for (id, token, lease_ms) in items {
        a.s(id.as_str()).s(token.as_str()).n(lease_ms);
    }
    let keys = [&k.active, &k.leases].map(String::as_str);
    let mut r = run(conn, "extend", &scripts::EXTEND, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        let d = r.u64()?;
        out.push((d > 0).then_some(d));
    }
    Ok(out)
}

pub(crate) async fn release(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(TaskId, LeaseToken)],
) -> Result<Vec<bool>> {
    let mut a = Args::default();
    a.s(&k.wake).n(items.len());
    for (id, token) in items {
        a.s(id.as_str()).s(token.as_str());
    }
    let keys = [&k.sched, &k.active, &k.leases, &k.tasks].map(String::as_str);
    let mut r = run(conn, "release", &scripts::RELEASE, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        out.push(r.i64()? == 1);
    }
    Ok(out)
}

/// What a recover pass did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecoverReply {
    pub now_ms: u64,
    pub recovered: u64,
    pub dead: u64,
    pub next_deadline_ms: Option<u64>,
    pub swept: bool,
}

pub(crate) async fn recover(
    conn: &mut Conn,
    k: &QueueKeys,
    max: usize,
    backoff_ms: &[u64],
) -> Result<RecoverReply> {
    let mut a = Args::default();
    a.s(&k.wake).n(max.min(MAX_BATCH)).n(backoff_ms.len());
    for d in backoff_ms {
        a.n(d);
    }
    let keys = [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.keys, &k.dead, &k.stats, &k.meta, &k.claims,
        &k.errors, &k.hist,
    ]
    .map(String::as_str);
    let mut r = run(conn, "recover", &scripts::RECOVER, &keys, a.take()).await?;
    Ok(RecoverReply {
        now_ms: r.u64()?,
        recovered: r.u64()?,
        dead: r.u64()?,
        next_deadline_ms: r.opt_u64()?,
        swept: r.i64()? == 1,
    })
}

pub(crate) async fn cancel(
    conn: &mut Conn,
    k: &QueueKeys,
    target: &TaskRef,
) -> Result<(CancelOutcome, Option<TaskId>, u64)> {
    let (by, value) = target.parts();
    let mut a = Args::default();
    a.s(by).s(value);
    let keys = [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.keys, &k.stats, &k.errors,
    ]
    .map(String::as_str);
    let mut r = run(conn, "cancel", &scripts::CANCEL, &keys, a.take()).await?;
    let now_ms = r.u64()?;
    let outcome = match r.string()?.as_str() {
        "cancelled" => CancelOutcome::Cancelled,
        "in_progress" => CancelOutcome::InProgress,
        "not_found" => CancelOutcome::NotFound,
        o => return Err(Error::protocol(format!("cancel: unknown outcome {o}"))),
    };
    let id = r.string()?;
    Ok((
        outcome,
        (!id.is_empty()).then(|| TaskId::from_redis(id)),
        now_ms,
    ))
}

pub(crate) async fn reschedule(
    conn: &mut Conn,
    k: &QueueKeys,
    target: &TaskRef,
    due: Due,
) -> Result<RescheduleOutcome> {
    let (by, value) = target.parts();
    let (kind, due_value) = due.parts()?;
    let mut a = Args::default();
    a.s(&k.wake).s(by).s(value).s(kind).n(due_value);
    let keys = [&k.sched, &k.active, &k.leases, &k.tasks, &k.keys].map(String::as_str);
    let mut r = run(conn, "reschedule", &scripts::RESCHEDULE, &keys, a.take()).await?;
    r.u64()?;
    let outcome = r.string()?;
    r.string()?;
    let due_at_ms = r.u64()?;
    match outcome.as_str() {
        "rescheduled" => Ok(RescheduleOutcome::Rescheduled { due_at_ms }),
        "in_progress" => Ok(RescheduleOutcome::InProgress),
        "not_found" => Ok(RescheduleOutcome::NotFound),
        "bad_due" => Err(Error::invalid("due time lands past year 9999")),
        o => Err(Error::protocol(format!("reschedule: unknown outcome {o}"))),
    }
}

fn task_from(
    id: TaskId,
    state: TaskState,
    rec: Record,
    score: u64,
    last_error: Option<String>,
) -> Task {
    let active = state == TaskState::Active;
    Task {
        id,
        key: rec.key,
        state,
        due_at_ms: if state == TaskState::Scheduled {
            score
        } else {
            rec.due_at_ms
        },
        attempt: rec.attempt.saturating_add(u32::from(active)),
        max_attempts: rec.max_attempts,
        lease_ms: rec.lease_ms,
        payload: rec.payload,
        last_error,
        created_at_ms: rec.created_at_ms,
        state_at_ms: (state != TaskState::Scheduled && score > 0).then_some(score),
    }
}

pub(crate) async fn get(conn: &mut Conn, k: &QueueKeys, target: &TaskRef) -> Result<Option<Task>> {
    let (by, value) = target.parts();
    let mut a = Args::default();
    a.s(by).s(value);
    let keys = [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.keys, &k.dead, &k.done, &k.errors,
    ]
    .map(String::as_str);
    let mut r = run(conn, "get", &scripts::GET, &keys, a.take()).await?;
    r.u64()?;
    if r.remaining() == 0 {
        return Ok(None);
    }
    let id = TaskId::from_redis(r.string()?);
    let state = match r.string()?.as_str() {
        "scheduled" => TaskState::Scheduled,
        "active" => TaskState::Active,
        "dead" => TaskState::Dead,
        "succeeded" => TaskState::Succeeded,
        s => return Err(Error::protocol(format!("get: unknown state {s}"))),
    };
    let rec = Record::decode(r.bytes()?)?;
    let score = r.u64()?;
    let last_error = r.opt_string()?;
    Ok(Some(task_from(id, state, rec, score, last_error)))
}

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

pub(crate) async fn dead_list(
    conn: &mut Conn,
    k: &QueueKeys,
    offset: u64,
    limit: u64,
) -> Result<DeadPage> {
    let mut a = Args::default();
    a.n(offset).n(limit.clamp(1, MAX_BATCH as u64));
    let keys = [&k.dead, &k.tasks, &k.errors].map(String::as_str);
    let mut r = run(conn, "dead_list", &scripts::DEAD_LIST, &keys, a.take()).await?;
    r.u64()?;
    let total = r.u64()?;
    let mut tasks = Vec::new();
    while r.remaining() > 0 {
        let id = TaskId::from_redis(r.string()?);
        let died_at_ms = r.u64()?;
        let raw = r.bytes()?;
        // an unreadable record (quarantined by a script) is still listed, raw, so an operator
        // can see and delete it
        let rec = Record::decode(raw.clone()).unwrap_or(Record {
            attempt: 0,
            max_attempts: 0,
            lease_ms: 0,
            due_at_ms: 0,
            created_at_ms: 0,
            key: None,
            payload: raw,
        });
        let last_error = r.opt_string()?;
        tasks.push(DeadTask {
            task: task_from(id, TaskState::Dead, rec, died_at_ms, last_error),
            died_at_ms,
        });
    }
    Ok(DeadPage { total, tasks })
}

pub(crate) async fn dead_retry(
    conn: &mut Conn,
    k: &QueueKeys,
    ids: &[TaskId],
) -> Result<Vec<DeadRetryOutcome>> {
    let mut a = Args::default();
    a.s(&k.wake).n(ids.len());
    for id in ids {
        a.s(id.as_str());
    }
    let keys = [&k.sched, &k.dead, &k.tasks, &k.keys, &k.errors].map(String::as_str);
    let mut r = run(conn, "dead_retry", &scripts::DEAD_RETRY, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(ids.len());
    for _ in ids {
        out.push(match r.string()?.as_str() {
            "retried" => DeadRetryOutcome::Retried,
            "conflict" => DeadRetryOutcome::Conflict,
            _ => DeadRetryOutcome::NotFound,
        });
    }
    Ok(out)
}

pub(crate) async fn dead_delete(
    conn: &mut Conn,
    k: &QueueKeys,
    ids: &[TaskId],
) -> Result<Vec<bool>> {
    let mut a = Args::default();
    a.n(ids.len());
    for id in ids {
        a.s(id.as_str());
    }
    let keys = [&k.dead, &k.tasks, &k.errors].map(String::as_str);
    let mut r = run(conn, "dead_delete", &scripts::DEAD_DELETE, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(ids.len());
    for _ in ids {
        out.push(r.i64()? == 1);
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

/// The server's `maxmemory-policy`, or an error when it cannot be read (for example when
/// `CONFIG` is disabled by ACL or renamed).
pub(crate) async fn maxmemory_policy(conn: &mut Conn) -> Result<String> {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await?;
    v.into_iter()
        .nth(1)
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "CONFIG GET maxmemory-policy: empty"))
}

/// `INFO section` text.
pub(crate) async fn info(conn: &mut Conn, section: &str) -> Result<String> {
    Ok(redis::cmd("INFO").arg(section).query_async(conn).await?)
}

/// Round trip to the server (readiness).
pub(crate) async fn ping(conn: &mut Conn) -> Result<()> {
    redis::cmd("PING").query_async::<()>(conn).await?;
    Ok(())
}

/// Keeps `ConnectionLike` in scope for callers of `query_async` on `Conn`.
#[allow(dead_code)]
fn _assert_conn_like<C: ConnectionLike>() {}
