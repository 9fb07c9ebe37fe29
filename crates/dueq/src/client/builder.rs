//! [`ClientBuilder`]: a [`Client`] with settings other than the defaults, and the connect
//! that loads the function library and checks the eviction policy.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::test_clock;
use super::wake::WakeHub;
use super::{
    Client, DEFAULT_PAYLOAD_LIMIT_BYTES, DEFAULT_REPLICA_TIMEOUT_MS, DEFAULT_WAKE_CHANNELS_MAX,
    EvictionCheck, Inner, MAX_REPLICAS, eviction_check,
};
use crate::error::Result;
use crate::protocol::conn::{self, WaitFor};
use crate::protocol::scripts;

/// Builds a [`Client`] with settings other than the defaults.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    payload_limit_bytes: usize,
    response_timeout_ms: u64,
    wake_channels_max: usize,
    replicas: u8,
    replica_timeout_ms: u64,
    test_clock: bool,
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    frozen_clock: crate::frozen_clock::FrozenClock,
}

impl ClientBuilder {
    /// Tests only (debug builds with the `frozen-clock` feature; absent from release builds):
    /// the scripts of this client read "now" from `clock` instead of Redis `TIME` while it is
    /// not 0 (see [`FrozenClock`](crate::FrozenClock)). Default: Redis `TIME`.
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    pub fn frozen_clock(mut self, clock: crate::frozen_clock::FrozenClock) -> Self {
        self.frozen_clock = clock;
        self
    }

    /// For tests only: runs every queue of this Redis on the test clock, Redis time plus an
    /// offset kept in Redis, which [`Client::test_clock`] moves forward (see [`TestClock`]).
    /// Starts it on a Redis that holds no queue yet, or joins it where it runs. Off by default;
    /// a client without it still follows a Redis that runs the clock, so all processes agree.
    ///
    /// [`connect`](Self::connect) fails with [`ErrorKind::InvalidInput`](crate::ErrorKind)
    /// on a Redis that holds queues made without the clock, and on a Redis Cluster.
    ///
    /// [`TestClock`]: crate::TestClock
    pub fn test_clock(mut self) -> Self {
        self.test_clock = true;
        self
    }

    /// Durable writes: every enqueue, ack, nack, cancel, reschedule and
    /// dead-letter retry or delete of this client is followed by `WAIT replicas
    /// replica_timeout_ms` on the same connection, and fails with
    /// [`ErrorKind::NotReplicated`](crate::ErrorKind) when fewer replicas confirm in time
    /// (the write did happen on the primary; repeat it, by key, to be sure). Default 0: no
    /// `WAIT`. At most [`MAX_REPLICAS`]. [`Queue::with_replicas`](crate::Queue::with_replicas) sets it per queue handle.
    ///
    /// `WAIT` is not consensus: a confirmed write is in the memory of that many replicas,
    /// not on their disks, and a failover may still promote a replica that lacks it (see
    /// docs/RELIABILITY.md).
    pub fn replicas(mut self, replicas: u8) -> Self {
        self.replicas = replicas.min(MAX_REPLICAS);
        self
    }

    /// How long a durable write waits for its replicas, ms. Default 1 000; at least 1
    /// (`WAIT` with 0 would wait forever).
    pub fn replica_timeout_ms(mut self, ms: u64) -> Self {
        self.replica_timeout_ms = ms.max(1);
        self
    }

    /// Most queues whose wake channel the client subscribes to at once (one pub/sub
    /// connection shared by every [`DueClaimer`](crate::DueClaimer) of the client), so that a claimer waiting on
    /// them wakes the moment an earlier task arrives. Default 10 000; 0 subscribes to none. A
    /// channel is dropped when no claimer has waited on it for 60 s, or, when the table is
    /// full, the least recently used ones without a waiting claimer (down to 90 %); a claimer
    /// of a queue beyond the limit, every channel having a waiter, falls back to polling at
    /// least every second.
    pub fn wake_channels_max(mut self, n: usize) -> Self {
        self.wake_channels_max = n;
        self
    }

    /// The largest payload accepted by enqueue, in bytes. Default 1 MiB (1 048 576).
    /// Larger payloads are refused with [`ErrorKind::PayloadTooLarge`](crate::ErrorKind) and
    /// nothing is written.
    pub fn payload_limit_bytes(mut self, limit: usize) -> Self {
        self.payload_limit_bytes = limit;
        self
    }

    /// How long to wait for a Redis reply before the call fails with a retryable error.
    /// Default 5 000 ms. Lower values detect a dead server sooner; values under the longest
    /// script (a 1 000-task batch takes a few ms) would fail healthy calls.
    pub fn response_timeout_ms(mut self, ms: u64) -> Self {
        self.response_timeout_ms = ms.max(1);
        self
    }

    /// Connects and loads the function library (if the server lacks it).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a malformed URL,
    /// [`ErrorKind::Redis`](crate::ErrorKind) when the server cannot be reached.
    pub async fn connect(self) -> Result<Client> {
        let c = conn::connect(&self.url, Duration::from_millis(self.response_timeout_ms)).await?;
        let mut conn = c.conn;
        #[cfg(all(feature = "frozen-clock", debug_assertions))]
        {
            conn = conn.with_clock(self.frozen_clock.clone());
        }
        scripts::ensure_loaded(&mut conn).await?;
        // after the first load, which waits out a Redis still loading its data set
        if test_clock::on_connect(&mut conn, self.test_clock, c.cluster).await? {
            conn = conn.with_test_clock(true);
            scripts::ensure_loaded(&mut conn).await?;
        }
        match eviction_check(&mut conn).await {
            EvictionCheck::Safe => {}
            EvictionCheck::Unsafe(policy) => tracing::warn!(
                policy = %policy,
                "Redis maxmemory-policy is {policy}: under memory pressure Redis will silently \
                 DELETE queue keys (tasks lost). Set maxmemory-policy noeviction."
            ),
            EvictionCheck::Unknown(why) => tracing::warn!(
                reason = %why,
                "could not read Redis maxmemory-policy; make sure it is noeviction"
            ),
        }
        let wait = (self.replicas > 0).then_some(WaitFor {
            replicas: self.replicas,
            timeout_ms: self.replica_timeout_ms,
        });
        let wake = WakeHub::new(c.pubsub, self.wake_channels_max, conn.test_clock());
        Ok(Client {
            recorder: None,
            wait,
            inner: Arc::new(Inner {
                conn,
                wake,
                cluster: c.cluster,
                payload_limit_bytes: self.payload_limit_bytes,
                registered: Mutex::new(HashSet::new()),
                settings: Mutex::new(HashMap::new()),
                layouts: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl Client {
    /// A builder for settings other than the defaults.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            payload_limit_bytes: DEFAULT_PAYLOAD_LIMIT_BYTES,
            response_timeout_ms: 5_000,
            wake_channels_max: DEFAULT_WAKE_CHANNELS_MAX,
            replicas: 0,
            replica_timeout_ms: DEFAULT_REPLICA_TIMEOUT_MS,
            test_clock: false,
            #[cfg(all(feature = "frozen-clock", debug_assertions))]
            frozen_clock: crate::frozen_clock::FrozenClock::default(),
        }
    }
}
