//! A claim without waiting ([`Queue::claim`]): due tasks now, shared over the partitions by
//! the rule the [`DueClaimer`](crate::DueClaimer) uses (`client/partitions.rs`'s `split`).

use futures_util::future::join_all;

use super::Queue;
use super::recover::earliest;
use crate::client::partitions::split;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::leases::{self, ClaimTracking, Throttle};
use crate::protocol::queues;
use crate::task::{ClaimedTask, validate_lease_ms};

/// What a claim returned.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Claim {
    /// The claimed tasks: ungrouped ones by priority (0 first), then due time (FIFO among
    /// equal due times); grouped ones interleaved round-robin by group.
    pub tasks: Vec<ClaimedTask>,
    /// Redis time of the claim, epoch ms.
    pub now_ms: u64,
    /// Earliest due time still scheduled (after this claim), epoch ms.
    pub next_due_at_ms: Option<u64>,
    /// Earliest lease deadline of an active task, epoch ms.
    pub next_lease_deadline_ms: Option<u64>,
    /// Whether the queue is paused (then no tasks are handed out).
    pub paused: bool,
    /// Whether a lease without a deadline entry was seen (run [`Queue::recover`]).
    pub orphans: bool,
    /// A queue limit that held due work back, if any.
    pub throttle: Option<Throttle>,
    /// Whether due work waits for a concurrency slot (the queue's limit, or a group parked at
    /// its `group_concurrency`): the next ack, nack or release of an active task frees one.
    pub waits_for_slot: bool,
    /// Version of the queue's settings (changes with every settings change).
    pub settings_version: u64,
    /// The schedule of each missed tick this claim dropped instead of handing it out: a
    /// tick's task that had not started by its misfire deadline, one name per
    /// tick.
    pub missed_ticks: Vec<String>,
}

impl Queue {
    /// Claims up to `max` due tasks (1 to 1 000), each under a lease of its own `lease_ms`
    /// or of `lease_ms` when given. Returns at once (no waiting).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for `max` over 1 000 or a bad lease, [`ErrorKind::Redis`](crate::ErrorKind::Redis).
    ///
    /// A partitioned queue: each partition is asked for an even share of `max` at once (so
    /// priorities and due order hold within each partition's share), then the partitions that
    /// filled their share for what is left, again at once (two round trips, as a rule). The
    /// shares follow the rule of [`DueClaimer`](crate::DueClaimer)'s claims. The
    /// reply's times are the earliest over the partitions.
    pub async fn claim(&self, max: usize, lease_ms: Option<u64>) -> Result<Claim> {
        let layout = if self.part {
            None
        } else {
            Some(self.claim_layout().await?).filter(|l| l.n() > 1)
        };
        let Some(layout) = layout else {
            return self
                .claim_tracked(max, lease_ms, ClaimTracking::default())
                .await;
        };
        let n = layout.n();
        let mut turn = layout.next_keyless();
        let parts = self.parts(&layout);
        // every partition is asked in the first round, for its share (0 too: its answer
        // tells the timings)
        let shares = split(max, &vec![true; n], turn);
        let calls = parts
            .iter()
            .zip(shares)
            .enumerate()
            .map(|(p, (q, n))| async move {
                (
                    p,
                    n,
                    q.claim_tracked(n, lease_ms, ClaimTracking::default()).await,
                )
            });
        let mut all: Option<Claim> = None;
        // the partitions that filled their share, and so may have more
        let mut full = vec![false; n];
        for (p, n, c) in join_all(calls).await {
            let c = c?;
            full[p] = n > 0 && c.tasks.len() >= n;
            merge_into(&mut all, c);
        }
        // what is left, shared among the partitions that may have more, again at once, until
        // `max` is reached or none filled its share; a partition given no share (`rest`
        // below their number) stays a candidate
        loop {
            let got = all.as_ref().map_or(0, |c| c.tasks.len());
            if got >= max || !full.contains(&true) {
                break;
            }
            turn = turn.wrapping_add(1);
            let shares = split(max - got, &full, turn);
            let calls = shares
                .into_iter()
                .enumerate()
                .filter(|&(_, n)| n > 0)
                .map(|(p, n)| {
                    let q = &parts[p];
                    async move {
                        (
                            p,
                            n,
                            q.claim_tracked(n, lease_ms, ClaimTracking::default()).await,
                        )
                    }
                });
            for (p, n, c) in join_all(calls).await {
                let c = c?;
                full[p] = c.tasks.len() >= n;
                merge_into(&mut all, c);
            }
        }
        all.ok_or_else(|| Error::protocol("claim: no partitions"))
    }

    /// [`Queue::claim`] with lost-reply recovery (used by the worker).
    pub(crate) async fn claim_tracked(
        &self,
        max: usize,
        lease_ms: Option<u64>,
        tracking: ClaimTracking<'_>,
    ) -> Result<Claim> {
        if max > MAX_BATCH {
            return Err(Error::invalid(format!("max must be 0 to {MAX_BATCH}")));
        }
        if let Some(l) = lease_ms {
            validate_lease_ms(l)?;
        }
        let r = leases::claim(
            &mut self.client.conn(),
            &self.keys,
            max,
            lease_ms.unwrap_or(0),
            tracking,
        )
        .await?;
        self.note_leases(&r.tasks);
        self.client
            .settings_seen(&self.keys.meta, r.settings_version);
        Ok(Claim {
            tasks: r.tasks,
            now_ms: r.now_ms,
            next_due_at_ms: r.next_due_ms,
            next_lease_deadline_ms: r.next_deadline_ms,
            paused: r.paused,
            orphans: r.orphans,
            throttle: r.throttle,
            waits_for_slot: r.waits_for_slot,
            settings_version: r.settings_version,
            missed_ticks: r.missed_ticks,
        })
    }

    /// Notes the earliest lease deadline of `tasks`, just handed out, in the recovery index,
    /// so that a recoverer finds them should this process die before it acknowledges them.
    /// Sent without waiting for the answer (the claim's tasks go to their handlers at once):
    /// a process that dies before the note lands leaves leases a recoverer's sweep of every
    /// queue finds (see `duties/recoverer.rs`).
    fn note_leases(&self, tasks: &[ClaimedTask]) {
        let Some(at) = tasks.iter().map(|t| t.lease_expires_at_ms).min() else {
            return;
        };
        let mut conn = self.client.conn();
        let name = self.name().to_owned();
        tokio::spawn(async move {
            if let Err(e) = queues::recovery_note(&mut conn, &name, at).await {
                tracing::warn!(queue = name, error = %e, "could not note leases for recovery");
            }
        });
    }
}

fn merge_into(all: &mut Option<Claim>, c: Claim) {
    match all {
        None => *all = Some(c),
        Some(a) => a.merge(c),
    }
}

impl Claim {
    /// Adds the answer of another partition's claim.
    fn merge(&mut self, o: Claim) {
        let min = earliest;
        self.tasks.extend(o.tasks);
        self.now_ms = self.now_ms.max(o.now_ms);
        self.next_due_at_ms = min(self.next_due_at_ms, o.next_due_at_ms);
        self.next_lease_deadline_ms = min(self.next_lease_deadline_ms, o.next_lease_deadline_ms);
        self.paused &= o.paused;
        self.orphans |= o.orphans;
        self.throttle = self.throttle.or(o.throttle);
        self.waits_for_slot |= o.waits_for_slot;
        self.missed_ticks.extend(o.missed_ticks);
    }
}
