//! What the claim path records through the [`metrics`](https://docs.rs/metrics) facade
//! (the lateness histogram is DESIGN 4.4's; the hand-out counter is an addition), for every task a [`DueClaimer`](super::DueClaimer) hands out (to a
//! Rust worker's handler, an HTTP long-poll, or a push delivery alike):
//!
//! | name | kind | labels | value |
//! |---|---|---|---|
//! | [`TASKS_CLAIMED_TOTAL`] | counter | `queue` | tasks handed out |
//! | [`TASK_LATENESS_SECONDS`] | histogram | `queue` | hand-out (handler start) minus due time, Redis clock, seconds |
//! | [`SCHEDULE_TICKS_TOTAL`] | counter | `queue`, `schedule`, `outcome` (`fired`, `skipped`) | schedule ticks this process fired or counted as skipped ([`ScheduleFirer`](super::ScheduleFirer), and a claim that dropped a missed tick's task) |
//!
//! They go to the recorder of the [`Client`] when one was given
//! ([`Client::with_metrics_recorder`], as `dueq serve` does), else to the process-wide
//! recorder: a Rust worker process that installs a Prometheus exporter exposes the same
//! `dueq_task_lateness_seconds` as `dueq serve` (use [`LATENESS_BUCKETS_S`] as its buckets).
//! With no recorder installed, recording costs next to nothing.

use crate::client::Client;
use crate::task::ClaimedTask;

/// Counter of tasks handed out, label `queue`.
pub const TASKS_CLAIMED_TOTAL: &str = "dueq_tasks_claimed_total";

/// Histogram of hand-out minus due time in seconds, label `queue`.
pub const TASK_LATENESS_SECONDS: &str = "dueq_task_lateness_seconds";

/// Counter of schedule ticks, labels `queue`, `schedule`, `outcome` (`fired`: a task was
/// enqueued; `skipped`: missed under misfire `skip`, or skipped for overlap). Each process
/// counts the ticks it fired or skipped, so the sum over processes counts every tick once as
/// `fired` when its task was enqueued; a tick fired ahead whose task a claim then drops as
/// missed is counted `skipped` too, by the claiming process.
pub const SCHEDULE_TICKS_TOTAL: &str = "dueq_schedule_ticks_total";

/// Lateness buckets, seconds: 0.5 ms to 1 day (a backlog hours late lands in a bucket of its
/// own, not in `+Inf`).
pub const LATENESS_BUCKETS_S: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
];

/// Records `tasks`, just handed out from `queue`.
pub(crate) fn handed_out(client: &Client, queue: &str, tasks: &[ClaimedTask]) {
    if tasks.is_empty() {
        return;
    }
    let emit = || {
        metrics::counter!(TASKS_CLAIMED_TOTAL, "queue" => queue.to_owned())
            .increment(tasks.len() as u64);
        let h = metrics::histogram!(TASK_LATENESS_SECONDS, "queue" => queue.to_owned());
        for t in tasks {
            h.record(t.started_at_ms.saturating_sub(t.due_at_ms) as f64 / 1000.0);
        }
    };
    match client.metrics_recorder() {
        Some(r) => metrics::with_local_recorder(r, emit),
        None => emit(),
    }
}

/// Records what one firing step did for schedule `schedule` of `queue`.
pub(crate) fn schedule_ticks(
    client: &Client,
    queue: &str,
    schedule: &str,
    fired: u64,
    skipped: u64,
) {
    if fired == 0 && skipped == 0 {
        return;
    }
    let emit = || {
        for (outcome, n) in [("fired", fired), ("skipped", skipped)] {
            if n > 0 {
                metrics::counter!(SCHEDULE_TICKS_TOTAL, "queue" => queue.to_owned(),
                    "schedule" => schedule.to_owned(), "outcome" => outcome)
                .increment(n);
            }
        }
    };
    match client.metrics_recorder() {
        Some(r) => metrics::with_local_recorder(r, emit),
        None => emit(),
    }
}
