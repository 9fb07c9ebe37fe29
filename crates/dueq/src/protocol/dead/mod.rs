//! The dead-letter queue: list (paged), retry, delete, and retry or delete by filter.

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
    let mut r = run(conn, &scripts::DEAD_LIST, k, a.take()).await?;
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
        let rec = Record::decode(raw.clone()).unwrap_or_else(|_| Record::unreadable(raw));
        let last_error = r.opt_string()?;
        let mut task = task_from(id, TaskState::Dead, rec, died_at_ms, last_error);
        task.group = r.opt_string()?;
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
    let mut r = run(conn, &scripts::DEAD_RETRY, k, a.take()).await?;
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
    let mut r = run(conn, &scripts::DEAD_DELETE, k, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(ids.len());
    for _ in ids {
        out.push(r.i64()? == 1);
    }
    Ok(out)
}

/// What a slice of [`dead_bulk`] does with the tasks that match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BulkAction {
    /// Due now, or spread evenly over `spread_ms` from now.
    Retry {
        spread_ms: u64,
    },
    Delete,
    Count,
}

/// Where a bulk run stands in one partition: the death time it goes on from, how many dead
/// tasks of that very time earlier slices looked at and left, and the bound (deaths at or
/// after it are left out; -1: the first slice takes Redis now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BulkCursor {
    pub at: u64,
    pub skip: u64,
    pub before: i64,
}

/// The filter of a bulk run as the script takes it.
pub(crate) struct BulkFilter<'a> {
    pub error_contains: &'a str,
    pub key_prefix: &'a str,
    pub group: &'a str,
}

/// What one slice did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BulkSlice {
    /// Where the next slice starts (`None`: this partition is done).
    pub next: Option<BulkCursor>,
    /// The run's bound: deaths at or after it are left out (the first slice sets it).
    pub before: i64,
    pub looked_at: u64,
    pub matched: u64,
    pub done: u64,
    pub conflicts: u64,
}

/// One slice of a bulk run over partition `k`'s dead-letter queue (see `dead_bulk.lua`):
/// looks at up to `scan` dead tasks from `at`, acts on at most `limit` of those that match.
pub(crate) async fn dead_bulk(
    conn: &mut Conn,
    k: &QueueKeys,
    action: BulkAction,
    at: BulkCursor,
    filter: &BulkFilter<'_>,
    scan: usize,
    limit: u64,
) -> Result<BulkSlice> {
    let (name, spread_ms) = match action {
        BulkAction::Retry { spread_ms } => ("retry", spread_ms),
        BulkAction::Delete => ("delete", 0),
        BulkAction::Count => ("count", 0),
    };
    let mut a = Args::default();
    a.s(name)
        .s(&k.wake)
        .n(at.at)
        .n(at.skip)
        .n(at.before)
        .n(scan.clamp(1, MAX_BATCH))
        .n(limit)
        .s(filter.error_contains)
        .s(filter.key_prefix)
        .s(filter.group)
        .n(spread_ms);
    let mut r = run(conn, &scripts::DEAD_BULK, k, a.take()).await?;
    r.u64()?;
    let next_at = r.i64()?;
    let skip = r.u64()?;
    let before = r.i64()?;
    Ok(BulkSlice {
        next: u64::try_from(next_at)
            .ok()
            .map(|at| BulkCursor { at, skip, before }),
        before,
        looked_at: r.u64()?,
        matched: r.u64()?,
        done: r.u64()?,
        conflicts: r.u64()?,
    })
}
