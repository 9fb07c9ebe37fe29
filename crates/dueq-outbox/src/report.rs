//! [`RelayReport`] and [`ReconcileReport`]: what a relay round and a reconciler pass did.
//! Plain values at the bottom, so the modules that fill them depend on them and not on each
//! other.

/// What one [`Relay::relay_once`](crate::Relay::relay_once) call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RelayReport {
    /// Rows enqueued into Redis.
    pub enqueued: u64,
    /// Cancels applied in Redis (whatever their outcome).
    pub cancels: u64,
    /// Reschedules applied in Redis.
    pub reschedules: u64,
    /// Rows Redis refused (now `rejected`).
    pub rejected: u64,
    /// Redis tasks removed for deleted or finished rows (tombstones).
    pub removed: u64,
    /// Rows found finished in Redis and written back (succeeded or dead).
    pub finished: u64,
    /// Whether a batch of rows to relay or of tombstones was full (more work is likely
    /// waiting).
    pub more: bool,
}

impl RelayReport {
    pub(crate) fn add(&mut self, o: RelayReport) {
        self.enqueued += o.enqueued;
        self.cancels += o.cancels;
        self.reschedules += o.reschedules;
        self.rejected += o.rejected;
        self.removed += o.removed;
        self.finished += o.finished;
        self.more |= o.more;
    }
}

/// What one reconciler pass found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconcileReport {
    /// Relayed rows looked up in Redis.
    pub examined: u64,
    /// Of those, tasks Redis had live (in agreement).
    pub in_sync: u64,
    /// Tasks missing in Redis, enqueued again with their original due time and key.
    pub restored: u64,
    /// Rows found finished in Redis (succeeded or dead) and written back.
    pub finished: u64,
    /// Rows given up after `max_restores` restores (now `dead`).
    pub gave_up: u64,
    /// Rows missing in Redis that dueq refuses to restore (options changed by hand since they
    /// were relayed, or out of range): now `rejected`, `last_error` naming the option.
    pub rejected: u64,
    /// Redis tasks removed because their row was deleted or finished (tombstones).
    pub removed: u64,
    /// Scheduled Redis tasks of the owned queues looked at for a live row.
    pub swept: u64,
    /// Of those, tasks removed because no live row held their key (orphans).
    pub orphans_removed: u64,
    /// Rows still waiting for the relay (committed, not yet in Redis) at the end.
    pub pending: u64,
    /// Whether the pass reached the end of the horizon, and every owned queue's sweep the end
    /// of its scheduled tasks (else the next pass goes on soon).
    pub complete: bool,
    /// How long the pass took, ms.
    pub took_ms: u64,
}
