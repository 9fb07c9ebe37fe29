//! `dueq chaos`: runs the fault-injection run of [`crate::chaos`] and prints its report
//! (text, or one JSON object with `--json`); fails (exit 1) unless lost, duplicated,
//! unexpected and early are 0.

use anyhow::{Result, bail};

use super::config::Config;
use super::report::{ClusterReport, Report};
use super::windows::Lateness;
use crate::args::ChaosArgs;

/// Tasks per second of the window when `--tasks` is not given.
const DEFAULT_TASKS_PER_S: u64 = 250;

/// Runs the command.
pub async fn run(redis: Option<&str>, replicas: u8, a: &ChaosArgs, json_out: bool) -> Result<()> {
    if redis.is_some() {
        // faults kill and restart the server: never someone else's Redis
        bail!(
            "dueq chaos starts and breaks its own redis-server; it does not take --redis (or \
             DUEQ_REDIS_URL)"
        );
    }
    if replicas > 0 && !a.cluster {
        bail!(
            "dueq chaos runs one redis-server without replicas; it takes --replicas only with \
             --cluster"
        );
    }
    if replicas > 1 {
        bail!(
            "dueq chaos --cluster gives each master one replica: --replicas must be 0 or 1, \
             got {replicas}"
        );
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let cfg = Config {
        duration_ms: a.duration_ms,
        tasks: a
            .tasks
            .unwrap_or((a.duration_ms * DEFAULT_TASKS_PER_S / 1_000).max(1)),
        workers: a.workers,
        seed,
        ledger_dir: a.ledger_dir.clone(),
        cluster: a.cluster,
        replicas,
    };
    if !json_out {
        eprintln!(
            "dueq chaos{}: {} tasks over {} ms, {} worker processes, seed {seed}",
            if cfg.cluster { " --cluster" } else { "" },
            cfg.tasks,
            cfg.duration_ms,
            cfg.workers
        );
    }
    let report = super::run(&cfg).await?;
    if json_out {
        outln!("{}", serde_json::json!(report));
    } else {
        print_report(&report);
    }
    if !report.ok {
        let c = &report.check;
        let duplicated = match &report.cluster {
            Some(k) => format!(
                "duplicated {} ({} not explained by a master kill)",
                c.duplicated, k.duplicated_unexplained
            ),
            None => format!("duplicated {}", c.duplicated),
        };
        bail!(
            "chaos check failed: lost {}, {duplicated}, unexpected {}, early {} (seed {})",
            c.lost,
            c.unexpected,
            c.early,
            report.seed
        );
    }
    Ok(())
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn print_report(r: &Report) {
    let c = &r.check;
    outln!(
        "dueq chaos: seed {}, {} ms of faults, {} tasks, {} worker processes at a time ({} \
         started), lease {} ms",
        r.seed,
        r.duration_ms,
        r.tasks,
        r.workers,
        r.worker_processes,
        r.lease_ms
    );
    outln!(
        "  enqueues: {} confirmed, {} answered with an error",
        c.confirmed,
        c.unknown
    );
    outln!(
        "  lost {}  duplicated {}  unexpected {}  early {}  recovered {}",
        c.lost,
        c.duplicated,
        c.unexpected,
        c.early,
        c.recovered
    );
    outln!(
        "  acked {}, acked with the answer lost {}, dead {}, unknown enqueues still live {}",
        c.acked,
        c.ack_answer_lost,
        c.dead,
        c.unknown_pending
    );
    outln!(
        "  deliveries {}, redelivered before an ack (lease expiry, crash) {}",
        c.deliveries,
        c.redelivered
    );
    outln!(
        "  {:<22} {:>8} {:>6} {:>14} {:>8} {:>14}",
        "fault",
        "injected",
        "failed",
        "recover p50 ms",
        "max ms",
        "not recovered"
    );
    for (name, f) in &r.faults {
        outln!(
            "  {name:<22} {:>8} {:>6} {:>14} {:>8} {:>14}",
            f.injected,
            f.failed,
            opt(f.recover_ms_p50),
            opt(f.recover_ms_max),
            f.not_recovered
        );
    }
    if r.cluster.is_some() {
        outln!(
            "  (recover: from the kill to the first successful ack of a failed partition's task \
             claimed after it)"
        );
    } else {
        outln!("  (recover: from the fault's end to the next successful ack by any worker)");
    }
    if let Some(k) = &r.cluster {
        print_cluster(k);
    }
    outln!(
        "  faults for {} ms, producer {} ms; {} in {} ms after both; {} ms in all; {} torn \
         ledger lines",
        r.faults_ms,
        r.producer_ms,
        if r.drained { "drained" } else { "NOT drained" },
        r.drain_ms,
        r.elapsed_ms,
        r.torn_lines
    );
    for (kind, keys) in &c.examples {
        outln!("  {kind}: {}", keys.join(", "));
    }
    for (key, evs) in &r.example_events {
        outln!("  ledger of {key}:");
        for e in evs {
            outln!("    {}", serde_json::json!(e));
        }
    }
    outln!("  {}", if r.ok { "OK" } else { "FAILED" });
}

fn lat(l: &Lateness) -> String {
    format!(
        "{:>6} {:>6} {:>6} {:>6}",
        l.tasks,
        opt_i(l.p50_ms),
        opt_i(l.p99_ms),
        opt_i(l.max_ms)
    )
}

fn opt_i(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn print_cluster(k: &ClusterReport) {
    outln!(
        "  cluster: {} masters x {} replica, cluster-node-timeout {} ms, {} partitions \
         (masters at the start: nodes {:?}), --replicas {}",
        k.masters,
        k.replicas_per_master,
        k.node_timeout_ms,
        k.partitions,
        k.partition_masters,
        k.replicas
    );
    outln!(
        "  duplicated: {} explained by a master kill, {} not",
        k.duplicated_explained,
        k.duplicated_unexplained
    );
    for d in &k.duplicates {
        outln!(
            "    {} (partition {}{}): {}",
            d.key,
            d.partition,
            if d.on_failed_partition {
                ", failed"
            } else {
                ", healthy"
            },
            match (d.fault, d.kill_after_ack_ms) {
                (Some(f), Some(ms)) => format!("fault {f}, killed {ms} ms after the ack"),
                _ => "no fault explains it".to_owned(),
            }
        );
    }
    outln!("  lateness, ms ({}):", k.lateness_clock);
    outln!(
        "  {:<28} {:>6} {:>6} {:>6} {:>6}",
        "",
        "tasks",
        "p50",
        "p99",
        "max"
    );
    outln!(
        "  {:<28} {}",
        "healthy, during faults",
        lat(&k.healthy_during_faults)
    );
    outln!(
        "  {:<28} {}",
        "failed, during faults",
        lat(&k.failed_during_faults)
    );
    outln!("  {:<28} {}", "outside faults", lat(&k.outside_faults));
    for (i, f) in k.fault_log.iter().enumerate() {
        let w = &f.figures;
        outln!(
            "  fault {i}: {} node {}{} (partitions {:?}): promoted node {} after {} ms, \
             restarted after {} ms, back as a replica after {} ms (window {} ms)",
            f.kind,
            f.node,
            if f.first_seed { " (first seed)" } else { "" },
            f.partitions,
            f.promoted,
            f.promoted_after_ms,
            f.restarted_after_ms,
            f.rejoined_after_ms,
            f.window_ms
        );
        let errors = |n: u64, until: Option<u64>| match until {
            Some(ms) if n > 0 => format!("{n} (the last {ms} ms after the kill)"),
            _ => n.to_string(),
        };
        outln!(
            "    failed partitions: claims back after {} ms, acks after {} ms; errors: {} \
             enqueues, {} acks",
            opt(w.claims_back_ms),
            opt(w.acks_back_ms),
            errors(w.enqueue_errors_failed, w.enqueue_errors_until_ms),
            errors(w.ack_errors_failed, w.ack_errors_until_ms)
        );
        outln!(
            "    lateness healthy {}   failed {}   (tasks p50 p99 max); healthy errors: {} \
             enqueues, {} acks",
            lat(&w.healthy),
            lat(&w.failed),
            w.enqueue_errors_healthy,
            w.ack_errors_healthy
        );
        for e in &w.healthy_error_examples {
            outln!("      {e}");
        }
    }
    if k.errors_before_faults > 0 {
        outln!(
            "  errors before the first fault: {}",
            k.errors_before_faults
        );
    }
}
