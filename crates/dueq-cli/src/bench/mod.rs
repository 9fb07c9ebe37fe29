//! `dueq bench`: the workloads of DESIGN section 6 (W1 to W5 and IDLE), each run against a
//! fresh embedded `redis-server` with persistence off (or `--redis`), repeated `--runs` times,
//! reporting every run and the median. W9 runs on a fresh local 3-master Redis Cluster
//! instead (`crate::cluster`), and reads Redis CPU from each master.
//!
//! How figures are measured:
//! * Redis CPU: `INFO cpu` `used_cpu_sys + used_cpu_user` before and after the timed part.
//! * Redis commands (IDLE): commands clients send, counted with `MONITOR` (an `FCALL` is
//!   one command); `redis_calls_per_s` also counts the calls inside scripts (`INFO stats`
//!   `total_commands_processed`, minus the probe's own `INFO`).
//! * client CPU: this process's `utime + stime` from `/proc/self/stat` (Linux, 100 ticks/s).
//! * memory: `INFO memory` `used_memory` before and after.
//! * lateness: handler start minus due time, both by the Redis clock (see
//!   `ClaimedTask::started_at_ms`), in whole milliseconds.

mod fairness;
mod outbox;
mod partitions;
mod schedules;
mod workloads;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use dueq::Client;
use serde_json::json;

use crate::cluster::EmbeddedCluster;
use crate::embedded::EmbeddedRedis;
pub use workloads::Workload;

/// Sizes of one bench session.
#[derive(Debug, Clone)]
pub struct Sizes {
    /// W1 tasks.
    pub w1: usize,
    /// W2 tasks.
    pub w2: usize,
    /// W3 tasks and the span they are due over.
    pub w3: usize,
    /// W3 span, ms.
    pub w3_span_ms: u64,
    /// IDLE future tasks.
    pub idle_tasks: usize,
    /// IDLE measuring time.
    pub idle: Duration,
    /// W4 pending counts.
    pub w4: Vec<usize>,
    /// W5 tasks.
    pub w5: usize,
    /// OUTBOX rows.
    pub outbox: usize,
    /// W7 tasks of the flooding group.
    pub w7: usize,
    /// W7 tasks of the small group.
    pub w7_small: usize,
    /// W8 schedules (each every second).
    pub w8: usize,
    /// W8 measured seconds.
    pub w8_secs: u64,
    /// IDLE-SCHEDULES schedules.
    pub idle_schedules: usize,
    /// W9's W4 pending counts (over 6 partitions).
    pub w9_w4: Vec<usize>,
}

impl Sizes {
    /// The sizes of DESIGN section 6.
    pub fn full() -> Self {
        Self {
            w1: 100_000,
            w2: 100_000,
            w3: 20_000,
            w3_span_ms: 20_000,
            idle_tasks: 100_000,
            idle: Duration::from_secs(10),
            w4: vec![10_000, 100_000, 1_000_000, 10_000_000],
            w5: 100_000,
            outbox: 50_000,
            w7: 100_000,
            w7_small: 100,
            w8: 10_000,
            w8_secs: 30,
            idle_schedules: 10_000,
            w9_w4: vec![10_000, 100_000, 1_000_000, 10_000_000],
        }
    }

    /// Tiny sizes that only prove the bench still runs (CI).
    pub fn smoke() -> Self {
        Self {
            w1: 2_000,
            w2: 2_000,
            w3: 200,
            w3_span_ms: 1_000,
            idle_tasks: 1_000,
            idle: Duration::from_secs(1),
            w4: vec![1_000, 10_000],
            w5: 2_000,
            outbox: 500,
            w7: 2_000,
            w7_small: 20,
            w8: 100,
            w8_secs: 2,
            idle_schedules: 100,
            w9_w4: vec![1_000, 10_000],
        }
    }
}

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

fn median(v: &mut [f64]) -> f64 {
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

/// Every run's figures, by workload and metric.
type Collected = BTreeMap<(String, &'static str), Vec<f64>>;

/// Prints the figures of run `run` and adds them to `all`.
fn report(
    figures: Vec<Figure>,
    run: usize,
    json_out: bool,
    all: &mut Collected,
    order: &mut Vec<(String, &'static str)>,
) {
    for f in figures {
        if json_out {
            outln!(
                "{}",
                json!({"workload": f.workload, "metric": f.metric, "value": f.value, "run": run})
            );
        } else {
            eprintln!("  {} run {run}: {} = {:.3}", f.workload, f.metric, f.value);
        }
        let k = (f.workload.clone(), f.metric);
        if !all.contains_key(&k) {
            order.push(k.clone());
        }
        all.entry(k).or_default().push(f.value);
    }
}

/// Runs the chosen workloads `runs` times and prints every figure and the medians.
pub async fn run(
    redis: Option<&str>,
    workloads: &[Workload],
    runs: usize,
    sizes: &Sizes,
    json_out: bool,
    postgres: Option<&str>,
) -> Result<()> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    if redis.is_some() && workloads.contains(&Workload::W9) {
        bail!(
            "W9 starts its own local {}-master Redis Cluster for each run: run it without \
             --redis (and without DUEQ_REDIS_URL)",
            partitions::MASTERS
        );
    }
    if redis.is_some() {
        eprintln!(
            "note: --redis given: each run uses fresh queues named bench-*, left in place; \
             other load on that server skews the figures"
        );
    }
    let mut all: Collected = BTreeMap::new();
    let mut order: Vec<(String, &'static str)> = Vec::new();
    for w in workloads {
        for run in 1..=runs {
            if *w == Workload::W9 {
                let cluster = EmbeddedCluster::start(partitions::MASTERS).await?;
                let figures = partitions::run(&cluster, sizes).await;
                cluster.stop().await;
                report(
                    figures.context("workload W9")?,
                    run,
                    json_out,
                    &mut all,
                    &mut order,
                );
                continue;
            }
            let embedded = match redis {
                Some(_) => None,
                None => Some(EmbeddedRedis::start_ephemeral().await?),
            };
            let url = redis
                .map(str::to_owned)
                .or_else(|| embedded.as_ref().map(|e| e.url().to_owned()))
                .context("no Redis")?;
            let figures = workloads::run(*w, &url, sizes, run, postgres).await;
            if let Some(e) = embedded {
                e.stop().await;
            }
            let figures = figures.with_context(|| format!("workload {}", w.name()))?;
            report(figures, run, json_out, &mut all, &mut order);
        }
    }
    if !json_out {
        outln!(
            "{:<20} {:<24} {:>14} {:>14} {:>14}",
            "workload",
            "metric",
            "median",
            "min",
            "max"
        );
    }
    for k in order {
        let mut v = all.remove(&k).unwrap_or_default();
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let m = median(&mut v);
        if json_out {
            outln!(
                "{}",
                json!({"workload": k.0, "metric": k.1, "value": m, "median_of": v.len(),
                    "min": lo, "max": hi})
            );
        } else {
            outln!(
                "{:<20} {:<24} {:>14.3} {:>14.3} {:>14.3}",
                k.0,
                k.1,
                m,
                lo,
                hi
            );
        }
    }
    Ok(())
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
