//! The one claim path: waiting until work is due, then claiming it.
//!
//! [`DueClaimer`] is the only code that decides when a queue is asked for work. The Rust
//! [`Worker`](crate::Worker), the HTTP long-poll claim of `dueq serve` and push delivery all
//! take tasks through it, so a rule about handing out work (a rate limit, a priority, a
//! schedule) is written once, here. It owns:
//!
//! * the timer to the next due time, by the Redis clock ([`clock`]): the claim script returns
//!   the server's time and the earliest due time, and the claimer sleeps for their difference;
//! * the wake-up subscription (the client's wake hub, `client/wake.rs`): one pub/sub
//!   connection per [`Client`](crate::Client), shared by all its claimers, with a bounded table of queues; an earlier task ends the sleep at once;
//! * the fallback poll (at most every second) for lost notifications (DESIGN 2.6, case C02);
//! * lease recovery of its queue ([`recovery`]): when a lease deadline passes, or a claim saw a
//!   lease without a deadline entry, it recovers before claiming;
//! * replay of a lost claim reply: a claim whose reply never arrived is asked for again by id
//!   on the next call, so its tasks are not stuck until their leases expire (case C01);
//!
//! Its answer to "no work" is [`DueClaimer::next_look_at`]: the instant the next claim can
//! find some. [`DueClaimer::ready`] sleeps until then (or until a wake-up says sooner), so no
//! caller computes a sleep. `PartitionClaimer::plan_next_look` ([`partition`]) is the single
//! function that decides that instant: a limiter that must hold work back until a slot opens
//! hooks in there.
//!
//! All of the above is per partition of the queue ([`partition::PartitionClaimer`]; a queue of
//! one partition has one): the `DueClaimer` shares each claim among its partitions and
//! sleeps until the first of them is ready (docs/SCALING.md). A partition's claim runs as a
//! task of its own, so a partition whose node hangs holds up only its own tasks: a claim
//! returns what the partitions that answered handed out, and a late answer is handed out by
//! the next claim (or handed back when the claimer is gone). The share of each partition is
//! `client/partitions.rs`'s `split`, the one rule [`Queue::claim`] uses too.
//!
//! Files: `claimer.rs` builds a `DueClaimer` and waits; `round.rs` is one claim over the
//! partitions; `partition.rs` the claimer of one partition; `clock.rs` the Redis clock;
//! `recovery.rs` when a claimer recovers expired leases.
//!
//! Rejected alternative: Redis blocking commands (`BZPOPMIN`), which fire on the server's
//! `hz` tick (100 ms by default) and cannot express "due at T".

mod claimer;
pub(crate) mod clock;
pub(crate) mod partition;
pub(crate) mod recovery;
mod round;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::{Layout, Queue};
use crate::error::Result;
use crate::task::ClaimedTask;
use clock::RedisClock;
use partition::PartitionClaimer;

/// Default and largest fallback poll, ms.
pub const MAX_POLL_MS: u64 = 1_000;

/// Longest pause after the partitions of a queue could not be read (the first call).
const MAX_LAYOUT_PAUSE: Duration = Duration::from_secs(1);

/// Longest a claim round waits for the partitions still out once one has answered: the
/// others' answers of a healthy round come within a few milliseconds; a partition slower
/// than this (its node hanging) answers into a later claim.
const MAX_ROUND_WAIT: Duration = Duration::from_millis(50);

/// Least a claim round waits for the partitions still out once one has answered. A partition
/// that answers after its round hands its tasks to a later claim, on top of the slots that
/// claim shares out, so the worker must hand the extra ones back: on a loaded machine the
/// masters' answers spread over a few milliseconds.
const MIN_ROUND_WAIT: Duration = Duration::from_millis(3);

/// What a partition's claim, run as a task of its own, sends back: the partition's index,
/// its claimer and the claim's answer.
type Answer = (usize, PartitionClaimer, Result<Vec<ClaimedTask>>);

/// A partition's claimer, or `None` while its claim is out (the task running it owns it).
type Slot = Option<PartitionClaimer>;

/// Waits until work of one queue is due, then claims it. Build with [`Queue::due_claimer`].
///
/// Use it as a loop: [`claim`](Self::claim) (which may hand out nothing), then
/// [`ready`](Self::ready) to sleep until the next claim can find work; or
/// [`claim_within`](Self::claim_within) for a long-poll. Not shared: one per consumer loop.
///
/// A partitioned queue gets one [`PartitionClaimer`] per partition, each with its own timer,
/// wake-ups and lease recovery (so a task is never early and is as punctual as in a queue of
/// one partition); a claim shares its `max` among the partitions that have due work, and
/// the fallback polls of idle partitions go out together (one round of calls per poll).
pub struct DueClaimer {
    queue: Queue,
    lease_ms: Option<u64>,
    poll_ms: u64,
    notifications: bool,
    replay: bool,
    worker: Option<Arc<str>>,
    clock: Arc<RedisClock>,
    /// The partitions the claimers below are for (`None` before the first claim).
    layout: Option<Arc<Layout>>,
    parts: Vec<Slot>,
    /// The share each partition's claim still out was asked for (0 when it is not out), and
    /// when it was sent: its answer may fill that many of a later claim's slots.
    out: Vec<(usize, Instant)>,
    /// Answers of partition claims that ran as tasks of their own (several partitions).
    answers_tx: mpsc::UnboundedSender<Answer>,
    answers: mpsc::UnboundedReceiver<Answer>,
    /// Tasks of late answers, for the next claim.
    late: Vec<ClaimedTask>,
    /// Which partition gets the first of an uneven split of `max`.
    turn: usize,
    /// Reading the partitions failed before any was known: no look before this.
    retry_at: Instant,
    error_pause: Duration,
}

impl std::fmt::Debug for DueClaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DueClaimer")
            .field("queue", &self.queue.name())
            .field("lease_ms", &self.lease_ms)
            .field("poll_ms", &self.poll_ms)
            .field("partitions", &self.parts.len())
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// The component that waits until this queue's work is due and claims it: the one claim
    /// path of workers, the HTTP long-poll and push delivery.
    pub fn due_claimer(&self) -> DueClaimer {
        DueClaimer::new(self.clone())
    }
}

/// Completes when any of `waits` completes. Every one is polled each time, not only up to
/// the first that is ready (as `select_all` does), so each claimer waiting beside a busy
/// one still starts its wake-up subscription and reads its wake-ups. Cancel safe when each
/// wait is.
pub(crate) async fn any_of<F: Future<Output = ()>>(waits: impl IntoIterator<Item = F>) {
    let mut waits: Vec<Pin<Box<F>>> = waits.into_iter().map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        // (none of them has completed before: the first round with one ready ends this)
        let mut any = false;
        for w in &mut waits {
            any |= w.as_mut().poll(cx).is_ready();
        }
        if any { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
}
