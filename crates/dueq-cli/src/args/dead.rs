//! The arguments of the bulk commands: `dueq dead ...`, `dueq purge` and `dueq queue delete`.

use clap::{Args, Subcommand};

use super::{duration, time};

/// `dueq dead ...`.
#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    /// List dead tasks, newest first.
    List {
        /// Queue name.
        queue: String,
        /// Skip this many.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Show at most this many (1..1000).
        #[arg(long, default_value_t = 20)]
        limit: u64,
    },
    /// Schedule dead tasks again, due now, attempts counted afresh: the tasks named by id,
    /// or without ids every dead task the filters match (all filters given must match;
    /// --all: every dead task). A bulk retry works through the dead-letter queue in bounded
    /// steps, with progress on stderr for a large one, and prints the counts; a task whose
    /// business key is taken by another task (live, or in its unique window) is not retried
    /// (counted as a conflict).
    Retry {
        /// Queue name.
        queue: String,
        /// Task ids (none: a bulk retry by the filters).
        ids: Vec<String>,
        /// Which dead tasks, without ids.
        #[command(flatten)]
        bulk: DeadBulkArgs,
        /// Bulk retry: spread the due times evenly over this long from now (30s, 10m, ...),
        /// so that retrying many tasks does not stampede the workers (default: all due now).
        #[arg(long = "spread", alias = "spread-ms", value_name = "DURATION",
              value_parser = duration, conflicts_with = "ids")]
        spread_ms: Option<u64>,
    },
    /// Delete dead tasks for good: the tasks named by id, or without ids every dead task the
    /// filters match (all filters given must match; --all: every dead task), in bounded
    /// steps as a bulk retry.
    Delete {
        /// Queue name.
        queue: String,
        /// Task ids (none: a bulk delete by the filters).
        ids: Vec<String>,
        /// Which dead tasks, without ids.
        #[command(flatten)]
        bulk: DeadBulkArgs,
    },
}

/// Which dead tasks a bulk `dueq dead retry|delete` acts on. A bulk run needs at least one
/// filter, or --all.
#[derive(Debug, Args)]
#[group(id = "bulk", multiple = true, conflicts_with = "ids")]
pub struct DeadBulkArgs {
    /// Only tasks whose last error contains this text (case-sensitive).
    #[arg(long, value_name = "TEXT")]
    pub error_contains: Option<String>,
    /// Only tasks that died at or after this time (RFC 3339 or Unix epoch ms).
    #[arg(long = "died-after", alias = "died-after-ms", value_name = "TIME",
          value_parser = time)]
    pub died_after_ms: Option<u64>,
    /// Only tasks that died before this time (default: when the run starts, so a task that
    /// dies again during the run is not taken twice).
    #[arg(long = "died-before", alias = "died-before-ms", value_name = "TIME",
          value_parser = time)]
    pub died_before_ms: Option<u64>,
    /// Only tasks whose business key starts with this.
    #[arg(long, value_name = "PREFIX")]
    pub key_prefix: Option<String>,
    /// Only tasks of this group.
    #[arg(long)]
    pub group: Option<String>,
    /// Every dead task of the queue (needed when no filter is given).
    #[arg(long, conflicts_with_all = DEAD_FILTERS)]
    pub all: bool,
    /// Act on at most this many tasks (conflicts count too).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Only count the matching tasks; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long one step of the run works (tests use 0 for a step per Redis call).
    #[arg(long = "step", value_name = "DURATION", default_value = STEP_DEFAULT,
          value_parser = duration, hide = true)]
    pub step_ms: u64,
}

/// `--step` default of the bulk commands: long enough that a step's overhead is nothing,
/// short enough that the progress line moves.
const STEP_DEFAULT: &str = "250ms";

/// The filter flags of [`DeadBulkArgs`], as clap names them (their field names).
pub const DEAD_FILTERS: [&str; 5] = [
    "error_contains",
    "died_after_ms",
    "died_before_ms",
    "key_prefix",
    "group",
];

impl DeadBulkArgs {
    /// Whether any filter is given (`--all` is not one).
    pub fn has_filter(&self) -> bool {
        self.error_contains.is_some()
            || self.died_after_ms.is_some()
            || self.died_before_ms.is_some()
            || self.key_prefix.is_some()
            || self.group.is_some()
    }
}

/// `dueq purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Queue name.
    pub queue: String,
    /// The state whose tasks go.
    #[arg(long, value_enum)]
    pub state: PurgeStateArg,
    /// How long one step works (tests use 0 for a step per Redis call).
    #[arg(long = "step", value_name = "DURATION", default_value = STEP_DEFAULT,
          value_parser = duration, hide = true)]
    pub step_ms: u64,
}

/// `--state` of `dueq purge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PurgeStateArg {
    /// Every task waiting for its due time or a retry (each counted as cancelled).
    Scheduled,
    /// Every dead task.
    Dead,
    /// Every succeeded task kept by retention.
    Succeeded,
}

/// `dueq queue ...`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Delete a queue: its tasks in every state, settings, counters, schedules and webhook.
    /// Refused (not_empty, exit status 1) while any task is scheduled or running, unless
    /// --force. Stop its producers first.
    Delete {
        /// Queue name.
        queue: String,
        /// Delete it even while tasks are scheduled or running (they are lost).
        #[arg(long)]
        force: bool,
    },
}
