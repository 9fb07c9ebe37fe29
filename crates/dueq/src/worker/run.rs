//! The run of a started [`Worker`]: its queues' duties, the process duties beside them,
//! and the shutdown order of the module docs.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::{
    Counters, LoadProbe, QueueRt, Report, Shared, Worker, acker, claimer, lease_keeper, share,
};
use crate::duties::{Duties, ScheduleFirer, WorkerLoad};
use crate::task::{LeaseToken, TaskId};
use crate::trace::{self, RunOutcome};

/// Runs `worker` until its stop signal, then shuts it down in the order of the module docs.
pub(super) async fn run(worker: Worker, shared: Arc<Shared>) {
    let grace = Duration::from_millis(worker.shutdown_grace_ms);
    let mut rts = Vec::new();
    let mut lanes = Vec::new();
    let mut ackers = Vec::new();
    let mut keepers = Vec::new();
    let (keeper_stop_tx, keeper_stop_rx) = watch::channel(false);
    // its claims name it in their leases: the dashboard shows who holds an active task
    let holder: Option<Arc<str>> = worker.id().map(Arc::from);
    let mut duties = Duties::new();
    if let Some(client) = worker.schedules {
        let queues = worker.queues.iter().map(|(q, _)| q.clone()).collect();
        duties = duties.fire_schedules(ScheduleFirer::for_queues(client, queues));
    }
    for (queue, handler) in worker.queues {
        let (tx, rx) = mpsc::unbounded_channel();
        let rt = Arc::new(QueueRt {
            queue,
            handler,
            running: Mutex::new(HashMap::new()),
            reports: tx,
            waits_for_slot: AtomicBool::new(false),
            refill: Notify::new(),
        });
        let mut due = rt
            .queue
            .due_claimer()
            .lease_ms(worker.lease_ms)
            .poll_ms(worker.poll_ms)
            .notifications(worker.notifications)
            .clock(shared.clock.clone());
        if let Some(id) = &holder {
            due = due.worker_id(id.clone());
        }
        lanes.push((rt.clone(), due));
        ackers.push(tokio::spawn(acker::run(rt.clone(), shared.clone(), rx)));
        keepers.push(tokio::spawn(lease_keeper::run(
            rt.clone(),
            shared.clone(),
            keeper_stop_rx.clone(),
        )));
        rts.push(rt);
    }
    // One queue keeps its own claim loop; several share the slots in one loop (`share.rs`).
    let claimer = if lanes.len() == 1 {
        let (rt, due) = lanes.remove(0);
        tokio::spawn(claimer::run(rt, shared.clone(), due))
    } else {
        let share = share::Share::new(worker.order, worker.weights);
        tokio::spawn(claimer::run_many(lanes, share, shared.clone()))
    };
    let probe: LoadProbe = {
        let beat_rts = rts.clone();
        let names: Vec<String> = rts.iter().map(|rt| rt.queue.name().to_owned()).collect();
        let concurrency = worker.concurrency as u64;
        Arc::new(move || {
            let in_hand = beat_rts.iter().map(|rt| rt.handlers() as u64).sum();
            WorkerLoad::new(names.clone(), concurrency, in_hand)
        })
    };
    let _ = shared.load.set(probe.clone());
    if let Some(hb) = worker.heartbeat {
        duties = duties.heartbeat(hb.load(move || probe()));
    }
    let duties = duties.start();
    // 1. wait for the stop signal; claimers end by themselves on it
    let mut stop = shared.stop.clone();
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    // the schedule firer stops first and the heartbeat last (step 6, `duties/mod.rs`);
    // the queues stop between them
    let queues = stop_queues(
        claimer,
        rts,
        ackers,
        keeper_stop_tx,
        keepers,
        grace,
        &shared,
    );
    duties.shutdown(queues).await;
}

/// Steps 1 to 5 of the shutdown order for the worker's queues, once the stop signal came:
/// the claimers end, handlers get the grace period, the rest are aborted and their leases
/// handed back, reports are flushed, lease keepers stop.
async fn stop_queues(
    claimer: JoinHandle<()>,
    rts: Vec<Arc<QueueRt>>,
    ackers: Vec<JoinHandle<()>>,
    keeper_stop_tx: watch::Sender<bool>,
    keepers: Vec<JoinHandle<()>>,
    grace: Duration,
    shared: &Shared,
) {
    let _ = claimer.await;
    // 2. grace period for running handlers
    let deadline = tokio::time::Instant::now() + grace;
    while rts.iter().any(|rt| rt.handlers() > 0) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // 3. abort the rest and hand their leases back (tasks whose handler ended stay with the
    // acker: their reports are settled in step 4)
    let mut aborted = Vec::new();
    for rt in &rts {
        let left: Vec<(TaskId, LeaseToken)> = {
            let mut running = rt.running();
            let ids: Vec<TaskId> = running
                .iter()
                .filter(|(_, r)| !r.reported)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| {
                    let r = running.remove(&id)?;
                    trace::record_outcome(
                        &r.span,
                        RunOutcome::HandedBack,
                        Some(
                            "the worker stopped before the handler ended; the task was handed back",
                        ),
                    );
                    if let Some(a) = r.abort {
                        a.abort();
                        aborted.push(a);
                    }
                    Some((id, r.token))
                })
                .collect()
        };
        if left.is_empty() {
            continue;
        }
        match rt.queue.release(&left).await {
            Ok(v) => {
                let n = v.iter().filter(|b| **b).count() as u64;
                Counters::add(&shared.counters.released, n);
            }
            Err(e) => {
                Counters::add(&shared.counters.redis_errors, 1);
                tracing::warn!(queue = rt.queue.name(), error = %e,
                    "could not hand leases back; they will expire and be recovered");
            }
        }
    }
    // an aborted handler ends at its next poll: wait for it (briefly), so that its end (the
    // run's span, a `dueq work` command killed) comes before the worker reports it stopped
    let until = tokio::time::Instant::now() + Duration::from_secs(1);
    while aborted.iter().any(|a| !a.is_finished()) && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // 4. flush reports
    for rt in &rts {
        let _ = rt.reports.send(Report::Stop);
    }
    for a in ackers {
        let _ = a.await;
    }
    // 5. lease keepers
    let _ = keeper_stop_tx.send(true);
    for k in keepers {
        let _ = k.await;
    }
}
