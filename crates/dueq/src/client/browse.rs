//! Browsing a [`Queue`]'s live tasks page by page: what is scheduled (in due order) and what
//! is running (in lease-deadline order), for operators and dashboards.

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
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
        let tasks =
            tasks::browse(&mut self.client().conn(), self.keys(), state, after, limit).await?;
        let cursor = |t: &Task| {
            let score = if state == TaskState::Active {
                t.state_at_ms.unwrap_or(0)
            } else {
                t.due_at_ms
            };
            format!("{score}:{}", t.id.as_str())
        };
        let next = match tasks.last() {
            Some(t) if tasks.len() == limit => Some(cursor(t)),
            _ => None,
        };
        Ok(TaskPage { tasks, next })
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
