//! Tasks by id or business key: enqueue (single and batch), get, cancel, reschedule; and
//! browsing scheduled or active tasks page by page.

use super::call::{Args, run};
use super::conn::Conn;
use super::keys::QueueKeys;
use super::record::{self, Record};
use super::scripts;
use crate::error::{Error, Result};
use crate::task::{
    CancelOutcome, Due, EnqueueOutcome, Enqueued, Expiry, KeyWindow, OnConflict, RescheduleOutcome,
    Task, TaskId, TaskOptions, TaskRef, TaskState,
};
use crate::trace;

/// A validated task ready for the enqueue script.
pub(crate) struct EnqueueItem<'a> {
    pub key: Option<&'a str>,
    pub on_conflict: OnConflict,
    pub due: Due,
    pub options: &'a TaskOptions,
    pub expiry: Option<Expiry>,
    /// Only with [`OnConflict::Debounce`].
    pub debounce_max_ms: Option<u64>,
    pub payload: &'a [u8],
    /// Made from a schedule's template ([`record::tick_spec`]).
    pub from_schedule: bool,
}

/// What one enqueue call did.
pub(crate) enum EnqueueReply {
    /// One answer per item, and the earliest expiry among the items (epoch ms), so the caller
    /// can note it in the recovery index.
    Done(Vec<Enqueued>, Option<u64>),
    /// Nothing written: the partition's count is not the one `k` was built for (a FLUSHALL
    /// or a change of the count since the client read its layout).
    LayoutChanged,
}

/// Enqueues `items` into partition `k`; `checked`: a partition above 0 first compares its
/// count with the one `k` was built for.
pub(crate) async fn enqueue(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[EnqueueItem<'_>],
    checked: bool,
) -> Result<EnqueueReply> {
    let mut a = Args::default();
    let grouped = items.iter().any(|it| it.options.group.is_some());
    a.s(&k.wake).n(items.len()).n(if grouped { 5 } else { 4 });
    // the caller's trace context, handed on to tasks that do not carry one
    let producer = trace::current();
    for it in items {
        let (kind, value) = it.due.parts()?;
        let conflict = match it.on_conflict {
            OnConflict::Replace => 'r',
            OnConflict::Debounce => 'b',
            _ => 'k',
        };
        let mut mode = String::with_capacity(24);
        mode.push(conflict);
        mode.push(if kind == "delay" { 'd' } else { 'a' });
        // options ride in the mode word, so a task without them costs no extra argument
        // (and the script reads a priority off the spec only when this says there is one)
        if it.options.priority > 0 {
            mode.push_str(" p");
        }
        match it.expiry {
            Some(Expiry::TtlMs(t)) => mode.push_str(&format!(" t{t}")),
            Some(Expiry::AtMs(t)) => mode.push_str(&format!(" e{t}")),
            None => {}
        }
        if let Some(m) = it.debounce_max_ms {
            mode.push_str(&format!(" m{m}"));
        }
        if let Some(w) = it.options.unique_for_ms {
            mode.push_str(&format!(" u{w}"));
        }
        let key = it.key.unwrap_or("");
        let build = |options: &TaskOptions| {
            if it.from_schedule {
                record::tick_spec(options, key, it.payload)
            } else {
                record::spec(options, key, it.payload)
            }
        };
        let spec = match &producer {
            Some(cx) if it.options.headers.traceparent().is_none() => {
                let mut options = it.options.clone();
                trace::inject(cx, &mut options.headers);
                build(&options)
            }
            _ => build(it.options),
        };
        a.s(key).s(&mode).n(value).0.push(spec);
        if grouped {
            a.s(it.options.group.as_deref().unwrap_or(""));
        }
    }
    if checked && k.partition > 0 {
        a.n(k.partitions);
    }
    let mut r = run(conn, &scripts::ENQUEUE, k, a.take()).await?;
    let status = r.string()?;
    let now = r.u64()?;
    let next_expiry_ms = items
        .iter()
        .filter_map(|it| match it.expiry {
            Some(Expiry::TtlMs(t)) => Some(now.saturating_add(t)),
            Some(Expiry::AtMs(t)) => Some(t),
            None => None,
        })
        .min();
    if status == "layout" {
        return Ok(EnqueueReply::LayoutChanged);
    }
    if status == "bad_due" {
        // unreachable from this client (delays are capped before sending), kept for safety
        let index = r.u64()?;
        return Err(Error::invalid(format!(
            "task {} of the slice: due time lands past year 9999",
            index.saturating_sub(1)
        )));
    }
    if status == "bad_expiry" {
        let index = r.u64()?;
        let field = if r.string()? == "t" {
            "ttl_ms"
        } else {
            "expires_at_ms"
        };
        return Err(Error::invalid(format!(
            "task {} of the slice: {field} must be after the due time: a task that expires \
             at or before it is due can never run",
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
            10 => EnqueueOutcome::Finished(TaskState::Succeeded),
            11 => EnqueueOutcome::Finished(TaskState::Dead),
            12 => EnqueueOutcome::Finished(TaskState::Cancelled),
            13 => EnqueueOutcome::Finished(TaskState::Expired),
            c => return Err(Error::protocol(format!("enqueue: unknown code {c}"))),
        };
        out.push(Enqueued {
            id,
            due_at_ms,
            outcome,
        });
    }
    Ok(EnqueueReply::Done(out, next_expiry_ms))
}

/// What a cancel did: its outcome, the task it found, the Redis time, and when the unique
/// window the cancel opened ends (epoch ms).
pub(crate) type Cancelled = (CancelOutcome, Option<TaskId>, u64, Option<u64>);

pub(crate) async fn cancel(conn: &mut Conn, k: &QueueKeys, target: &TaskRef) -> Result<Cancelled> {
    let (by, value) = target.parts();
    let mut a = Args::default();
    a.s(by).s(value);
    let mut r = run(conn, &scripts::CANCEL, k, a.take()).await?;
    let now_ms = r.u64()?;
    let outcome = match r.string()?.as_str() {
        "cancelled" => CancelOutcome::Cancelled,
        "in_progress" => CancelOutcome::InProgress,
        "not_found" => CancelOutcome::NotFound,
        o => return Err(Error::protocol(format!("cancel: unknown outcome {o}"))),
    };
    let id = r.string()?;
    let window_ends_ms = r.opt_u64()?;
    Ok((
        outcome,
        (!id.is_empty()).then(|| TaskId::from_redis(id)),
        now_ms,
        window_ends_ms,
    ))
}

/// The task state a script named, for operation `op`'s errors.
fn state_of(op: &str, name: &str) -> Result<TaskState> {
    TaskState::from_name(name).ok_or_else(|| Error::protocol(format!("{op}: unknown state {name}")))
}

/// The finished task holding `key` in its unique window, if any.
pub(crate) async fn window(conn: &mut Conn, k: &QueueKeys, key: &str) -> Result<Option<KeyWindow>> {
    let mut a = Args::default();
    a.s(key);
    let mut r = run(conn, &scripts::WINDOW, k, a.take()).await?;
    r.u64()?;
    if r.remaining() == 0 {
        return Ok(None);
    }
    let id = TaskId::from_redis(r.string()?);
    let state = state_of("window", &r.string()?)?;
    Ok(Some(KeyWindow {
        id,
        state,
        due_at_ms: r.u64()?,
        ends_at_ms: r.u64()?,
    }))
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
    let mut r = run(conn, &scripts::RESCHEDULE, k, a.take()).await?;
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

pub(super) fn task_from(
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
        group: None,
        priority: rec.priority,
        expires_at_ms: None,
        claimed_at_ms: None,
        worker: None,
        payload: rec.payload,
        headers: rec.headers,
        last_error,
        created_at_ms: rec.created_at_ms,
        state_at_ms: (state != TaskState::Scheduled && score > 0).then_some(score),
    }
}

/// Scheduled tasks in due order or active ones in lease-deadline order, after the cursor
/// `(score, id)`, at most `limit` (1 to 1 000).
pub(crate) async fn browse(
    conn: &mut Conn,
    k: &QueueKeys,
    state: TaskState,
    after: Option<(u64, &str)>,
    limit: usize,
) -> Result<Vec<Task>> {
    let mut a = Args::default();
    a.s(if state == TaskState::Active {
        "active"
    } else {
        "scheduled"
    });
    match after {
        Some((score, id)) => a.n(score).s(id),
        None => a.n(-1i64).s(""),
    };
    a.n(limit);
    let mut r = run(conn, &scripts::BROWSE, k, a.take()).await?;
    r.u64()?;
    let default_max_attempts = r.u64()?.min(u64::from(u32::MAX)) as u32;
    let default_lease_ms = r.u64()?;
    let n = r.u64()? as usize;
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let id = TaskId::from_redis(r.string()?);
        let score = r.u64()?;
        let rec = Record::decode(r.bytes()?)?;
        let group = r.opt_string()?;
        let last_error = r.opt_string()?;
        let expires_at_ms = r.opt_u64()?;
        let claimed_at_ms = r.opt_u64()?;
        let worker = r.opt_string()?;
        let mut t = task_from(id, state, rec, score, last_error);
        t.group = group;
        t.expires_at_ms = expires_at_ms;
        t.claimed_at_ms = claimed_at_ms;
        t.worker = worker;
        if t.max_attempts == 0 {
            t.max_attempts = default_max_attempts;
        }
        if t.lease_ms == 0 {
            t.lease_ms = default_lease_ms;
        }
        tasks.push(t);
    }
    Ok(tasks)
}

pub(crate) async fn get(conn: &mut Conn, k: &QueueKeys, target: &TaskRef) -> Result<Option<Task>> {
    let (by, value) = target.parts();
    let mut a = Args::default();
    a.s(by).s(value);
    let mut r = run(conn, &scripts::GET, k, a.take()).await?;
    r.u64()?;
    if r.remaining() == 0 {
        return Ok(None);
    }
    let id = TaskId::from_redis(r.string()?);
    let state = state_of("get", &r.string()?)?;
    let rec = Record::decode(r.bytes()?)?;
    let score = r.u64()?;
    let last_error = r.opt_string()?;
    let mut task = task_from(id, state, rec, score, last_error);
    task.group = r.opt_string()?;
    let default_max_attempts = r.u64()?;
    let default_lease_ms = r.u64()?;
    if task.max_attempts == 0 {
        task.max_attempts = default_max_attempts.min(u64::from(u32::MAX)) as u32;
    }
    if task.lease_ms == 0 {
        task.lease_ms = default_lease_ms;
    }
    if r.remaining() > 0 {
        task.expires_at_ms = r.opt_u64()?;
    }
    if r.remaining() > 0 {
        task.claimed_at_ms = r.opt_u64()?;
        task.worker = r.opt_string()?;
    }
    Ok(Some(task))
}
