//! Connections: one multiplexed connection (standalone, auto-reconnecting), a Redis Cluster
//! link (dueq's own routing over one connection per node, see [`cluster`]), or a
//! Sentinel-resolved primary, behind a single type the scripts run on.
//!
//! Every reply passes through [`Health`], which turns a run of connection failures into one
//! outage: one log line when it starts, one when it ends, and a counter
//! ([`ConnectionHealth`]). A reconnect itself is the link's job: `ConnectionManager` (and the
//! cluster link) make a new socket on the next call after a drop; the Sentinel link
//! also asks the sentinels for the primary again after a connection failure or a `READONLY`
//! reply (the old primary demoted to a replica), and repeats a refused write once on the new
//! primary (`READONLY` means nothing was written).

mod cluster;
mod sentinel;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use cluster::ClusterLink;
use sentinel::SentinelLink;
pub(crate) use sentinel::SentinelUrl;

use crate::error::{Error, Result};

/// Timeout of a TCP connect to Redis or a sentinel.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A cheap-to-clone handle that pipelines all callers over one socket per node.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    health: Arc<Health>,
    /// Durable writes: `WAIT` after the writes that ask for it (see [`WaitFor`]).
    wait: Option<WaitFor>,
    /// The Redis runs the test clock: calls go to its library (`scripts.rs`).
    test_clock: bool,
    /// "Now" for the scripts (`crate::frozen_clock`; debug builds with `frozen-clock` only).
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    clock: crate::frozen_clock::FrozenClock,
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(Arc<ClusterLink>),
    Sentinel(Arc<SentinelLink>),
}

/// `WAIT replicas timeout_ms` after a write: the write counts as done only once that many
/// replicas acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaitFor {
    pub replicas: u8,
    pub timeout_ms: u64,
}

impl Conn {
    /// The same connection, with `WAIT` after every durable write (or none).
    pub(crate) fn with_wait(mut self, wait: Option<WaitFor>) -> Self {
        self.wait = wait;
        self
    }

    pub(crate) fn wait(&self) -> Option<WaitFor> {
        self.wait
    }

    /// The same connection, calling the test clock's library (or not).
    pub(crate) fn with_test_clock(mut self, on: bool) -> Self {
        self.test_clock = on;
        self
    }

    /// Whether the Redis runs the test clock (see `client/test_clock.rs`).
    pub(crate) fn test_clock(&self) -> bool {
        self.test_clock
    }

    pub(crate) fn health(&self) -> &Arc<Health> {
        &self.health
    }

    fn new(link: Link, health: Arc<Health>) -> Self {
        Self {
            link,
            health,
            wait: None,
            test_clock: false,
            #[cfg(all(feature = "frozen-clock", debug_assertions))]
            clock: crate::frozen_clock::FrozenClock::default(),
        }
    }

    /// The same connection, its scripts reading "now" from `clock`.
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    pub(crate) fn with_clock(mut self, clock: crate::frozen_clock::FrozenClock) -> Self {
        self.clock = clock;
        self
    }

    /// Sends `cmd` to every primary of a cluster, where it must succeed on each (the answer is
    /// the first node's, the error the first one found), or to the one server otherwise; for
    /// a command without keys, which a cluster would send to one node at random.
    pub(crate) async fn on_every_primary(&mut self, cmd: Cmd) -> RedisResult<Value> {
        let Link::Cluster(c) = &self.link else {
            return self.req_packed_command(&cmd).await;
        };
        let sent = self.health.sent();
        let answers = c.on_every_master(&cmd).await;
        self.health.observe(sent, answers.as_ref().err());
        answers
    }

    /// The scripts' extra last argument: the test clock (0 = Redis `TIME`).
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    pub(crate) fn clock_arg(&self) -> Vec<u8> {
        self.clock.arg()
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let sent = self.health.sent();
            let r = match &mut self.link {
                Link::Single(c) => c.req_packed_command(cmd).await,
                Link::Cluster(c) => c.command(cmd).await,
                Link::Sentinel(s) => s.command(cmd).await,
            };
            self.health.observe(sent, r.as_ref().err());
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let sent = self.health.sent();
            let r = match &mut self.link {
                Link::Single(c) => c.req_packed_commands(pipeline, offset, count).await,
                Link::Cluster(c) => c.commands(pipeline, offset, count).await,
                Link::Sentinel(s) => s.commands(pipeline, offset, count).await,
            };
            self.health.observe(sent, r.as_ref().err());
            r
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c) => c.get_db(),
            Link::Cluster(_) => 0,
            Link::Sentinel(s) => s.db(),
        }
    }
}

/// Where the wake hub opens its pub/sub connections: a fixed server, any node of a cluster,
/// or whatever the sentinels name as primary now (resolved again at every reconnect).
#[derive(Clone)]
pub(crate) enum PubsubSource {
    Fixed(Box<redis::Client>),
    /// A cluster's seed nodes. A PUBLISH reaches every node of a cluster, so any live node
    /// serves; after a failed or dropped connection the next seed is tried, so one dead node
    /// does not silence the wake-ups of every partition.
    Seeds(Arc<(Vec<redis::Client>, AtomicUsize)>),
    Sentinel(Arc<SentinelLink>),
}

impl PubsubSource {
    /// A client for the server to subscribe on now.
    pub(crate) fn client(&self) -> redis::Client {
        match self {
            Self::Fixed(c) => (**c).clone(),
            Self::Seeds(s) => {
                let (seeds, at) = &**s;
                // `connect` refuses an empty seed list, so the modulo never divides by 0
                seeds[at.load(Ordering::Relaxed) % seeds.len()].clone()
            }
            Self::Sentinel(s) => s.pubsub_client(),
        }
    }

    /// The connection from [`client`](Self::client) failed or dropped: a cluster moves on
    /// to its next seed.
    pub(crate) fn failed(&self) {
        if let Self::Seeds(s) = self {
            s.1.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether an error means Redis (or this primary) is away, rather than an answer.
pub(crate) fn is_outage(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::ReadOnly
                    | ServerErrorKind::BusyLoading
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
            )
        )
        || is_readonly(e)
}

/// A `READONLY` reply: this server is a replica now (a failover demoted it).
pub(crate) fn is_readonly(e: &redis::RedisError) -> bool {
    e.code() == Some("READONLY")
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        )
        // inside a script, the write's error comes wrapped in the script error
        || e.to_string().contains("READONLY")
}

/// What the connection has seen of Redis's availability (see [`Health`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionHealth {
    /// The last call got an answer from Redis (false from the first failed call of an
    /// outage until the next answer).
    pub up: bool,
    /// Outages seen since the client connected: runs of connection failures (refused,
    /// dropped, timed out, `LOADING`, `READONLY`, ...) ended by an answer or still going.
    pub outages: u64,
    /// How long the last finished outage lasted, ms (first failure to first answer).
    pub last_outage_ms: Option<u64>,
}

/// Outage tracking shared by every clone of a connection: one warning when calls start
/// failing, one info line when Redis answers again, and a count.
#[derive(Debug, Default)]
pub(crate) struct Health {
    down: AtomicBool,
    since: Mutex<Option<Instant>>,
    outages: AtomicU64,
    /// ms + 1 of the last finished outage; 0 = none yet.
    last_ms: AtomicU64,
    /// Changes of `down` so far. A call's answer moves `down` only if none happened since the
    /// call was sent: on a multiplexed connection the reply to a call sent before an outage
    /// began can arrive just after another call's broken pipe, and says nothing about now
    /// (nor does a call sent on the dead socket failing after Redis answers again).
    changes: AtomicU64,
}

impl Health {
    /// What a call notes when it is sent, for [`observe`](Self::observe).
    fn sent(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    fn observe(&self, sent: u64, err: Option<&redis::RedisError>) {
        if self.changes.load(Ordering::Acquire) != sent {
            return;
        }
        match err {
            Some(e) if is_outage(e) => {
                if !self.down.swap(true, Ordering::AcqRel) {
                    self.changes.fetch_add(1, Ordering::AcqRel);
                    let n = self.outages.fetch_add(1, Ordering::AcqRel) + 1;
                    if let Ok(mut s) = self.since.lock() {
                        *s = Some(Instant::now());
                    }
                    tracing::warn!(error = %e, outage = n,
                        "Redis unreachable; calls fail and are retried with backoff until it answers again");
                }
            }
            _ => {
                if self.down.swap(false, Ordering::AcqRel) {
                    self.changes.fetch_add(1, Ordering::AcqRel);
                    let since = self.since.lock().ok().and_then(|mut s| s.take());
                    let ms = since.map_or(0, |t| t.elapsed().as_millis() as u64);
                    self.last_ms.store(ms + 1, Ordering::Release);
                    tracing::info!(
                        outage = self.outages.load(Ordering::Acquire),
                        duration_ms = ms,
                        "Redis answers again"
                    );
                }
            }
        }
    }

    pub(crate) fn snapshot(&self) -> ConnectionHealth {
        let last = self.last_ms.load(Ordering::Acquire);
        ConnectionHealth {
            up: !self.down.load(Ordering::Acquire),
            outages: self.outages.load(Ordering::Acquire),
            last_outage_ms: last.checked_sub(1),
        }
    }
}

/// What [`connect`] returns: the command connection and where pub/sub connections go
/// (plain `PUBLISH` reaches every node of a cluster, so one seed node serves for that).
pub(crate) struct Connected {
    pub conn: Conn,
    pub pubsub: PubsubSource,
    pub cluster: bool,
}

/// The URLs of a cluster seed list, or `None` for a single server.
///
/// A cluster is named by `redis+cluster://h1:p1,h2:p2` (or `rediss+cluster://`) or by a
/// comma-separated list of `redis://` URLs.
fn cluster_seeds(url: &str) -> Option<Vec<String>> {
    for (scheme, plain) in [
        ("redis+cluster://", "redis://"),
        ("rediss+cluster://", "rediss://"),
    ] {
        if let Some(rest) = url.strip_prefix(scheme) {
            return Some(
                rest.split(',')
                    .map(|h| format!("{plain}{}", h.trim()))
                    .collect(),
            );
        }
    }
    url.contains(',')
        .then(|| url.split(',').map(|s| s.trim().to_owned()).collect())
}

/// A `ConnectionManager` for one server: reconnects by itself on the call after a drop
/// (3 tries, up to 500 ms apart, then the call fails and the next call tries again).
pub(crate) async fn manager(
    client: &redis::Client,
    response_timeout: Duration,
) -> RedisResult<ConnectionManager> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_millis(500));
    client.get_connection_manager_with_config(config).await
}

pub(crate) async fn connect(url: &str, response_timeout: Duration) -> Result<Connected> {
    let bad_url = |e: redis::RedisError| {
        Error::invalid(format!("bad Redis URL {:?}: {e}", crate::redact_url(url)))
    };
    let health = Arc::new(Health::default());
    if let Some(s) = SentinelUrl::parse(url)? {
        let link = Arc::new(SentinelLink::connect(s, response_timeout).await?);
        tokio::spawn(sentinel::watch(Arc::downgrade(&link)));
        return Ok(Connected {
            conn: Conn::new(Link::Sentinel(link.clone()), health),
            pubsub: PubsubSource::Sentinel(link),
            cluster: false,
        });
    }
    if let Some(seeds) = cluster_seeds(url) {
        if seeds.is_empty() {
            return Err(Error::invalid("empty cluster seed list"));
        }
        let clients = seeds
            .iter()
            .map(|s| redis::Client::open(s.as_str()).map_err(bad_url))
            .collect::<Result<Vec<_>>>()?;
        let link = ClusterLink::connect(&seeds, response_timeout).await?;
        return Ok(Connected {
            conn: Conn::new(Link::Cluster(link), health),
            pubsub: PubsubSource::Seeds(Arc::new((clients, AtomicUsize::new(0)))),
            cluster: true,
        });
    }
    let client = redis::Client::open(url).map_err(bad_url)?;
    let conn = manager(&client, response_timeout).await?;
    Ok(Connected {
        conn: Conn::new(Link::Single(conn), health),
        pubsub: PubsubSource::Fixed(Box::new(client)),
        cluster: false,
    })
}

#[cfg(test)]
mod tests {
    use super::cluster_seeds;

    #[test]
    fn seed_lists() {
        assert_eq!(cluster_seeds("redis://a:1"), None);
        assert_eq!(
            cluster_seeds("redis+cluster://a:1,b:2").unwrap(),
            vec!["redis://a:1", "redis://b:2"]
        );
        assert_eq!(
            cluster_seeds("redis://a:1, redis://b:2").unwrap(),
            vec!["redis://a:1", "redis://b:2"]
        );
    }
}
