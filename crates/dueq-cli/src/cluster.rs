//! A throwaway local Redis Cluster for `dueq bench --workload W9`: N masters, no replicas, each
//! a `redis-server` on a free `127.0.0.1` TCP port in its own temporary directory, with
//! persistence off. The same steps as the test kit's cluster (`dueq-testkit`), which the CLI
//! does not depend on at run time.

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
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

/// One node: its process, port and directory.
struct Node {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

/// A local Redis Cluster; [`EmbeddedCluster::stop`] kills every node (and so does dropping it).
pub struct EmbeddedCluster {
    nodes: Vec<Node>,
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

async fn start_node() -> Result<Node> {
    let mut last = None;
    for _ in 0..PORT_ATTEMPTS {
        let dir = tempfile::Builder::new().prefix("dueq-cluster-").tempdir()?;
        let port = free_port()?;
        let d = dir.path().display().to_string();
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
                &d,
            ])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", "2000"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .args(["--logfile", &format!("{d}/redis.log"), "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("could not start redis-server: install it (apt-get install redis-server)")?;
        match wait_ping(port, &mut child).await {
            Ok(()) => {
                return Ok(Node {
                    child,
                    port,
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

impl EmbeddedCluster {
    /// Starts `masters` nodes (at least 3), joins them with `redis-cli --cluster create ...
    /// --cluster-replicas 0 --cluster-yes` (the masters own equal slot ranges in start order)
    /// and waits (up to 30 s) until every node reports `cluster_state:ok` with all 16 384
    /// slots ok and knows every other node.
    ///
    /// # Errors
    /// When a node does not start, `redis-cli` fails (its output is in the message), or the
    /// cluster is not ok in time.
    pub async fn start(masters: usize) -> Result<Self> {
        if masters < 3 {
            bail!("a Redis Cluster needs at least 3 masters, got {masters}");
        }
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(start_node().await?);
        }
        let cluster = Self { nodes };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
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

    async fn wait_ok(&self) -> Result<()> {
        let deadline = Instant::now() + CLUSTER_DEADLINE;
        let known = self.nodes.len().to_string();
        let mut conns = Vec::new();
        for u in self.urls() {
            conns.push(
                redis::Client::open(u)?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        loop {
            let mut ok = true;
            for c in &mut conns {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(c)
                    .await
                    .unwrap_or_default();
                let f = |n| info_field(&info, n);
                ok &= f("cluster_state") == Some("ok")
                    && f("cluster_slots_assigned") == Some("16384")
                    && f("cluster_slots_ok") == Some("16384")
                    && f("cluster_known_nodes") == Some(known.as_str());
            }
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the cluster did not report cluster_state:ok on every node within {} s",
                    CLUSTER_DEADLINE.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `redis://127.0.0.1:<port>` of every node, in start order (node i owns the i-th slot
    /// range).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url_of(n.port)).collect()
    }

    /// The URL a dueq [`dueq::Client`] takes: every node's, comma-joined.
    pub fn url(&self) -> String {
        self.urls().join(",")
    }

    /// Kills every node and waits for them (their directories are removed after).
    pub async fn stop(mut self) {
        for n in &mut self.nodes {
            let _ = n.child.start_kill();
        }
        for n in &mut self.nodes {
            let _ = n.child.wait().await;
        }
    }
}
