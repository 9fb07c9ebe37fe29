//! Lease recovery is responsible for returning tasks whose lease expired to `scheduled`
//! (attempt counted) or to `dead`, within about a second of expiry (DESIGN 2.4), driven by
//! whatever process is alive.
//!
//! Two drivers share [`Queue::recover`] (one atomic script per call, so any number of
//! processes recovering at once is harmless):
//!
//! * [`LeaseRecovery`], inside every [`DueClaimer`](super::DueClaimer): recovers its queue the
//!   moment a lease deadline the claims reported passes, and sweeps for leases that lost their
//!   deadline entry when a claim reports one (case C09);
//! * [`LeaseRecoverer`], the background duty for queues nobody claims from (a queue served
//!   only by HTTP clients that died): every interval it recovers every known queue. `dueq
//!   serve` runs it.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::{Instant, MissedTickBehavior};

use super::clock::RedisClock;
use crate::client::{Claim, Client, Queue, RecoverReport};

/// When the claimer of one queue recovers, from what its claims and recoveries reported.
pub(crate) struct LeaseRecovery {
    poll: Duration,
    /// Earliest lease deadline of an active task (Redis ms).
    next_deadline_ms: Option<u64>,
    /// A claim saw a lease without a deadline entry: sweep for it.
    orphans: bool,
    /// A sweep round is under way: keep sweeping back to back until it comes full circle.
    sweeping: bool,
    /// Deadline of an orphaned lease (no `active` entry) not yet expired, from the last sweep.
    orphan_due_ms: Option<u64>,
    last_sweep: Instant,
}

impl LeaseRecovery {
    pub(crate) fn new(poll: Duration) -> Self {
        Self {
            poll,
            next_deadline_ms: None,
            orphans: false,
            sweeping: false,
            orphan_due_ms: None,
            // so that the first orphan a claim reports is swept for at once
            last_sweep: Instant::now()
                .checked_sub(poll)
                .unwrap_or_else(Instant::now),
        }
    }

    /// Whether to recover before the next claim: a lease deadline has passed, or a sweep
    /// for orphaned leases is under way or due.
    pub(crate) fn due(&self, clock: &RedisClock) -> bool {
        self.sweep_waiting() || self.next_deadline_ms.is_some_and(|d| clock.now_ms() >= d)
    }

    /// Look again at once rather than after a sleep: a sweep round for orphaned leases is
    /// under way (its calls go back to back until it comes full circle, so an orphan whose
    /// deadline passed is found within a few calls, not one call per poll interval), or a
    /// claim saw an orphaned lease and the last sweep is a poll interval ago.
    pub(crate) fn sweep_waiting(&self) -> bool {
        self.sweeping || (self.orphans && self.last_sweep.elapsed() >= self.poll)
    }

    /// The earliest deadline to recover at (Redis ms).
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        self.next_deadline_ms
    }

    /// Learns from a claim's answer.
    pub(crate) fn saw_claim(&mut self, claim: &Claim) {
        self.orphans |= claim.orphans;
        if !claim.orphans {
            self.orphan_due_ms = None;
        }
        self.next_deadline_ms = match (claim.next_lease_deadline_ms, self.orphan_due_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Learns from a recover call's answer (and logs what it did).
    pub(crate) fn recovered(&mut self, r: &RecoverReport, queue: &str) {
        self.last_sweep = Instant::now();
        self.next_deadline_ms = r.next_lease_deadline_ms;
        // the earliest orphan deadline over all calls of one sweep round
        self.orphan_due_ms = match (
            self.sweeping.then_some(self.orphan_due_ms).flatten(),
            self.orphans || self.sweeping,
        ) {
            (_, false) => None,
            (Some(a), true) => Some(r.next_lease_deadline_ms.map_or(a, |b| a.min(b))),
            (None, true) => r.next_lease_deadline_ms,
        };
        self.sweeping = (self.orphans || self.sweeping) && !r.swept;
        self.orphans = false;
        log_recovered(queue, r);
    }
}

/// One log line per recover call that moved something, for both drivers.
fn log_recovered(queue: &str, r: &RecoverReport) {
    if r.expired > 0 {
        tracing::info!(
            queue,
            expired = r.expired,
            "expired tasks not started in time"
        );
    }
    if r.recovered + r.dead > 0 {
        tracing::info!(
            queue,
            recovered = r.recovered,
            dead = r.dead,
            "recovered expired leases"
        );
    }
}

/// Default pause between two passes of [`LeaseRecoverer`], ms.
pub const DEFAULT_RECOVER_INTERVAL_MS: u64 = 1000;

/// Tasks one `recover` call handles at most; a pass calls again on a queue while a call came
/// back full.
const RECOVER_BATCH: u64 = 1000;

/// Calls per queue and pass at most, so one huge backlog cannot starve the other queues.
const MAX_CALLS_PER_QUEUE: usize = 10;

/// Queues recovered concurrently within one pass.
const CONCURRENCY: usize = 8;

/// The background duty that recovers expired leases of every known queue
/// ([`Client::queues`]) every interval, for queues no [`DueClaimer`](super::DueClaimer)
/// serves. Errors (Redis down, a bad name in the registry) are logged and the next pass tries
/// again.
#[derive(Debug, Clone)]
pub struct LeaseRecoverer {
    client: Client,
    interval: Duration,
}

impl LeaseRecoverer {
    /// A recoverer of every queue of `client`, every [`DEFAULT_RECOVER_INTERVAL_MS`].
    pub fn new(client: Client) -> Self {
        Self {
            client,
            interval: Duration::from_millis(DEFAULT_RECOVER_INTERVAL_MS),
        }
    }

    /// Pause between two passes, ms (at least 1). Default 1 000 (DESIGN 2.4: within 1 s of
    /// expiry).
    pub fn interval_ms(mut self, ms: u64) -> Self {
        self.interval = Duration::from_millis(ms.max(1));
        self
    }

    /// Runs passes until `stop` completes (finishing the pass in flight).
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = &mut stop => return,
            }
            self.pass().await;
        }
    }

    /// One recovery pass over every known queue.
    pub async fn pass(&self) {
        let names = match self.client.queues().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "recoverer: could not list queues");
                return;
            }
        };
        futures_util::stream::iter(names)
            .for_each_concurrent(CONCURRENCY, |name| async move {
                match self.client.queue(&name) {
                    Ok(q) => recover_queue(&q).await,
                    Err(e) => {
                        tracing::warn!(queue = name, error = %e,
                            "recoverer: bad queue name in the registry");
                    }
                }
            })
            .await;
    }
}

async fn recover_queue(q: &Queue) {
    for _ in 0..MAX_CALLS_PER_QUEUE {
        match q.recover().await {
            Ok(r) => {
                log_recovered(q.name(), &r);
                if r.recovered + r.dead < RECOVER_BATCH && !r.expired_more {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(queue = q.name(), error = %e, "recoverer: recover failed");
                return;
            }
        }
    }
}
