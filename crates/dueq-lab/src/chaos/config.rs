//! What a `dueq chaos` run is asked to do ([`Config`]), and the settings that the run on one
//! redis-server and the `--cluster` run share: the queue, the lease of every claim, the most
//! faults.

use std::path::PathBuf;

/// The queue of a run (its Redis is its own).
pub const QUEUE: &str = "chaos";
/// Lease of every claim: short, so that a killed worker's tasks come back quickly.
pub const LEASE_MS: u64 = 1_000;
/// Most faults in one run (a 600 s run with the shortest pauses injects fewer).
pub const MAX_FAULTS: u64 = 10_000;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long tasks are enqueued and faults injected, ms.
    pub duration_ms: u64,
    /// Tasks enqueued over that time.
    pub tasks: u64,
    /// Worker processes.
    pub workers: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Where the ledgers go (kept); a temporary directory when `None`.
    pub ledger_dir: Option<PathBuf>,
    /// On a local Redis Cluster with master failovers ([`cluster`](super::cluster)) instead
    /// of one redis-server.
    pub cluster: bool,
    /// Durable writes of producer and workers (`--replicas`; `--cluster` only).
    pub replicas: u8,
}
