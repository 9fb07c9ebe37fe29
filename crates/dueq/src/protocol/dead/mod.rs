//! The dead-letter queue: list (paged), retry, delete.

use super::call::{Args, MAX_BATCH, run};
use super::conn::Conn;
use super::keys::QueueKeys;
use super::record::Record;
use super::scripts;
use super::tasks::task_from;
use crate::error::Result;
use crate::task::{DeadPage, DeadRetryOutcome, DeadTask, TaskId, TaskState};

pub(crate) async fn dead_list(
    conn: &mut Conn,
    k: &QueueKeys,
    offset: u64,
    limit: u64,
) -> Result<DeadPage> {
    let mut a = Args::default();
    a.n(offset).n(limit.clamp(1, MAX_BATCH as u64));
    let keys = [&k.dead, &k.tasks, &k.errors, &k.meta].map(String::as_str);
    let mut r = run(conn, "dead_list", &scripts::DEAD_LIST, &keys, a.take()).await?;
    r.u64()?;
    let total = r.u64()?;
    let default_max_attempts = r.u64()?.min(u64::from(u32::MAX)) as u32;
    let default_lease_ms = r.u64()?;
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
            priority: 0,
            due_at_ms: 0,
            created_at_ms: 0,
            misfire_deadline_ms: None,
            key: None,
            payload: raw,
        });
        let last_error = r.opt_string()?;
        let mut task = task_from(id, TaskState::Dead, rec, died_at_ms, last_error);
        // 0 in a record means "the queue's setting", as a get shows it
        if task.max_attempts == 0 {
            task.max_attempts = default_max_attempts;
        }
        if task.lease_ms == 0 {
            task.lease_ms = default_lease_ms;
        }
        tasks.push(DeadTask { task, died_at_ms });
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
    let mut keys = k.with_lane_keys(&[&k.sched, &k.dead, &k.tasks, &k.keys, &k.errors]);
    keys.push(&k.meta);
    keys.push(&k.dead_keys);
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
    let keys = [&k.dead, &k.tasks, &k.errors, &k.groups, &k.dead_keys].map(String::as_str);
    let mut r = run(conn, "dead_delete", &scripts::DEAD_DELETE, &keys, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(ids.len());
    for _ in ids {
        out.push(r.i64()? == 1);
    }
    Ok(out)
}
