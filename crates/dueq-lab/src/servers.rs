//! The redis-servers of the lab, started through `dueq-testkit`: one server on a unix socket
//! or a local Redis Cluster, each in temporary directories removed when dropped (dropping
//! kills the processes).
//!
//! The testkit's calls block until the servers answer. The lab runs them with [`blocking`]
//! so that its other tasks, the producer of a chaos run among them, go on meanwhile.

use anyhow::{Context, Result};
use dueq_testkit::{RedisCluster, RedisServer};

/// Runs a blocking testkit call on this worker thread and hands the thread's other tasks to
/// another one. Needs the multi-thread runtime of the `dueq` binary.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// `dueq bench`: persistence off, `noeviction`.
///
/// # Errors
/// When redis-server does not start (the message has the tail of its log).
pub fn bench_server() -> Result<RedisServer> {
    let server = blocking(|| {
        RedisServer::builder()
            .args(["--maxmemory-policy", "noeviction"])
            .try_start()
    })
    .context("starting the bench's redis-server")?;
    tracing::info!(url = %server.url(), "started a redis-server");
    Ok(server)
}

/// `dueq bench --workload W9`: `masters` masters without replicas, persistence off,
/// `cluster-node-timeout` 2 000 ms, `noeviction`.
///
/// # Errors
/// When a node does not start, `redis-cli --cluster create` fails, or the cluster is not ok
/// within 30 s.
pub fn bench_cluster(masters: usize) -> Result<RedisCluster> {
    let cluster = blocking(|| {
        RedisCluster::builder(masters)
            .arg("--maxmemory-policy")
            .arg("noeviction")
            .try_start()
    })
    .context("starting the bench's Redis Cluster")?;
    tracing::info!(urls = %cluster.urls().join(","), "started a local Redis Cluster");
    Ok(cluster)
}

/// `dueq chaos`: AOF with `appendfsync always`, so that `kill -9` loses no confirmed write,
/// `DEBUG` allowed for `DEBUG SLEEP` (`local`: the server has only a unix socket anyway),
/// `noeviction`.
///
/// # Errors
/// When redis-server does not start.
pub fn chaos_server() -> Result<RedisServer> {
    blocking(|| {
        RedisServer::builder()
            .appendonly(true)
            .args(["--maxmemory-policy", "noeviction"])
            .args(["--enable-debug-command", "local"])
            .try_start()
    })
    .context("starting the run's redis-server")
}

/// Replicas of each master of a [`chaos_cluster`].
pub const CHAOS_REPLICAS_PER_MASTER: usize = 1;
/// `cluster-node-timeout` of a [`chaos_cluster`], ms.
pub const CHAOS_NODE_TIMEOUT_MS: u64 = 1_000;

/// `dueq chaos --cluster`: `masters` masters with a replica each, AOF on with `appendfsync
/// everysec`, `cluster-node-timeout` 1 000 ms so that a killed master's replica is promoted
/// within about 2 to 3 s, the healthy slots served while one master's are not
/// (`cluster-require-full-coverage no`), `noeviction`.
///
/// # Errors
/// As [`bench_cluster`].
pub fn chaos_cluster(masters: usize) -> Result<RedisCluster> {
    let cluster = blocking(|| {
        RedisCluster::builder(masters)
            .replicas_per_master(CHAOS_REPLICAS_PER_MASTER)
            .node_timeout_ms(CHAOS_NODE_TIMEOUT_MS)
            .arg("--appendfsync")
            .arg("everysec")
            .arg("--cluster-require-full-coverage")
            .arg("no")
            .arg("--maxmemory-policy")
            .arg("noeviction")
            .try_start()
    })
    .context("starting the run's Redis Cluster")?;
    tracing::info!(urls = %cluster.urls().join(","), "started a local Redis Cluster");
    Ok(cluster)
}
