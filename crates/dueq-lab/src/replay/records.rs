//! The replay's settings and the records its parts hand each other: the driver ([`super::run`])
//! fills them, the outbox producer ([`super::outbox`]) and the check ([`super::check`]) read
//! them.

use dueq::{CancelOutcome, TaskSpec};
use serde::Serialize;

/// How the replay runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Trace seconds per real second.
    pub speedup: f64,
    /// Longest real pause between consecutive trace instants, ms.
    pub max_gap_ms: f64,
    /// Worker instances (separate connections).
    pub workers: usize,
    /// Handlers per worker.
    pub concurrency: usize,
    /// Queue name.
    pub queue: String,
    /// Partitions of the queue (set before the run when more than 1).
    pub partitions: u16,
    /// Through the PostgreSQL outbox instead of enqueueing directly.
    pub outbox: Option<OutboxConfig>,
}

/// `--postgres` and `--flush-midway`.
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// PostgreSQL URL.
    pub postgres: String,
    /// `FLUSHALL` Redis when half the steps are played.
    pub flush_midway: bool,
}

/// A task to enqueue: its index in the plan, key, payload and due time (Redis clock).
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Index in the plan.
    pub idx: usize,
    /// Business key.
    pub key: String,
    /// Payload (JSON).
    pub payload: Vec<u8>,
    /// Due time, epoch ms by the Redis clock.
    pub due_at_ms: u64,
}

impl NewTask {
    /// The task as the queue takes it.
    pub fn spec(&self) -> TaskSpec {
        TaskSpec::new(self.payload.clone())
            .key(self.key.clone())
            .due_at_ms(self.due_at_ms)
    }
}

/// One run of a task's handler.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Due time, epoch ms (Redis clock).
    pub due_at_ms: u64,
    /// Claimed, epoch ms (Redis clock).
    pub claimed_at_ms: u64,
    /// Handler started, epoch ms (Redis clock).
    pub started_at_ms: u64,
}

/// A cancel's outcome in Redis and when it was applied (Redis clock).
#[derive(Debug, Clone, Copy)]
pub struct CancelRecord {
    /// What Redis answered.
    pub outcome: CancelOutcome,
    /// When, epoch ms (with the outbox, a bound: see `outbox.rs`).
    pub at_ms: u64,
}

/// Lateness percentiles, ms (handler start minus due time, by the Redis clock).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Lateness {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}
