//! Returning expired leases and expired tasks of a queue ([`Queue::recover`]).

use super::Queue;
use crate::error::Result;
use crate::protocol::call::MAX_BATCH;
use crate::protocol::leases;

/// What a recover pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoverReport {
    /// Expired tasks put back to scheduled.
    pub recovered: u64,
    /// Expired tasks out of attempts, moved to the dead-letter queue.
    pub dead: u64,
    /// Earliest lease deadline still active, epoch ms.
    pub next_lease_deadline_ms: Option<u64>,
    /// Redis time, epoch ms.
    pub now_ms: u64,
    /// Whether the sweep for leases without a deadline entry finished a full round in this
    /// call (it looks at up to 1 000 leases per call).
    pub swept: bool,
    /// Scheduled tasks whose expiry passed before they started, ended by this call (up to
    /// 100 per call).
    pub expired: u64,
    /// The call expired a full batch: more expired tasks may be waiting.
    pub expired_more: bool,
    /// Earliest expiry of a task still scheduled, epoch ms.
    pub next_expiry_at_ms: Option<u64>,
}

impl RecoverReport {
    /// When the queue next needs a recovery pass: its earliest lease deadline or expiry,
    /// epoch ms (`None`: neither).
    pub fn next_check_at_ms(&self) -> Option<u64> {
        earliest(self.next_lease_deadline_ms, self.next_expiry_at_ms)
    }
}

/// The earlier of two optional times.
pub(super) fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Queue {
    /// Returns tasks whose lease expired to scheduled (or dead), at most 1 000 per call.
    /// Workers call this by themselves; it is public for servers and tools.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn recover(&self) -> Result<RecoverReport> {
        if let Some(layout) = self.split_layout().await? {
            let parts = self
                .each_part(&layout, |q| async move { q.recover().await })
                .await?;
            let mut all = RecoverReport {
                swept: true,
                ..RecoverReport::default()
            };
            for r in parts {
                all.recovered += r.recovered;
                all.dead += r.dead;
                all.expired += r.expired;
                all.expired_more |= r.expired_more;
                all.swept &= r.swept;
                all.now_ms = all.now_ms.max(r.now_ms);
                all.next_lease_deadline_ms =
                    earliest(all.next_lease_deadline_ms, r.next_lease_deadline_ms);
                all.next_expiry_at_ms = earliest(all.next_expiry_at_ms, r.next_expiry_at_ms);
            }
            return Ok(all);
        }
        let r = leases::recover(
            &mut self.client.conn(),
            &self.keys,
            MAX_BATCH,
            &self.backoff_table().await,
        )
        .await?;
        Ok(RecoverReport {
            recovered: r.recovered,
            dead: r.dead,
            next_lease_deadline_ms: r.next_deadline_ms,
            now_ms: r.now_ms,
            swept: r.swept,
            expired: r.expired,
            expired_more: r.expired_more,
            next_expiry_at_ms: r.next_expiry_ms,
        })
    }
}
