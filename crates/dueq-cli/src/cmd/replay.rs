//! `dueq replay`: the main job. Plays the order trace through a queue (an embedded
//! `redis-server` unless `--redis` is given) and prints the report.

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::args::ReplayArgs;
use crate::embedded::EmbeddedRedis;
use crate::replay::run::{OutboxConfig, PerKind, ReplayConfig, Report, replay};
use crate::replay::trace::{Plan, PlanOptions, TimeMap, load_orders, parse_trace_time};

/// Runs the replay; fails (exit 1) when an invariant is broken.
pub async fn run(redis: Option<&str>, a: &ReplayArgs, json_out: bool) -> Result<()> {
    TimeMap::check_params(a.speedup, a.max_gap_ms)?;
    let parse = |v: &Option<String>, what: &str| -> Result<Option<i64>> {
        v.as_deref()
            .map(|s| parse_trace_time(s).with_context(|| format!("bad --{what}")))
            .transpose()
    };
    let options = PlanOptions {
        from: parse(&a.from, "from")?,
        to: parse(&a.to, "to")?,
    };
    let orders = load_orders(&a.trace)
        .with_context(|| format!("reading the trace {}", a.trace.display()))?;
    let plan = Plan::build(&orders, &options);
    if plan.tasks.is_empty() {
        bail!("no order of the trace falls in the window");
    }
    let queue = match &a.queue {
        Some(q) => q.clone(),
        None => format!(
            "replay-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        ),
    };
    let map = plan.time_map(a.speedup, a.max_gap_ms);
    if !json_out {
        eprintln!(
            "replaying {} orders ({} tasks) at {}x: about {:.1} s",
            plan.orders,
            plan.tasks.len(),
            a.speedup,
            map.total_ms() as f64 / 1000.0
        );
    }
    let cfg = ReplayConfig {
        speedup: a.speedup,
        max_gap_ms: a.max_gap_ms,
        workers: a.workers,
        concurrency: a.concurrency,
        queue,
        partitions: a.partitions,
        outbox: a.postgres.as_ref().map(|p| OutboxConfig {
            postgres: p.clone(),
            flush_midway: a.flush_midway,
        }),
    };
    let report = match redis {
        Some(url) => replay(url, &plan, &cfg).await?,
        None => {
            let server = EmbeddedRedis::start(a.data_dir.as_deref()).await?;
            // on SIGINT/SIGTERM stop the embedded server too, instead of leaving it behind
            let r = tokio::select! {
                r = replay(server.url(), &plan, &cfg) => r,
                _ = crate::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
            };
            server.stop().await;
            r?
        }
    };
    if json_out {
        outln!("{}", json!(report));
    } else {
        print_report(&report);
    }
    if !report.ok() {
        bail!(
            "invariant broken: {} early runs, {} lost tasks, {} unexplained mismatches",
            report.early_runs,
            report.lost_tasks,
            report.unexplained_mismatches
        );
    }
    Ok(())
}

fn row(name: &str, v: &PerKind) {
    outln!(
        "  {name:<16} {:>14} {:>14} {:>16}",
        v.cancel_unpaid,
        v.auto_confirm,
        v.review_reminder
    );
}

fn print_report(r: &Report) {
    outln!("dueq replay: {} orders, queue {}", r.orders, r.queue);
    outln!(
        "  {:<16} {:>14} {:>14} {:>16}",
        "",
        "cancel-unpaid",
        "auto-confirm",
        "review-reminder"
    );
    row("enqueued", &r.tasks_enqueued);
    row("expected runs", &r.expected_runs);
    row("actual runs", &r.actual_runs);
    outln!(
        "  cancels: {} cancelled, {} in_progress, {} not_found",
        r.cancels.cancelled,
        r.cancels.in_progress,
        r.cancels.not_found
    );
    outln!(
        "  explained mismatches: {} ({} ran after a late cancel, {} cancelled while due, {} \
         ran and were cancelled once the reconciler restored them)",
        r.explained_mismatches,
        r.explained_ran_after_late_cancel,
        r.explained_cancelled_while_due,
        r.explained_cancelled_after_restore
    );
    outln!(
        "  lateness ms: p50 {} p99 {} max {}   driver lag max {} ms   closest cancel-to-due {} ms",
        r.lateness_ms.p50,
        r.lateness_ms.p99,
        r.lateness_ms.max,
        r.driver_lag_max_ms,
        r.min_cancel_margin_ms.map_or("-".into(), |m| m.to_string())
    );
    outln!(
        "  {:.0} tasks/s over {:.1} s, speed-up {}x, max gap {} ms",
        r.tasks_per_s,
        r.duration_s,
        r.speedup,
        r.max_gap_ms
    );
    if let Some(o) = &r.outbox {
        outln!(
            "  outbox: {} rows in {} transactions, commit to in-Redis ms p50 {} p99 {} max {}",
            o.rows,
            o.transactions,
            o.relay_lag_ms.p50,
            o.relay_lag_ms.p99,
            o.relay_lag_ms.max
        );
        match o.flushall_at_ms {
            Some(_) => outln!(
                "  FLUSHALL midway: reconciler restored {} tasks in its first pass ({} ms), {} \
                 in all passes",
                o.restored_first_pass,
                o.first_pass_took_ms,
                o.restored_total
            ),
            None => outln!("  no FLUSHALL (--flush-midway not given)"),
        }
    }
    outln!(
        "  early_runs {}  lost_tasks {}  unexplained_mismatches {}  duplicate_runs {}",
        r.early_runs,
        r.lost_tasks,
        r.unexplained_mismatches,
        r.duplicate_runs
    );
    outln!("  {}", if r.ok() { "OK" } else { "FAILED" });
}
