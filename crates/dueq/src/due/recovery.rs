//! Lease recovery on the claim path: when the claimer of one queue recovers expired leases.
//!
//! Lease recovery returns tasks whose lease expired to `scheduled` (attempt counted) or to
//! `dead`, within about a second of expiry (DESIGN 2.4), driven by whatever process is alive.
//! Two drivers share [`Queue::recover`](crate::Queue::recover) (one atomic script per call,
//! so any number of processes recovering at once is harmless):
//!
//! * [`LeaseRecovery`], inside every [`DueClaimer`](super::DueClaimer): recovers its queue the
//!   moment a lease deadline the claims reported passes, and sweeps for leases that lost their
//!   deadline entry when a claim reports one (case C09);
//! * [`LeaseRecoverer`](crate::LeaseRecoverer) (`duties/recoverer.rs`), the background duty
//!   for queues nobody claims from.

use std::time::Duration;

use tokio::time::Instant;

use super::clock::RedisClock;
use crate::client::{Claim, RecoverReport};

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
pub(crate) fn log_recovered(queue: &str, r: &RecoverReport) {
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
