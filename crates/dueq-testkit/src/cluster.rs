//! A throwaway Redis Cluster made of [`RedisServer`] masters.

use std::process::Command;
use std::time::Duration;

use crate::helpers::parse_info_field;
use crate::server::RedisServer;

/// How long the cluster may take to reach `cluster_state:ok` everywhere.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// Number of hash slots in Redis Cluster.
const SLOTS: &str = "16384";

/// A Redis Cluster of N masters and no replicas, each a TCP
/// [`RedisServer`] in its own temporary directory.
///
/// Dropping it kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Start `masters` nodes (`--cluster-enabled yes --cluster-config-file
    /// nodes.conf --cluster-node-timeout 2000`, no persistence) on free
    /// ports, join them with `redis-cli --cluster create … --cluster-replicas 0
    /// --cluster-yes`, and wait (up to 30 s) until every node reports
    /// `cluster_state:ok`, all 16384 slots assigned and ok, and knows all the
    /// other nodes.
    ///
    /// # Panics
    ///
    /// If `masters < 3` (`redis-cli --cluster create` requires at least 3
    /// masters), or if any step fails; the message includes `redis-cli`'s
    /// output.
    pub fn start(masters: usize) -> RedisCluster {
        assert!(
            masters >= 3,
            "a Redis Cluster needs at least 3 masters, got {masters}"
        );
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|_| RedisServer::builder().cluster_node().start())
            .collect();
        let cluster = RedisCluster { nodes };

        let addrs: Vec<String> = cluster
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("spawn redis-cli (is it on PATH?): {e}"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create {} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            addrs.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );

        let known = masters.to_string();
        let mut conns: Vec<redis::Connection> = cluster.nodes.iter().map(|n| n.conn()).collect();
        crate::wait_until(
            CLUSTER_DEADLINE,
            "every cluster node reports cluster_state:ok with all slots assigned",
            || {
                conns.iter_mut().all(|conn| {
                    let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(conn) else {
                        return false;
                    };
                    let field = |name| parse_info_field(&info, name);
                    field("cluster_state").as_deref() == Some("ok")
                        && field("cluster_slots_assigned").as_deref() == Some(SLOTS)
                        && field("cluster_slots_ok").as_deref() == Some(SLOTS)
                        && field("cluster_known_nodes").as_deref() == Some(known.as_str())
                })
            },
        );
        cluster
    }

    /// `redis://127.0.0.1:<port>` for every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The TCP port of every node.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|n| n.port().expect("cluster nodes always run in TCP mode"))
            .collect()
    }

    /// The nodes, in creation order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Mutable access to the nodes (e.g. to [`RedisServer::kill9`] one).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// A cluster client seeded with every node's URL.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.urls())
            .unwrap_or_else(|e| panic!("ClusterClient::new({:?}): {e}", self.urls()))
    }
}
