//! Slot sharing is responsible for deciding how the free concurrency slots of a worker that
//! serves several queues go to those queues: [`QueueOrder::Weighted`]
//! shares them in proportion to the weights of the queues that have due work;
//! [`QueueOrder::Strict`] gives them to the highest-weight queue with due work, and to a lower
//! one only while every higher one has nothing due. A queue with nothing due takes nothing.
//!
//! It is separate and pure (no Redis, no clock, no tokio) because it is the one rule that makes
//! weights mean something (with the check of the weights themselves, [`weights`]): the claimer (`claimer::run_many`) says how many slots are free and
//! which queues have due work (from what each `DueClaimer` learned from its last claim), and
//! applies the split; the tests here check the split itself.
//!
//! Weighted sharing is smooth weighted round-robin (nginx's way of sharing requests among
//! upstreams): each slot goes to the queue with the most credit; every queue with due work
//! earns its weight per slot and the winner pays the sum of those weights. The shares then
//! hold across rounds, also when a round has a single free slot (a busy worker frees its slots
//! one by one as handlers end). Rejected: a proportional split per round (largest remainder),
//! which gives a lone free slot to the heaviest queue every time, so 3:1 would become 1:0.

use crate::error::{Error, Result};

/// How a worker that serves several queues shares its concurrency slots among them when more
/// than one has due work. Set with
/// [`WorkerBuilder::queue_order`](crate::WorkerBuilder::queue_order); the weights with
/// [`WorkerBuilder::weight`](crate::WorkerBuilder::weight). A worker with one queue ignores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueOrder {
    /// The default: the slots are shared in proportion to the weights of the queues that have
    /// due work (weights 3 and 1: three tasks of the first for each of the second, while both
    /// have due work). A queue with nothing due takes nothing from the others, so an idle
    /// queue's share goes to the busy ones.
    #[default]
    Weighted,
    /// Queues in order of weight, highest first (equal weights: the order of
    /// [`WorkerBuilder::handle`](crate::WorkerBuilder::handle) calls): a lower queue gets slots
    /// only while every higher queue has nothing due. A higher queue that always has due work
    /// starves the lower ones.
    Strict,
}

/// Largest weight of a queue in a worker ([`WorkerBuilder::weight`](crate::WorkerBuilder::weight)).
pub const MAX_QUEUE_WEIGHT: u32 = 1_000;

/// The weight of each of `queues` (default 1) from the `given` (queue, weight) pairs, the
/// last one for a queue counting.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a weight out of range or of a queue not in
/// `queues`.
pub(super) fn weights(queues: &[&str], given: &[(String, u32)]) -> Result<Vec<u32>> {
    let mut weights = vec![1; queues.len()];
    for (name, w) in given {
        let Some(i) = queues.iter().position(|q| q == name) else {
            return Err(Error::invalid(format!(
                "weight of queue {name}: the worker has no handler for it"
            )));
        };
        if !(1..=MAX_QUEUE_WEIGHT).contains(w) {
            return Err(Error::invalid(format!(
                "weight of queue {name}: {w} is out of range (1 to {MAX_QUEUE_WEIGHT})"
            )));
        }
        weights[i] = *w;
    }
    Ok(weights)
}

/// The sharing state of one worker's queues (indices as in the worker's queue list).
#[derive(Debug)]
pub(super) struct Share {
    order: QueueOrder,
    weights: Vec<u32>,
    /// Queue indices by weight, highest first; equal weights keep their order (strict order).
    ranked: Vec<usize>,
    /// Smooth round-robin credit per queue (weighted order); 0 for a queue without due work.
    credit: Vec<i64>,
}

impl Share {
    /// Sharing among queues with these weights (each at least 1).
    pub(super) fn new(order: QueueOrder, weights: Vec<u32>) -> Self {
        let mut ranked: Vec<usize> = (0..weights.len()).collect();
        // a stable sort keeps equal weights in the order the queues were given
        ranked.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
        let credit = vec![0; weights.len()];
        Self {
            order,
            weights,
            ranked,
            credit,
        }
    }

    /// Shares `free` slots among the queues `i` with `due[i]`: `out[i]` is how many queue
    /// `i` may claim this round. Every free slot goes to some queue when any has due work;
    /// none goes anywhere when none has. `due` and `out` are as long as the weights.
    pub(super) fn split(&mut self, free: usize, due: &[bool], out: &mut [usize]) {
        out.fill(0);
        match self.order {
            QueueOrder::Strict => {
                if let Some(&top) = self.ranked.iter().find(|&&i| due[i]) {
                    out[top] = free;
                }
            }
            QueueOrder::Weighted => self.weighted(free, due, out),
        }
    }

    fn weighted(&mut self, free: usize, due: &[bool], out: &mut [usize]) {
        let mut total = 0i64;
        for (i, c) in self.credit.iter_mut().enumerate() {
            if due[i] {
                total += i64::from(self.weights[i]);
            } else {
                // a queue that ran dry starts afresh when work comes back: no debt, no
                // savings from the time it had nothing to claim
                *c = 0;
            }
        }
        if total == 0 {
            return;
        }
        for _ in 0..free {
            // (queue, its credit) with the most credit; the first one among equals
            let mut best: Option<(usize, i64)> = None;
            for (i, (c, w)) in self.credit.iter_mut().zip(&self.weights).enumerate() {
                if !due[i] {
                    continue;
                }
                *c += i64::from(*w);
                if best.is_none_or(|(_, most)| *c > most) {
                    best = Some((i, *c));
                }
            }
            // `total > 0`, so at least one queue is due and `best` is set
            if let Some((b, _)) = best {
                self.credit[b] -= total;
                out[b] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(share: &mut Share, rounds: &[(usize, &[bool])]) -> Vec<usize> {
        let mut total = vec![0; share.weights.len()];
        let mut out = vec![0; share.weights.len()];
        for (free, due) in rounds {
            share.split(*free, due, &mut out);
            assert_eq!(
                out.iter().sum::<usize>(),
                if due.iter().any(|d| *d) { *free } else { 0 },
                "every free slot goes to a queue with due work"
            );
            for (i, n) in out.iter().enumerate() {
                assert!(*n == 0 || due[i], "queue {i} has nothing due but got {n}");
                total[i] += n;
            }
        }
        total
    }

    #[test]
    fn weighted_shares_one_slot_at_a_time_in_proportion() {
        let mut s = Share::new(QueueOrder::Weighted, vec![3, 1]);
        let rounds = vec![(1, &[true, true][..]); 400];
        assert_eq!(run(&mut s, &rounds), [300, 100]);
        // and never more than one slot ahead of the exact share along the way
        let mut s = Share::new(QueueOrder::Weighted, vec![3, 1]);
        let mut out = [0; 2];
        let mut a = 0;
        for n in 1..=40 {
            s.split(1, &[true, true], &mut out);
            a += out[0];
            assert!((a as f64 - 0.75 * n as f64).abs() <= 1.0, "{a} of {n}");
        }
    }

    #[test]
    fn weighted_shares_a_large_round_in_proportion() {
        let mut s = Share::new(QueueOrder::Weighted, vec![3, 1]);
        let mut out = [0; 2];
        s.split(8, &[true, true], &mut out);
        assert_eq!(out, [6, 2]);
        let mut s = Share::new(QueueOrder::Weighted, vec![5, 3, 2]);
        let mut out = [0; 3];
        s.split(100, &[true, true, true], &mut out);
        assert_eq!(out, [50, 30, 20]);
        // uneven rounds still add up to the weights over time
        let mut s = Share::new(QueueOrder::Weighted, vec![2, 1]);
        let rounds: Vec<(usize, &[bool])> = (0..300).map(|i| (i % 4, &[true, true][..])).collect();
        let t = run(&mut s, &rounds);
        assert_eq!(t[0] + t[1], 450);
        assert!(t[0].abs_diff(300) <= 1, "{t:?}");
    }

    #[test]
    fn a_queue_without_due_work_takes_nothing_and_owes_nothing() {
        let mut s = Share::new(QueueOrder::Weighted, vec![3, 1]);
        assert_eq!(run(&mut s, &[(4, &[false, true])]), [0, 4]);
        assert_eq!(run(&mut s, &[(4, &[true, false])]), [4, 0]);
        assert_eq!(run(&mut s, &[(4, &[false, false])]), [0, 0]);
        // back to both: the proportion at once, whatever came before
        let rounds = vec![(1, &[true, true][..]); 4];
        assert_eq!(run(&mut s, &rounds), [3, 1]);
    }

    #[test]
    fn weights_default_to_one_and_the_last_counts() {
        let given = [("b".to_owned(), 3), ("b".to_owned(), 5)];
        assert_eq!(weights(&["a", "b"], &given).unwrap(), [1, 5]);
        for (bad, message) in [
            (("a", 0), "weight of queue a: 0 is out of range (1 to 1000)"),
            (("a", 1_001), "weight of queue a: 1001 is out of range"),
            (
                ("c", 1),
                "weight of queue c: the worker has no handler for it",
            ),
        ] {
            let e = weights(&["a", "b"], &[(bad.0.to_owned(), bad.1)]).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(message), "{e}");
        }
    }

    #[test]
    fn equal_weights_alternate() {
        let mut s = Share::new(QueueOrder::Weighted, vec![1, 1, 1]);
        let rounds = vec![(1, &[true, true, true][..]); 9];
        assert_eq!(run(&mut s, &rounds), [3, 3, 3]);
    }

    #[test]
    fn strict_serves_the_highest_weight_with_due_work_only() {
        // handle order b, a, c with weights 1, 5, 1: a first, then b, then c
        let mut s = Share::new(QueueOrder::Strict, vec![1, 5, 1]);
        assert_eq!(run(&mut s, &[(4, &[true, true, true])]), [0, 4, 0]);
        assert_eq!(run(&mut s, &[(4, &[true, false, true])]), [4, 0, 0]);
        assert_eq!(run(&mut s, &[(4, &[false, false, true])]), [0, 0, 4]);
        assert_eq!(run(&mut s, &[(4, &[false, false, false])]), [0, 0, 0]);
        assert_eq!(run(&mut s, &[(0, &[true, true, true])]), [0, 0, 0]);
    }
}
