//! W9 (DESIGN 6): partitions on a local 3-master Redis Cluster. For 1 and for 6 partitions,
//! on a fresh queue `bench-w9-p<N>`: W1 (enqueue) and then W2 (drain; the W1 tasks, due in 10
//! minutes, stay pending under it), each with the Redis CPU of every master and their spread;
//! then, at 6 partitions, W4 (one claim of 100 over growing numbers of pending tasks) on
//! queues `bench-w9-p6-w4-<i>`.
//!
//! Figures, over the timed part of W1 and of W2:
//! * `W9-P<N>-W1` / `W9-P<N>-W2`: W1's and W2's figures (`redis_cpu_us_per_task` summed over
//!   the masters); `script_calls_per_1k_tasks` (`FCALL` calls of dueq operations on all masters);
//!   `cpu_spread_pct`, (max - min) / mean of the masters' Redis CPU; `cpu_max_dev_pct`, the
//!   largest distance of one master from the mean (the "within ±15 %" of DESIGN 6).
//! * `W9-P<N>-W1-M<i>` / `W9-P<N>-W2-M<i>`: the i-th master's (in start order, so in slot
//!   order) `redis_cpu_us_per_task`.
//! * `W9-P<N>-M<i> partitions`: how many of the queue's partitions that master holds.
//! * `W9-P6-W4-<pending>`: W4's figures over 6 partitions.

use anyhow::{Context, Result, bail};
use dueq::{Client, Queue, QueueKeys, SettingsPatch};
use dueq_testkit::RedisCluster;

use super::measure::{Figure, NodeReading, Probe, fig};
use super::sizes::Sizes;
use super::workloads::{w1, w2, w4};

/// Masters of the cluster W9 starts.
pub const MASTERS: usize = 3;
/// The partition counts W9 compares.
const PARTITIONS: [u16; 2] = [1, 6];

/// Runs W9 once on `cluster` (fresh, started by the caller).
pub async fn run(cluster: &RedisCluster, sizes: &Sizes) -> Result<Vec<Figure>> {
    let url = cluster.urls().join(",");
    let nodes = cluster.urls();
    let client = Client::connect(&url).await?;
    if !client.is_cluster() {
        bail!("W9: the client did not see a cluster at {url}");
    }
    let probe = Probe::cluster(client.clone(), &nodes).await?;
    let mut out = Vec::new();
    for n in PARTITIONS {
        let prefix = format!("W9-P{n}");
        let queue = partitioned(&client, &format!("bench-w9-p{n}"), n).await?;
        for (m, count) in placement(&nodes, &queue, n).await?.into_iter().enumerate() {
            out.push(fig(format!("{prefix}-M{}", m + 1), "partitions", count));
        }
        probe.take_readings();
        let f = w1(&queue, &probe, sizes.w1).await?;
        out.extend(per_master(
            &prefix,
            "W1",
            f,
            &probe.take_readings(),
            sizes.w1,
        )?);
        let f = w2(&client, &queue, &probe, sizes.w2).await?;
        out.extend(per_master(
            &prefix,
            "W2",
            f,
            &probe.take_readings(),
            sizes.w2,
        )?);
        if n == 6 {
            let mut queues = Vec::new();
            for (i, pending) in sizes.w9_w4.iter().enumerate() {
                let q = partitioned(&client, &format!("bench-w9-p{n}-w4-{i}"), n).await?;
                queues.push((q, *pending));
            }
            for mut f in w4(&url, &client, &queues).await? {
                f.workload = format!("{prefix}-{}", f.workload);
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// The (empty) queue `name` set to `n` partitions.
async fn partitioned(client: &Client, name: &str, n: u16) -> Result<Queue> {
    let queue = client.queue(name)?;
    let s = queue
        .update_settings(&SettingsPatch::default().partitions(Some(n)))
        .await
        .with_context(|| format!("setting partitions {n} on {name}"))?;
    if s.partitions.unwrap_or(1) != n {
        bail!("{name}: partitions read back {:?}, not {n}", s.partitions);
    }
    Ok(queue)
}

/// How many of `queue`'s `n` partitions each master holds: the master whose plain
/// connection answers `EXISTS` of a partition's `meta` key (the others answer `MOVED`).
async fn placement(nodes: &[String], queue: &Queue, n: u16) -> Result<Vec<f64>> {
    let mut conns = Vec::new();
    for u in nodes {
        conns.push(
            redis::Client::open(u.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    let mut count = vec![0.0; nodes.len()];
    for p in 0..n {
        let keys = QueueKeys::partition(queue.name(), p, n)?;
        let mut owner = None;
        for (m, c) in conns.iter_mut().enumerate() {
            let r: redis::RedisResult<i64> =
                redis::cmd("EXISTS").arg(&keys.meta).query_async(c).await;
            if r.is_ok() {
                owner = Some(m);
            }
        }
        let m = owner.with_context(|| format!("no master holds {}", keys.meta))?;
        count[m] += 1.0;
    }
    Ok(count)
}

/// W1's or W2's figures renamed under `prefix`, with each master's Redis CPU per task and
/// the spread, from the two per-master readings around the timed part.
fn per_master(
    prefix: &str,
    w: &str,
    figures: Vec<Figure>,
    readings: &[Vec<NodeReading>],
    n: usize,
) -> Result<Vec<Figure>> {
    let [before, after] = readings else {
        bail!(
            "{prefix}-{w}: expected 2 CPU readings around the timed part, got {}",
            readings.len()
        );
    };
    let name = format!("{prefix}-{w}");
    let mut out: Vec<Figure> = figures
        .into_iter()
        .map(|mut f| {
            f.workload = name.clone();
            f
        })
        .collect();
    let per: Vec<f64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.cpu_s - b.cpu_s)
        .collect();
    let scripts: f64 = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.scripts - b.scripts)
        .sum();
    out.push(fig(
        name.clone(),
        "script_calls_per_1k_tasks",
        scripts * 1e3 / n.max(1) as f64,
    ));
    for (m, cpu) in per.iter().enumerate() {
        out.push(fig(
            format!("{name}-M{}", m + 1),
            "redis_cpu_us_per_task",
            cpu * 1e6 / n.max(1) as f64,
        ));
    }
    out.push(fig(name.clone(), "cpu_spread_pct", spread_pct(&per)));
    out.push(fig(name, "cpu_max_dev_pct", max_dev_pct(&per)));
    Ok(out)
}

/// (max - min) / mean, in percent (0 when nothing was used).
fn spread_pct(v: &[f64]) -> f64 {
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        });
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    if v.is_empty() || mean <= 0.0 {
        0.0
    } else {
        (hi - lo) / mean * 100.0
    }
}

/// The largest distance of one value from the mean, over the mean, in percent (the "within
/// ±15 %" of DESIGN 6; 0 when nothing was used).
fn max_dev_pct(v: &[f64]) -> f64 {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    if v.is_empty() || mean <= 0.0 {
        return 0.0;
    }
    v.iter().map(|x| (x - mean).abs()).fold(0.0, f64::max) / mean * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_range_over_mean() {
        assert_eq!(spread_pct(&[1.0, 1.0, 1.0]), 0.0);
        assert_eq!(spread_pct(&[0.5, 1.0, 1.5]), 100.0);
        assert_eq!(spread_pct(&[]), 0.0);
        assert_eq!(spread_pct(&[0.0, 0.0]), 0.0);
        assert_eq!(max_dev_pct(&[0.5, 1.0, 1.5]), 50.0);
        assert_eq!(max_dev_pct(&[3.0, 0.0, 0.0]), 200.0);
        assert_eq!(max_dev_pct(&[]), 0.0);
    }
}
