//! The client: a connection to Redis (standalone or Cluster) that hands out [`Queue`] handles.
//!
//! A [`Client`] is cheap to clone and safe to share between tasks: every clone pipelines over
//! the same multiplexed connection, which reconnects by itself after a drop.

mod browse;
mod builder;
mod cleanup;
mod dead;
mod partitions;
mod queue;
mod schedule_fire;
mod schedules;
mod test_clock;
mod wake;
mod webhook;
mod workers;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use browse::{DueHistogram, TaskPage};
pub use builder::ClientBuilder;
pub use cleanup::{Purge, PurgeReport};
pub use dead::{
    DeadBulk, DeadBulkReport, DeadFilter, MAX_DEAD_OFFSET, MAX_FILTER_BYTES, MAX_SPREAD_MS,
};
pub use partitions::LAYOUT_TTL;
pub(crate) use partitions::{Layout, split};
pub(crate) use queue::cut_error;
pub use queue::{CancelReport, Claim, MAX_ERROR_BYTES, Queue, RecoverReport, Throttle};
pub use schedules::{BackfillReport, MAX_BACKFILL_TICKS};
pub use test_clock::{ClockReading, MAX_TEST_CLOCK_ADVANCE_MS, MAX_TEST_CLOCK_MS, TestClock};
pub use webhook::{
    DEFAULT_WEBHOOK_CONCURRENCY, DEFAULT_WEBHOOK_TIMEOUT_MS, MAX_PREVIOUS_WEBHOOK_SECRETS,
    MAX_WEBHOOK_CONCURRENCY, MAX_WEBHOOK_SECRET_BYTES, MAX_WEBHOOK_TIMEOUT_MS,
    MAX_WEBHOOK_URL_BYTES, MIN_WEBHOOK_SECRET_BYTES, WEBHOOK_ROTATION_MS, WEBHOOK_SECRET_PREFIX,
    Webhook, WebhookConfig, WebhookSet, signing_key,
};
pub use workers::{
    DEFAULT_HEARTBEAT_MS, HEARTBEAT_MISSES, MAX_HEARTBEAT_MS, MAX_LISTED_QUEUES,
    MAX_WORKER_ID_BYTES, MAX_WORKER_TEXT_BYTES, MAX_WORKERS, MIN_HEARTBEAT_MS, WorkerBeat,
    WorkerInfo, WorkerKind,
};
pub(crate) use workers::{SelfInfo, check_worker_id};

use wake::WakeHub;

use crate::error::{Error, Result};
pub use crate::protocol::conn::ConnectionHealth;
use crate::protocol::conn::{Conn, WaitFor};
use crate::protocol::{queues, scripts, server};

/// Default payload limit: 1 MiB.
pub const DEFAULT_PAYLOAD_LIMIT_BYTES: usize = 1 << 20;

/// Default time a durable write waits for its replicas, ms.
pub const DEFAULT_REPLICA_TIMEOUT_MS: u64 = 1_000;

/// Most replicas a durable write can ask for.
pub const MAX_REPLICAS: u8 = 16;

/// Default most queue wake channels one client subscribes to at once.
pub const DEFAULT_WAKE_CHANNELS_MAX: usize = 10_000;

/// Whether Redis may evict keys (anything but `noeviction` can silently delete
/// queue keys).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// `maxmemory-policy` is `noeviction`.
    Safe,
    /// Any other policy, named here.
    Unsafe(String),
    /// The policy could not be read (for example `CONFIG` is disabled); the reason.
    Unknown(String),
}

async fn eviction_check(conn: &mut Conn) -> EvictionCheck {
    match server::maxmemory_policy(conn).await {
        Ok(p) if p == "noeviction" => EvictionCheck::Safe,
        Ok(p) => EvictionCheck::Unsafe(p),
        Err(e) => EvictionCheck::Unknown(e.to_string()),
    }
}

/// Time [`Client::readiness`] takes at most, ms.
pub const READINESS_TIMEOUT_MS: u64 = 2_000;

/// What a readiness probe found (the `/readyz` fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readiness {
    /// Redis answered `PING`.
    pub redis: bool,
    /// Every script is loaded (loading them again succeeded).
    pub scripts: bool,
    /// The eviction policy check.
    pub eviction: EvictionCheck,
    /// The first error met, if any.
    pub error: Option<String>,
    /// The test clock, when the Redis runs it (see [`TestClock`]).
    pub test_clock: Option<ClockReading>,
}

impl Readiness {
    /// Ready: Redis answers, scripts load, and eviction is not known to be unsafe (an
    /// unreadable policy only warns).
    pub fn ready(&self) -> bool {
        self.redis && self.scripts && !matches!(self.eviction, EvictionCheck::Unsafe(_))
    }
}

/// A connection to the Redis that holds the queues.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Where the claim path's metrics go; `None`: the process-wide recorder.
    recorder: Option<Arc<dyn metrics::Recorder + Send + Sync>>,
    /// Durable writes of this handle (`ClientBuilder::replicas`, `Queue::with_replicas`).
    wait: Option<WaitFor>,
}

struct Inner {
    conn: Conn,
    /// The wake-up subscriptions of every claimer of this client (one pub/sub connection).
    wake: Arc<WakeHub>,
    cluster: bool,
    payload_limit_bytes: usize,
    /// Queue names already added to the `dueq:queues` set by this client.
    registered: Mutex<HashSet<String>>,
    /// Per `meta` key (one per partition): the backoff setting as last read, and the
    /// settings versions seen.
    settings: Mutex<HashMap<String, CachedSettings>>,
    /// Per queue: its partitions as last read.
    layouts: Mutex<HashMap<String, Arc<Layout>>>,
}

/// How long a cached queue backoff setting is trusted when no claim has shown a new version.
const SETTINGS_TTL: Duration = Duration::from_secs(10);

#[derive(Default)]
struct CachedSettings {
    /// Newest settings version a claim of this client returned.
    seen: u64,
    /// Version, read time and backoff of the last read.
    read: Option<(u64, std::time::Instant, Option<crate::backoff::Backoff>)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("cluster", &self.inner.cluster)
            .field("payload_limit_bytes", &self.inner.payload_limit_bytes)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects with default settings. URLs: `redis://host:port/db`, `rediss://...` (TLS),
    /// `redis+unix:///path/to.sock`, for Redis Cluster a seed list
    /// `redis+cluster://host1:port1,host2:port2` (or comma-separated `redis://` URLs), and
    /// for Sentinel `redis+sentinel://[user:pass@]s1:p1,s2:p2/MASTER_NAME[/db]` (TLS:
    /// `rediss+sentinel://`; sentinel credentials in `?sentinel_password=&sentinel_username=`;
    /// the primary is found again by itself after a failover).
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn f() -> dueq::Result<()> {
    /// let client = dueq::Client::connect("redis://127.0.0.1:6379").await?;
    /// let orders = client.queue("orders")?;
    /// orders
    ///     .enqueue(dueq::TaskSpec::new(b"42".to_vec()).key("order:42:cancel").delay_ms(1_800_000))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// A handle on queue `name` (no Redis call).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) when the name does not match
    /// `[A-Za-z0-9_.-]{1,128}`.
    pub fn queue(&self, name: &str) -> Result<Queue> {
        Queue::new(self.clone(), name)
    }

    /// Names of every queue that has had a task enqueued or a setting written (pause,
    /// resume, configure, webhook), sorted.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn queues(&self) -> Result<Vec<String>> {
        queues::list_queues(&mut self.conn()).await
    }

    /// Whether queue `name` is known: it has had a task enqueued or a setting written (one
    /// set lookup, whatever the number of queues).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn has_queue(&self, name: &str) -> Result<bool> {
        queues::is_registered(&mut self.conn(), name).await
    }

    /// Names of every queue that has had a schedule (the `dueq:schedules` registry), sorted.
    /// A queue whose schedules were all deleted stays listed.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn schedule_queues(&self) -> Result<Vec<String>> {
        crate::protocol::schedules::registry(&mut self.conn()).await
    }

    /// Checks that Redis answers.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when it does not.
    pub async fn ping(&self) -> Result<()> {
        server::ping(&mut self.conn()).await
    }

    /// Loads the function library if the server lacks it (readiness checks; calls also load it
    /// by themselves on `Function not found`).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when a script cannot be loaded.
    pub async fn load_scripts(&self) -> Result<()> {
        scripts::ensure_loaded(&mut self.conn()).await
    }

    /// The server's `maxmemory-policy`. Anything but `noeviction` can silently delete queue keys.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when it cannot be read (for example `CONFIG`
    /// disabled).
    pub async fn maxmemory_policy(&self) -> Result<String> {
        server::maxmemory_policy(&mut self.conn()).await
    }

    /// Checks Redis, the scripts and the eviction policy (for readiness probes), within
    /// [`READINESS_TIMEOUT_MS`] in all: a Redis that is down or hung gives a not-ready answer
    /// in bounded time, so a probe with a short timeout sees "not ready" rather than its own
    /// timeout. Stops at the first failure. Never fails: problems are fields of the answer.
    pub async fn readiness(&self) -> Readiness {
        let not_ready = |error: String| Readiness {
            redis: false,
            scripts: false,
            eviction: EvictionCheck::Unknown("Redis did not answer".to_owned()),
            error: Some(error),
            test_clock: None,
        };
        let check = async {
            let mut conn = self.conn();
            if let Err(e) = server::ping(&mut conn).await {
                return not_ready(e.to_string());
            }
            let load = scripts::ensure_loaded(&mut conn).await;
            let eviction = eviction_check(&mut conn).await;
            let test_clock = match self.test_clock() {
                Some(c) => c.now().await.ok(),
                None => None,
            };
            Readiness {
                redis: true,
                scripts: load.is_ok(),
                eviction,
                error: load.err().map(|e| e.to_string()),
                test_clock,
            }
        };
        let limit = Duration::from_millis(READINESS_TIMEOUT_MS);
        tokio::time::timeout(limit, check)
            .await
            .unwrap_or_else(|_| {
                not_ready(format!(
                    "Redis did not answer the readiness checks within {READINESS_TIMEOUT_MS} ms"
                ))
            })
    }

    /// The server's raw `INFO section` text (for tools and benchmarks; on a cluster, from
    /// whichever node the client picks).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn info(&self, section: &str) -> Result<String> {
        server::info(&mut self.conn(), section).await
    }

    /// Whether this client talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster
    }

    /// The payload limit in bytes.
    pub fn payload_limit_bytes(&self) -> usize {
        self.inner.payload_limit_bytes
    }

    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone().with_wait(self.wait)
    }

    /// What the connection has seen of Redis's availability: up or not, how many outages
    /// (runs of failed calls) so far, how long the last one lasted. Each outage is logged
    /// once when it starts (warning) and once when Redis answers again (info).
    pub fn connection_health(&self) -> ConnectionHealth {
        self.inner.conn.health().snapshot()
    }

    /// This client with durable writes for `replicas` replicas (0: none), each waiting up to
    /// `timeout_ms` (see [`ClientBuilder::replicas`]).
    pub(crate) fn with_replicas(&self, replicas: u8, timeout_ms: u64) -> Self {
        let mut c = self.clone();
        c.wait = (replicas > 0).then_some(WaitFor {
            replicas: replicas.min(MAX_REPLICAS),
            timeout_ms: timeout_ms.max(1),
        });
        c
    }

    /// This client (same connection, same wake-up subscriptions) carrying a metrics
    /// recorder for the components built on it (the PostgreSQL outbox relay), instead of the
    /// process-wide one, so that two servers in one process keep their numbers apart. (The
    /// queue's own counts and timings are kept in Redis: [`Queue::stats`].)
    pub fn with_metrics_recorder(
        &self,
        recorder: Arc<dyn metrics::Recorder + Send + Sync>,
    ) -> Self {
        Self {
            inner: self.inner.clone(),
            recorder: Some(recorder),
            wait: self.wait,
        }
    }

    /// The recorder given with [`with_metrics_recorder`](Self::with_metrics_recorder), if
    /// any (else metrics go to the process-wide recorder). Components built on a client
    /// (the PostgreSQL outbox relay in `dueq serve`) record into it too, so their metrics
    /// appear beside the server's.
    pub fn metrics_recorder(&self) -> Option<&dyn metrics::Recorder> {
        self.recorder
            .as_deref()
            .map(|r| r as &dyn metrics::Recorder)
    }

    pub(crate) fn wake_hub(&self) -> &Arc<WakeHub> {
        &self.inner.wake
    }

    /// Notes the settings version a claim returned from the partition whose `meta` key is
    /// `queue`.
    pub(crate) fn settings_seen(&self, queue: &str, version: u64) {
        let mut m = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match m.get_mut(queue) {
            Some(c) => c.seen = c.seen.max(version),
            None => {
                m.insert(
                    queue.to_owned(),
                    CachedSettings {
                        seen: version,
                        read: None,
                    },
                );
            }
        }
    }

    /// The queue's backoff setting when the cached read is current (`Some(None)`: it has none).
    pub(crate) fn cached_backoff(&self, queue: &str) -> Option<Option<crate::backoff::Backoff>> {
        let m = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let c = m.get(queue)?;
        let (version, at, b) = c.read?;
        (version >= c.seen && at.elapsed() < SETTINGS_TTL).then_some(b)
    }

    /// Caches a read of the queue's backoff setting.
    pub(crate) fn store_backoff(
        &self,
        queue: &str,
        version: u64,
        b: Option<crate::backoff::Backoff>,
    ) {
        let mut m = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let c = m.entry(queue.to_owned()).or_default();
        c.read = Some((version, std::time::Instant::now(), b));
    }

    /// The cached partitions of `queue` unless a claim showed a settings version of
    /// partition 0 (`meta0`) newer than the one they were read at.
    pub(crate) fn cached_layout(&self, queue: &str, meta0: &str) -> Option<Arc<Layout>> {
        let l = self.cached_layout_any(queue)?;
        let seen = self
            .inner
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(meta0)
            .map_or(0, |c| c.seen);
        (seen <= l.version).then_some(l)
    }

    /// The cached partitions of `queue`, however old.
    pub(crate) fn cached_layout_any(&self, queue: &str) -> Option<Arc<Layout>> {
        self.inner
            .layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(queue)
            .cloned()
    }

    pub(crate) fn store_layout(&self, queue: &str, layout: Arc<Layout>) {
        self.inner
            .layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(queue.to_owned(), layout);
    }

    /// Forgets the cached partitions of `queue` (after this client changed them).
    pub(crate) fn forget_layout(&self, queue: &str) {
        self.inner
            .layouts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(queue);
    }

    pub(crate) async fn register(&self, name: &str) -> Result<()> {
        let known = self
            .inner
            .registered
            .lock()
            .map_err(|_| Error::protocol("queue registry lock poisoned"))?
            .contains(name);
        if !known {
            queues::register_queue(&mut self.conn(), name).await?;
            self.inner
                .registered
                .lock()
                .map_err(|_| Error::protocol("queue registry lock poisoned"))?
                .insert(name.to_owned());
        }
        Ok(())
    }
}
