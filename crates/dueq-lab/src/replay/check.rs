//! The replay's checks: the report's types and [`check`], which compares what ran (the
//! workers' records) and what the cancels did with what the trace says must happen. Pure (no
//! I/O), shared by the direct and the outbox replay.
//!
//! A cancel-unpaid task whose outcome differs from the CSV's expectation is *explained* when
//! the Redis timestamps show a legitimate race (the cancel reached Redis after the task was
//! due: after its claim, or before a worker got to it; or, after a `FLUSHALL`, it removed the
//! restored copy of a task that had already run) and *unexplained* otherwise.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use dueq::CancelOutcome;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::outbox::OutboxReport;
use super::records::{CancelRecord, Lateness, ReplayConfig, Run};
use super::trace::{Plan, TaskKind};

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
    /// Of those, tasks that ran (before the `FLUSHALL`, or before the reconciler restored
    /// their row because it did not find their success in Redis), were restored by the
    /// reconciler, and whose restored copy the cancel then removed (`--postgres` only).
    pub explained_cancelled_after_restore: u64,
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
    /// The outbox's part (`--postgres` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox: Option<OutboxReport>,
}

impl Report {
    /// Whether the three must-be-zero counters are zero.
    pub fn ok(&self) -> bool {
        self.early_runs == 0 && self.lost_tasks == 0 && self.unexplained_mismatches == 0
    }
}

/// Builds the report of one replay from what happened.
#[allow(clippy::too_many_arguments)]
pub fn check(
    plan: &Plan,
    cfg: &ReplayConfig,
    runs: &HashMap<usize, Vec<Run>>,
    cancels: &HashMap<usize, CancelRecord>,
    created: &[bool],
    due_ms: &[u64],
    duration: Duration,
    driver_lag_max_ms: u64,
    flushed_at_ms: Option<u64>,
    restored: &HashSet<usize>,
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
                // cancelled and run: allowed only when the cancel removed a restored copy of
                // a task that had run: a run before a FLUSHALL (the wipe lost the run's
                // record, not the run), or one whose row the reconciler restored (its
                // success was not found in Redis, e.g. acknowledged after the wipe before the
                // relay set the queue's retention again) before the cancel
                let before_wipe = flushed_at_ms
                    .is_some_and(|f| c.at_ms >= f && task_runs.iter().all(|x| x.claimed_at_ms < f));
                let restored_copy =
                    restored.contains(&idx) && task_runs.iter().all(|x| x.claimed_at_ms < c.at_ms);
                if before_wipe || restored_copy {
                    r.explained_mismatches += 1;
                    r.explained_cancelled_after_restore += 1;
                } else {
                    r.unexplained_mismatches += 1;
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::trace::PlannedTask;

    /// One cancel-unpaid task the trace says runs (approval after its due time), which ran
    /// (claimed at 100) and whose cancel was applied at 300 and removed a live copy.
    fn ran_then_cancelled(flushed_at_ms: Option<u64>, claimed_at_ms: u64) -> Report {
        ran_then_cancelled_restored(flushed_at_ms, claimed_at_ms, false)
    }

    fn ran_then_cancelled_restored(
        flushed_at_ms: Option<u64>,
        claimed_at_ms: u64,
        restored: bool,
    ) -> Report {
        let plan = Plan {
            tasks: vec![PlannedTask {
                kind: TaskKind::CancelUnpaid,
                order_id: "o".into(),
                key: "order:o:cancel".into(),
                enqueue_at_s: 0,
                due_at_s: 1,
                expected_run: true,
            }],
            orders: 1,
            ..Plan::default()
        };
        let cfg = ReplayConfig {
            speedup: 1.0,
            max_gap_ms: 100.0,
            workers: 1,
            concurrency: 1,
            queue: "q".into(),
            partitions: 1,
            outbox: None,
        };
        let runs = HashMap::from([(
            0,
            vec![Run {
                due_at_ms: 50,
                claimed_at_ms,
                started_at_ms: claimed_at_ms,
            }],
        )]);
        let cancels = HashMap::from([(
            0,
            CancelRecord {
                outcome: CancelOutcome::Cancelled,
                at_ms: 300,
            },
        )]);
        check(
            &plan,
            &cfg,
            &runs,
            &cancels,
            &[true],
            &[50],
            Duration::from_secs(1),
            0,
            flushed_at_ms,
            &if restored {
                HashSet::from([0])
            } else {
                HashSet::new()
            },
        )
    }

    #[test]
    fn a_cancelled_task_that_ran_is_explained_only_by_a_run_before_the_wipe() {
        // no FLUSHALL: cancelled and run is never allowed
        let r = ran_then_cancelled(None, 100);
        assert_eq!(
            (
                r.unexplained_mismatches,
                r.explained_cancelled_after_restore
            ),
            (1, 0)
        );
        // the run came before the wipe at 200, the cancel after it: the restored copy
        let r = ran_then_cancelled(Some(200), 100);
        assert_eq!(
            (
                r.unexplained_mismatches,
                r.explained_cancelled_after_restore
            ),
            (0, 1)
        );
        assert_eq!(r.explained_mismatches, 1);
        assert!(r.ok());
        // the run came after the wipe: nothing explains it
        let r = ran_then_cancelled(Some(200), 250);
        assert_eq!(r.unexplained_mismatches, 1);
        // the cancel came before the wipe: nothing explains it either
        let r = ran_then_cancelled(Some(400), 100);
        assert_eq!(r.unexplained_mismatches, 1);
    }

    #[test]
    fn a_cancelled_task_that_ran_is_explained_by_a_restore_of_its_row_after_the_run() {
        // the run came after the wipe, but the reconciler restored its row (its success was
        // not found) and the cancel at 300 removed that copy
        let r = ran_then_cancelled_restored(Some(200), 250, true);
        assert_eq!(
            (
                r.unexplained_mismatches,
                r.explained_cancelled_after_restore
            ),
            (0, 1)
        );
        // also without a wipe (a success pushed out of the retention)
        let r = ran_then_cancelled_restored(None, 100, true);
        assert_eq!(r.unexplained_mismatches, 0);
        // a run after the cancel is not the restored copy's
        let r = ran_then_cancelled_restored(Some(200), 350, true);
        assert_eq!(r.unexplained_mismatches, 1);
    }
}
