//! A throwaway local Redis Cluster: N masters, each a `redis-server` on a free `127.0.0.1` TCP
//! port in its own temporary directory. The same steps as the test kit's cluster
//! (`dueq-testkit`), which the CLI does not depend on at run time.
//!
//! Two uses:
//! - `dueq bench --workload W9` ([`EmbeddedCluster::start`]): masters only, persistence off,
//!   `cluster-node-timeout` 2 000 ms.
//! - `dueq chaos --cluster` ([`ClusterOptions::chaos`]): a replica per master, AOF on,
//!   `cluster-node-timeout` 1 000 ms so that a killed master's replica is promoted within
//!   about 2–3 s, and the steps of a failover: [`EmbeddedCluster::kill9`] of a node,
//!   [`EmbeddedCluster::wait_promoted`], [`EmbeddedCluster::restart`] on the same port and
//!   directory, [`EmbeddedCluster::wait_rejoined`] as a replica of the new master.

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, Value};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How long one node may take to answer `PING`.
const NODE_DEADLINE: Duration = Duration::from_secs(10);
/// How long the joined cluster may take to report `cluster_state:ok` on every node.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);
/// The cluster bus listens on the client port plus this.
const BUS_OFFSET: u16 = 10_000;
/// Tries of a node on a fresh port when it does not come up (another process took the port).
const PORT_ATTEMPTS: usize = 5;
/// Redis Cluster hash slots, as `CLUSTER INFO` prints their count.
const SLOTS: &str = "16384";
/// Connect and answer timeout of the probes that watch a failover, so that a dead node makes a
/// probe fail instead of hang.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause between two looks at a failover in progress.
const PROBE_POLL: Duration = Duration::from_millis(20);

/// How the nodes of a cluster are started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Masters (at least 3), owning equal slot ranges in start order.
    pub masters: usize,
    /// Replicas of each master (`redis-cli --cluster create --cluster-replicas n`).
    pub replicas_per_master: usize,
    /// AOF (`appendonly yes`, `appendfsync everysec`) instead of no persistence.
    pub appendonly: bool,
    /// `cluster-node-timeout`, ms: how long a node may be unreachable before the others flag
    /// it as failing (and its replica starts an election).
    pub node_timeout_ms: u64,
    /// `cluster-require-full-coverage`: with `yes` (Redis's default) every node refuses every
    /// command (`CLUSTERDOWN`) while any slot is unserved, from the dead master's `FAIL` flag
    /// until its replica is promoted.
    pub require_full_coverage: bool,
}

impl ClusterOptions {
    /// `dueq bench --workload W9`: `masters` masters, no replicas, persistence off,
    /// `cluster-node-timeout` 2 000 ms.
    pub fn bench(masters: usize) -> Self {
        Self {
            masters,
            replicas_per_master: 0,
            appendonly: false,
            node_timeout_ms: 2_000,
            require_full_coverage: true,
        }
    }

    /// `dueq chaos --cluster`: `masters` masters with a replica each, AOF on,
    /// `cluster-node-timeout` 1 000 ms, and the healthy slots served while one master's are
    /// not (`cluster-require-full-coverage no`).
    pub fn chaos(masters: usize) -> Self {
        Self {
            masters,
            replicas_per_master: 1,
            appendonly: true,
            node_timeout_ms: 1_000,
            require_full_coverage: false,
        }
    }

    fn nodes(&self) -> usize {
        self.masters * (1 + self.replicas_per_master)
    }

    /// The `redis-server` arguments of the node on `port` in directory `d`.
    fn args(&self, port: u16, d: &str) -> Vec<String> {
        let mut a: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            d,
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            &self.node_timeout_ms.to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        if self.appendonly {
            a.extend(
                [
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "everysec",
                ]
                .map(str::to_owned),
            );
        } else {
            a.extend(["--save", "", "--appendonly", "no"].map(str::to_owned));
        }
        if !self.require_full_coverage {
            a.extend(["--cluster-require-full-coverage", "no"].map(str::to_owned));
        }
        if self.replicas_per_master > 0 {
            // a restarted node's full resync starts at once (the default waits 5 s for more
            // replicas to share one transfer)
            a.extend(["--repl-diskless-sync-delay", "0"].map(str::to_owned));
        }
        a.extend(["--maxmemory-policy", "noeviction"].map(str::to_owned));
        a.extend([
            "--logfile".to_owned(),
            format!("{d}/redis.log"),
            "--daemonize".to_owned(),
            "no".to_owned(),
        ]);
        a
    }
}

/// One node: its process (none while it is killed), port, arguments and directory.
struct Node {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

/// What `INFO replication` of a node says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
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

/// A local Redis Cluster; [`EmbeddedCluster::stop`] kills every node (and so does dropping it).
pub struct EmbeddedCluster {
    nodes: Vec<Node>,
    /// Per node: the node it replicates, as last learned (at start, and by
    /// [`EmbeddedCluster::wait_promoted`] and [`EmbeddedCluster::wait_rejoined`]); `None` for
    /// a master, or a node that is down.
    replica_of: Vec<Option<usize>>,
}

/// A `127.0.0.1` port that was free a moment ago, with its bus port (+10 000) free too.
fn free_port() -> Result<u16> {
    for _ in 0..100 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).context("binding 127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if let Some(bus) = port.checked_add(BUS_OFFSET)
            && TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return Ok(port);
        }
    }
    bail!("found no free 127.0.0.1 port with a free cluster bus port in 100 tries")
}

fn url_of(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// Waits until the server on `port` answers `PING`; fails at once if `child` exits.
async fn wait_ping(port: u16, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + NODE_DEADLINE;
    let client = redis::Client::open(url_of(port))?;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("redis-server on port {port} exited at start-up ({status})");
        }
        if let Ok(mut c) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING").query_async::<()>(&mut c).await.is_ok()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "redis-server on port {port} did not answer within {} s",
                NODE_DEADLINE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn(args: &[String]) -> Result<Child> {
    Command::new("redis-server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("could not start redis-server: install it (apt-get install redis-server)")
}

async fn start_node(opts: &ClusterOptions) -> Result<Node> {
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let dir = tempfile::Builder::new().prefix("dueq-cluster-").tempdir()?;
        let port = free_port()?;
        let args = opts.args(port, &dir.path().display().to_string());
        let mut child = spawn(&args)?;
        match wait_ping(port, &mut child).await {
            Ok(()) => {
                return Ok(Node {
                    child: Some(child),
                    port,
                    args,
                    _dir: dir,
                });
            }
            Err(e) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
        .context("starting a cluster node")
}

fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Parses `INFO replication`.
fn parse_role(info: &str) -> Option<Role> {
    match info_field(info, "role")? {
        "master" => Some(Role::Master),
        _ => Some(Role::Replica {
            master_port: info_field(info, "master_port")?.parse().ok()?,
            link_up: info_field(info, "master_link_status") == Some("up"),
        }),
    }
}

/// `CLUSTER SLOTS` as (first slot, last slot, master port) ranges.
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

/// Connections to the nodes for the probes of a wait, made on first use, dropped on an error
/// (a killed node is asked afresh each time, and refuses at once).
#[derive(Default)]
struct Probe {
    conns: HashMap<u16, MultiplexedConnection>,
}

impl Probe {
    async fn query<T: FromRedisValue>(&mut self, port: u16, cmd: &redis::Cmd) -> Option<T> {
        let conn = match self.conns.get(&port) {
            Some(c) => c.clone(),
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(PROBE_TIMEOUT))
                    .set_response_timeout(Some(PROBE_TIMEOUT));
                let c = redis::Client::open(url_of(port))
                    .ok()?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .ok()?;
                self.conns.insert(port, c.clone());
                c
            }
        };
        let mut conn = conn;
        match cmd.query_async::<T>(&mut conn).await {
            Ok(v) => Some(v),
            Err(_) => {
                self.conns.remove(&port);
                None
            }
        }
    }

    async fn role(&mut self, port: u16) -> Option<Role> {
        let info: String = self
            .query(port, redis::cmd("INFO").arg("replication"))
            .await?;
        parse_role(&info)
    }

    /// Whether the node reports `cluster_state:ok` with every slot ok, and knows `known`
    /// nodes (when given).
    async fn cluster_ok(&mut self, port: u16, known: Option<usize>) -> bool {
        let Some(info) = self
            .query::<String>(port, redis::cmd("CLUSTER").arg("INFO"))
            .await
        else {
            return false;
        };
        let f = |n| info_field(&info, n);
        f("cluster_state") == Some("ok")
            && f("cluster_slots_assigned") == Some(SLOTS)
            && f("cluster_slots_ok") == Some(SLOTS)
            && known.is_none_or(|k| f("cluster_known_nodes") == Some(k.to_string().as_str()))
    }

    async fn slots(&mut self, port: u16) -> Option<Vec<(u16, u16, u16)>> {
        let v: Value = self.query(port, redis::cmd("CLUSTER").arg("SLOTS")).await?;
        parse_slots(&v)
    }
}

impl EmbeddedCluster {
    /// Starts `masters` nodes (at least 3) as [`ClusterOptions::bench`] says; see
    /// [`EmbeddedCluster::start_with`].
    ///
    /// # Errors
    /// As [`EmbeddedCluster::start_with`].
    pub async fn start(masters: usize) -> Result<Self> {
        Self::start_with(&ClusterOptions::bench(masters)).await
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create ... --cluster-replicas n
    /// --cluster-yes` (the first `masters` nodes become the masters and own equal slot ranges
    /// in start order; the others are their replicas) and waits (up to 30 s) until every node
    /// reports `cluster_state:ok` with all 16 384 slots ok, knows every other node, and every
    /// replica's link to its master is up.
    ///
    /// # Errors
    /// When a node does not start, `redis-cli` fails (its output is in the message), or the
    /// cluster is not ok in time.
    pub async fn start_with(opts: &ClusterOptions) -> Result<Self> {
        if opts.masters < 3 {
            bail!(
                "a Redis Cluster needs at least 3 masters, got {}",
                opts.masters
            );
        }
        let mut nodes = Vec::with_capacity(opts.nodes());
        for _ in 0..opts.nodes() {
            nodes.push(start_node(opts).await?);
        }
        let mut cluster = Self {
            replica_of: vec![None; nodes.len()],
            nodes,
        };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args([
                "--cluster-replicas",
                &opts.replicas_per_master.to_string(),
                "--cluster-yes",
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .context("could not run redis-cli (is it on PATH?)")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create {} failed ({}):\n{}\n{}",
                addrs.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cluster.wait_ok().await?;
        tracing::info!(urls = %cluster.url(), "started a local Redis Cluster");
        Ok(cluster)
    }

    /// Waits until every node is ok, knows every other, and every replica's link is up; then
    /// records who replicates whom.
    async fn wait_ok(&mut self) -> Result<()> {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        let mut probe = Probe::default();
        let ports = self.ports();
        loop {
            let mut ok = true;
            let mut roles = Vec::with_capacity(ports.len());
            for &port in &ports {
                ok &= probe.cluster_ok(port, Some(ports.len())).await;
                let role = probe.role(port).await;
                ok &= matches!(
                    role,
                    Some(Role::Master | Role::Replica { link_up: true, .. })
                );
                roles.push(role);
            }
            if ok {
                for (i, r) in roles.into_iter().enumerate() {
                    self.replica_of[i] = match r {
                        Some(Role::Replica { master_port, .. }) => self.index_of_port(master_port),
                        _ => None,
                    };
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the cluster did not report cluster_state:ok on every node (with every \
                     replica's link up) within {} s",
                    CLUSTER_DEADLINE.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `redis://127.0.0.1:<port>` of every node, in start order (node i < masters owns the
    /// i-th slot range at the start).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url_of(n.port)).collect()
    }

    /// The URL a dueq [`dueq::Client`] takes: every node's, comma-joined.
    pub fn url(&self) -> String {
        self.urls().join(",")
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...`: every node as a seed, in start
    /// order.
    pub fn seed_url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Every node's port, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The node listening on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    /// Whether node `i` runs (was not killed, or was restarted).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// The running masters that have a replica, as last learned.
    pub fn masters_with_replica(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.is_running(i)
                    && self.replica_of[i].is_none()
                    && self.replica_of.contains(&Some(i))
            })
            .collect()
    }

    /// The master that serves `slot` now, as the first node that answers `CLUSTER SLOTS`
    /// says.
    pub async fn owner_of_slot(&self, slot: u16) -> Option<usize> {
        let mut probe = Probe::default();
        for i in (0..self.nodes.len()).filter(|&i| self.is_running(i)) {
            if let Some(ranges) = probe.slots(self.nodes[i].port).await {
                let port = ranges
                    .iter()
                    .find(|(a, b, _)| (*a..=*b).contains(&slot))
                    .map(|r| r.2)?;
                return self.index_of_port(port);
            }
        }
        None
    }

    /// `kill -9` of node `i` (no shutdown), reaped.
    ///
    /// # Errors
    /// When it is not running.
    pub async fn kill9(&mut self, i: usize) -> Result<()> {
        let Some(mut child) = self.nodes[i].child.take() else {
            bail!("node {i} is not running");
        };
        child.start_kill().context("kill -9 of a cluster node")?;
        let _ = child.wait().await;
        self.replica_of[i] = None;
        Ok(())
    }

    /// Starts killed node `i` again, on its port and directory (its `nodes.conf` and AOF),
    /// and waits until it answers `PING`.
    ///
    /// # Errors
    /// When it runs already or does not come up.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        if self.nodes[i].child.is_some() {
            bail!("node {i} is running");
        }
        let mut child = spawn(&self.nodes[i].args)?;
        wait_ping(self.nodes[i].port, &mut child)
            .await
            .with_context(|| format!("restarting cluster node {i}"))?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// After [`kill9`](Self::kill9) of master `killed`: waits (up to `deadline`) until one of
    /// its replicas reports itself master, and every running node reports `cluster_state:ok`
    /// with all slots ok and no longer names `killed` in `CLUSTER SLOTS`. Returns the
    /// promoted node.
    ///
    /// # Errors
    /// When `killed` had no replica, or the deadline passes (with `CLUSTER NODES` in the
    /// message).
    pub async fn wait_promoted(&mut self, killed: usize, deadline: Duration) -> Result<usize> {
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.replica_of[i] == Some(killed))
            .collect();
        if candidates.is_empty() {
            bail!("node {killed} has no replica to promote");
        }
        let killed_port = self.nodes[killed].port;
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .collect();
        let mut probe = Probe::default();
        let until = Instant::now() + deadline;
        loop {
            let mut new = None;
            for &c in &candidates {
                if probe.role(self.nodes[c].port).await == Some(Role::Master) {
                    new = Some(c);
                    break;
                }
            }
            if let Some(new) = new {
                let mut agree = true;
                for &i in &live {
                    let port = self.nodes[i].port;
                    agree = agree
                        && probe.cluster_ok(port, None).await
                        && probe
                            .slots(port)
                            .await
                            .is_some_and(|r| r.iter().all(|(_, _, p)| *p != killed_port));
                }
                if agree {
                    for c in candidates {
                        self.replica_of[c] = (c != new).then_some(new);
                    }
                    return Ok(new);
                }
            }
            if Instant::now() > until {
                let nodes = self.cluster_nodes(&mut probe).await;
                bail!(
                    "no replica of node {killed} (port {killed_port}) was promoted within {} \
                     ms\n--- CLUSTER NODES ---\n{nodes}",
                    deadline.as_millis()
                );
            }
            tokio::time::sleep(PROBE_POLL).await;
        }
    }

    /// After [`restart`](Self::restart) of node `i`: waits (up to `deadline`) until it is a
    /// replica with its link to its master up, and every running node reports
    /// `cluster_state:ok` with all slots ok and knows every node. Returns its master.
    ///
    /// # Errors
    /// When the deadline passes (with `CLUSTER NODES` in the message).
    pub async fn wait_rejoined(&mut self, i: usize, deadline: Duration) -> Result<usize> {
        let mut probe = Probe::default();
        let until = Instant::now() + deadline;
        let n = self.nodes.len();
        loop {
            if let Some(Role::Replica {
                master_port,
                link_up: true,
            }) = probe.role(self.nodes[i].port).await
                && let Some(master) = self.index_of_port(master_port)
            {
                let mut ok = true;
                for j in (0..n).filter(|&j| self.is_running(j)) {
                    ok = ok && probe.cluster_ok(self.nodes[j].port, Some(n)).await;
                }
                if ok {
                    self.replica_of[i] = Some(master);
                    return Ok(master);
                }
            }
            if Instant::now() > until {
                let nodes = self.cluster_nodes(&mut probe).await;
                bail!(
                    "node {i} (port {}) did not rejoin as a replica within {} ms\n--- CLUSTER \
                     NODES ---\n{nodes}",
                    self.nodes[i].port,
                    deadline.as_millis()
                );
            }
            tokio::time::sleep(PROBE_POLL).await;
        }
    }

    /// `CLUSTER NODES` of the first running node that answers, for error messages.
    async fn cluster_nodes(&self, probe: &mut Probe) -> String {
        for i in (0..self.nodes.len()).filter(|&i| self.is_running(i)) {
            if let Some(s) = probe
                .query::<String>(self.nodes[i].port, redis::cmd("CLUSTER").arg("NODES"))
                .await
            {
                return s;
            }
        }
        "<no node answers>".to_owned()
    }

    /// Kills every node and waits for them (their directories are removed after).
    pub async fn stop(mut self) {
        for n in &mut self.nodes {
            if let Some(c) = &mut n.child {
                let _ = c.start_kill();
            }
        }
        for n in &mut self.nodes {
            if let Some(c) = &mut n.child {
                let _ = c.wait().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn bench_nodes_keep_their_arguments_and_chaos_nodes_add_aof_and_replicas() {
        let bench = ClusterOptions::bench(3).args(7000, "/d");
        assert_eq!(
            bench.join(" "),
            "--port 7000 --bind 127.0.0.1 --dir /d --cluster-enabled yes \
             --cluster-config-file nodes.conf --cluster-node-timeout 2000 --save  \
             --appendonly no --maxmemory-policy noeviction --logfile /d/redis.log \
             --daemonize no"
        );
        let chaos = ClusterOptions::chaos(3);
        assert_eq!(chaos.nodes(), 6);
        let a = chaos.args(7000, "/d").join(" ");
        for want in [
            "--cluster-node-timeout 1000",
            "--appendonly yes --appendfsync everysec",
            "--cluster-require-full-coverage no",
            "--repl-diskless-sync-delay 0",
        ] {
            assert!(a.contains(want), "{a}");
        }
    }

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
