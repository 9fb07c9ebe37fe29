//! Connections: one multiplexed connection (standalone, auto-reconnecting) or one cluster
//! connection, behind a single type the scripts run on.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{Error, Result};

/// A cheap-to-clone handle that pipelines all callers over one socket per node.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// What [`connect`] returns: the command connection and a client for pub/sub connections
/// (plain `PUBLISH` reaches every node of a cluster, so one seed node serves for that).
pub(crate) struct Connected {
    pub conn: Conn,
    pub pubsub: redis::Client,
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

pub(crate) async fn connect(url: &str, response_timeout: Duration) -> Result<Connected> {
    let bad_url = |e: redis::RedisError| Error::invalid(format!("bad Redis URL {url:?}: {e}"));
    if let Some(seeds) = cluster_seeds(url) {
        let first = seeds
            .first()
            .ok_or_else(|| Error::invalid("empty cluster seed list"))?;
        let pubsub = redis::Client::open(first.as_str()).map_err(bad_url)?;
        let client = redis::cluster::ClusterClient::builder(seeds.clone())
            .response_timeout(response_timeout)
            .connection_timeout(Duration::from_secs(2))
            .build()
            .map_err(bad_url)?;
        let conn = client.get_async_connection().await?;
        return Ok(Connected {
            conn: Conn::Cluster(conn),
            pubsub,
            cluster: true,
        });
    }
    let client = redis::Client::open(url).map_err(bad_url)?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(response_timeout))
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_millis(500));
    let conn = client.get_connection_manager_with_config(config).await?;
    Ok(Connected {
        conn: Conn::Single(conn),
        pubsub: client,
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
