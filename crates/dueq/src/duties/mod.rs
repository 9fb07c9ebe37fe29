//! The background duties of a process, apart from claiming work: firing schedule ticks
//! ([`ScheduleFirer`]), recovering expired leases of queues nobody claims from
//! ([`LeaseRecoverer`]), and listing the process among the live workers ([`Heartbeat`]).
//!
//! Each duty has its own file and runs as a task of its own. [`Duties`] starts the ones a
//! process wants together and stops them in one order, so the [`Worker`](crate::Worker) and
//! `dueq serve` share one start and one shutdown instead of each writing them out:
//!
//! 1. lease recovery stops, then schedule firing (a step in flight finishes): no task is
//!    made or moved by the process any more;
//! 2. the caller's own work stops: a worker's claimers, handlers and ackers, the server's
//!    push delivery ([`RunningDuties::shutdown`] runs it here);
//! 3. the heartbeat stops last and removes the process from the live workers list, which
//!    shows it while it still holds leases.
//!
//! The duties stop too when their [`RunningDuties`] is dropped, without waiting for them.
//! River's `QueueMaintainer` is the model: a set of services started together and stopped in
//! one place.

mod heartbeat;
mod recoverer;
mod schedule_firer;

use std::future::Future;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use heartbeat::{Heartbeat, WorkerLoad, validate_heartbeat_ms};
pub use recoverer::{DEFAULT_RECOVER_INTERVAL_MS, DEFAULT_SWEEP_MS, LeaseRecoverer};
pub use schedule_firer::{DEFAULT_SCHEDULE_POLL_MS, ScheduleFirer};

/// The duties a process runs beside its own work (module docs). Build it, then
/// [`start`](Self::start) it on the current tokio runtime.
#[derive(Debug, Default)]
pub struct Duties {
    recoverer: Option<LeaseRecoverer>,
    firer: Option<ScheduleFirer>,
    heartbeat: Option<Heartbeat>,
}

impl Duties {
    /// No duties; add each with its method.
    pub fn new() -> Self {
        Self::default()
    }

    /// Recovers expired leases and expired tasks with `recoverer`. Default: not run.
    pub fn recover_leases(mut self, recoverer: LeaseRecoverer) -> Self {
        self.recoverer = Some(recoverer);
        self
    }

    /// Fires schedule ticks with `firer`. Default: not run.
    pub fn fire_schedules(mut self, firer: ScheduleFirer) -> Self {
        self.firer = Some(firer);
        self
    }

    /// Lists the process among the live workers with `heartbeat`. Default: not listed.
    pub fn heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        self.heartbeat = Some(heartbeat);
        self
    }

    /// Starts every duty given, each as a task of its own.
    pub fn start(self) -> RunningDuties {
        let (stop_work, work_stopped) = watch::channel(false);
        let (stop_beat, beat_stopped) = watch::channel(false);
        let mut work = Vec::new();
        if let Some(r) = self.recoverer {
            work.push((
                "lease recoverer",
                tokio::spawn(r.run(stopped(work_stopped.clone()))),
            ));
        }
        if let Some(f) = self.firer {
            work.push(("schedule firer", tokio::spawn(f.run(stopped(work_stopped)))));
        }
        let heartbeat = self
            .heartbeat
            .map(|hb| tokio::spawn(hb.run(stopped(beat_stopped))));
        RunningDuties {
            stop_work,
            work,
            stop_beat,
            heartbeat,
        }
    }
}

/// Completes when `rx` turns `true` or its sender is dropped.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// The running duties of a process: stop them with [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct RunningDuties {
    stop_work: watch::Sender<bool>,
    /// Recoverer and firer, in their stop order.
    work: Vec<(&'static str, JoinHandle<()>)>,
    stop_beat: watch::Sender<bool>,
    heartbeat: Option<JoinHandle<()>>,
}

impl RunningDuties {
    /// Stops the duties in the order of the module docs: lease recovery and schedule firing
    /// first, then `between` (the caller's own shutdown) runs to its end, then the heartbeat,
    /// which removes the process from the live workers list. Returns when all have ended. A
    /// duty whose task panicked is logged.
    pub async fn shutdown(self, between: impl Future<Output = ()>) {
        self.stop_work.send_replace(true);
        for (name, task) in self.work {
            if let Err(e) = task.await {
                tracing::error!(duty = name, error = %e, "duty task failed");
            }
        }
        between.await;
        self.stop_beat.send_replace(true);
        if let Some(task) = self.heartbeat
            && let Err(e) = task.await
        {
            tracing::error!(duty = "heartbeat", error = %e, "duty task failed");
        }
    }
}
