//! The command-line arguments of `dueq chaos`, `dueq chaos-worker` and `dueq replay` (clap
//! derive); the `dueq` binary flattens them into its commands. `dueq bench`'s are
//! `bench/args.rs`.

use std::path::PathBuf;

use clap::Args;

/// `dueq chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// How long tasks are enqueued and faults injected, ms (1 to 600000); draining and the
    /// check add a few seconds.
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub duration_ms: u64,
    /// Tasks enqueued over --duration-ms, at an even pace (1 to 1000000; default 250 per
    /// second).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tasks: Option<u64>,
    /// Worker processes (1 to 32).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub workers: u32,
    /// Seed of the fault schedule, fault choices and task due times (default: from the
    /// clock; the report prints it).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the ledgers (producer.jsonl, worker-N.jsonl: one JSON event per line) into this
    /// new or empty directory and keep them (default: a temporary directory, removed).
    #[arg(long)]
    pub ledger_dir: Option<PathBuf>,
    /// Run against a local Redis Cluster of 3 masters and 3 replicas (AOF on,
    /// cluster-node-timeout 1000 ms) with the queue split into 6 partitions, and inject master
    /// failovers instead of the single-server faults: kill -9 of a master (seeded), its
    /// replica promoted, the node started again as a replica; with --replicas 1 (durable
    /// writes) also the same kill with the node started again only at the next fault, so that
    /// durable writes to the failed partitions answer not_replicated meanwhile. Adds to the
    /// report the per-partition lateness of healthy and failed partitions during each fault
    /// and checks that every duplicate is a task of a killed master's partition.
    #[arg(long)]
    pub cluster: bool,
}

/// `dueq chaos-worker` (hidden): claims through `DueClaimer`, acks by hand, and appends each
/// delivery and ack answer to its ledger; exits when its stdin closes.
#[derive(Debug, Args)]
pub struct ChaosWorkerArgs {
    /// The ledger file it appends to (JSON lines).
    #[arg(long)]
    pub ledger: PathBuf,
    /// Queue name.
    #[arg(long)]
    pub queue: String,
    /// Lease of each claim, ms.
    #[arg(long)]
    pub lease_ms: u64,
    /// Partitions of the queue: above 1, the acks of a claim go out per partition at once,
    /// without holding up the next claim, so that a failing partition's answers delay no
    /// other partition's tasks.
    #[arg(long, default_value_t = 1)]
    pub partitions: u16,
}

/// `dueq replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The order trace (Olist orders CSV).
    #[arg(long, default_value = "../shared/data/olist_orders_union_sample.csv")]
    pub trace: PathBuf,
    /// How many times faster than real time the trace plays.
    #[arg(long, default_value_t = 1_000_000.0)]
    pub speedup: f64,
    /// Longest real pause between two consecutive trace events or due times, ms: quiet
    /// stretches are shortened to it (event order is kept). Use "inf" for none.
    #[arg(long, default_value_t = 100.0)]
    pub max_gap_ms: f64,
    /// Only orders purchased at or after this time (YYYY-MM-DD or "YYYY-MM-DD HH:MM:SS").
    #[arg(long)]
    pub from: Option<String>,
    /// Only orders purchased before this time.
    #[arg(long)]
    pub to: Option<String>,
    /// Worker instances (each with its own connection).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Handlers running at once per worker.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Queue to use (default: a fresh name per run).
    #[arg(long)]
    pub queue: Option<String>,
    /// Data directory of the embedded redis-server (default: a temporary directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Play the trace through the PostgreSQL outbox at this URL: every enqueue and cancel is
    /// a row written in a transaction, and a relay in this process carries them into Redis
    /// (the table is migrated first; the replay's rows are deleted at the end).
    #[arg(long)]
    pub postgres: Option<String>,
    /// With --postgres: FLUSHALL Redis when half the steps are played, and let the reconciler
    /// restore what the wipe lost (the report says how many). Wipes the WHOLE Redis the
    /// replay runs on: use the embedded one (no --redis) or a Redis of its own.
    #[arg(long, requires = "postgres")]
    pub flush_midway: bool,
    /// Split the replay's queue into this many partitions (1 to 1024) before it starts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub partitions: u16,
}
