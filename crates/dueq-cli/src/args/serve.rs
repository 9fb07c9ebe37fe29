//! The arguments of `dueq serve` and `dueq relay`, and the outbox relay settings they share.

use std::path::PathBuf;

use clap::Args;

use super::{HEARTBEAT_DEFAULT, duration};

/// `dueq serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the chosen address is printed).
    #[arg(long, env = "DUEQ_LISTEN", default_value = "127.0.0.1:7878")]
    pub listen: String,
    /// Data directory of the embedded redis-server (only without --redis). While it runs,
    /// the other dueq commands started in the directory holding ./dueq-data (or with the same
    /// DUEQ_DATA_DIR) and without --redis use this Redis.
    #[arg(long, env = "DUEQ_DATA_DIR", default_value = "./dueq-data")]
    pub data_dir: PathBuf,
    /// File of bearer tokens, one per line (# comments); DUEQ_TOKENS adds comma-separated
    /// ones. With no token the API is open.
    #[arg(long)]
    pub tokens_file: Option<PathBuf>,
    /// Require a token on /metrics too (default: open for Prometheus).
    #[arg(long)]
    pub metrics_auth: bool,
    /// Largest payload accepted, bytes (default 1 MiB); request bodies may be 64 KiB more.
    #[arg(long, default_value_t = dueq::DEFAULT_PAYLOAD_LIMIT_BYTES)]
    pub payload_limit_bytes: usize,
    /// Time between two heartbeats that keep this server in `dueq workers` and
    /// `GET /v1/workers` (100ms to 1m).
    #[arg(long = "heartbeat", alias = "heartbeat-ms", value_name = "DURATION",
          default_value = HEARTBEAT_DEFAULT, value_parser = duration)]
    pub heartbeat_ms: u64,
    /// Time a client has to send a complete request head: from the connection's accept,
    /// or from the first byte of a later request on a keep-alive connection. Past it the
    /// connection is closed (slow-header clients); 0: no limit.
    #[arg(long = "header-read-timeout", alias = "header-read-timeout-ms",
          value_name = "DURATION", default_value = HEADER_READ_TIMEOUT_DEFAULT,
          value_parser = duration)]
    pub header_read_timeout_ms: u64,
    /// Time a keep-alive connection may stay idle between two requests before it is
    /// closed; 0: no limit.
    #[arg(long = "idle-timeout", alias = "idle-timeout-ms", value_name = "DURATION",
          default_value = IDLE_TIMEOUT_DEFAULT, value_parser = duration)]
    pub idle_timeout_ms: u64,
    /// Most HTTP connections open at once (1 to 1000000). At the cap no new connection is
    /// accepted: they wait in the kernel's listen backlog and are served as open ones close
    /// (keep it below the open-file limit, `ulimit -n`).
    #[arg(long, default_value_t = dueq_server::DEFAULT_MAX_CONNECTIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_http_connections: u64,
    /// For tests only: run every queue on a virtual clock (Redis time plus an offset kept in
    /// Redis) that `dueq test-clock advance`, `POST /v1/test/clock` and the clients' helpers
    /// move forward. Refused on a Redis that holds queues made without it: give it a Redis
    /// (or a --data-dir) of its own. Every process on that Redis follows the clock.
    #[arg(long)]
    pub test_clock: bool,
    /// Also run the PostgreSQL outbox relay and its reconciler in this server, against the
    /// database at this URL (as `dueq relay` does: migrates the table first), and include the
    /// database in /readyz. The server starts while the database is unreachable (/readyz is
    /// 503 naming postgres; the relay retries with backoff).
    #[arg(long)]
    pub postgres: Option<String>,
    /// The relay's settings (with --postgres).
    #[command(flatten)]
    pub outbox: OutboxArgs,
}

/// `--header-read-timeout` default: [`dueq_server::DEFAULT_HEADER_READ_TIMEOUT_MS`].
pub(super) const HEADER_READ_TIMEOUT_DEFAULT: &str = "10s";
/// `--idle-timeout` default: [`dueq_server::DEFAULT_IDLE_TIMEOUT_MS`].
pub(super) const IDLE_TIMEOUT_DEFAULT: &str = "1m";

/// `dueq relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// PostgreSQL URL of the database holding the outbox table (postgres://user@host/db).
    #[arg(long, env = "DUEQ_POSTGRES_URL")]
    pub postgres: String,
    /// Run one reconciler pass, print its report and exit (no relaying).
    #[arg(long)]
    pub reconcile_once: bool,
    /// The relay's settings.
    #[command(flatten)]
    pub outbox: OutboxArgs,
}

/// The outbox relay's settings, shared by `dueq relay` and `dueq serve --postgres` (each
/// needs `--postgres`).
#[derive(Debug, Args)]
pub struct OutboxArgs {
    /// Time between two reconciler passes (at least 1s).
    #[arg(long = "reconcile-interval", alias = "reconcile-interval-ms", value_name = "DURATION",
          default_value = "5m", value_parser = duration, requires = "postgres")]
    pub reconcile_interval_ms: u64,
    /// The reconciler checks rows due before now plus this.
    #[arg(long = "horizon", alias = "horizon-ms", value_name = "DURATION", default_value = "1h",
          value_parser = duration, requires = "postgres")]
    pub horizon_ms: u64,
    /// Rows one reconciler pass looks at, at most (the next pass goes on).
    #[arg(long, default_value_t = 100_000, requires = "postgres")]
    pub max_rows_per_pass: usize,
    /// Fallback poll when no NOTIFY arrives.
    #[arg(long = "poll", alias = "poll-ms", value_name = "DURATION", default_value = "1s",
          value_parser = duration, requires = "postgres")]
    pub poll_ms: u64,
    /// Rows per batch (1 to 1000).
    #[arg(long, default_value_t = 1_000, requires = "postgres")]
    pub batch: usize,
    /// Succeeded tasks each served queue keeps in Redis so the relay can record completions
    /// (0: leave the queue's setting alone).
    #[arg(long, default_value_t = 10_000, requires = "postgres")]
    pub succeeded_retention: u64,
    /// Most PostgreSQL connections.
    #[arg(long, default_value_t = 4, requires = "postgres")]
    pub max_connections: u32,
    /// A queue written only through the outbox (repeatable): the reconciler also removes its
    /// Redis tasks that have no live row and no tombstone (e.g. after restoring the database
    /// from a backup). Never name a queue that also gets tasks enqueued directly.
    #[arg(long = "owned-queue", value_name = "QUEUE", requires = "postgres")]
    pub owned_queues: Vec<String>,
}
