//! One claim of a [`DueClaimer`]: over the partitions of a queue, in rounds, each
//! partition's claim a task of its own.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::partition::PartitionClaimer;
use super::{Answer, DueClaimer, MAX_ROUND_WAIT, MIN_ROUND_WAIT, any_of};
use crate::client::{Queue, split};
use crate::error::Result;
use crate::task::ClaimedTask;

impl DueClaimer {
    /// Claims up to `max` due tasks (0 to 1 000; 0 only recovers and learns the timing),
    /// recovering expired leases first when one is due. Returns at once; tasks of an earlier
    /// call whose reply was lost may come first and make the list longer than `max`.
    ///
    /// Redis counts every task handed out and its lateness (the claim script,
    /// [`QueueStats::lateness`](crate::QueueStats::lateness)). Each task comes with
    /// `started_at_ms` set to the Redis time of the hand-out (a consumer that starts the
    /// handler later adds the delay; the worker does).
    ///
    /// A partitioned queue: `max` is shared among the partitions whose work is due (as each
    /// one's last answer and wake-ups tell), their claims sent at once, each as a task of its
    /// own; an idle partition (no work due within a poll) whose fallback poll comes within
    /// half a poll is asked for nothing at the same time, so idle partitions cost one round
    /// of calls per poll, not one each. The claim waits for the first answer and then for
    /// the others twice as long again, at least [`MIN_ROUND_WAIT`] (at most
    /// [`MAX_ROUND_WAIT`] in all), never for a partition whose last call failed, and no
    /// longer than until a partition not asked has work (its timer or a wake-up): a
    /// partition whose node hangs holds up only its own
    /// tasks, which a later claim hands out when they come (its answer ends
    /// [`ready`](Self::ready)). A later claim keeps the share of a claim still out for its
    /// answer, for at most [`MAX_ROUND_WAIT`] after it was sent, and when those shares cover
    /// all of `max` it waits for them (so a call may wait up to [`MAX_ROUND_WAIT`]). A late
    /// answer still makes the list longer than `max` when `max` shrank meanwhile, or when it
    /// comes after its share lapsed or from a partition whose last call had failed.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for `max` over 1 000 or a bad lease;
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails: the error is for logging; the
    /// next look is pushed back by a growing pause (10 ms to 1 s), so calling
    /// [`ready`](Self::ready) and then `claim` again is the right loop. (With partitions, the
    /// tasks of the partitions that answered are handed out and a failure is only logged.)
    ///
    /// # Cancel safety
    /// Not cancel safe: a claim dropped in flight may have leased tasks, which then come back
    /// only when their leases expire.
    pub async fn claim(&mut self, max: usize) -> Result<Vec<ClaimedTask>> {
        self.sync_layout().await?;
        if let [Some(one)] = self.parts.as_mut_slice() {
            return one.claim(max).await;
        }
        let mut tasks = std::mem::take(&mut self.late);
        let mut failed = None;
        // a partition that answered late is not asked again in this call
        let mut short = vec![false; self.parts.len()];
        while let Ok(a) = self.answers.try_recv() {
            self.take_answer(a, None, &mut short, &mut tasks, &mut failed);
        }
        // rounds: a partition held back for want of a share takes, in the next round, what
        // the short claims of the others left (else the freed slots would wait for its poll);
        // a partition that came back short is not asked again in this call
        while tasks.len() < max || tasks.is_empty() {
            // the claims of earlier calls still out keep their shares: their answers come
            // into this call, and without room for them the caller would hand tasks back;
            // when they may fill every slot left, the call waits for them (a share lapses
            // MAX_ROUND_WAIT after its claim was sent, so a hanging node holds a call up at
            // most that long)
            let left = max - tasks.len().min(max);
            let (reserved, lapses) = self.reserved(Instant::now());
            if left > 0 && reserved >= left {
                tokio::select! {
                    a = self.answers.recv() => if let Some(a) = a {
                        self.take_answer(a, None, &mut short, &mut tasks, &mut failed);
                    },
                    () = sleep_until(lapses) => {}
                }
                continue;
            }
            let held = self
                .claim_round(
                    left.saturating_sub(reserved),
                    &mut short,
                    &mut tasks,
                    &mut failed,
                )
                .await;
            if !held || tasks.len() >= max || failed.is_some() {
                break;
            }
        }
        match failed {
            Some(e) if tasks.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(queue = self.queue.name(), error = %e,
                    "claim of one partition failed; retrying it after a pause");
                Ok(tasks)
            }
            None => Ok(tasks),
        }
    }

    /// One round of a partitioned claim of up to `max` (see [`claim`](Self::claim)), leaving
    /// out the partitions marked in `short` (they came back with less than their share in an
    /// earlier round of this call, and are marked so here) and those whose claim is still
    /// out. The claimed tasks go to `tasks`, the first failure to `failed`. Returns whether a
    /// partition with due work got no share (was held back).
    async fn claim_round(
        &mut self,
        max: usize,
        short: &mut [bool],
        tasks: &mut Vec<ClaimedTask>,
        failed: &mut Option<crate::Error>,
    ) -> bool {
        let now = Instant::now();
        let poll = Duration::from_millis(self.poll_ms);
        let soon = now + poll / 2;
        let wants: Vec<bool> = self
            .parts
            .iter()
            .zip(short.iter())
            .map(|(s, &short)| {
                s.as_ref()
                    .is_some_and(|p| !short && (p.has_due_work() || p.next_look_at() <= now))
            })
            .collect();
        let shares = split(max, &wants, self.turn);
        self.turn = self.turn.wrapping_add(1);
        let mut held = false;
        let mut asked: Vec<Option<usize>> = vec![None; self.parts.len()];
        // asked partitions whose last call failed: their node may be gone, so no wait
        let mut failing = vec![false; self.parts.len()];
        for (i, ((slot, &n), &want)) in self.parts.iter_mut().zip(&shares).zip(&wants).enumerate() {
            let Some(part) = slot else { continue };
            let look = part.next_look_at();
            held |= n == 0 && want && part.has_due_work();
            let ask = n > 0
                || (!short[i] && look <= now && !(want && part.has_due_work() && part.hold()))
                || (!short[i] && look <= soon && part.idle_until(now + poll));
            if ask {
                let Some(part) = slot.take() else { continue };
                asked[i] = Some(n);
                failing[i] = part.failing();
                // (a partition whose last call failed may not answer soon: none kept for it)
                if let Some(o) = self.out.get_mut(i) {
                    *o = (if failing[i] { 0 } else { n }, now);
                }
                tokio::spawn(claim_out(i, part, n, self.answers_tx.clone()));
            }
        }
        if asked.iter().all(Option::is_none) {
            return held;
        }
        // the first answer, then the others twice as long again (at least MIN_ROUND_WAIT), at
        // most MAX_ROUND_WAIT;
        // only for partitions asked now and not failing, and only until a partition not
        // asked has work (its timer, a wake-up): a hanging node's claim never holds up the
        // due tasks of the others
        let sent = Instant::now();
        let mut until = sent + MAX_ROUND_WAIT;
        let mut first = true;
        let watched: Vec<bool> = self
            .parts
            .iter()
            .map(|s| s.as_ref().is_some_and(|p| p.next_look_at() > sent))
            .collect();
        let awaited = |parts: &[Option<PartitionClaimer>]| {
            (0..parts.len()).any(|i| asked[i].is_some() && !failing[i] && parts[i].is_none())
        };
        while awaited(&self.parts) {
            let others = self
                .parts
                .iter_mut()
                .zip(&watched)
                .filter(|(_, w)| **w)
                .filter_map(|(s, _)| s.as_mut())
                .map(PartitionClaimer::ready);
            let a = tokio::select! {
                a = self.answers.recv() => a,
                () = sleep_until(until) => None,
                () = any_of(others) => None,
            };
            let Some(a) = a else { break };
            let i = a.0;
            self.take_answer(a, asked.get(i).copied().flatten(), short, tasks, failed);
            if first {
                first = false;
                until = until.min(Instant::now() + (sent.elapsed() * 2).max(MIN_ROUND_WAIT));
            }
        }
        held
    }

    /// The slots the claims still out (sent by earlier calls) may fill, and when the first
    /// of them stops counting: a claim out for [`MAX_ROUND_WAIT`] (its node may hang) keeps
    /// none.
    fn reserved(&self, now: Instant) -> (usize, Instant) {
        let mut n = 0;
        let mut lapses = now + MAX_ROUND_WAIT;
        for &(share, sent) in &self.out {
            let ends = sent + MAX_ROUND_WAIT;
            if share > 0 && ends > now {
                n += share;
                lapses = lapses.min(ends);
            }
        }
        (n, lapses)
    }

    /// Puts a partition's claimer back from its answer; its tasks go to `tasks`, a failure to
    /// `failed`; it counts as short unless it filled `asked`, its share of this round.
    pub(super) fn take_answer(
        &mut self,
        (i, part, got): Answer,
        asked: Option<usize>,
        short: &mut [bool],
        tasks: &mut Vec<ClaimedTask>,
        failed: &mut Option<crate::Error>,
    ) {
        if let Some(slot) = self.parts.get_mut(i) {
            *slot = Some(part);
        }
        if let Some(o) = self.out.get_mut(i) {
            o.0 = 0;
        }
        let short = short.get_mut(i);
        match got {
            Ok(t) => {
                if let Some(s) = short {
                    *s |= asked.is_none_or(|n| n == 0 || t.len() < n);
                }
                tasks.extend(t);
            }
            Err(e) => {
                if let Some(s) = short {
                    *s = true;
                }
                *failed = failed.take().or(Some(e));
            }
        }
    }
}

/// A partition's claim as a task of its own: sends its answer to its `DueClaimer`, or,
/// when that is gone, hands the tasks back.
async fn claim_out(
    i: usize,
    mut part: PartitionClaimer,
    n: usize,
    answers: mpsc::UnboundedSender<Answer>,
) {
    let got = part.claim(n).await;
    if let Err(mpsc::error::SendError((_, part, got))) = answers.send((i, part, got))
        && let Ok(tasks) = got
        && !tasks.is_empty()
    {
        hand_back(part.queue().clone(), tasks).await;
    }
}

/// Releases `tasks` (due again at once, the attempt not counted).
pub(super) async fn hand_back(queue: Queue, tasks: Vec<ClaimedTask>) {
    let items: Vec<_> = tasks.into_iter().map(|t| (t.id, t.lease_token)).collect();
    if let Err(e) = queue.release(&items).await {
        tracing::warn!(queue = queue.name(), error = %e,
            "could not hand back tasks claimed for a claimer that is gone; their leases expire");
    }
}
