//! Building a [`Worker`]: its queues and handlers, weights, concurrency, leases, shutdown
//! grace, notifications and duties, checked by [`WorkerBuilder::build`].

use std::future::Future;

use super::handler::{self, Handler};
use super::share::{self, QueueOrder};
use super::{Outcome, Worker};
use crate::backoff::Backoff;
use crate::client::{Client, Queue, WorkerKind};
use crate::duties::Heartbeat;
use crate::error::{Error, Result};
use crate::task::ClaimedTask;

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

    /// The weight of queue `queue` among the worker's queues: 1 to [`MAX_QUEUE_WEIGHT`](crate::MAX_QUEUE_WEIGHT)
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
}
