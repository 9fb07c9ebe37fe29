//! The schedule firer is responsible for turning schedule ticks into tasks, without a leader:
//! every [`Worker`](crate::Worker) runs one for the queues it serves and `dueq serve` one for
//! every queue with schedules, and whichever process reaches a tick first fires it
//! (`schedule_fire.lua` claims the tick by the schedule's stored next fire time, so the others
//! are refused and a tick fires exactly once, DESIGN 2.11).
//!
//! Per queue it reads the one index of next fire times (`schedule_next`) and sleeps until its
//! earliest entry by the Redis clock ([`RedisClock`]), so 10 000 schedules cost one call per
//! wake-up like one schedule. A schedule change publishes on the queue's `schedule_wake`
//! channel (through the client's wake hub), which ends the sleep at once; without a message
//! it looks again after at most the fallback poll ([`DEFAULT_SCHEDULE_POLL_MS`]). A firer of
//! every queue (`dueq serve`) also hears `dueq:schedules:wake`, published when a queue gets
//! its first schedule, and starts firing that queue at once.
//!
//! Fire times come from the schedule's grid, never from "now + interval", so a slow step or a
//! reconnect shifts nothing: the next tick is the grid's next point.

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, sleep_until};

use crate::client::{Client, Queue};
use crate::due::clock::RedisClock;
use crate::protocol::keys::SCHEDULES_WAKE;

/// Default longest sleep before looking at a queue's schedules again, ms (the fallback for a
/// lost change notification; the sleep to the next tick itself is a timer). Longer than the
/// claim path's 1 s because only a schedule *change* can be missed, and the wake hub already
/// tells every listener to look after it (re)subscribes.
pub const DEFAULT_SCHEDULE_POLL_MS: u64 = 5_000;

const FIRST_ERROR_PAUSE: Duration = Duration::from_millis(10);
const MAX_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Which queues a [`ScheduleFirer`] fires.
#[derive(Debug, Clone)]
enum Source {
    Queues(Vec<Queue>),
    /// Every queue in `dueq:schedules`, read again every poll.
    Registry,
}

/// The background duty that fires schedule ticks (module docs). Errors are logged and
/// retried after a pause.
#[derive(Debug, Clone)]
pub struct ScheduleFirer {
    client: Client,
    source: Source,
    poll: Duration,
}

impl ScheduleFirer {
    /// A firer of the schedules of `queues` (a worker's).
    pub fn for_queues(client: Client, queues: Vec<Queue>) -> Self {
        Self {
            client,
            source: Source::Queues(queues),
            poll: Duration::from_millis(DEFAULT_SCHEDULE_POLL_MS),
        }
    }

    /// A firer of every queue that has schedules ([`Client::schedule_queues`]), found again
    /// every poll interval (`dueq serve`).
    pub fn all_queues(client: Client) -> Self {
        Self {
            client,
            source: Source::Registry,
            poll: Duration::from_millis(DEFAULT_SCHEDULE_POLL_MS),
        }
    }

    /// Longest sleep before looking again without a notification, ms (at least 1). Default
    /// [`DEFAULT_SCHEDULE_POLL_MS`]. With [`all_queues`](Self::all_queues) it is also how soon
    /// a queue's first schedule is found.
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll = Duration::from_millis(ms.max(1));
        self
    }

    /// Fires ticks until `stop` completes; a step in flight finishes first (a fire script
    /// is never dropped half-way through its reply).
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let (tx, rx) = watch::channel(false);
        let mut loops = tokio::task::JoinSet::new();
        let mut started: HashSet<String> = HashSet::new();
        let mut stop = std::pin::pin!(stop);
        // a firer of every queue also hears when a queue gets its first schedule
        let hub = self.client.wake_hub().clone();
        let mut joined = match self.source {
            Source::Registry => hub.listen(SCHEDULES_WAKE),
            Source::Queues(_) => None,
        };
        loop {
            let queues = match &self.source {
                Source::Queues(q) => q.clone(),
                Source::Registry => match self.client.schedule_queues().await {
                    Ok(names) => names
                        .iter()
                        .filter(|n| !started.contains(*n))
                        .filter_map(|n| self.client.queue(n).ok())
                        .collect(),
                    Err(e) => {
                        tracing::warn!(error = %e, "schedule firer: could not list queues");
                        Vec::new()
                    }
                },
            };
            for q in queues {
                if started.insert(q.name().to_owned()) {
                    loops.spawn(fire_loop(q, self.poll, rx.clone()));
                }
            }
            let again = match self.source {
                Source::Queues(_) => None,
                Source::Registry => Some(Instant::now() + self.poll),
            };
            let heard = async {
                match &mut joined {
                    Some(r) => r.recv().await.map(|_| ()),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut stop => break,
                () = async { match again { Some(at) => sleep_until(at).await,
                    None => std::future::pending().await } } => {}
                res = heard => {
                    if let Err(broadcast::error::RecvError::Closed) = res {
                        joined = None;
                    }
                }
            }
        }
        if joined.take().is_some() {
            hub.release(SCHEDULES_WAKE);
        }
        let _ = tx.send(true);
        while loops.join_next().await.is_some() {}
    }
}

/// Fires one queue's ticks until `stop` says so.
async fn fire_loop(q: Queue, poll: Duration, mut stop: watch::Receiver<bool>) {
    let clock = RedisClock::new();
    let hub = q.client().wake_hub().clone();
    let channel = q.keys().schedule_wake.clone();
    // subscribed after the first step (which looks anyway), not before it
    let mut rx: Option<broadcast::Receiver<u64>> = None;
    let mut subscribed = false;
    let mut pause = FIRST_ERROR_PAUSE;
    // while steps find due schedules but apply none, look again after a growing pause
    let mut stall = FIRST_ERROR_PAUSE;
    loop {
        if *stop.borrow() {
            break;
        }
        let look_at = match q.fire_due_schedules().await {
            Ok(r) if r.stalled => {
                clock.update(r.now_ms, Instant::now());
                let at = Instant::now() + crate::backoff::jittered(stall);
                stall = (stall * 2).min(MAX_ERROR_PAUSE);
                at
            }
            Ok(r) => {
                clock.update(r.now_ms, Instant::now());
                pause = FIRST_ERROR_PAUSE;
                stall = FIRST_ERROR_PAUSE;
                if r.busy {
                    continue;
                }
                let mut at = Instant::now() + poll;
                // a due entry that could not be fired (unreadable, left by hand) waits for
                // the poll instead of spinning
                if let Some(next) = r.next_fire_at_ms.filter(|&n| n > r.now_ms) {
                    at = at.min(clock.instant_of(next));
                }
                at
            }
            Err(e) => {
                tracing::warn!(queue = q.name(), error = %e, "schedule firer: step failed");
                let at = Instant::now() + crate::backoff::jittered(pause);
                pause = (pause * 2).min(MAX_ERROR_PAUSE);
                at
            }
        };
        if !subscribed {
            subscribed = true;
            rx = hub.listen(&channel);
        }
        let msg = async {
            match &mut rx {
                Some(r) => r.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep_until(look_at) => {}
            res = msg => {
                if let Err(broadcast::error::RecvError::Closed) = res {
                    rx = None;
                }
            }
            _ = stop.changed() => break,
        }
    }
    drop(rx);
    hub.release(&channel);
}
