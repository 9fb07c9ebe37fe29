//! Plain commands about the Redis server itself (readiness, eviction policy, `INFO`), not a
//! queue.

use redis::aio::ConnectionLike;

use super::conn::Conn;
use crate::error::{Error, ErrorKind, Result};

/// The server's `maxmemory-policy`, or an error when it cannot be read (for example when
/// `CONFIG` is disabled by ACL or renamed).
pub(crate) async fn maxmemory_policy(conn: &mut Conn) -> Result<String> {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await?;
    v.into_iter()
        .nth(1)
        .ok_or_else(|| Error::new(ErrorKind::Protocol, "CONFIG GET maxmemory-policy: empty"))
}

/// `INFO section` text.
pub(crate) async fn info(conn: &mut Conn, section: &str) -> Result<String> {
    Ok(redis::cmd("INFO").arg(section).query_async(conn).await?)
}

/// Round trip to the server (readiness).
pub(crate) async fn ping(conn: &mut Conn) -> Result<()> {
    redis::cmd("PING").query_async::<()>(conn).await?;
    Ok(())
}

/// Keeps `ConnectionLike` in scope for callers of `query_async` on `Conn`.
#[allow(dead_code)]
fn _assert_conn_like<C: ConnectionLike>() {}
