//! `dueq bench`: the workloads of DESIGN section 6 (W1 to W5 and IDLE), each run against a
//! fresh `redis-server` with persistence off (or `--redis`), repeated `--runs` times,
//! reporting every run and the median. W9 runs on a fresh local 3-master Redis Cluster
//! instead, and reads Redis CPU from each master. [`measure`] says how each figure is taken.

mod args;
mod fairness;
mod load;
mod measure;
mod outbox;
mod partitions;
mod schedules;
mod sizes;
mod targets;
mod workloads;

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use serde_json::json;

pub use self::args::BenchArgs;
use self::measure::{Figure, median};
pub use self::sizes::Sizes;
pub use self::workloads::Workload;
use crate::servers;

/// Runs `dueq bench` with its flags: the chosen workloads (default [`Workload::ALL`]) at the
/// sizes of DESIGN 6, or the smoke sizes, with `--pending` replacing W4's counts.
///
/// # Errors
/// As [`run`].
pub async fn command(redis: Option<&str>, a: &BenchArgs, json_out: bool) -> Result<()> {
    let workloads = if a.workload.is_empty() {
        Workload::ALL.to_vec()
    } else {
        a.workload.clone()
    };
    let mut sizes = if a.smoke {
        Sizes::smoke()
    } else {
        Sizes::full()
    };
    if !a.pending.is_empty() {
        sizes.w4.clone_from(&a.pending);
        sizes.w9_w4.clone_from(&a.pending);
    }
    run(
        redis,
        &workloads,
        a.runs,
        &sizes,
        json_out,
        a.postgres.as_deref(),
    )
    .await
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
                let cluster = servers::bench_cluster(partitions::MASTERS)?;
                let figures = partitions::run(&cluster, sizes).await;
                drop(cluster);
                report(
                    figures.context("workload W9")?,
                    run,
                    json_out,
                    &mut all,
                    &mut order,
                );
                continue;
            }
            let server = match redis {
                Some(_) => None,
                None => Some(servers::bench_server()?),
            };
            let url = redis
                .map(str::to_owned)
                .or_else(|| server.as_ref().map(|s| s.url()))
                .context("no Redis")?;
            let figures = workloads::run(*w, &url, sizes, run, postgres).await;
            drop(server);
            let figures = figures.with_context(|| format!("workload {}", w.name()))?;
            report(figures, run, json_out, &mut all, &mut order);
        }
    }
    if !json_out {
        outln!(
            "{:<20} {:<24} {:>14} {:>14} {:>14}  target",
            "workload",
            "metric",
            "median",
            "min",
            "max"
        );
    }
    let mut medians = BTreeMap::new();
    for k in order {
        let mut v = all.remove(&k).unwrap_or_default();
        let (lo, hi) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let m = median(&mut v);
        medians.insert(k.clone(), m);
        let target = targets::of(&k.0, k.1).unwrap_or("");
        if json_out {
            outln!(
                "{}",
                json!({"workload": k.0, "metric": k.1, "value": m, "median_of": v.len(),
                    "min": lo, "max": hi, "target": target})
            );
        } else {
            outln!(
                "{:<20} {:<24} {:>14.3} {:>14.3} {:>14.3}  {target}",
                k.0,
                k.1,
                m,
                lo,
                hi
            );
        }
    }
    for r in targets::ratios(&medians) {
        if json_out {
            outln!(
                "{}",
                json!({"workload": r.workload, "metric": r.metric, "value": r.value,
                    "ratio_of": r.of, "target": r.target})
            );
        } else {
            outln!(
                "{:<20} {:<24} {:>14.3} {:>14} {:>14}  {}",
                r.workload,
                r.metric,
                r.value,
                "",
                "",
                r.target
            );
        }
    }
    Ok(())
}
