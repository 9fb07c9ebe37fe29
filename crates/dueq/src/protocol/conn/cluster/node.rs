//! One connection per node: made on first use, made again after it failed, with one connect
//! at a time per node; and the `host:port` addresses and URLs of the nodes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult};
use tokio::time::Instant;

use super::super::CONNECT_TIMEOUT;
use super::ClusterLink;

/// After a failed connect to a node, how long its callers get that failure instead of a new
/// try (and the callers that waited for that try get it too): one connect at a time, and
/// not more than one per gap, to a node that is down, instead of one per waiting call
/// queued behind each other.
const RECONNECT_GAP: Duration = Duration::from_millis(10);

/// One node's connection, made on first use and again after it failed.
pub(super) struct Node {
    client: redis::Client,
    /// The connection and its number (a failure drops it only if it is still that one).
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Held while connecting: the callers of a node wait for one connect, not one each.
    connecting: tokio::sync::Mutex<()>,
    made: AtomicU64,
    /// When the last connect failed, and how.
    failed: Mutex<Option<(Instant, RedisError)>>,
}

impl ClusterLink {
    /// The node at `addr` (`host:port`), known from now on.
    pub(super) fn node(&self, addr: &str) -> RedisResult<Arc<Node>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(addr) {
            return Ok(n.clone());
        }
        let n = Arc::new(Node {
            client: redis::Client::open(node_url(&self.template, addr)?.as_str())?,
            conn: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            made: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        nodes.insert(addr.to_owned(), n.clone());
        Ok(n)
    }
}

impl Node {
    /// The node's connection, made now if there is none.
    pub(super) async fn connection(
        &self,
        response_timeout: Duration,
    ) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let asked = Instant::now();
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        // a connect that failed while this call waited, or just before: its error
        {
            let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, e)) = failed.as_ref()
                && (*at >= asked || at.elapsed() < RECONNECT_GAP)
            {
                return Err(e.clone());
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        let conn = match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), e.clone()));
                return Err(e);
            }
        };
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some((made, conn.clone()));
        Ok((made, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops connection number `made` (if it is still the current one): the next call makes
    /// a new one.
    pub(super) fn forget(&self, made: u64) {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if c.as_ref().is_some_and(|(n, _)| *n == made) {
            *c = None;
        }
    }
}

/// The URL of node `addr` (`host:port`): `template` (a seed's URL: scheme, credentials,
/// options) with that host and port.
fn node_url(template: &url::Url, addr: &str) -> RedisResult<url::Url> {
    let (host, port) = split_host_port(addr);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let mut url = template.clone();
    let bad = |what: &str| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "unusable Redis Cluster node address",
            format!("{what} of {addr:?}"),
        ))
    };
    url.set_host(Some(&host)).map_err(|_| bad("host"))?;
    url.set_port(Some(port)).map_err(|()| bad("port"))?;
    Ok(url)
}

pub(super) fn host_port(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// `host:port` (IPv6 hosts without brackets) into its parts; no port: 6379.
pub(super) fn split_host_port(addr: &str) -> (&str, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => match p.parse() {
            Ok(port) => (h.trim_start_matches('[').trim_end_matches(']'), port),
            Err(_) => (addr, 6379),
        },
        None => (addr, 6379),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_keep_the_seed_options() {
        let t = url::Url::parse("rediss://u:p%40w@seed:7000/?protocol=3#insecure").unwrap();
        assert_eq!(
            node_url(&t, "10.0.0.2:7001").unwrap().as_str(),
            "rediss://u:p%40w@10.0.0.2:7001/?protocol=3#insecure"
        );
        assert_eq!(
            node_url(&t, "::1:7002").unwrap().as_str(),
            "rediss://u:p%40w@[::1]:7002/?protocol=3#insecure"
        );
    }

    #[test]
    fn splits_addresses() {
        assert_eq!(split_host_port("10.0.0.1:7000"), ("10.0.0.1", 7000));
        assert_eq!(split_host_port("::1:7000"), ("::1", 7000));
        assert_eq!(split_host_port("[::1]:7000"), ("::1", 7000));
        assert_eq!(split_host_port("host"), ("host", 6379));
    }
}
