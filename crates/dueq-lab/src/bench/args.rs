//! The command-line arguments of `dueq bench` (clap derive).

use clap::Args;

use super::workloads::Workload;

/// `dueq bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workloads to run, comma-separated: W1, W2, W2-PRIO, W3, IDLE, W4, W5, W7, W7-REF,
    /// W7T, W8, IDLE-SCHEDULES, OUTBOX, W9 (default: all but W2-PRIO, W8, IDLE-SCHEDULES,
    /// OUTBOX and W9). W9 starts its own local 3-master Redis Cluster (redis-server and redis-cli on
    /// PATH) and refuses --redis.
    #[arg(long, value_delimiter = ',')]
    pub workload: Vec<Workload>,
    /// Runs of each workload; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Tiny sizes that only check the bench still works (for CI).
    #[arg(long)]
    pub smoke: bool,
    /// Pending counts of W4 and of W9's W4 part, comma-separated, instead of the sizes of
    /// DESIGN 6 (10 000, 100 000, 1 M and 10 M).
    #[arg(long, value_delimiter = ',')]
    pub pending: Vec<usize>,
    /// PostgreSQL URL for the OUTBOX workload (its rows are deleted after each run).
    #[arg(long, env = "DUEQ_POSTGRES_URL")]
    pub postgres: Option<String>,
}
