//! [`RelayConfig`]: the relay's and the reconciler's settings, a plain value at the bottom
//! that every module running the relay reads.

/// Settings of a [`Relay`](crate::Relay) (and of its reconciler). Build with `RelayConfig::default()` and
/// the setting methods.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub(crate) batch: usize,
    pub(crate) poll_ms: u64,
    pub(crate) recheck_ms: u64,
    pub(crate) succeeded_retention: u64,
    pub(crate) reconcile_interval_ms: u64,
    pub(crate) horizon_ms: u64,
    pub(crate) max_rows_per_pass: usize,
    pub(crate) max_restores: i32,
    pub(crate) owned_queues: Vec<String>,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch: 1_000,
            poll_ms: 1_000,
            recheck_ms: 1_000,
            succeeded_retention: 10_000,
            reconcile_interval_ms: 300_000,
            horizon_ms: 3_600_000,
            max_rows_per_pass: 100_000,
            max_restores: 3,
            owned_queues: Vec::new(),
        }
    }
}

impl RelayConfig {
    /// Rows per batch (one PostgreSQL transaction, one Redis script call per queue for
    /// enqueues), 1 to 1 000. Default 1 000.
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.clamp(1, 1_000);
        self
    }

    /// Fallback poll when no notification arrives, ms (at least 10). Default 1 000: a lost
    /// `NOTIFY` delays a row by at most this.
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll_ms = ms.max(10);
        self
    }

    /// Shortest time between two outcome lookups of one relayed row, ms. Default 1 000.
    pub fn recheck_ms(mut self, ms: u64) -> Self {
        self.recheck_ms = ms;
        self
    }

    /// Succeeded tasks each served queue keeps in Redis so the relay can tell "acknowledged"
    /// from "lost" (set on the queue's settings when the relay first meets the queue; 0 leaves
    /// the queue's setting alone). Default 10 000. An acknowledged task pushed out of the
    /// retention before the relay looked it up is taken for lost and run again (at most
    /// `max_restores` times).
    pub fn succeeded_retention(mut self, n: u64) -> Self {
        self.succeeded_retention = n;
        self
    }

    /// Time between two reconciler passes of [`Relay::run_until`], ms (at least 1 000).
    /// Default 300 000 (5 minutes).
    pub fn reconcile_interval_ms(mut self, ms: u64) -> Self {
        self.reconcile_interval_ms = ms.max(1_000);
        self
    }

    /// The reconciler checks relayed rows due before now plus this, ms. Default 3 600 000
    /// (1 hour); keep it above the interval so a task lost in Redis is restored before it is
    /// due.
    pub fn horizon_ms(mut self, ms: u64) -> Self {
        self.horizon_ms = ms;
        self
    }

    /// Rows one reconciler pass looks at, at most (in batches of `batch`); the next pass goes
    /// on from where this one stopped. Default 100 000.
    pub fn max_rows_per_pass(mut self, n: usize) -> Self {
        self.max_rows_per_pass = n.max(1);
        self
    }

    /// Times the reconciler re-adds one row's task before giving up on it (the row is then
    /// `dead` with a `last_error` saying so). Default 3.
    pub fn max_restores(mut self, n: u32) -> Self {
        self.max_restores = i32::try_from(n).unwrap_or(i32::MAX);
        self
    }

    /// Declares a queue written only through the outbox, so the reconciler may also remove
    /// its Redis tasks that have **no live row and no tombstone** (the database restored from
    /// an older backup, rows deleted by `TRUNCATE` or in the relay's mode). Each pass pages
    /// through the queue's scheduled tasks from where the last one stopped (within
    /// `max_rows_per_pass`), and cancels each task whose key no `pending`, `relayed` or
    /// `cancelling` row holds, and each task without a key; tasks of the queue's schedules
    /// (keys `schedule:...`) and running tasks are left alone. Off for every queue by
    /// default: a task enqueued into the queue directly, not through the outbox, would be
    /// removed.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error) naming `owned_queue` for a name dueq refuses.
    pub fn owned_queue(mut self, name: impl Into<String>) -> crate::Result<Self> {
        let name = name.into();
        dueq::validate_queue_name(&name)
            .map_err(|e| crate::Error::invalid("owned_queue", e.to_string()))?;
        if !self.owned_queues.contains(&name) {
            self.owned_queues.push(name);
        }
        Ok(self)
    }
}
