//! `dueq replay`: the main job. Builds the plan from the order trace, plays it through a
//! queue on the Redis the binary gives, and prints the report.
//!
//! The binary owns where Redis comes from: `--redis`, or the embedded `redis-server` it
//! supervises. The steps are apart so that a bad trace fails before any server starts.

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::check::{PerKind, Report};
use super::records::{OutboxConfig, ReplayConfig};
use super::run::replay;
use super::trace::{Plan, PlanOptions, TimeMap, load_orders, parse_trace_time};
use crate::args::ReplayArgs;

/// A replay ready to play: the plan of the trace window and the run's settings.
pub struct Prepared {
    plan: Plan,
    cfg: ReplayConfig,
    json_out: bool,
}

impl Prepared {
    /// Reads the trace and builds the plan; announces the run on stderr unless `json_out`.
    ///
    /// # Errors
    /// When a flag is out of range, the trace cannot be read, or no order falls in the
    /// window.
    pub fn new(a: &ReplayArgs, json_out: bool) -> Result<Self> {
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
        Ok(Self {
            plan,
            cfg,
            json_out,
        })
    }

    /// Plays the plan against the Redis at `url`.
    ///
    /// # Errors
    /// When the run itself cannot be carried out (a broken invariant is a report).
    pub async fn play(&self, url: &str) -> Result<Report> {
        replay(url, &self.plan, &self.cfg).await
    }

    /// Prints the report.
    ///
    /// # Errors
    /// When an invariant is broken (exit status 1).
    pub fn finish(&self, report: &Report) -> Result<()> {
        if self.json_out {
            outln!("{}", json!(report));
        } else {
            print_report(report);
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
