//! How figures are measured: the [`Figure`] type, the Redis probe (`INFO` through the client,
//! or from every master of a cluster), this process's CPU, and percentiles and medians.
//!
//! * Redis CPU: `INFO cpu` `used_cpu_sys + used_cpu_user` before and after the timed part.
//! * Redis commands (IDLE): commands clients send, counted with `MONITOR` (an `FCALL` is
//!   one command); `redis_calls_per_s` also counts the calls inside scripts (`INFO stats`
//!   `total_commands_processed`, minus the probe's own `INFO`).
//! * client CPU: this process's `utime + stime` from `/proc/self/stat` (Linux, 100 ticks/s).
//! * memory: `INFO memory` `used_memory` before and after.
//! * lateness: handler start minus due time, both by the Redis clock (see
//!   `ClaimedTask::started_at_ms`), in whole milliseconds.

use std::time::Duration;

use anyhow::{Context, Result};
use dueq::Client;

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Workload name (`W4-1000000` carries its pending count).
    pub workload: String,
    /// Metric name.
    pub metric: &'static str,
    /// Value.
    pub value: f64,
}

/// Reads server figures through `INFO`: through the client, or on a cluster from every
/// master with a plain connection to each (the client's `INFO` answers from one node).
pub struct Probe {
    client: Client,
    /// One connection per master, in the cluster's start order (empty: not a cluster).
    nodes: Vec<redis::aio::MultiplexedConnection>,
    /// Every per-master reading [`Probe::cpu_s`] took on a cluster, in order.
    readings: std::sync::Mutex<Vec<Vec<NodeReading>>>,
}

fn info_field(text: &str, field: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// One master's counters at one moment.
#[derive(Debug, Clone, Copy)]
pub struct NodeReading {
    /// Redis CPU seconds so far (sys + user).
    pub cpu_s: f64,
    /// Script calls so far (`FCALL`, `EVALSHA` and `EVAL` in `INFO commandstats`).
    pub scripts: f64,
}

/// Calls of `command` in `INFO commandstats` text (0 when it never ran).
fn command_calls(text: &str, command: &str) -> f64 {
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn cpu_of(text: &str) -> Result<f64> {
    let sys = info_field(text, "used_cpu_sys").context("no used_cpu_sys")?;
    let user = info_field(text, "used_cpu_user").context("no used_cpu_user")?;
    Ok(sys + user)
}

impl Probe {
    /// A probe that reads `INFO` through `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            nodes: Vec::new(),
            readings: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A probe of a cluster: Redis CPU is read from each master at `node_urls` (and
    /// [`Probe::cpu_s`] is their sum).
    pub async fn cluster(client: Client, node_urls: &[String]) -> Result<Self> {
        let mut nodes = Vec::new();
        for u in node_urls {
            nodes.push(
                redis::Client::open(u.as_str())?
                    .get_multiplexed_async_connection()
                    .await
                    .with_context(|| format!("connecting to cluster node {u}"))?,
            );
        }
        Ok(Self {
            nodes,
            ..Self::new(client)
        })
    }

    async fn field(&self, section: &str, field: &str) -> Result<f64> {
        let text = self.client.info(section).await?;
        info_field(&text, field).with_context(|| format!("INFO {section} has no {field}"))
    }

    /// Redis CPU seconds so far (sys + user); on a cluster the sum over the masters, each
    /// master's reading (with its script calls) kept for [`Probe::take_readings`].
    pub async fn cpu_s(&self) -> Result<f64> {
        if self.nodes.is_empty() {
            return cpu_of(&self.client.info("cpu").await?);
        }
        let mut per = Vec::with_capacity(self.nodes.len());
        for c in &self.nodes {
            let text: String = redis::cmd("INFO")
                .arg("cpu")
                .arg("commandstats")
                .query_async(&mut c.clone())
                .await?;
            per.push(NodeReading {
                cpu_s: cpu_of(&text)?,
                scripts: command_calls(&text, "fcall")
                    + command_calls(&text, "evalsha")
                    + command_calls(&text, "eval"),
            });
        }
        let sum = per.iter().map(|r| r.cpu_s).sum();
        self.readings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(per);
        Ok(sum)
    }

    /// The per-master readings [`Probe::cpu_s`] took since the last call (none when not a
    /// cluster).
    pub fn take_readings(&self) -> Vec<Vec<NodeReading>> {
        std::mem::take(&mut *self.readings.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Commands processed so far.
    pub async fn commands(&self) -> Result<f64> {
        self.field("stats", "total_commands_processed").await
    }

    /// Bytes of memory in use.
    pub async fn used_memory(&self) -> Result<f64> {
        self.field("memory", "used_memory").await
    }
}

/// Brings the hash tables of a queue's `tasks` hash and `sched` sorted set to rest after a
/// fill. Redis grows a hash table by doubling it and then moves the old buckets over
/// incrementally, one bucket per command that touches that hash; its background rehashing
/// (`activerehashing`) covers only the keyspace, not the tables inside a hash or sorted set.
/// A queue just filled past a power of two (10 M crosses 2^23) is therefore still moving
/// buckets, and every lookup pays for both tables and a move, until about `n` more commands
/// have touched it. A queue that has stayed near its size for a while has no such move
/// pending, so the bench does those lookups itself (`HEXISTS` / `ZSCORE` of a member that does
/// not exist: no change to the data), 10 000 per script call. The bench talks to Redis
/// directly here, as a measuring instrument. `url` may be a cluster's comma-joined node URLs.
pub async fn settle_tables(url: &str, keys: &dueq::QueueKeys, n: usize) -> Result<()> {
    if url.contains(',') {
        // a cluster: the script goes to the node of the keys' slot
        let nodes: Vec<&str> = url.split(',').collect();
        let mut conn = redis::cluster::ClusterClient::new(nodes)?
            .get_async_connection()
            .await?;
        settle_on(&mut conn, keys, n).await
    } else {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        settle_on(&mut conn, keys, n).await
    }
}

async fn settle_on<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
    keys: &dueq::QueueKeys,
    n: usize,
) -> Result<()> {
    const PER_CALL: usize = 10_000;
    let script = redis::Script::new(
        "for i = 1, tonumber(ARGV[1]) do \
           redis.call('HEXISTS', KEYS[1], '') redis.call('ZSCORE', KEYS[2], '') end",
    );
    let mut left = n;
    while left > 0 {
        let k = left.min(PER_CALL);
        let () = script
            .key(&keys.tasks)
            .key(&keys.sched)
            .arg(k)
            .invoke_async(conn)
            .await?;
        left -= k;
    }
    Ok(())
}

/// Commands that clients sent to the server during `span`, counted with `MONITOR` (commands
/// run inside scripts, which `MONITOR` tags `lua`, are not counted: one `FCALL` is one
/// command). The bench talks to Redis directly here, as a measuring instrument.
pub async fn client_commands(url: &str, span: Duration) -> Result<u64> {
    use futures_util::StreamExt;
    let monitor = redis::Client::open(url)?.get_async_monitor().await?;
    let mut lines = monitor.into_on_message::<String>();
    let deadline = tokio::time::Instant::now() + span;
    let mut n = 0;
    while let Ok(Some(line)) = tokio::time::timeout_at(deadline, lines.next()).await {
        if !line.contains(" lua]") {
            n += 1;
        }
    }
    Ok(n)
}

/// This process's CPU seconds (user + system) from `/proc/self/stat`.
pub fn client_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // fields after the parenthesised command name: state is field 3, utime 14, stime 15
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The median of `v` (sorted in place); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One figure of `workload`.
pub fn fig(workload: impl Into<String>, metric: &'static str, value: f64) -> Figure {
    Figure {
        workload: workload.into(),
        metric,
        value,
    }
}

/// The three throughput figures of W1 and W2.
pub fn throughput(
    w: &'static str,
    n: usize,
    secs: f64,
    redis_cpu_s: f64,
    client_cpu_s: f64,
) -> Vec<Figure> {
    vec![
        fig(w, "tasks_per_s", n as f64 / secs),
        fig(w, "redis_cpu_us_per_task", redis_cpu_s * 1e6 / n as f64),
        fig(w, "client_cpu_us_per_task", client_cpu_s * 1e6 / n as f64),
    ]
}

/// The `q` quantile of `sorted`, 0 when empty.
pub fn pct(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_info_fields() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        let text = "# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_user:2.25\r\n";
        assert_eq!(info_field(text, "used_cpu_sys"), Some(1.5));
        assert_eq!(info_field(text, "used_cpu_user"), Some(2.25));
        assert_eq!(info_field(text, "used_cpu"), None);
        assert!(client_cpu_s() >= 0.0);
        let stats = "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=30,usec_per_call=2.5\r\n\
                     cmdstat_eval:calls=3,usec=9\r\n";
        assert_eq!(command_calls(stats, "evalsha"), 12.0);
        assert_eq!(command_calls(stats, "eval"), 3.0);
        assert_eq!(command_calls(stats, "fcall"), 0.0);
    }
}
