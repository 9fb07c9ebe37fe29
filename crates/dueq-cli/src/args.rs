//! Command-line arguments (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod dead;
mod serve;

pub use dead::{DeadBulkArgs, DeadCommand, PurgeArgs, PurgeStateArg, QueueCommand};
pub use serve::{OutboxArgs, RelayArgs, ServeArgs};

/// dueq: a delay queue and task scheduler on Redis sorted sets.
#[derive(Debug, Parser)]
#[command(name = "dueq", version, about)]
pub struct Cli {
    /// Redis URL: redis://host:port/db, rediss://..., redis+unix:///path.sock, a cluster seed
    /// list redis+cluster://h1:p1,h2:p2, or Sentinel redis+sentinel://s1:p1,s2:p2/MASTER_NAME
    /// (rediss+sentinel:// for TLS; ?sentinel_password=... for the sentinels). Without it,
    /// `serve` and `replay` start their own redis-server; every other command uses the
    /// redis-server of a `dueq serve` running on ./dueq-data (or on $DUEQ_DATA_DIR), found by
    /// the redis.url file it keeps there while it runs, else redis://127.0.0.1:6379.
    #[arg(long, global = true, env = "DUEQ_REDIS_URL")]
    pub redis: Option<String>,

    /// Durable writes: every enqueue, ack, nack, cancel, reschedule and dead-letter retry or
    /// delete waits (WAIT, up to 1 s) until this many replicas confirm it, else fails with
    /// not_replicated. Default 0 (none). `serve` applies it to every request (HTTP enqueue
    /// may also ask per call with "replicas").
    #[arg(long, global = true, env = "DUEQ_REPLICAS", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=16))]
    pub replicas: u8,

    /// Print JSON instead of text (one object per result; times and durations as integer
    /// milliseconds).
    #[arg(long, global = true)]
    pub json: bool,

    /// Format of the log lines on stderr: text, or json (one JSON object per line).
    /// DUEQ_LOG sets the level (default warn; info for `dueq work`'s own lines).
    #[arg(
        long,
        global = true,
        env = "DUEQ_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (tracing's JSON format, fields at the top level).
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API. Without --redis, starts and supervises its own
    /// redis-server (AOF on) with its data in --data-dir, which the other dueq commands run
    /// from the same directory without --redis then use. SIGINT/SIGTERM stop it gracefully.
    Serve(ServeArgs),
    /// Enqueue one task.
    Enqueue(EnqueueArgs),
    /// Show one task by id or business key.
    Get(TargetArgs),
    /// Cancel a scheduled task by id or business key.
    Cancel(TargetArgs),
    /// Move the due time of a scheduled task.
    Reschedule(RescheduleArgs),
    /// Queue statistics (all queues when none is named).
    Stats(StatsArgs),
    /// Stop handing out tasks of a queue.
    Pause(PauseArgs),
    /// Hand out tasks of a paused queue again.
    Resume(QueueArg),
    /// The dead-letter queue.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Drop every task of one state of a queue: scheduled (each counted as cancelled), dead,
    /// or succeeded (those kept by retention). Running tasks are not touched. Works in
    /// bounded steps until none is left, with progress on stderr for a large queue.
    Purge(PurgeArgs),
    /// A whole queue.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Push delivery: a URL that `dueq serve` POSTs each due task of a queue to (signed).
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// A queue's stored settings: defaults, retention caps, rate and concurrency limits
    /// (whole queue and per group), alert thresholds. Every worker and server applies a
    /// change at its next claim.
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// Recurring schedules: a cron pattern or an interval that enqueues one task per tick
    /// (fired by every running worker and server, each tick exactly once).
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Live worker processes and servers (heartbeats): language, pid, queues, concurrency,
    /// tasks in hand, started and last seen.
    Workers(WorkersArgs),
    /// The test clock of a Redis run with `dueq serve --test-clock`, for integration tests:
    /// every queue on it runs on a virtual clock that these commands move forward.
    #[command(subcommand)]
    TestClock(TestClockCommand),
    /// Run COMMAND for each task of QUEUE (or of each --queue, slots shared by weight):
    /// payload on stdin, exit 0 acknowledges, any other exit retries with backoff (then
    /// dead-letters). Logs a line at start, per failed attempt, per dead task and at stop;
    /// the command's stderr passes through, each line prefixed "[QUEUE ID] ". SIGINT/SIGTERM
    /// wait --shutdown-grace for running commands, then hand their tasks back.
    #[command(after_long_help = crate::cmd::work::ENV_HELP)]
    Work(WorkArgs),
    /// Replay the Olist order trace through a queue and check every task ran as it should.
    Replay(dueq_lab::ReplayArgs),
    /// Measure throughput, lateness, idle cost and memory (the benchmark workloads).
    Bench(dueq_lab::BenchArgs),
    /// PostgreSQL outbox: carry committed `dueq_outbox` rows into Redis, write outcomes back,
    /// and reconcile both sides (at start and every --reconcile-interval-ms). Migrates the
    /// table first. SIGINT/SIGTERM stop it.
    Relay(RelayArgs),
    /// Fault-injection run: starts its own redis-server (AOF, appendfsync always) and worker
    /// processes, enqueues keyed tasks while it kills workers (SIGKILL), kills and restarts
    /// Redis, kills connections, flushes scripts and pauses Redis; then checks a ledger kept
    /// outside Redis and reports lost, duplicated, recovered, unexpected and early tasks
    /// (exit status 1 unless lost, duplicated, unexpected and early are 0).
    Chaos(dueq_lab::ChaosArgs),
    /// One worker process of `dueq chaos` (started by it; not for use by hand).
    #[command(hide = true)]
    ChaosWorker(dueq_lab::ChaosWorkerArgs),
}

/// A queue name.
#[derive(Debug, Args)]
pub struct QueueArg {
    /// Queue name ([A-Za-z0-9_.-]{1,128}).
    pub queue: String,
}

/// `dueq pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// Queue name ([A-Za-z0-9_.-]{1,128}).
    pub queue: String,
    /// Pause a queue that has never been used, ahead of its first task (without it, an
    /// unknown queue is an error: a typo must not pause nothing).
    #[arg(long)]
    pub create: bool,
}

/// A task named by id or by business key.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Queue name.
    pub queue: String,
    /// Task id (or use --key).
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    pub id: Option<String>,
    /// Business key of a live task.
    #[arg(long)]
    pub key: Option<String>,
}

/// When a task is due.
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct DueArgs {
    /// Due after this long (Redis clock): 30m, 7d, 1h30m, 250ms, 2s or plain milliseconds
    /// (--delay-ms also works). For enqueue the default is now; reschedule needs this or
    /// --at.
    #[arg(long = "delay", alias = "delay-ms", value_name = "DURATION", value_parser = duration)]
    pub delay_ms: Option<u64>,
    /// Due at this time: RFC 3339 with an offset (2026-12-05T09:00:00+01:00, or ...Z) or
    /// Unix epoch milliseconds (--due-at-ms also works).
    #[arg(long = "at", alias = "due-at-ms", value_name = "TIME", value_parser = time)]
    pub due_at_ms: Option<u64>,
}

/// `dueq enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Queue name.
    pub queue: String,
    /// Payload text (default empty).
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload from this file ("-" = stdin).
    #[arg(long)]
    pub payload_file: Option<PathBuf>,
    /// When it is due.
    #[command(flatten)]
    pub due: DueArgs,
    /// Business key (unique among live tasks of the queue).
    #[arg(long)]
    pub key: Option<String>,
    /// If the key is live, replace that task's payload and due time instead of keeping it.
    #[arg(long, conflicts_with = "debounce_max_ms")]
    pub replace: bool,
    /// Debounce: if the key is live, replace like --replace, but never move the due time
    /// past the task's first enqueue + this long.
    #[arg(long = "debounce-max", alias = "debounce-max-ms", value_name = "DURATION",
          value_parser = duration, requires = "key")]
    pub debounce_max_ms: Option<u64>,
    /// Expire the task if it has not started this long after the write (Redis clock).
    #[arg(long = "ttl", alias = "ttl-ms", value_name = "DURATION", value_parser = duration,
          conflicts_with = "expires_at_ms")]
    pub ttl_ms: Option<u64>,
    /// Expire the task if it has not started by this time (RFC 3339 or Unix epoch ms).
    #[arg(long = "expires-at", alias = "expires-at-ms", value_name = "TIME", value_parser = time)]
    pub expires_at_ms: Option<u64>,
    /// The task's options.
    #[command(flatten)]
    pub options: TaskOptionArgs,
}

/// The task options of `dueq enqueue` and `dueq schedule set` (there, of each tick's task).
/// A new option's flag is written here once.
#[derive(Debug, Args)]
pub struct TaskOptionArgs {
    /// Attempts before the dead-letter queue (default for an enqueue: the queue's setting,
    /// else 5; for a schedule's ticks: 5).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Lease of a claim (default for an enqueue: the queue's setting, else 30s; for a
    /// schedule's ticks: 30s).
    #[arg(long = "lease", alias = "lease-ms", value_name = "DURATION", value_parser = duration)]
    pub lease_ms: Option<u64>,
    /// Priority 0 (served first, the default) to 9, among due tasks (within a --group, among
    /// the group's own).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
    pub priority: Option<u8>,
    /// Group (a tenant, a customer): per-group limits apply to it, and groups are served
    /// round-robin.
    #[arg(long)]
    pub group: Option<String>,
    /// Unique window (needs a key): after the task finished, its key stays taken this long,
    /// so an enqueue of the key meanwhile creates nothing (default: the queue's
    /// `unique_for_ms` setting, else none; 0 for none).
    #[arg(long = "unique-for", value_name = "DURATION", value_parser = duration)]
    pub unique_for_ms: Option<u64>,
    /// A header carried with the task (repeat for more): a small string map returned by
    /// get, claim and push delivery. Names are compared case-insensitively and stored
    /// lower-case. `traceparent` / `tracestate` are the W3C trace context.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = header_pair)]
    pub headers: Vec<(String, String)>,
}

/// `NAME=VALUE` of `--header` (the limits are checked with the other options).
fn header_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) => Ok((n.to_owned(), v.to_owned())),
        None => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

impl TaskOptionArgs {
    /// The options given (the limits are checked where they are used).
    ///
    /// # Errors
    /// Two `--header` names that differ only in case.
    pub fn options(&self) -> dueq::Result<dueq::TaskOptions> {
        let mut o = dueq::TaskOptions::new();
        o.max_attempts = self.max_attempts;
        o.lease_ms = self.lease_ms;
        o.priority = self.priority.unwrap_or(0);
        o.group = self.group.clone();
        o.unique_for_ms = self.unique_for_ms;
        o.headers = dueq::Headers::from_pairs(self.headers.iter().cloned())?;
        Ok(o)
    }
}

/// `dueq settings ...`.
#[derive(Debug, Subcommand)]
pub enum SettingsCommand {
    /// Show the queue's settings in effect, defaults marked "(default)"; with --json the
    /// stored settings (`null`: the default) plus "effective", every value in effect.
    /// An unknown queue is an error.
    Get {
        /// Queue name.
        queue: String,
    },
    /// Change settings: a JSON object with the fields to change, as the HTTP PATCH body
    /// (`null` clears a field), e.g. '{"concurrency": 10, "rate_limit": {"max": 100,
    /// "per_ms": 1000}}', or '{"partitions": 6}' to spread an empty queue over a Redis
    /// Cluster (docs/SCALING.md). Prints the settings after the change, as `get` does.
    Set {
        /// Queue name.
        queue: String,
        /// The fields to change, as JSON.
        patch: String,
    },
}

/// `dueq reschedule`.
#[derive(Debug, Args)]
pub struct RescheduleArgs {
    /// The task.
    #[command(flatten)]
    pub target: TargetArgs,
    /// The new due time.
    #[command(flatten)]
    pub due: DueArgs,
}

/// `dueq stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Queue name; all known queues when omitted.
    pub queue: Option<String>,
}

/// `dueq workers`.
#[derive(Debug, Args)]
pub struct WorkersArgs {
    /// Only workers that serve this queue.
    #[arg(long)]
    pub queue: Option<String>,
}

/// `dueq schedule set`: exactly one of `--cron` and `--every-ms`.
#[derive(Debug, Args)]
pub struct ScheduleSetArgs {
    /// Queue name.
    pub queue: String,
    /// Schedule name ([A-Za-z0-9_.-]{1,128}).
    pub name: String,
    /// Cron pattern, 5 fields (minute first) or 6 (seconds first).
    #[arg(long)]
    pub cron: Option<String>,
    /// Fixed interval, at least 1s (fire times are multiples of it since the Unix epoch).
    #[arg(long = "every", alias = "every-ms", value_name = "DURATION", value_parser = duration)]
    pub every_ms: Option<u64>,
    /// IANA time zone of --cron (default UTC, never the host's TZ).
    #[arg(long)]
    pub tz: Option<String>,
    /// Payload of every task (the bytes given; JSON is shown as JSON).
    #[arg(long, default_value = "null")]
    pub payload: String,
    /// Missed ticks: skip (counted) or fire_once (one task for the missed span; fire-once
    /// also works).
    #[arg(long, value_enum, default_value = "skip")]
    pub misfire: MisfireArg,
    /// How late a tick may still fire.
    #[arg(long = "misfire-grace", alias = "misfire-grace-ms", value_name = "DURATION",
          default_value = MISFIRE_GRACE_DEFAULT, value_parser = duration)]
    pub misfire_grace_ms: u64,
    /// While the previous tick's task is live: allow or skip.
    #[arg(long, value_enum, default_value = "allow")]
    pub overlap: OverlapArg,
    /// The options of each tick's task.
    #[command(flatten)]
    pub options: TaskOptionArgs,
}

/// `--misfire-grace` default: [`dueq::DEFAULT_MISFIRE_GRACE_MS`] (a test checks they agree).
const MISFIRE_GRACE_DEFAULT: &str = "1s";

/// `--misfire` of `dueq schedule set`, spelled as the HTTP API does (`fire_once`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MisfireArg {
    /// Missed ticks are skipped (and counted).
    Skip,
    /// One task for the missed span.
    #[value(name = "fire_once", alias = "fire-once")]
    FireOnce,
}

/// `--overlap` of `dueq schedule set`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverlapArg {
    /// A tick fires even while the previous tick's task is live.
    Allow,
    /// A tick is skipped while the previous tick's task is live.
    Skip,
}

/// `dueq schedule ...`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create or replace a schedule (the same definition again changes nothing).
    Set(ScheduleSetArgs),
    /// Show a schedule with its next 5 fire times.
    Get {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
    },
    /// List a queue's schedules.
    List {
        /// Queue name.
        queue: String,
    },
    /// Delete a schedule (tasks of ticks that came stay; those of ticks fired ahead are taken back).
    Delete {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
    },
    /// Pause a schedule (no tick fires or counts).
    Pause {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
    },
    /// Resume a schedule at its first tick after now.
    Resume {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
    },
    /// Run a schedule's task once now (paused or not), without moving its next fire time:
    /// key schedule:NAME:manual:MS.
    Trigger {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
    },
    /// Enqueue one task, due now, per tick of a past range (at most 10 000 ticks), keyed as
    /// the tick would have been: a tick whose task is still scheduled or running keeps it,
    /// so running it twice adds nothing. A tick whose task already ran cannot be told from
    /// one that never fired: backfill a range where the schedule did not run.
    Backfill {
        /// Queue name.
        queue: String,
        /// Schedule name.
        name: String,
        /// First tick time of the range, inclusive (RFC 3339 or Unix epoch ms).
        #[arg(long = "from", alias = "from-ms", value_name = "TIME", value_parser = time)]
        from_ms: u64,
        /// End of the range, exclusive, at most now (RFC 3339 or Unix epoch ms).
        #[arg(long = "to", alias = "to-ms", value_name = "TIME", value_parser = time)]
        to_ms: u64,
    },
}

/// `dueq test-clock ...`.
#[derive(Debug, Subcommand)]
pub enum TestClockCommand {
    /// Move the clock forward by DURATION (30m, 7d, 1h30m, or ms): what became due runs at
    /// once, leases and expiries that passed end, schedules fire or skip the ticks crossed by
    /// their misfire policy.
    Advance {
        /// How far (1ms to 100 years).
        #[arg(value_name = "DURATION", value_parser = duration)]
        by_ms: u64,
    },
    /// Move the clock forward to TIME (RFC 3339 or Unix epoch ms; never back).
    Set {
        /// The time to move to.
        #[arg(value_name = "TIME", value_parser = time)]
        at_ms: u64,
    },
    /// Show the clock: its time and how far it is ahead of Redis time.
    Get,
}

/// `dueq webhook ...`.
#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Set (or replace) the queue's webhook; prints the signing secret.
    Set {
        /// Queue name.
        queue: String,
        /// Target URL (http:// or https://; redirects are not followed).
        url: String,
        /// Deliveries in flight per server (1..1000; default 10).
        #[arg(long)]
        concurrency: Option<u32>,
        /// Time limit of one delivery (1ms to 5m; default 10s).
        #[arg(long = "timeout", alias = "timeout-ms", value_name = "DURATION",
              value_parser = duration)]
        timeout_ms: Option<u64>,
        /// Signing secret in the Standard Webhooks form, whsec_ and the base64 of 24 to 64
        /// bytes (default: keep the current one, or generate one for a new webhook). A new
        /// secret signs beside the ones it replaces, each for 24 h from its replacement (up to
        /// the 8 newest).
        #[arg(long, env = "DUEQ_WEBHOOK_SECRET", hide_env_values = true)]
        secret: Option<String>,
    },
    /// Show the queue's webhook (without the secret, and with a password in the URL as ***,
    /// unless --show-secret).
    Get {
        /// Queue name.
        queue: String,
        /// Print the signing secret and the URL as stored (with any password in it).
        #[arg(long)]
        show_secret: bool,
    },
    /// Remove the queue's webhook.
    Clear {
        /// Queue name.
        queue: String,
    },
}

/// `dueq work`.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// Queue name (the same as `--queue NAME`).
    pub queue: Option<String>,
    /// A queue to serve, with its weight (1 to 1000, default 1): `--queue orders=3 --queue
    /// reports=1` shares the slots 3:1 while both have due work; a queue with nothing due
    /// takes nothing from the others. Repeat for several queues.
    #[arg(long = "queue", value_name = "NAME[=WEIGHT]", value_parser = parse_queue_weight)]
    pub queues: Vec<(String, u32)>,
    /// Serve the queues in order of weight, highest first: a lower queue only while every
    /// higher one has nothing due (default: share in proportion to the weights).
    #[arg(long)]
    pub strict: bool,
    /// Commands running at once, 1 to 10000.
    #[arg(long, default_value_t = 4, value_parser = parse_concurrency)]
    pub concurrency: usize,
    /// Lease of each claim (default: the task's own); renewed while the command runs.
    #[arg(long = "lease", alias = "lease-ms", value_name = "DURATION", value_parser = duration)]
    pub lease_ms: Option<u64>,
    /// On SIGINT/SIGTERM, wait this long for running commands to finish (their tasks are
    /// acknowledged or retried as usual) before killing them (their whole process group) and
    /// handing their tasks back; 0: kill and hand back at once. A second signal stops at
    /// once (the tasks of commands still running come back when their leases run out).
    #[arg(long = "shutdown-grace", alias = "shutdown-grace-ms", value_name = "DURATION",
          default_value = "30s", value_parser = duration)]
    pub shutdown_grace_ms: u64,
    /// Time between two heartbeats that keep this worker in `dueq workers` (100ms to 1m); a
    /// killed worker leaves the list 3 intervals after its last beat.
    #[arg(long = "heartbeat", alias = "heartbeat-ms", value_name = "DURATION",
          default_value = HEARTBEAT_DEFAULT, value_parser = duration)]
    pub heartbeat_ms: u64,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `--heartbeat` default: [`dueq::DEFAULT_HEARTBEAT_MS`] (a test checks they agree).
const HEARTBEAT_DEFAULT: &str = "5s";

/// A duration flag (clap names the flag in the error).
fn duration(s: &str) -> Result<u64, String> {
    crate::human::parse_duration_ms(s)
}

/// A point-in-time flag: RFC 3339 or Unix epoch ms.
fn time(s: &str) -> Result<u64, String> {
    crate::human::parse_time_ms(s)
}

/// `--concurrency` of `dueq work`: 0 would run nothing.
fn parse_concurrency(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=10_000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: concurrency must be 1 to 10000")),
    }
}

/// `NAME[=WEIGHT]` of `dueq work --queue`: the name is checked where the worker is built.
fn parse_queue_weight(s: &str) -> Result<(String, u32), String> {
    let Some((name, weight)) = s.split_once('=') else {
        return Ok((s.to_owned(), 1));
    };
    let max = dueq::MAX_QUEUE_WEIGHT;
    match weight.parse::<u32>() {
        Ok(w) if (1..=max).contains(&w) => Ok((name.to_owned(), w)),
        _ => Err(format!(
            "the weight of queue {name:?} must be a whole number from 1 to {max}, not {weight:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// The readable defaults in the help are the library's constants.
    #[test]
    fn readable_defaults_match_the_constants() {
        use super::serve::{HEADER_READ_TIMEOUT_DEFAULT, IDLE_TIMEOUT_DEFAULT};
        use super::*;
        let ms = |s| crate::human::parse_duration_ms(s);
        assert_eq!(
            ms(MISFIRE_GRACE_DEFAULT),
            Ok(dueq::DEFAULT_MISFIRE_GRACE_MS)
        );
        assert_eq!(ms(HEARTBEAT_DEFAULT), Ok(dueq::DEFAULT_HEARTBEAT_MS));
        assert_eq!(
            ms(HEADER_READ_TIMEOUT_DEFAULT),
            Ok(dueq_server::DEFAULT_HEADER_READ_TIMEOUT_MS)
        );
        assert_eq!(
            ms(IDLE_TIMEOUT_DEFAULT),
            Ok(dueq_server::DEFAULT_IDLE_TIMEOUT_MS)
        );
    }

    /// clap's own checks of every command (for example two flags of `serve` with one name,
    /// which otherwise panics only when the command runs).
    #[test]
    fn the_commands_are_well_formed() {
        super::Cli::command().debug_assert();
    }
}
