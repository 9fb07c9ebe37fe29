//! The acker is responsible for telling Redis how handlers of one queue ended.
//!
//! Each partition of the queue has a lane of its own (one for a queue of one partition): a
//! task that takes its reports in batches (whatever has queued up over a few yields to the
//! scheduler, up to 1 000) and sends them as one `ack` and one `nack` call, so under load one
//! round trip settles many tasks. A lane retries a failed call with a growing pause, merging
//! the reports that arrive meanwhile, for as long as this worker holds the tasks' leases: the
//! lease keeper keeps them alive while the reports wait, so a partition whose node is
//! unreachable or whose durable writes are not confirmed holds up its own reports only, and
//! its tasks run again elsewhere only once their leases can no longer be held. A report whose
//! lease was lost meanwhile is refused by Redis (fencing) and only counted. When due work
//! waits for the concurrency slots acks free, the claimer is told to claim right behind them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use super::{Counters, Outcome, QueueRt, Report, Shared};
use crate::client::Queue;
use crate::protocol::call::MAX_BATCH;
use crate::protocol::leases::NackItem;
use crate::task::{AckOutcome, LeaseToken, NackOutcome, TaskId};

/// Most yields to the scheduler while gathering one batch of reports.
const GATHER_YIELDS: usize = 4;
/// First pause before a failed call is sent again; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_secs(1);

type Done = (TaskId, LeaseToken, Outcome);

/// Hands each report to its partition's lane until `Stop`, then lets every lane settle what
/// it holds and waits for them.
pub(super) async fn run(
    rt: Arc<QueueRt>,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    let mut lanes: HashMap<(usize, usize), Lane> = HashMap::new();
    while let Some(report) = rx.recv().await {
        let Report::Done { id, token, outcome } = report else {
            break;
        };
        let (at, queue) = lane_of(&rt.queue, &id).await;
        let lane = lanes
            .entry(at)
            .or_insert_with(|| Lane::start(rt.clone(), shared.clone(), queue));
        let _ = lane.tx.send(Report::Done { id, token, outcome });
    }
    for lane in lanes.values() {
        let _ = lane.tx.send(Report::Stop);
    }
    for (_, lane) in lanes {
        let _ = lane.join.await;
    }
}

/// The lane of task `id`: (partition count, partition) and the partition's handle; the
/// queue's own handle when it has one partition (or its layout cannot be read now: its calls
/// then split by partition themselves). The layout is the claim path's (read again only when
/// a claim shows a settings change), so a partition 0 that hangs does not hold up every lane
/// at each refresh.
async fn lane_of(queue: &Queue, id: &TaskId) -> ((usize, usize), Queue) {
    match queue.claim_layout().await {
        Ok(layout) if layout.n() > 1 => {
            let p = layout.of_id(id.as_str());
            ((layout.n(), p), queue.part(&layout, p))
        }
        _ => ((1, 0), queue.clone()),
    }
}

struct Lane {
    tx: mpsc::UnboundedSender<Report>,
    join: JoinHandle<()>,
}

impl Lane {
    fn start(rt: Arc<QueueRt>, shared: Arc<Shared>, queue: Queue) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let join = tokio::spawn(lane(rt, shared, queue, rx));
        Self { tx, join }
    }
}

/// One lane: gathers batches of reports and settles them on `queue` (one partition).
async fn lane(
    rt: Arc<QueueRt>,
    shared: Arc<Shared>,
    queue: Queue,
    mut rx: mpsc::UnboundedReceiver<Report>,
) {
    let mut stopping = false;
    while !stopping {
        let Some(first) = rx.recv().await else { return };
        let mut batch = Vec::new();
        take(first, &mut batch, &mut stopping);
        // let handlers that finish in the same instant (a claim's batch of quick handlers)
        // report too, so they share one call instead of one call each: yield, take what
        // arrived, and yield again while more keeps arriving (a few times at most, so a
        // steady stream is not held up)
        for _ in 0..GATHER_YIELDS {
            tokio::task::yield_now().await;
            let before = batch.len();
            drain(&mut rx, &mut batch, &mut stopping);
            if batch.len() == before || batch.len() >= MAX_BATCH {
                break;
            }
        }
        let mut pause = FIRST_PAUSE;
        loop {
            batch = settle(&rt, &shared, &queue, batch).await;
            if batch.is_empty() {
                break;
            }
            // some calls failed: again after a pause, with what arrived meanwhile, while the
            // leases are still held
            sleep(crate::backoff::jittered(pause)).await;
            pause = (pause * 2).min(MAX_PAUSE);
            drain(&mut rx, &mut batch, &mut stopping);
            let now = shared.clock.now_ms();
            batch.retain(|(id, token, _)| {
                let held = rt.holds(id, token, now);
                if !held {
                    // the lease expired or was taken over: the task runs again elsewhere
                    Counters::add(&shared.counters.lease_lost, 1);
                    rt.settled(id, token);
                }
                held
            });
            if batch.is_empty() {
                break;
            }
        }
    }
}

fn take(r: Report, batch: &mut Vec<Done>, stopping: &mut bool) {
    match r {
        Report::Done { id, token, outcome } => batch.push((id, token, outcome)),
        Report::Stop => *stopping = true,
    }
}

/// Takes the reports waiting in `rx` into `batch` (up to a call's worth).
fn drain(rx: &mut mpsc::UnboundedReceiver<Report>, batch: &mut Vec<Done>, stopping: &mut bool) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(r) => take(r, batch, stopping),
            Err(_) => break,
        }
    }
}

/// Sends `batch` (an ack call and a nack call); counts what Redis answered and returns the
/// reports whose call failed, to send again.
async fn settle(rt: &QueueRt, shared: &Shared, queue: &Queue, batch: Vec<Done>) -> Vec<Done> {
    let mut acks = Vec::new();
    let mut nacks = Vec::new();
    for (id, token, outcome) in batch {
        match outcome {
            Outcome::Success => acks.push((id, token)),
            other => nacks.push((id, token, other)),
        }
    }
    let mut again = Vec::new();
    let mut failed = None;
    if !acks.is_empty() {
        let answers = send_then_refill(rt, queue.ack_each(&acks)).await;
        for ((id, token), a) in acks.into_iter().zip(answers) {
            match a {
                Ok(o) => {
                    let c = if o == AckOutcome::Acked {
                        &shared.counters.succeeded
                    } else {
                        &shared.counters.lease_lost
                    };
                    Counters::add(c, 1);
                    rt.settled(&id, &token);
                }
                Err(e) => {
                    failed = Some(e);
                    again.push((id, token, Outcome::Success));
                }
            }
        }
    }
    if !nacks.is_empty() {
        let items: Vec<NackItem<'_>> = nacks
            .iter()
            .map(|(id, token, o)| {
                let (error, retry_in_ms, permanent) = match o {
                    Outcome::Retry { error, after_ms } => (error.as_str(), *after_ms, false),
                    Outcome::Fail { error } => (error.as_str(), None, true),
                    Outcome::Success => ("", None, false),
                };
                NackItem {
                    id,
                    token,
                    retry_in_ms,
                    permanent,
                    error: crate::client::cut_error(error),
                }
            })
            .collect();
        let answers = send_then_refill(rt, queue.nack_items_each(&items)).await;
        drop(items);
        for ((id, token, outcome), a) in nacks.into_iter().zip(answers) {
            match a {
                Ok(o) => {
                    let c = match o {
                        NackOutcome::Rescheduled { .. } => &shared.counters.retried,
                        NackOutcome::Dead => &shared.counters.dead,
                        _ => &shared.counters.lease_lost,
                    };
                    Counters::add(c, 1);
                    rt.settled(&id, &token);
                }
                Err(e) => {
                    failed = Some(e);
                    again.push((id, token, outcome));
                }
            }
        }
    }
    if let Some(e) = failed {
        Counters::add(&shared.counters.redis_errors, 1);
        tracing::warn!(queue = rt.queue.name(), error = %e, reports = again.len(),
            "ack/nack failed; retrying while the leases are held");
    }
    again
}

/// Sends `call`; when the claimer's last claim saw due work waiting for a concurrency slot,
/// tells the claimer to claim at once. The call is polled once first, which puts its request
/// on the client's connection, so the claim goes down the same connection after it and Redis
/// runs it once the slots are free: the refill costs no extra round trip. (Should the order
/// ever differ, the claim finds nothing and the wake-up the ack publishes still comes.)
async fn send_then_refill<T>(rt: &QueueRt, call: impl Future<Output = T>) -> T {
    let mut call = std::pin::pin!(call);
    if rt.waits_for_slot.load(Ordering::Relaxed) {
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        rt.refill.notify_one();
        if let Poll::Ready(v) = first {
            return v;
        }
    }
    call.await
}
