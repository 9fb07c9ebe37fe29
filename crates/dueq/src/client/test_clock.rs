//! The test clock: for users' integration tests, every queue of one Redis runs on a virtual
//! clock, Redis `TIME` plus an offset kept in Redis (`dueq:test_clock`), which a test moves
//! forward ("advance 30 minutes") instead of sleeping.
//!
//! It is a property of the Redis, so every process on it agrees: [`ClientBuilder::test_clock`]
//! (`dueq serve --test-clock`) starts it on a Redis that holds no queue yet and no live
//! worker, and refuses one that does (a process decides at connect, so one connected before
//! would stay on Redis time); any client that connects to a Redis running it follows it (and
//! says so in its log), so a worker or a second server needs no flag of its own. The scripts
//! read the offset
//! once per call (`protocol/test_clock.lua`, in a second function library that only a Redis
//! running the clock is served by), so every guarantee holds on the virtual time as it does on
//! Redis time: nothing runs early, leases expire, retries back off, expiry and rate windows
//! move, schedules fire or skip each tick crossed by their misfire policy.
//!
//! A `FLUSHALL` puts the clock back at Redis time: the processes stay on the test clock, and
//! the next reading (at the latest the next heartbeat of a worker or server) writes the key
//! back, so processes that connect later find it. The live workers list keeps Redis
//! time (`scripts.rs`), so an advance does not make every worker look gone.
//!
//! A move publishes on the `dueq:test_clock` channel; each client's wake hub then has every
//! claimer, schedule firer and recoverer look at once, so a task made due by an advance runs a
//! pub/sub round trip later rather than at the next poll. A task running while the clock jumps
//! past its lease deadline is handed out again, as any expired lease is.
//!
//! Not on a Redis Cluster (the offset key would sit on one node), and never on by default: a
//! Redis gets the clock only from an explicit start on an empty Redis.
//!
//! [`ClientBuilder::test_clock`]: crate::ClientBuilder::test_clock

use std::time::Duration;

use super::Client;
use crate::error::{Error, ErrorKind, Result};
pub use crate::protocol::clock::ClockReading;
use crate::protocol::clock::{self, Move, Moved};

/// Farthest one advance moves the test clock, ms (100 years).
pub const MAX_TEST_CLOCK_ADVANCE_MS: u64 = 100 * 365 * 24 * 3_600_000;

/// Latest time the test clock may show, epoch ms (3000-01-01T00:00:00Z), so that any delay
/// from there still gives a valid due time.
pub const MAX_TEST_CLOCK_MS: u64 = 32_503_680_000_000;

/// The test clock of the Redis a [`Client`] talks to: read it, move it forward.
/// [`Client::test_clock`] hands it out when the Redis runs the clock.
#[derive(Clone, Debug)]
pub struct TestClock {
    client: Client,
}

impl Client {
    /// The test clock, when this client's Redis runs it (see
    /// [`ClientBuilder::test_clock`](crate::ClientBuilder::test_clock)); `None` on a Redis on
    /// its own clock.
    pub fn test_clock(&self) -> Option<TestClock> {
        self.conn().test_clock().then(|| TestClock {
            client: self.clone(),
        })
    }
}

impl TestClock {
    /// The clock now. After a `FLUSHALL` it is back at Redis time (offset 0), written back so
    /// that processes that connect next find it (each heartbeat of a worker or server on the
    /// test clock reads it too).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn now(&self) -> Result<ClockReading> {
        clock::read(&mut self.client.conn()).await
    }

    /// Moves the clock forward by `by` and wakes every process on the Redis: what became due
    /// runs at once, leases and expiries that passed end, schedules fire or skip the ticks
    /// crossed by their misfire policy.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) naming `advance_ms` when `by` is 0, over
    /// [`MAX_TEST_CLOCK_ADVANCE_MS`] or past [`MAX_TEST_CLOCK_MS`] (nothing moves);
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn advance(&self, by: Duration) -> Result<ClockReading> {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 || ms > MAX_TEST_CLOCK_ADVANCE_MS {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "advance_ms: {ms} is out of range: the test clock moves forward by 1 ms to \
                     {MAX_TEST_CLOCK_ADVANCE_MS} ms (100 years) at a time"
                ),
            ));
        }
        self.go(Move::By(ms), "advance_ms").await
    }

    /// Moves the clock forward to `ms` (epoch ms) and wakes every process, as
    /// [`advance`](Self::advance). A time equal to the clock's now changes nothing but still
    /// wakes them.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) naming `set_ms` when `ms` is before the
    /// clock's now (it moves forward only) or past [`MAX_TEST_CLOCK_MS`];
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn set_ms(&self, ms: u64) -> Result<ClockReading> {
        self.go(Move::To(ms), "set_ms").await
    }

    async fn go(&self, to: Move, field: &str) -> Result<ClockReading> {
        let moved = clock::advance(&mut self.client.conn(), to, MAX_TEST_CLOCK_MS).await?;
        match moved {
            Moved::Done(r) => Ok(r),
            Moved::Backwards(now) => Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{field}: the test clock moves forward only, and it is at {now} ({}) \
                     already",
                    rfc3339(now)
                ),
            )),
            Moved::TooFar(now) => Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{field}: the test clock (now {now}) may not pass {MAX_TEST_CLOCK_MS} \
                     (3000-01-01T00:00:00Z)"
                ),
            )),
        }
    }
}

/// `ms` as an RFC 3339 time, for messages.
fn rfc3339(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| ms.to_string(), |t| t.to_string())
}

/// Starts or joins the test clock for a client that asked for it (`start`), or finds whether
/// its Redis runs it; logs which.
pub(crate) async fn on_connect(
    conn: &mut crate::protocol::conn::Conn,
    start: bool,
    cluster: bool,
) -> Result<bool> {
    if cluster {
        if start {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "test_clock: the test clock runs on a single Redis (standalone or behind \
                 Sentinel), not on a Redis Cluster",
            ));
        }
        return Ok(false);
    }
    if start {
        match clock::start(conn).await? {
            clock::Start::HasQueues(n) => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "test_clock: this Redis holds {n} queue(s) made without the test clock; \
                         the test clock runs only on a Redis of its own (an empty one, for \
                         tests), never beside real queues"
                    ),
                ));
            }
            clock::Start::HasWorkers(n) => {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "test_clock: {n} live worker(s) or server(s) use this Redis without the \
                         test clock (dueq workers lists them), and would stay on Redis time; \
                         start the test clock before any other dueq process connects"
                    ),
                ));
            }
            clock::Start::Started => {
                tracing::warn!(
                    "TEST CLOCK started: every queue on this Redis runs on a virtual clock that tests move forward; for tests only"
                );
            }
            clock::Start::Running => {
                tracing::warn!(
                    "TEST CLOCK: this Redis runs the test clock; every queue on it runs on a virtual clock that tests move forward; for tests only"
                );
            }
        }
        return Ok(true);
    }
    let on = clock::is_on(conn).await?;
    if on {
        tracing::info!(
            "TEST CLOCK: this Redis runs the test clock (dueq serve --test-clock), so this \
             process follows it: every queue runs on a virtual clock that tests move forward"
        );
    }
    Ok(on)
}
