//! The check of `dueq chaos`, as Jepsen's total-queue checker: from the ledger's events and
//! the final state in Redis of the tasks the ledger does not show acked, count what was lost,
//! duplicated, recovered, unexpected and early.
//!
//! Pure (no I/O), so the rules are unit-tested here. Order within a key comes from Redis, not
//! from the clocks of the processes: a task's deliveries are ordered by attempt (one more per
//! expired lease, so every new delivery of a task has a higher attempt than the one before)
//! and then by Redis claim time. Any delivery ordered after a delivery whose ack answered
//! `acked` is a duplicate: either it was claimed after that ack (delivered again after a
//! successful ack), or before it, and then that ack should have answered `lease_lost`
//! (fencing broken). Both are bugs.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::ledger::{AckAnswer, EnqueueAnswer, Event};

/// What Redis holds at the end for a task the ledger does not show acked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    /// No record: acknowledged (a succeeded task leaves nothing behind) or never written.
    Gone,
    /// In the dead-letter queue (its attempts used up by expired leases).
    Dead,
    /// Still scheduled or active (its state's name).
    Live(&'static str),
    /// Redis could not be read for it.
    Unreadable,
}

/// Largest number of example keys kept per kind of violation.
const EXAMPLES: usize = 5;

/// The counts of a run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Check {
    /// Enqueues answered with success.
    pub confirmed: u64,
    /// Enqueues answered with an error (the task may or may not exist).
    pub unknown: u64,
    /// Confirmed tasks that never finished (not acked, not dead, not gone after a delivery
    /// that may have acked it).
    pub lost: u64,
    /// Deliveries ordered after a delivery of the same task whose ack answered `acked`.
    pub duplicated: u64,
    /// Tasks whose enqueue answer was unknown and which ran anyway.
    pub recovered: u64,
    /// Tasks delivered that were never enqueued (or carried no key, or another id than
    /// their confirmed enqueue answered).
    pub unexpected: u64,
    /// Deliveries claimed before their due time by the Redis clock (the due time of the
    /// claim, or the later one of the confirmed enqueue answer).
    pub early: u64,
    /// Deliveries of a task before the one that was acked (lease expiry, worker crash,
    /// lost reply): allowed by at-least-once, counted.
    pub redelivered: u64,
    /// Distinct deliveries (a lost reply replayed with the same token counts once).
    pub deliveries: u64,
    /// Tasks with an `acked` answer in the ledger.
    pub acked: u64,
    /// Tasks gone from Redis whose only possible ack has no answer (the call failed, or the
    /// worker was killed before it wrote the answer): the ack landed.
    pub ack_answer_lost: u64,
    /// Tasks in the dead-letter queue at the end (allowed: DESIGN 2.1).
    pub dead: u64,
    /// Tasks whose enqueue answer was unknown and that are still live at the end.
    pub unknown_pending: u64,
    /// Up to five keys per violation (`lost`, `duplicated`, `unexpected`, `early`).
    pub examples: BTreeMap<&'static str, Vec<String>>,
    /// Every duplicated delivery, for a check that explains them (`--cluster`).
    #[serde(skip)]
    pub duplicates: Vec<Duplicate>,
}

/// A delivery ordered after a delivery of the same task whose ack answered `acked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    /// The task's key.
    pub key: String,
    /// Redis time of the claim of the acked delivery, epoch ms.
    pub acked_claimed_at_ms: u64,
    /// When its first `acked` answer came (the worker's clock), epoch ms.
    pub acked_at_ms: u64,
    /// Redis time of the claim of the delivery after it, epoch ms.
    pub claimed_at_ms: u64,
}

impl Check {
    /// Whether lost, duplicated, unexpected and early are all 0.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.unexpected == 0 && self.early == 0
    }

    fn example(&mut self, kind: &'static str, key: &str) {
        let v = self.examples.entry(kind).or_default();
        if v.len() < EXAMPLES {
            v.push(key.to_owned());
        }
    }
}

/// One delivery of a task.
struct Delivery<'a> {
    id: &'a str,
    token: &'a str,
    attempt: u32,
    claimed_at_ms: u64,
    due_at_ms: u64,
}

#[derive(Default)]
struct KeyLog<'a> {
    enqueue: Option<EnqueueAnswer>,
    /// Id and due time of the confirmed enqueue.
    enqueued: Option<(&'a str, u64)>,
    deliveries: Vec<Delivery<'a>>,
    /// Per token, the answers of its acks and when they came.
    acks: HashMap<&'a str, Vec<(AckAnswer, u64)>>,
}

fn by_key(events: &[Event]) -> HashMap<&str, KeyLog<'_>> {
    let mut keys: HashMap<&str, KeyLog<'_>> = HashMap::new();
    for ev in events {
        match ev {
            Event::Start { .. } => {}
            Event::Enqueue {
                key,
                answer,
                id,
                due_at_ms,
                ..
            } => {
                let k = keys.entry(key).or_default();
                // a confirmed answer wins (each key is enqueued once; this only guards)
                if k.enqueue != Some(EnqueueAnswer::Confirmed) {
                    k.enqueue = Some(*answer);
                }
                if let (Some(id), Some(due)) = (id, due_at_ms) {
                    k.enqueued = Some((id, *due));
                }
            }
            Event::Deliver {
                id,
                key,
                token,
                attempt,
                due_at_ms,
                claimed_at_ms,
                ..
            } => {
                let k = keys.entry(key).or_default();
                // a lost reply handed out again carries the same token: one delivery
                if k.deliveries.iter().all(|d| d.token != token) {
                    k.deliveries.push(Delivery {
                        id,
                        token,
                        attempt: *attempt,
                        claimed_at_ms: *claimed_at_ms,
                        due_at_ms: *due_at_ms,
                    });
                }
            }
            Event::Ack {
                key,
                token,
                answer,
                at_ms,
                ..
            } => keys
                .entry(key)
                .or_default()
                .acks
                .entry(token)
                .or_default()
                .push((*answer, *at_ms)),
        }
    }
    keys
}

/// The keys whose task the ledger does not show acked, and that were enqueued (confirmed or
/// not): the ones whose final state in Redis the check needs.
pub fn unfinished(events: &[Event]) -> Vec<String> {
    let mut v: Vec<String> = by_key(events)
        .into_iter()
        .filter(|(_, k)| {
            k.enqueue.is_some()
                && !k
                    .acks
                    .values()
                    .flatten()
                    .any(|(a, _)| *a == AckAnswer::Acked)
        })
        .map(|(key, _)| key.to_owned())
        .collect();
    v.sort();
    v
}

/// Checks the run. `finals` holds the final state of (at least) every key of
/// [`unfinished`]; a key missing from it counts as [`Final::Unreadable`].
pub fn check(events: &[Event], finals: &HashMap<String, Final>) -> Check {
    let mut c = Check::default();
    let mut keys: Vec<_> = by_key(events).into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (key, mut k) in keys {
        match k.enqueue {
            Some(EnqueueAnswer::Confirmed) => c.confirmed += 1,
            Some(EnqueueAnswer::Unknown) => c.unknown += 1,
            None => {}
        }
        k.deliveries.sort_by_key(|d| (d.attempt, d.claimed_at_ms));
        c.deliveries += k.deliveries.len() as u64;
        let enqueued_due = k.enqueued.map_or(0, |(_, due)| due);
        let early = k
            .deliveries
            .iter()
            .filter(|d| d.claimed_at_ms < d.due_at_ms.max(enqueued_due))
            .count() as u64;
        if early > 0 {
            c.early += early;
            c.example("early", key);
        }
        let foreign = |d: &Delivery<'_>| k.enqueued.is_some_and(|(id, _)| id != d.id);
        if !k.deliveries.is_empty()
            && (k.enqueue.is_none() || key.is_empty() || k.deliveries.iter().any(foreign))
        {
            c.unexpected += 1;
            c.example("unexpected", key);
        }
        let answer_of = |token: &str, want: AckAnswer| {
            k.acks
                .get(token)
                .is_some_and(|v| v.iter().any(|(a, _)| *a == want))
        };
        let first_acked = k
            .deliveries
            .iter()
            .position(|d| answer_of(d.token, AckAnswer::Acked));
        match first_acked {
            Some(i) => {
                c.acked += 1;
                c.redelivered += i as u64;
                let after = (k.deliveries.len() - 1 - i) as u64;
                if after > 0 {
                    c.duplicated += after;
                    c.example("duplicated", key);
                    let acked = &k.deliveries[i];
                    let acked_at_ms = k.acks[acked.token]
                        .iter()
                        .filter(|(a, _)| *a == AckAnswer::Acked)
                        .map(|(_, at)| *at)
                        .min()
                        .unwrap_or(0);
                    for d in &k.deliveries[i + 1..] {
                        c.duplicates.push(Duplicate {
                            key: key.to_owned(),
                            acked_claimed_at_ms: acked.claimed_at_ms,
                            acked_at_ms,
                            claimed_at_ms: d.claimed_at_ms,
                        });
                    }
                }
            }
            None => {
                c.redelivered += k.deliveries.len().saturating_sub(1) as u64;
                // an ack with no answer (failed call, or none written before a SIGKILL):
                // it may have landed
                let maybe_acked = k
                    .deliveries
                    .iter()
                    .any(|d| !answer_of(d.token, AckAnswer::LeaseLost));
                let confirmed = k.enqueue == Some(EnqueueAnswer::Confirmed);
                match finals.get(key).unwrap_or(&Final::Unreadable) {
                    Final::Dead => c.dead += 1,
                    Final::Gone if maybe_acked => c.ack_answer_lost += 1,
                    // an unknown enqueue that never wrote anything
                    Final::Gone if !confirmed => {}
                    Final::Live(_) if !confirmed => c.unknown_pending += 1,
                    Final::Gone | Final::Live(_) | Final::Unreadable => {
                        if confirmed {
                            c.lost += 1;
                            c.example("lost", key);
                        }
                    }
                }
            }
        }
        if k.enqueue == Some(EnqueueAnswer::Unknown) && !k.deliveries.is_empty() {
            c.recovered += 1;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn enq(key: &str, answer: EnqueueAnswer) -> Event {
        let confirmed = answer == EnqueueAnswer::Confirmed;
        Event::Enqueue {
            key: key.into(),
            answer,
            id: confirmed.then(|| format!("id-{key}")),
            due_at_ms: confirmed.then_some(100),
            error: None,
            at_ms: 0,
        }
    }

    fn deliver(key: &str, token: &str, attempt: u32, claimed_at_ms: u64) -> Event {
        Event::Deliver {
            id: format!("id-{key}"),
            key: key.into(),
            token: token.into(),
            attempt,
            due_at_ms: 100,
            claimed_at_ms,
            at_ms: 0,
        }
    }

    fn ack(key: &str, token: &str, answer: AckAnswer) -> Event {
        Event::Ack {
            id: format!("id-{key}"),
            key: key.into(),
            token: token.into(),
            answer,
            error: None,
            at_ms: 0,
        }
    }

    use AckAnswer::{Acked, LeaseLost, Unknown};
    use EnqueueAnswer::Confirmed;

    #[test]
    fn a_clean_history_is_ok_and_counts_redeliveries() {
        let ev = vec![
            enq("a", Confirmed),
            deliver("a", "x", 1, 100),
            ack("a", "x", Acked),
            enq("b", Confirmed),
            // lease expired (worker killed): delivered again, then acked
            deliver("b", "y", 1, 100),
            deliver("b", "z", 2, 1_200),
            ack("b", "z", Acked),
            ack("b", "y", LeaseLost),
            // a lost reply replayed: same token, one delivery
            enq("c", Confirmed),
            deliver("c", "w", 1, 100),
            deliver("c", "w", 1, 100),
            ack("c", "w", Acked),
        ];
        let c = check(&ev, &HashMap::new());
        assert!(c.ok(), "{c:?}");
        assert_eq!((c.confirmed, c.acked, c.deliveries), (3, 3, 4));
        assert_eq!(c.redelivered, 1);
        assert!(unfinished(&ev).is_empty());
    }

    #[test]
    fn a_claim_due_earlier_than_the_enqueue_said_or_of_another_id_is_caught() {
        let mut ev = vec![enq("a", Confirmed), enq("b", Confirmed)];
        // the claim's own due time says 50, but the enqueue answered 100
        ev.push(Event::Deliver {
            id: "id-a".into(),
            key: "a".into(),
            token: "x".into(),
            attempt: 1,
            due_at_ms: 50,
            claimed_at_ms: 60,
            at_ms: 0,
        });
        ev.push(ack("a", "x", Acked));
        ev.push(Event::Deliver {
            id: "other".into(),
            key: "b".into(),
            token: "y".into(),
            attempt: 1,
            due_at_ms: 100,
            claimed_at_ms: 100,
            at_ms: 0,
        });
        ev.push(ack("b", "y", Acked));
        let c = check(&ev, &HashMap::new());
        assert_eq!((c.early, c.unexpected), (1, 1), "{c:?}");
        assert_eq!(c.examples["early"], ["a"]);
        assert_eq!(c.examples["unexpected"], ["b"]);
    }

    #[test]
    fn a_delivery_after_a_successful_ack_is_duplicated() {
        let ev = vec![
            enq("a", Confirmed),
            deliver("a", "x", 1, 100),
            ack("a", "x", Acked),
            deliver("a", "y", 2, 1_500),
            ack("a", "y", Acked),
        ];
        let c = check(&ev, &HashMap::new());
        assert_eq!(c.duplicated, 1);
        assert_eq!(c.examples["duplicated"], vec!["a".to_owned()]);
        assert_eq!(
            c.duplicates,
            [Duplicate {
                key: "a".into(),
                acked_claimed_at_ms: 100,
                acked_at_ms: 0,
                claimed_at_ms: 1_500
            }]
        );
        assert!(!c.ok());
    }

    #[test]
    fn lost_recovered_unexpected_early_dead_and_lost_ack_answers() {
        let ev = vec![
            // confirmed, never delivered, gone: lost
            enq("lost", Confirmed),
            // confirmed, still scheduled at the end: lost
            enq("stuck", Confirmed),
            // confirmed, every ack refused, gone: lost
            enq("fenced", Confirmed),
            deliver("fenced", "f", 1, 100),
            ack("fenced", "f", LeaseLost),
            // unknown answer, ran: recovered
            enq("rec", EnqueueAnswer::Unknown),
            deliver("rec", "r", 1, 100),
            ack("rec", "r", Acked),
            // unknown answer, never written: nothing
            enq("never", EnqueueAnswer::Unknown),
            // never enqueued: unexpected
            deliver("ghost", "g", 1, 100),
            // claimed before due: early
            enq("early", Confirmed),
            deliver("early", "e", 1, 99),
            ack("early", "e", Acked),
            // ack failed, task gone: the ack landed
            enq("answer", Confirmed),
            deliver("answer", "n", 1, 100),
            ack("answer", "n", Unknown),
            // worker killed before writing the ack answer, task gone
            enq("killed", Confirmed),
            deliver("killed", "k", 1, 100),
            enq("dead", Confirmed),
            deliver("dead", "d", 1, 100),
        ];
        let finals: HashMap<String, Final> = [
            ("lost", Final::Gone),
            ("stuck", Final::Live("scheduled")),
            ("fenced", Final::Gone),
            ("never", Final::Gone),
            ("answer", Final::Gone),
            ("killed", Final::Gone),
            ("dead", Final::Dead),
        ]
        .into_iter()
        .map(|(k, f)| (k.to_owned(), f))
        .collect();
        let mut u = unfinished(&ev);
        u.sort();
        assert_eq!(
            u,
            [
                "answer", "dead", "fenced", "killed", "lost", "never", "stuck"
            ]
        );
        let c = check(&ev, &finals);
        assert_eq!(c.lost, 3, "{c:?}");
        assert_eq!(c.examples["unexpected"], ["ghost"]);
        assert_eq!(c.examples["lost"], ["fenced", "lost", "stuck"]);
        assert_eq!((c.recovered, c.unexpected, c.early), (1, 1, 1));
        assert_eq!((c.ack_answer_lost, c.dead), (2, 1));
        assert_eq!((c.confirmed, c.unknown), (7, 2));
    }
}
