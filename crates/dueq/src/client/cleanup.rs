//! Cleanup in bulk on a [`Queue`]: purge every task of one state, delete the queue. Each
//! Redis call does bounded work (at most 1 000 tasks), so a queue of millions never blocks
//! Redis; a call of these methods goes on for at most its time budget and says what is left.

use std::time::Duration;

use tokio::time::Instant;

use super::Queue;
use crate::error::Result;
use crate::protocol::call::MAX_BATCH;
use crate::protocol::queues::{self, PurgeState};

/// Which tasks [`Queue::purge`] drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purge {
    /// Every task waiting for its due time or a retry (each counted as cancelled).
    Scheduled,
    /// Every task of the dead-letter queue.
    Dead,
    /// Every succeeded task kept by retention (`succeeded_max`).
    Succeeded,
}

impl Purge {
    /// The state's name (`scheduled`, `dead`, `succeeded`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Dead => "dead",
            Self::Succeeded => "succeeded",
        }
    }
}

/// What a [`Queue::purge`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Tasks dropped by this call.
    pub dropped: u64,
    /// Tasks of that state still there (0: done; call again for the rest).
    pub left: u64,
}

impl Queue {
    /// Drops every task of `state` (scheduled ones as a cancel drops them, counted in
    /// `cancelled_total`; dead and kept succeeded ones deleted), at most 1 000 per Redis call,
    /// until none is left or `budget` has passed. Tasks that are running are not touched.
    /// A schedule's ticks fired ahead are scheduled tasks: a purge drops them too (the
    /// schedule goes on with its later ticks).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails (what was dropped stays
    /// dropped; call again).
    pub async fn purge(&self, state: Purge, budget: Duration) -> Result<PurgeReport> {
        let state = match state {
            Purge::Scheduled => PurgeState::Scheduled,
            Purge::Dead => PurgeState::Dead,
            Purge::Succeeded => PurgeState::Succeeded,
        };
        let parts = match self.split_layout().await? {
            Some(layout) => self.parts(&layout),
            None => vec![self.clone()],
        };
        let deadline = Instant::now() + budget;
        let mut conn = self.client().conn();
        let mut report = PurgeReport::default();
        let mut left = vec![u64::MAX; parts.len()];
        loop {
            for (q, l) in parts.iter().zip(left.iter_mut()) {
                if *l == 0 {
                    continue;
                }
                let (dropped, now_left) =
                    queues::purge(&mut conn, q.keys(), state, MAX_BATCH).await?;
                report.dropped += dropped;
                *l = now_left;
            }
            report.left = left.iter().sum();
            if report.left == 0 || Instant::now() >= deadline {
                return Ok(report);
            }
        }
    }

    /// Deletes the queue: its tasks in every state, settings, counters, schedules and
    /// webhook, every partition, and its name from the queue list. Without `force` nothing is
    /// deleted while a task is scheduled or running: `Ok(false)`. Workers of the queue that
    /// still run find it empty (and a new enqueue makes it again, with default settings).
    /// Stop producers first: a task enqueued while a queue of several partitions is being
    /// deleted may survive the delete.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails (call again: the rest goes).
    pub async fn delete_queue(&self, force: bool) -> Result<bool> {
        let parts = match self.split_layout().await? {
            Some(layout) => self.parts(&layout),
            None => vec![self.clone()],
        };
        let mut conn = self.client().conn();
        if !force {
            for q in &parts {
                let s = queues::stats(&mut conn, q.keys()).await?;
                if s.scheduled + s.active > 0 {
                    return Ok(false);
                }
            }
        }
        // partition 0 last: it holds the count the other partitions are found by
        for q in parts.iter().rev() {
            if !queues::queue_delete(&mut conn, q.keys(), force).await? {
                return Ok(false);
            }
        }
        queues::unregister_queue(&mut conn, self.name()).await?;
        self.client().forget_layout(self.name());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::Purge;

    #[test]
    fn purge_states_are_named_as_the_api_names_them() {
        assert_eq!(Purge::Scheduled.as_str(), "scheduled");
        assert_eq!(Purge::Dead.as_str(), "dead");
        assert_eq!(Purge::Succeeded.as_str(), "succeeded");
    }
}
