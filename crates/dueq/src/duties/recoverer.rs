//! The lease recoverer is responsible for returning expired leases and expired tasks of
//! queues nobody claims from (a queue served only by HTTP clients that died): every interval
//! it recovers the queues the recovery index says are due, and sweeps the registry slowly.
//! `dueq serve` runs it. Recovery on the claim path is `due/recovery.rs`; both call
//! [`Queue::recover`].

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::broadcast;
use tokio::time::MissedTickBehavior;

use crate::client::{Client, Queue};
use crate::due::recovery::log_recovered;
use crate::protocol::queues;

/// Default pause between two passes of [`LeaseRecoverer`], ms.
pub const DEFAULT_RECOVER_INTERVAL_MS: u64 = 1000;

/// Default time a [`LeaseRecoverer`] takes to sweep every queue once, ms.
pub const DEFAULT_SWEEP_MS: u64 = 1_800_000;

/// Tasks one `recover` call handles at most; a pass calls again on a queue while a call came
/// back full.
const RECOVER_BATCH: u64 = 1000;

/// Calls per queue and pass at most, so one huge backlog cannot starve the other queues.
const MAX_CALLS_PER_QUEUE: usize = 10;

/// Queues recovered concurrently within one pass.
const CONCURRENCY: usize = 8;

/// Queues one call takes off the recovery index at most.
const DUE_BATCH: usize = 1000;

/// How long a queue taken off the index waits for its report before it is due again (its
/// recoverer died mid-pass), ms.
const HOLD_MS: u64 = 60_000;

/// The background duty that recovers expired leases and expired tasks of queues no
/// [`DueClaimer`](crate::DueClaimer) serves, within about a second, at a cost that does not
/// grow with idle queues. `dueq serve` runs it. Errors (Redis down, a bad name in the
/// registry) are logged and the next pass tries again.
///
/// Each pass visits the queues the recovery index (`dueq:recovery`, queue → earliest lease
/// deadline or expiry) says are due: a claim that hands out tasks notes their earliest lease
/// deadline there, an enqueue of tasks with an expiry their earliest expiry, and each visit
/// writes back the queue's next one (or removes the queue when it has none). A sweep also
/// visits every queue of the registry once per [`sweep_ms`](Self::sweep_ms), a slice a pass
/// (all of them on the first pass): it finds leases whose note never landed (a process that
/// died between its claim and the note) and leases from before the index existed, forgets
/// claim records of callers gone for an hour and drops idle rate-limit logs. A visit costs
/// three Redis calls, so with 15 000 idle queues and the defaults the sweep costs about 25
/// calls a second.
#[derive(Debug, Clone)]
pub struct LeaseRecoverer {
    client: Client,
    interval: Duration,
    sweep: Duration,
}

impl LeaseRecoverer {
    /// A recoverer of every queue of `client`, every [`DEFAULT_RECOVER_INTERVAL_MS`], sweeping
    /// every queue once per [`DEFAULT_SWEEP_MS`].
    pub fn new(client: Client) -> Self {
        Self {
            client,
            interval: Duration::from_millis(DEFAULT_RECOVER_INTERVAL_MS),
            sweep: Duration::from_millis(DEFAULT_SWEEP_MS),
        }
    }

    /// Pause between two passes, ms (at least 1). Default 1 000 (within 1 s of
    /// expiry).
    pub fn interval_ms(mut self, ms: u64) -> Self {
        self.interval = Duration::from_millis(ms.max(1));
        self
    }

    /// Time to sweep every queue of the registry once, ms (at least the interval). Default
    /// 600 000: a lease whose note in the recovery index never landed is recovered within
    /// this long after it expired.
    pub fn sweep_ms(mut self, ms: u64) -> Self {
        self.sweep = Duration::from_millis(ms);
        self
    }

    /// Runs passes until `stop` completes (finishing the pass in flight). The first pass
    /// sweeps every queue.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut sweep = Sweep::default();
        // on the test clock, a move of the clock may end leases and expiries at once
        let mut moved = self.client.wake_hub().clock_moves();
        loop {
            let clock = async {
                match &mut moved {
                    Some(rx) => rx.recv().await.map(|_| ()),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                res = clock => {
                    if let Err(broadcast::error::RecvError::Closed) = res {
                        moved = None;
                    }
                }
                () = &mut stop => return,
            }
            self.pass(&mut sweep).await;
        }
    }

    /// One pass: the queues the recovery index says are due, then the sweep's next slice.
    async fn pass(&self, sweep: &mut Sweep) {
        if let Err(e) = self.due_pass().await {
            tracing::warn!(error = %e, "recoverer: could not read the recovery index");
        }
        if let Err(e) = self.sweep_pass(sweep).await {
            tracing::warn!(error = %e, "recoverer: could not sweep the queue registry");
        }
    }

    /// Recovers the queues due in the recovery index (a full batch: again at once).
    async fn due_pass(&self) -> crate::Result<()> {
        loop {
            let due = queues::recovery_due(&mut self.client.conn(), DUE_BATCH, HOLD_MS).await?;
            let full = due.queues.len() >= DUE_BATCH;
            if due.queues.is_empty() {
                return Ok(());
            }
            // a queue whose recovery failed is looked at again next pass
            let retry_at = due.now_ms + self.interval.as_millis() as u64;
            let found = self.recover_all(due.queues, Some(retry_at)).await;
            queues::recovery_done(&mut self.client.conn(), &due.mark, &found).await?;
            if !full {
                return Ok(());
            }
        }
    }

    /// Recovers the sweep's next slice of the registry and notes what each queue has next.
    async fn sweep_pass(&self, sweep: &mut Sweep) -> crate::Result<()> {
        let mut conn = self.client.conn();
        let count = if sweep.started {
            let n = queues::count_queues(&mut conn).await?;
            let passes = (self.sweep.as_millis() / self.interval.as_millis().max(1)).max(1);
            usize::try_from(u128::from(n).div_ceil(passes)).unwrap_or(usize::MAX)
        } else {
            // the first pass sweeps every queue: leases from before this process started
            usize::MAX
        };
        let mut left = count;
        loop {
            let (next, names) =
                queues::scan_queues(&mut conn, &sweep.cursor, left.clamp(1, DUE_BATCH)).await?;
            left = left.saturating_sub(names.len());
            let found = self.recover_all(names, None).await;
            // no mark: entries are only written (next >= 0), never removed here
            queues::recovery_done(&mut conn, "-1", &found).await?;
            sweep.cursor = next;
            if sweep.cursor == "0" {
                sweep.started = true;
                return Ok(());
            }
            if left == 0 {
                sweep.started = true;
                return Ok(());
            }
        }
    }

    /// Recovers `names` (at most [`CONCURRENCY`] at once); each one's next lease deadline or
    /// expiry, or `on_error` when its recovery failed.
    async fn recover_all(
        &self,
        names: Vec<String>,
        on_error: Option<u64>,
    ) -> Vec<(String, Option<u64>)> {
        futures_util::stream::iter(names)
            .map(|name| async move {
                let next = match self.client.queue(&name) {
                    Ok(q) => recover_queue(&q).await.unwrap_or(on_error),
                    Err(e) => {
                        tracing::warn!(queue = name, error = %e,
                            "recoverer: bad queue name in the registry");
                        None
                    }
                };
                (name, next)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }
}

/// Where the sweep of the queue registry is.
#[derive(Debug)]
struct Sweep {
    /// `SSCAN` cursor of the registry ("0": a new round).
    cursor: String,
    /// The first full round is done: later passes take slices.
    started: bool,
}

impl Default for Sweep {
    fn default() -> Self {
        Self {
            cursor: "0".to_owned(),
            started: false,
        }
    }
}

/// Recovers `q` (several calls while a backlog fills them); its next lease deadline or
/// expiry, or `None` (the call failed) when Redis failed.
async fn recover_queue(q: &Queue) -> Option<Option<u64>> {
    for _ in 0..MAX_CALLS_PER_QUEUE {
        match q.recover().await {
            Ok(r) => {
                log_recovered(q.name(), &r);
                if r.recovered + r.dead < RECOVER_BATCH && !r.expired_more {
                    return Some(r.next_check_at_ms());
                }
            }
            Err(e) => {
                tracing::warn!(queue = q.name(), error = %e, "recoverer: recover failed");
                return None;
            }
        }
    }
    // a backlog bigger than this pass's share: look again next pass
    Some(Some(0))
}
