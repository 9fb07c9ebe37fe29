//! Browsing a [`Queue`]'s live tasks page by page: what is scheduled (in due order) and what
//! is running (in lease-deadline order), for operators and dashboards; and what is coming:
//! how many scheduled tasks fall due in each of the next 60 minutes and 24 hours.

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::queues::{self, DueCounts};
use crate::protocol::tasks;
use crate::task::{Task, TaskState};

/// One page of [`Queue::browse`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskPage {
    /// The tasks, in due order (scheduled) or lease-deadline order (active); ties in enqueue
    /// order.
    pub tasks: Vec<Task>,
    /// Cursor of the next page (pass it as `after`), `None` when this page reached the end.
    pub next: Option<String>,
}

/// How many scheduled tasks fall due when, from [`Queue::due_histogram`]: counted by the
/// Redis clock at one instant over every priority and group, retries included.
///
/// Buckets start at `now_ms` and include their end: `minutes[i]` counts the tasks due in
/// `(now_ms + i min, now_ms + (i + 1) min]`, `hours[i]` those due in
/// `(now_ms + i h, now_ms + (i + 1) h]`, so `hours[0]` is the sum of `minutes`, and
/// `due + hours.iter().sum() + later` is every scheduled task.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DueHistogram {
    /// The Redis clock at the count, epoch ms.
    pub now_ms: u64,
    /// Already due (due time at or before `now_ms`): waiting for a worker, or held back by
    /// a pause or a limit. The `due` of [`Queue::stats`].
    pub due: u64,
    /// Tasks falling due in each of the next 60 minutes ([`DueHistogram::MINUTES`] entries).
    pub minutes: Vec<u64>,
    /// Tasks falling due in each of the next 24 hours ([`DueHistogram::HOURS`] entries).
    pub hours: Vec<u64>,
    /// Due later than `now_ms` + 24 h.
    pub later: u64,
}

impl DueHistogram {
    /// Entries of [`minutes`](Self::minutes): one a minute for the next hour.
    pub const MINUTES: usize = queues::DUE_MINUTES;
    /// Entries of [`hours`](Self::hours): one an hour for the next day.
    pub const HOURS: usize = queues::DUE_HOURS;

    /// Every scheduled task counted: due now, in the next 24 hours, and later.
    pub fn scheduled(&self) -> u64 {
        self.due + self.hours.iter().sum::<u64>() + self.later
    }
}

impl From<DueCounts> for DueHistogram {
    fn from(c: DueCounts) -> Self {
        Self {
            now_ms: c.now_ms,
            due: c.due,
            minutes: c.minutes,
            hours: c.hours,
            later: c.later,
        }
    }
}

/// Reads a cursor made by [`Queue::browse`]: `"<score ms>:<task id>"`.
fn parse_cursor(s: &str) -> Result<(u64, &str)> {
    let bad = || Error::invalid(format!("after: {s:?} is not a cursor from a page's `next`"));
    let (score, id) = s.split_once(':').ok_or_else(bad)?;
    let score = score.parse::<u64>().map_err(|_| bad())?;
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok((score, id))
}

impl Queue {
    /// One page of live tasks: [`TaskState::Scheduled`] ones in due-time order (every
    /// priority and group together), or [`TaskState::Active`] ones in lease-deadline order;
    /// at most `limit` (1 to 1 000), after the cursor `after` (a page's `next`; `None`: from
    /// the start). A page costs O(log n + limit) per scheduled set in use (one per priority,
    /// and the groups'), never a scan; tasks that change state between pages are seen where
    /// they are at the time of each page.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for another state, a limit out of range
    /// or a cursor not made here, [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn browse(
        &self,
        state: TaskState,
        after: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage> {
        if !matches!(state, TaskState::Scheduled | TaskState::Active) {
            return Err(Error::invalid(format!(
                "state must be scheduled or active, got {}",
                state.as_str()
            )));
        }
        if limit == 0 || limit > MAX_BATCH {
            return Err(Error::invalid(format!("limit must be 1 to {MAX_BATCH}")));
        }
        let after = after.map(parse_cursor).transpose()?;
        let score = |t: &Task| {
            if state == TaskState::Active {
                t.state_at_ms.unwrap_or(0)
            } else {
                t.due_at_ms
            }
        };
        let tasks = match self.split_layout().await? {
            None => {
                tasks::browse(&mut self.client().conn(), self.keys(), state, after, limit).await?
            }
            // each partition's next page after the cursor, merged by (score, id)
            Some(layout) => {
                let pages = self
                    .each_part(&layout, |q| async move {
                        tasks::browse(&mut q.client().conn(), q.keys(), state, after, limit).await
                    })
                    .await?;
                let mut all: Vec<Task> = pages.into_iter().flatten().collect();
                all.sort_by(|a, b| (score(a), a.id.as_str()).cmp(&(score(b), b.id.as_str())));
                all.truncate(limit);
                all
            }
        };
        let cursor = |t: &Task| format!("{}:{}", score(t), t.id.as_str());
        let next = match tasks.last() {
            Some(t) if tasks.len() == limit => Some(cursor(t)),
            _ => None,
        };
        Ok(TaskPage { tasks, next })
    }

    /// How many scheduled tasks fall due in each of the next 60 minutes and the next 24
    /// hours, and how many are due already, by the Redis clock (see [`DueHistogram`]). One
    /// script call of one `ZCOUNT` per bucket and scheduled set in use (one per priority in
    /// use, one for the groups), so O(log n) per bucket and set, never a scan; buckets past
    /// a set's last task are skipped.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn due_histogram(&self) -> Result<DueHistogram> {
        let Some(layout) = self.split_layout().await? else {
            return Ok(queues::due_counts(&mut self.client().conn(), self.keys())
                .await?
                .into());
        };
        let parts = self
            .each_part(&layout, |q| async move {
                queues::due_counts(&mut q.client().conn(), q.keys()).await
            })
            .await?;
        let mut all = DueHistogram::default();
        for c in parts {
            // the buckets start at each partition's own reading of the clock: a bucket edge
            // may differ by the few ms between the calls
            all.now_ms = all.now_ms.max(c.now_ms);
            all.due += c.due;
            all.later += c.later;
            let add = |to: &mut Vec<u64>, from: &[u64]| {
                to.resize(to.len().max(from.len()), 0);
                for (t, f) in to.iter_mut().zip(from) {
                    *t += f;
                }
            };
            add(&mut all.minutes, &c.minutes);
            add(&mut all.hours, &c.hours);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_checked() {
        assert_eq!(
            parse_cursor("17:00000000000a").unwrap(),
            (17, "00000000000a")
        );
        for bad in ["", "17", ":a", "x:a", "17:", "-1:a", "17:a b"] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
    }
}
