//! Redis operations on the test clock (`dueq:test_clock`): start it on an empty Redis, read it,
//! move it forward. What the clock means and who runs on it: `client/test_clock.rs`.

use redis::Value;

use super::call::{Args, run_global};
use super::conn::Conn;
use super::keys::{QUEUES_KEY, TEST_CLOCK_KEY};
use super::scripts;
use crate::error::{Error, ErrorKind, Result};

/// The test clock at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// The virtual time, epoch ms: what every queue on this Redis takes as "now".
    pub now_ms: u64,
    /// How far the virtual time is ahead of Redis `TIME`, ms.
    pub offset_ms: u64,
}

/// How a start found the Redis.
pub(crate) enum Start {
    /// The clock was already running (another process started it).
    Running,
    /// Started now, at Redis time.
    Started,
    /// Refused: this many queues were made without the test clock.
    HasQueues(u64),
    /// Refused: this many workers or servers run on the Redis without the test clock.
    HasWorkers(usize),
}

/// Starts the test clock on a Redis that holds no queue yet; joins it on one that runs it.
pub(crate) async fn start(conn: &mut Conn) -> Result<Start> {
    if is_on(conn).await? {
        return Ok(Start::Running);
    }
    let queues: u64 = redis::cmd("SCARD")
        .arg(QUEUES_KEY)
        .query_async(conn)
        .await?;
    if queues > 0 {
        return Ok(Start::HasQueues(queues));
    }
    // a process connected before the start would stay on Redis time (it decided at connect)
    let (_, live) = super::workers::list(conn).await?;
    if !live.is_empty() {
        return Ok(Start::HasWorkers(live.len()));
    }
    // NX: a process starting beside this one may have set it meanwhile; both run it
    put_back(conn).await?;
    Ok(Start::Started)
}

/// Writes the clock at Redis time (offset 0) unless it runs already.
async fn put_back(conn: &mut Conn) -> Result<()> {
    let _: Value = redis::cmd("SET")
        .arg(TEST_CLOCK_KEY)
        .arg(0)
        .arg("NX")
        .query_async(conn)
        .await?;
    Ok(())
}

/// Epoch ms of a Redis `TIME` answer.
fn epoch_ms((s, us): (u64, u64)) -> u64 {
    s * 1000 + us / 1000
}

/// Whether this Redis runs the test clock: its key is there, or its library is (a `FLUSHALL`
/// since dropped the key, which is then written back at Redis time, so that a process that
/// connects right after a flush follows the clock too).
pub(crate) async fn is_on(conn: &mut Conn) -> Result<bool> {
    let exists: u64 = redis::cmd("EXISTS")
        .arg(TEST_CLOCK_KEY)
        .query_async(conn)
        .await?;
    if exists == 1 {
        return Ok(true);
    }
    if scripts::has_test_library(conn).await {
        put_back(conn).await?;
        return Ok(true);
    }
    Ok(false)
}

/// Redis `TIME` and the test clock's offset, read together. On a connection on the test
/// clock an absent offset (a `FLUSHALL` since) is written back as 0: the clock restarts at
/// Redis time, and processes that connect next still find it.
pub(crate) async fn read(conn: &mut Conn) -> Result<ClockReading> {
    let (time, offset): ((u64, u64), Option<u64>) = redis::pipe()
        .cmd("TIME")
        .cmd("GET")
        .arg(TEST_CLOCK_KEY)
        .query_async(conn)
        .await?;
    if offset.is_none() && conn.test_clock() {
        put_back(conn).await?;
    }
    let offset_ms = offset.unwrap_or(0);
    Ok(ClockReading {
        now_ms: epoch_ms(time) + offset_ms,
        offset_ms,
    })
}

/// "Now" as the scripts of `conn` see it, epoch ms: Redis `TIME`, plus the test clock's offset
/// on a Redis that runs it.
pub(crate) async fn now_ms(conn: &mut Conn) -> Result<u64> {
    if conn.test_clock() {
        return Ok(read(conn).await?.now_ms);
    }
    Ok(epoch_ms(redis::cmd("TIME").query_async(conn).await?))
}

/// Where to move the clock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Move {
    /// Forward by this many ms.
    By(u64),
    /// To this time, epoch ms (not before now).
    To(u64),
}

/// What a move found.
pub(crate) enum Moved {
    Done(ClockReading),
    /// A move to a time before now, which is the clock's now.
    Backwards(u64),
    /// A move past `latest_ms`; the clock's now.
    TooFar(u64),
}

/// Moves the clock (never past `latest_ms`) and tells every process on the Redis.
pub(crate) async fn advance(conn: &mut Conn, to: Move, latest_ms: u64) -> Result<Moved> {
    let mut a = Args::default();
    match to {
        Move::By(ms) => a.s("by").n(ms),
        Move::To(ms) => a.s("to").n(ms),
    };
    a.n(latest_ms);
    let mut r = run_global(conn, &scripts::CLOCK_ADVANCE, a.take()).await?;
    Ok(match r.string()?.as_str() {
        "ok" => Moved::Done(ClockReading {
            now_ms: r.u64()?,
            offset_ms: r.u64()?,
        }),
        "backwards" => Moved::Backwards(r.u64()?),
        "too_far" => Moved::TooFar(r.u64()?),
        other => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("clock_advance: unexpected answer {other:?}"),
            ));
        }
    })
}
