//! The replay driver: plays a [`Plan`] against a real queue with real workers and checks the
//! outcome against what the trace says must happen.
//!
//! Time: the driver reads the Redis clock once, then every trace instant `t` maps to the Redis
//! time `base + time_map.offset_ms(t)`. Tasks are enqueued with that absolute due time, so
//! what decides "due" is Redis's clock, exactly as in production; the driver only has to issue
//! each event (enqueue, cancel) when the Redis clock reaches its mapped time.
//!
//! Checking: every task records its runs (Redis claim time, handler start, due time); every
//! cancel records its outcome and the Redis time it was applied. A cancel-unpaid task whose
//! outcome differs from the CSV's expectation is *explained* when the Redis timestamps show a
//! legitimate race (the cancel reached Redis after the task was due: after its claim, or
//! before a worker got to it) and *unexplained* otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{CancelOutcome, Client, EnqueueOutcome, Outcome, TaskRef, TaskSpec, Worker};
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use super::trace::{Action, Plan, TaskKind};

/// How the replay runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Trace seconds per real second.
    pub speedup: f64,
    /// Longest real pause between consecutive trace instants, ms.
    pub max_gap_ms: f64,
    /// Worker instances (separate connections).
    pub workers: usize,
    /// Handlers per worker.
    pub concurrency: usize,
    /// Queue name.
    pub queue: String,
}

/// One run of a task's handler.
#[derive(Debug, Clone, Copy)]
struct Run {
    due_at_ms: u64,
    claimed_at_ms: u64,
    started_at_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct CancelRecord {
    outcome: CancelOutcome,
    at_ms: u64,
}

/// Counts per task kind.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PerKind {
    /// cancel-unpaid
    #[serde(rename = "cancel-unpaid")]
    pub cancel_unpaid: u64,
    /// auto-confirm
    #[serde(rename = "auto-confirm")]
    pub auto_confirm: u64,
    /// review-reminder
    #[serde(rename = "review-reminder")]
    pub review_reminder: u64,
}

impl PerKind {
    fn add(&mut self, k: TaskKind, n: u64) {
        match k {
            TaskKind::CancelUnpaid => self.cancel_unpaid += n,
            TaskKind::AutoConfirm => self.auto_confirm += n,
            TaskKind::ReviewReminder => self.review_reminder += n,
        }
    }
}

/// Cancels by outcome.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cancels {
    /// Removed before a worker got the task.
    pub cancelled: u64,
    /// The task was running.
    pub in_progress: u64,
    /// The task had already finished.
    pub not_found: u64,
}

/// Lateness percentiles, ms (handler start minus due time, by the Redis clock).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Lateness {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// The replay report (also the JSON object printed last with `--json`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Orders replayed.
    pub orders: usize,
    /// Queue used.
    pub queue: String,
    /// Trace seconds per real second.
    pub speedup: f64,
    /// Longest real pause between trace instants, ms.
    pub max_gap_ms: f64,
    /// Tasks enqueued per kind.
    pub tasks_enqueued: PerKind,
    /// Runs the trace says must happen, per kind (computed from the CSV).
    pub expected_runs: PerKind,
    /// Tasks that ran, per kind.
    pub actual_runs: PerKind,
    /// Cancel outcomes.
    pub cancels: Cancels,
    /// Differences from the CSV's expectation explained by Redis-clock timestamps (the
    /// approval's cancel reached Redis after the task's due time).
    pub explained_mismatches: u64,
    /// Of those, tasks that ran although the trace's approval came first.
    pub explained_ran_after_late_cancel: u64,
    /// Of those, tasks cancelled although the trace's approval came after the due time.
    pub explained_cancelled_while_due: u64,
    /// Handler start minus due time.
    pub lateness_ms: Lateness,
    /// Smallest real-time gap between an approval's cancel and its task's due time at this
    /// speed-up, ms: below a few ms, races (explained mismatches) are expected.
    pub min_cancel_margin_ms: Option<u64>,
    /// Largest delay of the driver issuing an event after its mapped time, ms.
    pub driver_lag_max_ms: u64,
    /// Task runs per second over the replay.
    pub tasks_per_s: f64,
    /// Wall time of the replay, s.
    pub duration_s: f64,
    /// Runs beyond the first of a task (at-least-once allows them; none are expected here).
    pub duplicate_runs: u64,
    /// Tasks started before their due time by the Redis clock. Must be 0.
    pub early_runs: u64,
    /// Tasks enqueued, not cancelled, never finished. Must be 0.
    pub lost_tasks: u64,
    /// Differences from the CSV's expectation that the timestamps do not explain. Must be 0.
    pub unexplained_mismatches: u64,
}

impl Report {
    /// Whether the three must-be-zero counters are zero.
    pub fn ok(&self) -> bool {
        self.early_runs == 0 && self.lost_tasks == 0 && self.unexplained_mismatches == 0
    }
}

type Runs = Arc<Mutex<HashMap<usize, Vec<Run>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Plays `plan` on `url` and checks it.
pub async fn replay(url: &str, plan: &Plan, cfg: &ReplayConfig) -> Result<Report> {
    let map = plan.time_map(cfg.speedup, cfg.max_gap_ms);
    let client = Client::connect(url).await?;
    let queue = client.queue(&cfg.queue)?;
    let runs: Runs = Arc::new(Mutex::new(HashMap::new()));

    let mut workers = Vec::new();
    for _ in 0..cfg.workers.max(1) {
        let runs = runs.clone();
        let c = Client::connect(url).await?;
        let w = Worker::builder(c)
            .concurrency(cfg.concurrency)
            .handle(&cfg.queue, move |task| {
                let runs = runs.clone();
                async move {
                    let idx = serde_json::from_slice::<serde_json::Value>(&task.payload)
                        .ok()
                        .and_then(|v| v["task"].as_u64());
                    let Some(idx) = idx else {
                        return Outcome::fail("payload without a task index");
                    };
                    lock(&runs).entry(idx as usize).or_default().push(Run {
                        due_at_ms: task.due_at_ms,
                        claimed_at_ms: task.claimed_at_ms,
                        started_at_ms: task.started_at_ms,
                    });
                    Outcome::Success
                }
            })
            .build()?
            .start();
        workers.push(w);
    }

    // The Redis clock, read once; a short lead lets the workers go idle first.
    let t0 = queue.stats().await?.now_ms;
    let i0 = Instant::now();
    let base = t0 + 300;
    let redis_now = || t0 + i0.elapsed().as_millis() as u64;
    let local = |redis_ms: u64| i0 + Duration::from_millis(redis_ms.saturating_sub(t0));
    let mapped = |t_s: i64| base + map.offset_ms(t_s);

    let started = Instant::now();
    let mut cancels: HashMap<usize, CancelRecord> = HashMap::new();
    let mut created = vec![false; plan.tasks.len()];
    let mut driver_lag_max_ms = 0;
    let mut pending: Vec<(usize, TaskSpec)> = Vec::new();
    let mut i = 0;
    while i < plan.steps.len() {
        let target = mapped(plan.steps[i].at_s);
        tokio::time::sleep_until(local(target)).await;
        let now = redis_now();
        driver_lag_max_ms = driver_lag_max_ms.max(now.saturating_sub(target));
        // every step whose time has come, in order; consecutive enqueues go as one batch
        while i < plan.steps.len() && mapped(plan.steps[i].at_s) <= now {
            match plan.steps[i].action {
                Action::Enqueue { task } => {
                    let t = &plan.tasks[task];
                    let payload = serde_json::json!({
                        "kind": t.kind.as_str(), "order_id": t.order_id, "task": task,
                    });
                    let spec = TaskSpec::new(payload.to_string().into_bytes())
                        .key(t.key.clone())
                        .due_at_ms(mapped(t.due_at_s));
                    pending.push((task, spec));
                }
                Action::Cancel { task } => {
                    flush(&queue, &mut pending, &mut created).await?;
                    let r = queue
                        .cancel_report(&TaskRef::key(plan.tasks[task].key.clone())?)
                        .await?;
                    cancels.insert(
                        task,
                        CancelRecord {
                            outcome: r.outcome,
                            at_ms: r.now_ms,
                        },
                    );
                }
            }
            i += 1;
        }
        flush(&queue, &mut pending, &mut created).await?;
    }

    // Wait until every task that was not cancelled has run (or a generous deadline passes:
    // what is still missing then is reported as lost).
    let must_run: Vec<usize> = (0..plan.tasks.len())
        .filter(|t| {
            created[*t]
                && !cancels
                    .get(t)
                    .is_some_and(|c| c.outcome == CancelOutcome::Cancelled)
        })
        .collect();
    let last_due = plan
        .tasks
        .iter()
        .map(|t| mapped(t.due_at_s))
        .max()
        .unwrap_or(base);
    let deadline = local(last_due) + Duration::from_secs(10);
    loop {
        let missing = {
            let runs = lock(&runs);
            must_run.iter().filter(|t| !runs.contains_key(t)).count()
        };
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let duration = started.elapsed();
    for w in workers {
        w.shutdown().await?;
    }
    let runs = lock(&runs).clone();
    let due_ms: Vec<u64> = plan.tasks.iter().map(|t| mapped(t.due_at_s)).collect();
    Ok(check(
        plan,
        cfg,
        &runs,
        &cancels,
        &created,
        &due_ms,
        duration,
        driver_lag_max_ms,
    ))
}

async fn flush(
    queue: &dueq::Queue,
    pending: &mut Vec<(usize, TaskSpec)>,
    created: &mut [bool],
) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let specs: Vec<TaskSpec> = pending.iter().map(|(_, s)| s.clone()).collect();
    let results = queue
        .enqueue_batch(&specs)
        .await
        .context("enqueueing replay tasks")?;
    for ((task, _), r) in pending.iter().zip(results) {
        if r.outcome == EnqueueOutcome::Created {
            created[*task] = true;
        } else {
            tracing::error!(task, outcome = ?r.outcome, "replay key was already live in the queue");
        }
    }
    pending.clear();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn check(
    plan: &Plan,
    cfg: &ReplayConfig,
    runs: &HashMap<usize, Vec<Run>>,
    cancels: &HashMap<usize, CancelRecord>,
    created: &[bool],
    due_ms: &[u64],
    duration: Duration,
    driver_lag_max_ms: u64,
) -> Report {
    let mut r = Report {
        orders: plan.orders,
        queue: cfg.queue.clone(),
        speedup: cfg.speedup,
        max_gap_ms: cfg.max_gap_ms,
        driver_lag_max_ms,
        min_cancel_margin_ms: plan
            .min_cancel_margin_ms(&plan.time_map(cfg.speedup, cfg.max_gap_ms))
            .map(|(ms, _)| ms),
        duration_s: duration.as_secs_f64(),
        ..Report::default()
    };
    // 3 significant figures, lateness up to an hour
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000, 3).ok();
    let mut total_runs = 0u64;
    for (idx, t) in plan.tasks.iter().enumerate() {
        r.tasks_enqueued.add(t.kind, u64::from(created[idx]));
        r.expected_runs.add(t.kind, u64::from(t.expected_run));
        let task_runs = runs.get(&idx).map(Vec::as_slice).unwrap_or(&[]);
        let ran = !task_runs.is_empty();
        r.actual_runs.add(t.kind, u64::from(ran));
        total_runs += task_runs.len() as u64;
        r.duplicate_runs += task_runs.len().saturating_sub(1) as u64;
        for run in task_runs {
            if run.started_at_ms < run.due_at_ms || run.claimed_at_ms < run.due_at_ms {
                r.early_runs += 1;
            }
            let late = run.started_at_ms.saturating_sub(run.due_at_ms);
            if let Some(h) = hist.as_mut() {
                h.saturating_record(late);
            }
            r.lateness_ms.max = r.lateness_ms.max.max(late);
        }
        let cancel = cancels.get(&idx);
        if let Some(c) = cancel {
            match c.outcome {
                CancelOutcome::Cancelled => r.cancels.cancelled += 1,
                CancelOutcome::InProgress => r.cancels.in_progress += 1,
                _ => r.cancels.not_found += 1,
            }
        }
        let cancelled = cancel.is_some_and(|c| c.outcome == CancelOutcome::Cancelled);
        if created[idx] && !ran && !cancelled {
            r.lost_tasks += 1;
            continue;
        }
        match (t.expected_run, ran, cancel) {
            (_, true, Some(c)) if c.outcome == CancelOutcome::Cancelled => {
                // cancelled and run: never allowed
                r.unexplained_mismatches += 1;
            }
            (false, true, Some(c)) => {
                // the trace cancels first, but the task ran: fine only if the cancel reached
                // Redis after the claim (it answered in_progress / not_found)
                let first_claim = task_runs.iter().map(|x| x.claimed_at_ms).min().unwrap_or(0);
                if c.at_ms >= first_claim {
                    r.explained_mismatches += 1;
                    r.explained_ran_after_late_cancel += 1;
                } else {
                    r.unexplained_mismatches += 1;
                }
            }
            (true, false, Some(c)) if c.outcome == CancelOutcome::Cancelled => {
                // the trace says it runs first, but the cancel won: fine only if the cancel
                // reached Redis when the task was already due (no worker had claimed it yet)
                if c.at_ms >= due_ms[idx] {
                    r.explained_mismatches += 1;
                    r.explained_cancelled_while_due += 1;
                } else {
                    r.unexplained_mismatches += 1;
                }
            }
            (false, false, _) | (true, true, _) => {}
            _ => r.unexplained_mismatches += 1,
        }
    }
    if let Some(h) = hist {
        r.lateness_ms.p50 = if h.is_empty() {
            0
        } else {
            h.value_at_quantile(0.5)
        };
        r.lateness_ms.p99 = if h.is_empty() {
            0
        } else {
            h.value_at_quantile(0.99)
        };
    }
    r.tasks_per_s = total_runs as f64 / duration.as_secs_f64().max(1e-9);
    r
}
