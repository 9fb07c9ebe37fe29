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
//! * the [`ScheduleFirer`](crate::ScheduleFirer) (`due/schedules.rs`) of the worker's queues:
//!   fires their schedule ticks, racing every other worker and server harmlessly.
//! * the [`Heartbeat`](crate::Heartbeat) (`due/heartbeat.rs`): keeps the worker in the live
//!   workers list ([`Client::workers`]) with its queues, concurrency and handlers running.
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
mod claimer;
mod handler;
mod lease_keeper;
mod share;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};

pub use handler::{HandlerFuture, Outcome};
pub use share::{MAX_QUEUE_WEIGHT, QueueOrder};

use crate::backoff::Backoff;
use crate::client::{Client, Queue, WorkerKind};
use crate::due::clock::RedisClock;
use crate::due::{Heartbeat, WorkerLoad};
use crate::error::{Error, Result};
use crate::task::{ClaimedTask, LeaseToken, TaskId};
use handler::Handler;

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    client: Client,
    handlers: Vec<(String, Handler)>,
    weights: Vec<(String, u32)>,
    order: QueueOrder,
    concurrency: usize,
    lease_ms: Option<u64>,
    backoff: Backoff,
    shutdown_grace_ms: u64,
    notifications: bool,
    poll_ms: u64,
    schedules: bool,
    heartbeat: bool,
    heartbeat_ms: u64,
}

impl WorkerBuilder {
    /// Runs `handler` for every task of queue `queue`. Call once per queue; several queues
    /// share the [`concurrency`](Self::concurrency) by their [`weight`](Self::weight)s.
    pub fn handle<F, Fut>(mut self, queue: &str, handler: F) -> Self
    where
        F: Fn(ClaimedTask) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.handlers
            .push((queue.to_owned(), handler::boxed(handler)));
        self
    }

    /// The weight of queue `queue` among the worker's queues: 1 to [`MAX_QUEUE_WEIGHT`]
    /// (1 000), default 1; the last call for a queue counts. It matters only to a worker that
    /// serves several queues, when more than one has due work and the free slots do not cover
    /// it all: [`QueueOrder::Weighted`] (the default) shares the slots in proportion to the
    /// weights, [`QueueOrder::Strict`] serves the heaviest queue with due work first (see
    /// [`queue_order`](Self::queue_order)). Checked by [`build`](Self::build).
    pub fn weight(mut self, queue: &str, weight: u32) -> Self {
        self.weights.push((queue.to_owned(), weight));
        self
    }

    /// How the free slots are shared among the worker's queues when several have due work.
    /// Default [`QueueOrder::Weighted`]. A worker with one queue ignores it.
    pub fn queue_order(mut self, order: QueueOrder) -> Self {
        self.order = order;
        self
    }

    /// Most handlers running at once, over all queues. Default 64. It also caps a claim batch.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The lease every claim takes, overriding each task's own `lease_ms`. Default: the task's.
    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = Some(lease_ms);
        self
    }

    /// Delays between attempts when a handler returns [`Outcome::retry`] and when an expired
    /// lease is recovered. Default [`Backoff::default`] (1 s doubling to 1 h, 20 % jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long shutdown waits for running handlers before aborting them and handing their
    /// leases back. Default 0: hand back at once (another worker reruns the task; handlers must
    /// tolerate at-least-once anyway). Longer values let short handlers finish.
    pub fn shutdown_grace_ms(mut self, ms: u64) -> Self {
        self.shutdown_grace_ms = ms;
        self
    }

    /// Whether to listen for wake-up notifications. Default `true`. Without them an idle
    /// worker still finds early tasks by its fallback poll (at most every second).
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Longest sleep of an idle claimer before it asks Redis again (the fallback for lost
    /// notifications). Default 1 000 ms; values above 1 000 are lowered to 1 000.
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll_ms = ms.clamp(1, 1_000);
        self
    }

    /// Whether the worker fires the schedule ticks of its queues. Default `true`: every
    /// worker takes part (whichever process reaches a tick first fires it, exactly once), so
    /// schedules keep firing while any worker or server runs.
    pub fn fire_schedules(mut self, on: bool) -> Self {
        self.schedules = on;
        self
    }

    /// Whether the worker lists itself in the live workers list ([`Client::workers`],
    /// `GET /v1/workers`) with a heartbeat. Default `true`. Off for workers that are part of
    /// a process that registers itself (`dueq serve`'s push delivery).
    pub fn heartbeat(mut self, on: bool) -> Self {
        self.heartbeat = on;
        self
    }

    /// Time between two heartbeats, ms: [`MIN_HEARTBEAT_MS`](crate::MIN_HEARTBEAT_MS) to
    /// [`MAX_HEARTBEAT_MS`](crate::MAX_HEARTBEAT_MS), default
    /// [`DEFAULT_HEARTBEAT_MS`](crate::DEFAULT_HEARTBEAT_MS) (5 s). A worker that dies leaves
    /// the list [`HEARTBEAT_MISSES`](crate::HEARTBEAT_MISSES) intervals after its last beat.
    /// Checked by [`build`](Self::build).
    pub fn heartbeat_ms(mut self, ms: u64) -> Self {
        self.heartbeat_ms = ms;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) when no queue has a handler, a queue
    /// appears twice, a name is invalid, the lease or heartbeat interval is out of range, or a
    /// weight is out of range or given for a queue without a handler.
    pub fn build(self) -> Result<Worker> {
        if self.handlers.is_empty() {
            return Err(Error::invalid("a worker needs at least one queue handler"));
        }
        let heartbeat = if self.heartbeat {
            Some(
                Heartbeat::new(self.client.clone(), WorkerKind::Worker)
                    .interval_ms(self.heartbeat_ms)?,
            )
        } else {
            None
        };
        if let Some(l) = self.lease_ms {
            crate::task::validate_lease_ms(l)?;
        }
        let mut queues = Vec::new();
        for (name, h) in self.handlers {
            if queues
                .iter()
                .any(|(q, _): &(Queue, Handler)| q.name() == name)
            {
                return Err(Error::invalid(format!("queue {name} has two handlers")));
            }
            let q = self.client.queue(&name)?.with_backoff(self.backoff);
            queues.push((q, h));
        }
        let names: Vec<&str> = queues.iter().map(|(q, _)| q.name()).collect();
        let weights = share::weights(&names, &self.weights)?;
        Ok(Worker {
            queues,
            weights,
            order: self.order,
            concurrency: self.concurrency,
            lease_ms: self.lease_ms,
            shutdown_grace_ms: self.shutdown_grace_ms,
            notifications: self.notifications,
            poll_ms: self.poll_ms,
            schedules: self.schedules.then_some(self.client),
            heartbeat,
        })
    }
}

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
    /// A builder for a worker on `client`.
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            handlers: Vec::new(),
            weights: Vec::new(),
            order: QueueOrder::Weighted,
            concurrency: 64,
            lease_ms: None,
            backoff: Backoff::default(),
            shutdown_grace_ms: 0,
            notifications: true,
            poll_ms: 1_000,
            schedules: true,
            heartbeat: true,
            heartbeat_ms: crate::DEFAULT_HEARTBEAT_MS,
        }
    }

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
        let join = tokio::spawn(run(self, shared.clone()));
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

async fn run(worker: Worker, shared: Arc<Shared>) {
    let grace = Duration::from_millis(worker.shutdown_grace_ms);
    let mut rts = Vec::new();
    let mut lanes = Vec::new();
    let mut ackers = Vec::new();
    let mut keepers = Vec::new();
    let (keeper_stop_tx, keeper_stop_rx) = watch::channel(false);
    // its claims name it in their leases: the dashboard shows who holds an active task
    let holder: Option<Arc<str>> = worker.id().map(Arc::from);
    let firer = worker.schedules.map(|client| {
        let queues = worker.queues.iter().map(|(q, _)| q.clone()).collect();
        let mut stop = shared.stop.clone();
        let firer = crate::due::ScheduleFirer::for_queues(client, queues);
        tokio::spawn(firer.run(async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    });
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
    let (beat_stop_tx, mut beat_stop_rx) = watch::channel(false);
    let heartbeat = worker.heartbeat.map(|hb| {
        let hb = hb.load(move || probe());
        tokio::spawn(hb.run(async move {
            let _ = beat_stop_rx.wait_for(|s| *s).await;
        }))
    });
    // 1. wait for the stop signal; claimers end by themselves on it
    let mut stop = shared.stop.clone();
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            break;
        }
    }
    if let Some(f) = firer {
        let _ = f.await;
    }
    let _ = claimer.await;
    // 2. grace period for running handlers
    let deadline = tokio::time::Instant::now() + grace;
    while rts.iter().any(|rt| rt.handlers() > 0) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // 3. abort the rest and hand their leases back (tasks whose handler ended stay with the
    // acker: their reports are settled in step 4)
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
                    if let Some(a) = r.abort {
                        a.abort();
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
    // 6. heartbeat: removes the entry
    let _ = beat_stop_tx.send(true);
    if let Some(h) = heartbeat {
        let _ = h.await;
    }
}
