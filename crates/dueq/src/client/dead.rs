//! Dead-letter queue operations on a [`Queue`]: list, retry, delete, and retry or delete
//! every dead task that matches a filter ([`DeadFilter`]), a bounded slice per Redis call.

use std::time::Duration;

use tokio::time::Instant;

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::dead::{self, BulkAction, BulkCursor, BulkFilter};
use crate::task::{DeadPage, DeadRetryOutcome, TaskId, validate_group};

/// Dead tasks one Redis call of a bulk retry or delete looks at (with those that died in the
/// same millisecond as the last of them): a retry is about ten commands a task, so a call
/// stays well under 10 ms.
const BULK_SCAN: usize = 200;
/// Dead tasks one Redis call of a dry run looks at (it only reads them).
const COUNT_SCAN: usize = 1_000;

/// Longest filter text (`error_contains`, `key_prefix`), bytes.
pub const MAX_FILTER_BYTES: usize = 4096;

/// Which dead tasks a bulk retry or delete acts on: every filter given must match, and none
/// given matches every dead task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadFilter {
    /// The task's last error contains this text (case-sensitive).
    pub error_contains: Option<String>,
    /// It died at or after this time, epoch ms (Redis clock).
    pub died_after_ms: Option<u64>,
    /// It died before this time, epoch ms. Default: when the run starts, so tasks that die
    /// during a run (a retried one failing again) are not taken twice.
    pub died_before_ms: Option<u64>,
    /// Its business key starts with this.
    pub key_prefix: Option<String>,
    /// It belongs to this group.
    pub group: Option<String>,
}

impl DeadFilter {
    /// Every dead task (add filters with the other methods).
    pub fn new() -> Self {
        Self::default()
    }

    /// Only tasks whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Only tasks that died at or after `ms` (epoch ms).
    pub fn died_after_ms(mut self, ms: u64) -> Self {
        self.died_after_ms = Some(ms);
        self
    }

    /// Only tasks that died before `ms` (epoch ms).
    pub fn died_before_ms(mut self, ms: u64) -> Self {
        self.died_before_ms = Some(ms);
        self
    }

    /// Only tasks whose business key starts with `prefix`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Only tasks of group `group`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("error_contains", &self.error_contains),
            ("key_prefix", &self.key_prefix),
        ] {
            if let Some(v) = v
                && (v.is_empty() || v.len() > MAX_FILTER_BYTES)
            {
                return Err(Error::invalid(format!(
                    "{field} must be 1 to {MAX_FILTER_BYTES} bytes"
                )));
            }
        }
        if let Some(g) = &self.group {
            validate_group(g)?;
        }
        if let (Some(a), Some(b)) = (self.died_after_ms, self.died_before_ms)
            && a >= b
        {
            return Err(Error::invalid(
                "died_after_ms must be before died_before_ms",
            ));
        }
        Ok(())
    }
}

/// What a bulk run over the dead-letter queue did (this call's share of it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadBulkReport {
    /// Dead tasks looked at.
    pub looked_at: u64,
    /// Of those, the ones the filter matched.
    pub matched: u64,
    /// Retried or deleted.
    pub done: u64,
    /// Retries refused: the task's business key is taken by another task (live, or in its unique
    /// window).
    pub conflicts: u64,
    /// Where to go on (pass it to the next call): `None` when the run is over (the whole
    /// dead-letter queue looked at, or the limit reached).
    pub cursor: Option<String>,
}

/// How a bulk retry or delete runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadBulk {
    /// Which dead tasks.
    pub filter: DeadFilter,
    /// Most tasks to act on (this call); `None`: every match.
    pub limit: Option<u64>,
    /// Only count the matches; change nothing.
    pub dry_run: bool,
    /// A retry only: each task is due at a time spread over this many ms from now
    /// (by a hash of its id), so that a retry of 50 000 does not stampede the workers. At
    /// most [`MAX_SPREAD_MS`].
    pub spread_ms: u64,
}

/// Longest spread of a bulk retry: 30 days.
pub const MAX_SPREAD_MS: u64 = 30 * 86_400_000;

impl DeadBulk {
    /// A run over the dead tasks `filter` matches.
    pub fn new(filter: DeadFilter) -> Self {
        Self {
            filter,
            ..Self::default()
        }
    }

    /// Acts on at most `n` tasks.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Counts the matches only.
    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    /// Spreads retried tasks over `ms` from now.
    pub fn spread_ms(mut self, ms: u64) -> Self {
        self.spread_ms = ms;
        self
    }
}

/// Parses a bulk cursor `partition:at:skip:before`.
fn parse_cursor(c: &str) -> Result<(usize, BulkCursor)> {
    let bad = || Error::invalid(format!("cursor {c:?} is not one a bulk call returned"));
    let v: Vec<u64> = c
        .split(':')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    let [p, at, skip, before] = v[..] else {
        return Err(bad());
    };
    Ok((
        usize::try_from(p).map_err(|_| bad())?,
        BulkCursor {
            at,
            skip,
            before: i64::try_from(before).map_err(|_| bad())?,
        },
    ))
}

fn cursor_text(p: usize, c: BulkCursor) -> String {
    format!("{p}:{}:{}:{}", c.at, c.skip, c.before.max(0))
}

/// Largest `offset` of [`Queue::dead_list`]: far beyond any dead-letter queue that fits in
/// memory; Redis and the script's arithmetic could not take every `u64`.
pub const MAX_DEAD_OFFSET: u64 = u32::MAX as u64;

/// Dead tasks read from each partition for one page of a partitioned queue: a page beyond
/// this depth (`offset + limit`) comes out short.
const MAX_DEAD_MERGE: u64 = 10_000;

impl Queue {
    /// One page of dead tasks, newest first: `limit` (1 to 1 000) from `offset` (0 to
    /// [`MAX_DEAD_OFFSET`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a limit or offset out of range,
    /// [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn dead_list(&self, offset: u64, limit: u64) -> Result<DeadPage> {
        if limit == 0 || limit > MAX_BATCH as u64 {
            return Err(Error::invalid(format!("limit must be 1 to {MAX_BATCH}")));
        }
        if offset > MAX_DEAD_OFFSET {
            return Err(Error::invalid(format!(
                "offset must be 0 to {MAX_DEAD_OFFSET}"
            )));
        }
        let Some(layout) = self.split_layout().await? else {
            return dead::dead_list(&mut self.client().conn(), self.keys(), offset, limit).await;
        };
        // the newest `offset + limit` of each partition hold the page of the whole queue
        let want = offset.saturating_add(limit);
        let pages = self
            .each_part(&layout, |q| async move {
                dead::dead_list(
                    &mut q.client().conn(),
                    q.keys(),
                    0,
                    want.min(MAX_DEAD_MERGE),
                )
                .await
            })
            .await?;
        let total = pages.iter().map(|p| p.total).sum();
        let mut tasks: Vec<_> = pages.into_iter().flat_map(|p| p.tasks).collect();
        tasks.sort_by_key(|t| std::cmp::Reverse(t.died_at_ms));
        let tasks = tasks
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .collect();
        Ok(DeadPage { total, tasks })
    }

    /// Moves dead tasks back to scheduled, due now, attempts counted afresh.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_retry(&self, ids: &[TaskId]) -> Result<Vec<DeadRetryOutcome>> {
        let retry = |q: Queue, mine: Vec<TaskId>| async move { q.dead_retry(&mine).await };
        if let Some(out) = self.by_id(ids, TaskId::as_str, retry).await? {
            return Ok(out);
        }
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(dead::dead_retry(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }

    /// Retries every dead task `run` matches (due now, or spread over `spread_ms`), looking at
    /// a slice of the dead-letter queue per Redis call (in order of death) until the whole
    /// queue was looked at, the limit was reached or `budget` has passed, then answers with
    /// the counts and, when work is left, a cursor to go on from. A retry is refused
    /// (counted in `conflicts`) when the task's business key is taken by another task (live, or in
    /// its unique window).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a bad filter or cursor (nothing
    /// done), [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails (what earlier calls
    /// did stays done; go on from the last cursor).
    pub async fn dead_retry_where(
        &self,
        run: &DeadBulk,
        cursor: Option<&str>,
        budget: Duration,
    ) -> Result<DeadBulkReport> {
        let action = if run.dry_run {
            BulkAction::Count
        } else {
            BulkAction::Retry {
                spread_ms: run.spread_ms,
            }
        };
        self.dead_bulk(action, run, cursor, budget).await
    }

    /// Deletes every dead task `run` matches for good, as [`Queue::dead_retry_where`] runs.
    ///
    /// # Errors
    /// As [`Queue::dead_retry_where`].
    pub async fn dead_delete_where(
        &self,
        run: &DeadBulk,
        cursor: Option<&str>,
        budget: Duration,
    ) -> Result<DeadBulkReport> {
        let action = if run.dry_run {
            BulkAction::Count
        } else {
            BulkAction::Delete
        };
        self.dead_bulk(action, run, cursor, budget).await
    }

    async fn dead_bulk(
        &self,
        action: BulkAction,
        run: &DeadBulk,
        cursor: Option<&str>,
        budget: Duration,
    ) -> Result<DeadBulkReport> {
        run.filter.validate()?;
        if run.limit == Some(0) {
            return Err(Error::invalid(
                "limit: must be at least 1 (leave it out to take every match)",
            ));
        }
        if run.spread_ms > MAX_SPREAD_MS {
            return Err(Error::invalid(format!(
                "spread_ms must be at most {MAX_SPREAD_MS} (30 days)"
            )));
        }
        let before = run
            .filter
            .died_before_ms
            .map_or(-1, |t| t.min(i64::MAX as u64) as i64);
        let start = run.filter.died_after_ms.unwrap_or(0);
        let (mut p, mut at) = match cursor {
            Some(c) => parse_cursor(c)?,
            None => (
                0,
                BulkCursor {
                    at: start,
                    skip: 0,
                    before,
                },
            ),
        };
        let parts = match self.split_layout().await? {
            Some(layout) => self.parts(&layout),
            None => vec![self.clone()],
        };
        let f = &run.filter;
        let filter = BulkFilter {
            error_contains: f.error_contains.as_deref().unwrap_or(""),
            key_prefix: f.key_prefix.as_deref().unwrap_or(""),
            group: f.group.as_deref().unwrap_or(""),
        };
        let deadline = Instant::now() + budget;
        let mut report = DeadBulkReport::default();
        let mut conn = self.client().conn();
        while let Some(q) = parts.get(p) {
            let left = match run.limit {
                Some(l) => l.saturating_sub(report.done + report.conflicts),
                None => u64::MAX,
            };
            let s = dead::dead_bulk(
                &mut conn,
                q.keys(),
                action,
                at,
                &filter,
                if action == BulkAction::Count {
                    COUNT_SCAN
                } else {
                    BULK_SCAN
                },
                left,
            )
            .await?;
            report.looked_at += s.looked_at;
            report.matched += s.matched;
            report.done += s.done;
            report.conflicts += s.conflicts;
            // every slice and partition keeps the bound the first slice set
            at.before = s.before;
            match s.next {
                Some(next) => (at.at, at.skip) = (next.at, next.skip),
                None => {
                    p += 1;
                    (at.at, at.skip) = (start, 0);
                }
            }
            let limit_reached = action != BulkAction::Count
                && run
                    .limit
                    .is_some_and(|l| report.done + report.conflicts >= l);
            if limit_reached {
                return Ok(report);
            }
            if Instant::now() >= deadline && p < parts.len() {
                report.cursor = Some(cursor_text(p, at));
                return Ok(report);
            }
        }
        Ok(report)
    }

    /// Deletes dead tasks for good; `true` per task deleted.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn dead_delete(&self, ids: &[TaskId]) -> Result<Vec<bool>> {
        let delete = |q: Queue, mine: Vec<TaskId>| async move { q.dead_delete(&mine).await };
        if let Some(out) = self.by_id(ids, TaskId::as_str, delete).await? {
            return Ok(out);
        }
        let mut conn = self.client().conn();
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(MAX_BATCH) {
            out.extend(dead::dead_delete(&mut conn, self.keys(), chunk).await?);
        }
        Ok(out)
    }
}
