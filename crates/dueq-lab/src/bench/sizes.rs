//! The sizes of one bench session: DESIGN section 6's, or tiny ones for CI.

use std::time::Duration;

/// Sizes of one bench session.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// W1 tasks.
    pub w1: usize,
    /// W2 tasks.
    pub w2: usize,
    /// W3 tasks and the span they are due over.
    pub w3: usize,
    /// W3 span, ms.
    pub w3_span_ms: u64,
    /// IDLE future tasks.
    pub idle_tasks: usize,
    /// IDLE measuring time.
    pub idle: Duration,
    /// W4 pending counts.
    pub w4: Vec<usize>,
    /// W5 tasks.
    pub w5: usize,
    /// OUTBOX rows.
    pub outbox: usize,
    /// W7 tasks of the flooding group.
    pub w7: usize,
    /// W7 tasks of the small group.
    pub w7_small: usize,
    /// W7T groups.
    pub w7t_groups: usize,
    /// W7T tasks of each group.
    pub w7t_per_group: usize,
    /// W8 schedules (each every second).
    pub w8: usize,
    /// W8 measured seconds.
    pub w8_secs: u64,
    /// IDLE-SCHEDULES schedules.
    pub idle_schedules: usize,
    /// W9's W4 pending counts (over 6 partitions).
    pub w9_w4: Vec<usize>,
}

impl Sizes {
    /// The sizes of DESIGN section 6.
    pub fn full() -> Self {
        Self {
            w1: 100_000,
            w2: 100_000,
            w3: 20_000,
            w3_span_ms: 20_000,
            idle_tasks: 100_000,
            idle: Duration::from_secs(10),
            w4: vec![10_000, 100_000, 1_000_000, 10_000_000],
            w5: 100_000,
            outbox: 50_000,
            w7: 100_000,
            w7_small: 100,
            w7t_groups: 1_000,
            w7t_per_group: 100,
            w8: 10_000,
            w8_secs: 30,
            idle_schedules: 10_000,
            w9_w4: vec![10_000, 100_000, 1_000_000, 10_000_000],
        }
    }

    /// Tiny sizes that only prove the bench still runs (CI).
    pub fn smoke() -> Self {
        Self {
            w1: 2_000,
            w2: 2_000,
            w3: 200,
            w3_span_ms: 1_000,
            idle_tasks: 1_000,
            idle: Duration::from_secs(1),
            w4: vec![1_000, 10_000],
            w5: 2_000,
            outbox: 500,
            w7: 2_000,
            w7_small: 20,
            w7t_groups: 20,
            w7t_per_group: 10,
            w8: 100,
            w8_secs: 2,
            idle_schedules: 100,
            w9_w4: vec![1_000, 10_000],
        }
    }
}
