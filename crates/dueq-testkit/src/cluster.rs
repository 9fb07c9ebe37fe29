//! A throwaway Redis Cluster made of [`RedisServer`] nodes: masters only
//! ([`RedisCluster::start`]) or masters with replicas
//! ([`RedisCluster::start_with_replicas`], for failover tests).

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

use redis::Value;

use crate::Error;
use crate::helpers::parse_info_field;
use crate::server::{RedisServer, tail};

/// How long the cluster may take to reach `cluster_state:ok` everywhere.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// Number of hash slots in Redis Cluster.
const SLOTS: &str = "16384";
/// `cluster-node-timeout` of a cluster without replicas (nothing fails over).
const NODE_TIMEOUT_MS: u64 = 2_000;
/// `cluster-node-timeout` of a cluster with replicas: short, so a dead master is marked failed
/// and its replica promoted within about 2–3 s.
const FAILOVER_NODE_TIMEOUT_MS: u64 = 1_000;
/// Pause between two looks at a failover in progress.
const POLL: Duration = Duration::from_millis(5);
/// Connect, read and write timeout of the testkit's own inspection connections, so a dead or
/// stopped node makes a probe fail instead of hang.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Options for starting a [`RedisCluster`]; create one with [`RedisCluster::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .start() is called"]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas_per_master: usize,
    appendonly: bool,
    node_timeout_ms: u64,
    extra_args: Vec<OsString>,
}

impl RedisClusterBuilder {
    /// Replicas per master (`redis-cli --cluster create --cluster-replicas n`). With
    /// replicas the defaults change to those of [`RedisCluster::start_with_replicas`]:
    /// AOF on and `cluster-node-timeout` 1 000 ms.
    pub fn replicas_per_master(mut self, n: usize) -> Self {
        self.replicas_per_master = n;
        if n > 0 {
            self.appendonly = true;
            self.node_timeout_ms = FAILOVER_NODE_TIMEOUT_MS;
        }
        self
    }

    /// AOF persistence with `appendfsync always` on every node (see
    /// [`crate::RedisServerBuilder::appendonly`]).
    pub fn appendonly(mut self, on: bool) -> Self {
        self.appendonly = on;
        self
    }

    /// `cluster-node-timeout`, ms: how long a node may be unreachable before the others
    /// flag it as failing (and its replica starts an election).
    pub fn node_timeout_ms(mut self, ms: u64) -> Self {
        self.node_timeout_ms = ms;
        self
    }

    /// One extra `redis-server` argument for every node (after the built-in ones, so it
    /// overrides them), e.g. `.arg("--cluster-require-full-coverage").arg("no")`.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Start the nodes (`--cluster-enabled yes --cluster-config-file nodes.conf
    /// --cluster-node-timeout <ms>`) on free ports, join them with `redis-cli --cluster
    /// create … --cluster-replicas <n> --cluster-yes` (the first `masters` nodes become the
    /// masters, owning equal slot ranges in start order), and wait (up to 30 s) until every
    /// node reports `cluster_state:ok`, all 16384 slots assigned and ok, knows all the other
    /// nodes, and every replica's link to its master is up.
    ///
    /// # Panics
    ///
    /// If `masters < 3` (`redis-cli --cluster create` requires at least 3 masters), or if
    /// any step fails; the message includes `redis-cli`'s output.
    pub fn start(self) -> RedisCluster {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start`] for callers that report failures themselves (the lab's `dueq bench`
    /// and `dueq chaos --cluster`).
    ///
    /// # Errors
    ///
    /// When [`Self::start`] would panic, with the same message.
    pub fn try_start(self) -> Result<RedisCluster, Error> {
        let masters = self.masters;
        if masters < 3 {
            return Err(Error::new(format!(
                "a Redis Cluster needs at least 3 masters, got {masters}"
            )));
        }
        let total = masters * (1 + self.replicas_per_master);
        let nodes = (0..total)
            .map(|_| {
                RedisServer::builder()
                    .cluster_node()
                    .appendonly(self.appendonly)
                    .args(["--cluster-node-timeout", &self.node_timeout_ms.to_string()])
                    .args(&self.extra_args)
                    .try_start()
            })
            .collect::<Result<Vec<RedisServer>, Error>>()?;
        let mut cluster = RedisCluster {
            nodes,
            replica_of: vec![None; total],
        };

        let addrs: Vec<String> = cluster
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args([
                "--cluster-replicas",
                &self.replicas_per_master.to_string(),
                "--cluster-yes",
            ])
            .output()
            .map_err(|e| Error::new(format!("spawn redis-cli (is it on PATH?): {e}")))?;
        if !output.status.success() {
            return Err(Error::new(format!(
                "redis-cli --cluster create {} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                addrs.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            )));
        }

        let known = total.to_string();
        let mut conns = Vec::with_capacity(total);
        for n in &cluster.nodes {
            conns.push(
                n.client()
                    .get_connection()
                    .map_err(|e| Error::new(format!("connect to {}: {e}", n.url())))?,
            );
        }
        let what = "every cluster node reports cluster_state:ok with all slots assigned, \
                    and every replica's master link is up";
        let ok = crate::wait::poll_until(CLUSTER_DEADLINE, || {
            conns.iter_mut().all(|conn| {
                let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(conn) else {
                    return false;
                };
                let field = |name| parse_info_field(&info, name);
                let cluster_ok = field("cluster_state").as_deref() == Some("ok")
                    && field("cluster_slots_assigned").as_deref() == Some(SLOTS)
                    && field("cluster_slots_ok").as_deref() == Some(SLOTS)
                    && field("cluster_known_nodes").as_deref() == Some(known.as_str());
                let Ok(repl) = redis::cmd("INFO").arg("replication").query::<String>(conn) else {
                    return false;
                };
                let linked = parse_info_field(&repl, "role").as_deref() == Some("master")
                    || parse_info_field(&repl, "master_link_status").as_deref() == Some("up");
                cluster_ok && linked
            })
        });
        if !ok {
            return Err(Error::timeout(CLUSTER_DEADLINE, what));
        }
        for i in 0..total {
            cluster.replica_of[i] = match cluster.replication(i) {
                Some(Role::Replica { master_port, .. }) => Some(cluster.index_of_port(master_port)),
                _ => None,
            };
        }
        Ok(cluster)
    }
}

/// A Redis Cluster of TCP [`RedisServer`] nodes, each in its own temporary directory.
///
/// Dropping it kills every node.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Per node: the node it replicates, as this handle last learned it (at start, and after
    /// [`RedisCluster::wait_for_promotion`]); `None` for a master.
    replica_of: Vec<Option<usize>>,
}

impl RedisCluster {
    /// Options: `masters` masters, no replicas, no persistence, `cluster-node-timeout`
    /// 2 000 ms unless changed.
    pub fn builder(masters: usize) -> RedisClusterBuilder {
        RedisClusterBuilder {
            masters,
            replicas_per_master: 0,
            appendonly: false,
            node_timeout_ms: NODE_TIMEOUT_MS,
            extra_args: Vec::new(),
        }
    }

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
        Self::builder(masters).start()
    }

    /// Start a cluster of `masters` masters with `replicas_per_master` replicas each, for
    /// failover tests: AOF on (`appendfsync always`), `cluster-node-timeout` 1 000 ms (a
    /// killed master's replica is promoted about 2–3 s later). Nodes `0..masters` are the
    /// masters, in slot order; the replicas follow. See [`RedisClusterBuilder::start`].
    ///
    /// # Panics
    ///
    /// As [`RedisClusterBuilder::start`].
    pub fn start_with_replicas(masters: usize, replicas_per_master: usize) -> RedisCluster {
        Self::builder(masters)
            .replicas_per_master(replicas_per_master)
            .start()
    }

    /// `redis://127.0.0.1:<port>` for every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,…`: every node as a seed.
    pub fn cluster_url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
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

    /// The index of the node listening on `port`.
    ///
    /// # Panics
    ///
    /// If no node of this cluster has that port.
    pub fn index_of_port(&self, port: u16) -> usize {
        self.ports()
            .iter()
            .position(|&p| p == port)
            .unwrap_or_else(|| panic!("no node of the cluster listens on port {port}"))
    }

    /// The replicas of node `master`, as this handle knows them (from the start, updated by
    /// [`Self::wait_for_promotion`]).
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.replica_of[i] == Some(master))
            .collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    ///
    /// # Panics
    ///
    /// If no node answers.
    pub fn slot_of_key(&self, key: &str) -> u16 {
        let mut conn = self.any_running_conn();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("CLUSTER KEYSLOT {key}: {e}"))
    }

    /// The index of the master serving `slot`, as the first running node that answers sees
    /// it (`CLUSTER SLOTS`).
    ///
    /// # Panics
    ///
    /// If no node answers, or none owns the slot.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        self.try_master_of_slot(slot)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::master_of_slot`] for callers that report failures themselves.
    ///
    /// # Errors
    ///
    /// When [`Self::master_of_slot`] would panic, with the same message.
    pub fn try_master_of_slot(&self, slot: u16) -> Result<usize, Error> {
        let mut conn = (0..self.nodes.len())
            .find_map(|i| self.node_conn(i))
            .ok_or_else(|| Error::new("no node of the cluster answers".to_owned()))?;
        let ranges = cluster_slots(&mut conn)
            .map_err(|e| Error::new(format!("CLUSTER SLOTS failed: {e}")))?;
        let port = ranges
            .iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, port)| *port)
            .ok_or_else(|| Error::new(format!("no master serves slot {slot}: {ranges:?}")))?;
        Ok(self.index_of_port(port))
    }

    /// The index of the master serving `key`'s slot.
    ///
    /// # Panics
    ///
    /// As [`Self::slot_of_key`] and [`Self::master_of_slot`].
    pub fn master_of_key(&self, key: &str) -> usize {
        self.master_of_slot(self.slot_of_key(key))
    }

    /// Kill node `i` with SIGKILL (no shutdown, no last AOF write beyond what
    /// `appendfsync always` already did) and reap it.
    pub fn kill9(&mut self, i: usize) {
        self.nodes[i].kill9();
    }

    /// After [`Self::kill9`] of master `killed`: waits (up to `deadline`) until one of its
    /// replicas is a master, no running node's `CLUSTER SLOTS` names `killed` any more,
    /// every running node reports `cluster_state:ok` with all slots ok, and every replica
    /// left of `killed` follows the new master with its link up. Returns the promoted
    /// replica's index and records the new roles for [`Self::replicas_of`] (the killed node
    /// counts as nobody's replica; restarted, Redis would make it one of the new master).
    ///
    /// # Panics
    ///
    /// If `killed` has no replica, or the deadline passes.
    pub fn wait_for_promotion(&mut self, killed: usize, deadline: Duration) -> usize {
        self.try_wait_for_promotion(killed, deadline)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::wait_for_promotion`] for callers that report failures themselves.
    ///
    /// # Errors
    ///
    /// When [`Self::wait_for_promotion`] would panic, with the same message.
    pub fn try_wait_for_promotion(
        &mut self,
        killed: usize,
        deadline: Duration,
    ) -> Result<usize, Error> {
        let candidates = self.replicas_of(killed);
        if candidates.is_empty() {
            return Err(Error::new(format!(
                "node {killed} has no replica to promote"
            )));
        }
        let killed_port = self.ports()[killed];
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i != killed && self.nodes[i].is_running())
            .collect();
        let promoted_now = || -> Option<usize> {
            let new = candidates
                .iter()
                .copied()
                .find(|&c| self.replication(c) == Some(Role::Master))?;
            let new_port = self.ports()[new];
            let followers_moved = candidates.iter().filter(|&&c| c != new).all(|&c| {
                self.replication(c)
                    == Some(Role::Replica {
                        master_port: new_port,
                        link_up: true,
                    })
            });
            let everyone_agrees = live.iter().all(|&i| {
                let Some(mut conn) = self.node_conn(i) else {
                    return false;
                };
                let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut conn) else {
                    return false;
                };
                parse_info_field(&info, "cluster_state").as_deref() == Some("ok")
                    && parse_info_field(&info, "cluster_slots_ok").as_deref() == Some(SLOTS)
                    && cluster_slots(&mut conn)
                        .is_ok_and(|ranges| ranges.iter().all(|(_, _, port)| *port != killed_port))
            });
            (followers_moved && everyone_agrees).then_some(new)
        };
        let start = Instant::now();
        let new = loop {
            if let Some(new) = promoted_now() {
                break new;
            }
            if start.elapsed() >= deadline {
                let nodes = self.cluster_nodes(&live);
                let logs: Vec<String> = candidates
                    .iter()
                    .map(|&c| {
                        let log = self.nodes[c].log_path();
                        format!("--- tail of node {c}'s log ---\n{}", tail(&log, 20))
                    })
                    .collect();
                return Err(Error::new(format!(
                    "timed out after {deadline:?} waiting until a replica of node {killed} \
                     (port {killed_port}) is promoted\n--- CLUSTER NODES ---\n{nodes}\n{}",
                    logs.join("\n")
                )));
            }
            std::thread::sleep(POLL);
        };
        for c in candidates {
            self.replica_of[c] = (c != new).then_some(new);
        }
        self.replica_of[killed] = None;
        Ok(new)
    }

    /// Starts killed node `i` again on its port and data directory (its `nodes.conf` and
    /// AOF) and waits until it answers `PING`. Follow with [`Self::wait_for_rejoin`].
    ///
    /// # Panics
    ///
    /// If it does not come back within 10 s.
    pub fn restart(&mut self, i: usize) {
        self.try_restart(i).unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Self::restart`] for callers that report failures themselves.
    ///
    /// # Errors
    ///
    /// When [`Self::restart`] would panic, with the same message.
    pub fn try_restart(&mut self, i: usize) -> Result<(), Error> {
        self.nodes[i].try_restart()
    }

    /// After [`Self::restart`] of node `i`: waits (up to `deadline`) until it is a replica
    /// with its link to its master up, and every running node reports `cluster_state:ok`
    /// with all slots ok and knows every node. Returns its master and records it for
    /// [`Self::replicas_of`].
    ///
    /// # Panics
    ///
    /// If the deadline passes.
    pub fn wait_for_rejoin(&mut self, i: usize, deadline: Duration) -> usize {
        self.try_wait_for_rejoin(i, deadline)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::wait_for_rejoin`] for callers that report failures themselves.
    ///
    /// # Errors
    ///
    /// When [`Self::wait_for_rejoin`] would panic, with the same message.
    pub fn try_wait_for_rejoin(&mut self, i: usize, deadline: Duration) -> Result<usize, Error> {
        let n = self.nodes.len();
        let known = n.to_string();
        let live: Vec<usize> = (0..n).filter(|&j| self.nodes[j].is_running()).collect();
        let rejoined_now = || -> Option<usize> {
            let Some(Role::Replica {
                master_port,
                link_up: true,
            }) = self.replication(i)
            else {
                return None;
            };
            let master = self.ports().iter().position(|&p| p == master_port)?;
            let everyone_ok = live.iter().all(|&j| {
                let Some(mut conn) = self.node_conn(j) else {
                    return false;
                };
                let Ok(info) = redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut conn) else {
                    return false;
                };
                let field = |name| parse_info_field(&info, name);
                field("cluster_state").as_deref() == Some("ok")
                    && field("cluster_slots_assigned").as_deref() == Some(SLOTS)
                    && field("cluster_slots_ok").as_deref() == Some(SLOTS)
                    && field("cluster_known_nodes").as_deref() == Some(known.as_str())
            });
            everyone_ok.then_some(master)
        };
        let start = Instant::now();
        loop {
            if let Some(master) = rejoined_now() {
                self.replica_of[i] = Some(master);
                return Ok(master);
            }
            if start.elapsed() >= deadline {
                let nodes = self.cluster_nodes(&live);
                return Err(Error::new(format!(
                    "timed out after {deadline:?} waiting until node {i} (port {}) rejoins as \
                     a replica\n--- CLUSTER NODES ---\n{nodes}",
                    self.ports()[i]
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The running masters that have a replica, as this handle last learned it.
    pub fn masters_with_replica(&mut self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].is_running()
                    && self.replica_of[i].is_none()
                    && self.replica_of.contains(&Some(i))
            })
            .collect()
    }

    /// `CLUSTER NODES` of the first of `nodes` that answers, for error messages.
    fn cluster_nodes(&self, nodes: &[usize]) -> String {
        nodes
            .iter()
            .find_map(|&i| {
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut self.node_conn(i)?)
                    .ok()
            })
            .unwrap_or_else(|| "<no node answers>".to_owned())
    }

    /// A connection to node `i` with short timeouts, or `None` if it does not answer.
    fn node_conn(&self, i: usize) -> Option<redis::Connection> {
        let conn = self.nodes[i]
            .client()
            .get_connection_with_timeout(PROBE_TIMEOUT)
            .ok()?;
        conn.set_read_timeout(Some(PROBE_TIMEOUT)).ok()?;
        conn.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
        Some(conn)
    }

    /// A connection to the first node that answers.
    fn any_running_conn(&self) -> redis::Connection {
        (0..self.nodes.len())
            .find_map(|i| self.node_conn(i))
            .expect("no node of the cluster answers")
    }

    /// Node `i`'s `INFO replication`, or `None` if it does not answer.
    fn replication(&self, i: usize) -> Option<Role> {
        let mut conn = self.node_conn(i)?;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .ok()?;
        parse_role(&info)
    }
}

/// What `INFO replication` of a node says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A master.
    Master,
    /// A replica of the master on `master_port`, its link up or not.
    Replica {
        /// The master's port.
        master_port: u16,
        /// `master_link_status:up`.
        link_up: bool,
    },
}

/// Parses `INFO replication`.
fn parse_role(info: &str) -> Option<Role> {
    match parse_info_field(info, "role")?.as_str() {
        "master" => Some(Role::Master),
        _ => Some(Role::Replica {
            master_port: parse_info_field(info, "master_port")?.parse().ok()?,
            link_up: parse_info_field(info, "master_link_status").as_deref() == Some("up"),
        }),
    }
}

/// `CLUSTER SLOTS` as (first slot, last slot, master port) ranges.
fn cluster_slots(conn: &mut redis::Connection) -> redis::RedisResult<Vec<(u16, u16, u16)>> {
    let v: Value = redis::cmd("CLUSTER").arg("SLOTS").query(conn)?;
    parse_slots(&v).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Parse,
            "unexpected CLUSTER SLOTS reply",
            format!("{v:?}"),
        ))
    })
}

/// A `CLUSTER SLOTS` reply as (first slot, last slot, master port) ranges.
fn parse_slots(v: &Value) -> Option<Vec<(u16, u16, u16)>> {
    let Value::Array(ranges) = v else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .map(|range| match range {
            Value::Array(f) if f.len() >= 3 => match &f[2] {
                Value::Array(master) if master.len() >= 2 => {
                    Some((int(&f[0])?, int(&f[1])?, int(&master[1])?))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn roles_and_slots_parse() {
        assert_eq!(
            parse_role("# Replication\r\nrole:master\r\n"),
            Some(Role::Master)
        );
        assert_eq!(
            parse_role(
                "role:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:7001\r\nmaster_link_status:down\r\n"
            ),
            Some(Role::Replica {
                master_port: 7001,
                link_up: false
            })
        );
        let v = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(7000),
            ]),
        ])]);
        assert_eq!(parse_slots(&v), Some(vec![(0, 5460, 7000)]));
    }
}
