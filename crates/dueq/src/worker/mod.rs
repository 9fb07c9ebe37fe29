//! The worker runtime: runs handlers for one or more queues with a concurrency limit.
//!
//! Each duty has its own file and task:
//!
//! * [`claimer`]: takes due tasks from each queue's [`DueClaimer`](crate::DueClaimer) as slots
//!   free up and starts their handlers (the `DueClaimer` owns the wait: timer from the Redis
//!   clock, wake-ups, fallback poll, lease recovery, lost-reply replay): one loop for a
//!   worker with one queue, one loop over all the queues of a worker with several, which
//!   shares the slots as [`share`] decides.
//! * [`share`]: the rule for sharing the slots among several queues by their weights
//!   ([`WorkerBuilder::weight`], [`QueueOrder`]); pure, no I/O.
//! * [`lease_keeper`]: per queue, extends the leases of handlers that run long.
//! * [`acker`]: per queue, sends acks and nacks in batches.
//! * the [`ScheduleFirer`](crate::ScheduleFirer) of the worker's queues: fires their schedule
//!   ticks, racing every other worker and server harmlessly.
//! * the [`Heartbeat`](crate::Heartbeat): keeps the worker in the live workers list
//!   ([`Client::workers`]) with its queues, concurrency and handlers running.
//!
//! The last two are [`Duties`](crate::Duties), started and stopped by the starter `dueq
//! serve` uses too. `builder.rs` checks the settings; `run.rs` starts the duties and writes
//! the shutdown order down.
//!
//! # Several queues
//!
//! Call [`WorkerBuilder::handle`] once per queue. The worker's
//! [`concurrency`](WorkerBuilder::concurrency) is shared by them: while several queues have
//! due work and the free slots do not cover it all, [`QueueOrder::Weighted`] (the default)
//! shares the slots in proportion to the queues' weights (default 1 each), and
//! [`QueueOrder::Strict`] gives them to the heaviest queue with due work, a lower one getting
//! slots only while every higher one has nothing due. A queue with nothing due takes nothing.
//! Whether a queue has due work is what its last claim said (a full batch, or a next due time
//! that has come by the Redis clock): no Redis call is made to find out, and a queue held back
//! waits without calls (but one per fallback poll, which also recovers its expired leases)
//! until a handler ends and frees a slot.
//!
//! ```no_run
//! # async fn f(client: dueq::Client) -> dueq::Result<()> {
//! use dueq::{Outcome, QueueOrder, Worker};
//! let worker = Worker::builder(client)
//!     .concurrency(8)
//!     .handle("orders", |_task| async { Outcome::Success })
//!     .handle("reports", |_task| async { Outcome::Success })
//!     .weight("orders", 3) // three orders tasks for each reports task while both wait
//!     .queue_order(QueueOrder::Weighted) // the default; Strict: orders first, always
//!     .build()?;
//! # let _ = worker; Ok(()) }
//! ```
//!
//! # Shutdown order
//!
//! [`WorkerHandle::shutdown`] (and the end of [`Worker::run_until`]):
//! 1. the schedule firer and the claimers stop: no tick is fired and no task claimed by this
//!    worker any more (a fire step in flight finishes);
//! 2. running handlers get the grace period ([`WorkerBuilder::shutdown_grace_ms`]) to finish;
//! 3. handlers still running are aborted and their leases handed back (`release`), so another
//!    worker runs them at once instead of after the lease;
//! 4. ackers flush what the finished handlers reported, then stop;
//! 5. lease keepers stop;
//! 6. the heartbeat stops and removes the worker from the live workers list (last, so the list
//!    shows it while it still holds leases).

mod acker;
mod builder;
mod claimer;
mod handler;
mod lease_keeper;
mod run;
mod share;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};

pub use builder::WorkerBuilder;
pub use handler::{HandlerFuture, Outcome};
pub use share::{MAX_QUEUE_WEIGHT, QueueOrder};

use crate::client::{Client, Queue};
use crate::due::clock::RedisClock;
use crate::duties::{Heartbeat, WorkerLoad};
use crate::error::{Error, Result};
use crate::task::{LeaseToken, TaskId};
use handler::Handler;

/// Runs handlers for one or more queues. Build with [`Worker::builder`], then
/// [`Worker::start`] or [`Worker::run_until`]. Several queues share the worker's concurrency:
/// in proportion to their weights while more than one has due work, or in strict order of
/// weight ([`WorkerBuilder::weight`], [`QueueOrder`]); a queue with nothing due takes nothing.
pub struct Worker {
    queues: Vec<(Queue, Handler)>,
    /// Each queue's weight, as `queues`.
    weights: Vec<u32>,
    order: QueueOrder,
    concurrency: usize,
    lease_ms: Option<u64>,
    shutdown_grace_ms: u64,
    notifications: bool,
    poll_ms: u64,
    /// The client to fire schedules with, when the worker fires them.
    schedules: Option<Client>,
    heartbeat: Option<Heartbeat>,
}

/// Counters of one worker since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Tasks claimed.
    pub claimed: u64,
    /// Tasks acknowledged.
    pub succeeded: u64,
    /// Attempts reported failed and rescheduled.
    pub retried: u64,
    /// Tasks moved to the dead-letter queue by this worker.
    pub dead: u64,
    /// Acks, nacks or extends refused because the lease was lost.
    pub lease_lost: u64,
    /// Tasks handed back at shutdown.
    pub released: u64,
    /// Redis calls that failed (each is retried).
    pub redis_errors: u64,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    succeeded: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    lease_lost: AtomicU64,
    released: AtomicU64,
    redis_errors: AtomicU64,
}

impl Counters {
    fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WorkerStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            claimed: g(&self.claimed),
            succeeded: g(&self.succeeded),
            retried: g(&self.retried),
            dead: g(&self.dead),
            lease_lost: g(&self.lease_lost),
            released: g(&self.released),
            redis_errors: g(&self.redis_errors),
        }
    }
}

/// A task this worker holds: its handler is running, or has ended and its report is not yet
/// settled in Redis (the lease keeper keeps its lease alive meanwhile, so an ack that has to
/// be retried does not let the task run again elsewhere).
struct Running {
    token: LeaseToken,
    lease_ms: u64,
    deadline_ms: u64,
    abort: Option<AbortHandle>,
    /// The handler has ended and reported; the acker removes the entry once it is settled.
    reported: bool,
    /// The run's consumer span (disabled when spans are not exported), to record a run that
    /// is stopped before its handler ends.
    span: tracing::Span,
}

/// A handler's report, on its way to the acker.
enum Report {
    Done {
        id: TaskId,
        token: LeaseToken,
        outcome: Outcome,
    },
    /// Everything before this has been sent: flush and stop.
    Stop,
}

/// What every duty of one queue shares.
struct QueueRt {
    queue: Queue,
    handler: Handler,
    running: Mutex<HashMap<TaskId, Running>>,
    reports: mpsc::UnboundedSender<Report>,
    /// The claimer's last claim saw due work waiting for a concurrency slot (set by the
    /// claimer, read by the acker).
    waits_for_slot: AtomicBool,
    /// The acker tells the claimer that it has just sent an ack or nack that frees slots
    /// the queue's due work waits for: the claimer's next claim goes down the same
    /// connection right behind it, so it finds the freed slots without waiting for the
    /// wake-up the ack publishes (one round trip per refill instead of two).
    refill: Notify,
}

impl QueueRt {
    fn running(&self) -> MutexGuard<'_, HashMap<TaskId, Running>> {
        // A panic while holding this lock cannot leave the map half-updated (single inserts
        // and removes), so a poisoned lock is still usable.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handlers running now (tasks held for an unsettled report not counted).
    fn handlers(&self) -> usize {
        self.running().values().filter(|r| !r.reported).count()
    }

    /// Forgets a held task once its report is settled (or its lease is gone), if the entry
    /// is still the one of lease `token`.
    fn settled(&self, id: &TaskId, token: &LeaseToken) {
        let mut running = self.running();
        if running
            .get(id)
            .is_some_and(|r| r.reported && r.token == *token)
        {
            running.remove(id);
        }
    }

    /// Whether this worker still holds lease `token` of `id` for a report to settle: the
    /// lease keeper has not lost it and its deadline has not passed by the Redis clock.
    fn holds(&self, id: &TaskId, token: &LeaseToken, now_ms: u64) -> bool {
        self.running()
            .get(id)
            .is_some_and(|r| r.token == *token && r.deadline_ms > now_ms)
    }
}

/// What every duty of the worker shares.
struct Shared {
    slots: Arc<Semaphore>,
    clock: Arc<RedisClock>,
    counters: Counters,
    batch: usize,
    stop: watch::Receiver<bool>,
    /// Reads the worker's load (set once its queues run).
    load: std::sync::OnceLock<LoadProbe>,
}

type LoadProbe = Arc<dyn Fn() -> WorkerLoad + Send + Sync>;

/// A running worker: ask it to stop with [`WorkerHandle::shutdown`].
pub struct WorkerHandle {
    id: Option<String>,
    stop: watch::Sender<bool>,
    shared: Arc<Shared>,
    join: JoinHandle<()>,
}

impl WorkerHandle {
    /// The worker's id in the live workers list ([`Client::workers`]); `None` without a
    /// heartbeat.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// A reader of the worker's load (its queues, concurrency and the handlers running now),
    /// what its heartbeat reports; for a process that lists itself instead of its workers
    /// (`dueq serve`'s push delivery, built with [`WorkerBuilder::heartbeat`] off). Reads
    /// memory only. Before the worker's queues run it reports no queue and nothing in hand.
    pub fn load_probe(&self) -> impl Fn() -> WorkerLoad + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.load.get().map(|p| p()).unwrap_or_default()
    }

    /// Counters so far.
    pub fn stats(&self) -> WorkerStats {
        self.shared.counters.snapshot()
    }

    /// Stops the worker in the documented order and waits for it.
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`](crate::ErrorKind) if the worker's task panicked.
    pub async fn shutdown(self) -> Result<WorkerStats> {
        let _ = self.stop.send(true);
        self.join
            .await
            .map_err(|e| Error::protocol(format!("worker task failed: {e}")))?;
        Ok(self.shared.counters.snapshot())
    }
}

impl Worker {
    /// The worker's id in the live workers list ([`Client::workers`]); `None` without a
    /// heartbeat.
    pub fn id(&self) -> Option<&str> {
        self.heartbeat.as_ref().map(Heartbeat::id)
    }

    /// Starts the worker on the current tokio runtime.
    pub fn start(self) -> WorkerHandle {
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            slots: Arc::new(Semaphore::new(self.concurrency)),
            clock: Arc::new(RedisClock::new()),
            counters: Counters::default(),
            batch: self.concurrency.min(crate::protocol::call::MAX_BATCH),
            stop: stop_rx,
            load: std::sync::OnceLock::new(),
        });
        let id = self.id().map(str::to_owned);
        let join = tokio::spawn(run::run(self, shared.clone()));
        WorkerHandle {
            id,
            stop: stop_tx,
            shared,
            join,
        }
    }

    /// Runs until `signal` completes, then shuts down in the documented order.
    ///
    /// # Errors
    /// As [`WorkerHandle::shutdown`].
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<WorkerStats> {
        let handle = self.start();
        signal.await;
        handle.shutdown().await
    }
}
