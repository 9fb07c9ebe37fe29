//! The per-partition figures of a `dueq chaos --cluster` run, from the ledger and the fault
//! log: lateness of the healthy and of the failed partitions while each fault lasted, how long
//! the failed partitions were unavailable, the errors each side saw, and which fault explains
//! each duplicate.
//!
//! Pure (no I/O), so the rules are unit-tested here.
//!
//! **Clock.** A task's lateness is its first hand-out time minus its due time: the Deliver
//! line's `at_ms` (the worker's wall clock when the claim answered) minus `due_at_ms` (the
//! Redis `TIME` of the partition's master at the enqueue, plus the delay). Every process and
//! every redis-server of a run is on one host, so both read the same clock
//! (`CLOCK_REALTIME`). The same figure by the Redis clock alone (`claimed_at_ms - due_at_ms`:
//! when the claim ran on the master) is reported beside it as `*_claim`; the difference is the
//! time from the claim's run to its answer in the worker.

use std::collections::HashMap;

use serde::Serialize;

use super::check::Duplicate;
use super::ledger::{AckAnswer, EnqueueAnswer, Event};

/// Leeway of the duplicate rule for the gap between the driver's clock reading and the kill,
/// ms.
const SLACK_MS: u64 = 50;
/// Most error messages of healthy partitions kept per fault.
const ERROR_EXAMPLES: usize = 3;

/// One fault as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Just before the `kill -9`, epoch ms.
    pub kill_at_ms: u64,
    /// When the fault was over (the killed node back as a replica with its link up, and a
    /// settling time after), epoch ms.
    pub end_at_ms: u64,
    /// The partitions whose master was killed.
    pub failed: Vec<u16>,
}

/// Lateness of a set of tasks, ms.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Lateness {
    /// Tasks counted.
    pub tasks: u64,
    /// Median.
    pub p50_ms: Option<i64>,
    /// 99th percentile.
    pub p99_ms: Option<i64>,
    /// Largest.
    pub max_ms: Option<i64>,
}

impl Lateness {
    fn of(mut v: Vec<i64>) -> Self {
        v.sort_unstable();
        let at = |q: f64| {
            if v.is_empty() {
                None
            } else {
                let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
                Some(v[i])
            }
        };
        Self {
            tasks: v.len() as u64,
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: v.last().copied(),
        }
    }
}

/// The figures of one fault.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct WindowFigures {
    /// Tasks of the healthy partitions due between the kill and the end of the fault (or due
    /// before and not yet handed out at the kill), handed out before the next kill: first
    /// hand-out minus due time (module docs).
    pub healthy: Lateness,
    /// The same for the failed partitions.
    pub failed: Lateness,
    /// `healthy` by the Redis clock (claim time minus due time).
    pub healthy_claim: Lateness,
    /// `failed` by the Redis clock.
    pub failed_claim: Lateness,
    /// The same tasks per partition (index = partition), healthy and failed alike.
    pub by_partition: Vec<Lateness>,
    /// From the kill to the first claim (Redis time) of a failed partition's task after it:
    /// how long the failed partitions handed out nothing, ms.
    pub claims_back_ms: Option<u64>,
    /// From the kill to the first `acked` answer of a failed partition's task claimed after
    /// the kill: how long their writes (durable ones with `--replicas`) failed, ms.
    pub acks_back_ms: Option<u64>,
    /// Enqueues answered with an error between this kill and the next: of the healthy
    /// partitions.
    pub enqueue_errors_healthy: u64,
    /// The same, of the failed partitions.
    pub enqueue_errors_failed: u64,
    /// From the kill to the last enqueue error of a failed partition, ms.
    pub enqueue_errors_until_ms: Option<u64>,
    /// Acks answered with an error between this kill and the next: of the healthy partitions.
    pub ack_errors_healthy: u64,
    /// The same, of the failed partitions.
    pub ack_errors_failed: u64,
    /// From the kill to the last ack error of a failed partition, ms.
    pub ack_errors_until_ms: Option<u64>,
    /// The first error messages of healthy partitions (enqueue or ack).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub healthy_error_examples: Vec<String>,
}

/// A duplicated delivery and the fault that explains it, if one does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DuplicateCause {
    /// The task's key.
    pub key: String,
    /// Its partition.
    pub partition: u16,
    /// Whether its partition's master was killed at some point of the run.
    pub on_failed_partition: bool,
    /// The fault (index in the fault log) that explains it: its partition's master killed
    /// after the acked delivery's claim and within its lease (or before its ack's answer),
    /// and the duplicate claimed after the kill.
    pub fault: Option<usize>,
    /// The kill's time minus the acked answer's, ms (for the explaining fault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_after_ack_ms: Option<i64>,
}

/// The figures of a run.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Figures {
    /// Per fault, in order.
    pub windows: Vec<WindowFigures>,
    /// Every fault's healthy-partition tasks together.
    pub healthy_during_faults: Lateness,
    /// Every fault's failed-partition tasks together.
    pub failed_during_faults: Lateness,
    /// Tasks due outside every fault (any partition): the baseline.
    pub outside_faults: Lateness,
    /// Enqueue and ack errors before the first kill.
    pub errors_before_faults: u64,
    /// Duplicates with a fault that explains them.
    pub duplicated_explained: u64,
    /// Duplicates without (must be 0).
    pub duplicated_unexplained: u64,
    /// Every duplicate.
    pub duplicates: Vec<DuplicateCause>,
}

/// A task's first hand-out.
struct First {
    due_at_ms: u64,
    at_ms: u64,
    claimed_at_ms: u64,
}

/// The figures of `events` for the faults of `windows` (in kill order), on a queue of
/// `partitions` partitions with leases of `lease_ms`.
pub fn figures(
    events: &[Event],
    windows: &[Window],
    duplicates: &[Duplicate],
    partitions: u16,
    lease_ms: u64,
) -> Figures {
    let part = |key: &str| dueq::partition_of_key(key, partitions);
    // first hand-out of every task, and when its deliveries were claimed
    let mut first: HashMap<&str, First> = HashMap::new();
    // token -> (key, claimed_at) of every delivery
    let mut claims: HashMap<&str, (&str, u64)> = HashMap::new();
    for ev in events {
        if let Event::Deliver {
            key,
            token,
            due_at_ms,
            claimed_at_ms,
            at_ms,
            ..
        } = ev
        {
            claims.insert(token, (key, *claimed_at_ms));
            let f = first.entry(key).or_insert(First {
                due_at_ms: *due_at_ms,
                at_ms: *at_ms,
                claimed_at_ms: *claimed_at_ms,
            });
            if *at_ms < f.at_ms {
                *f = First {
                    due_at_ms: *due_at_ms,
                    at_ms: *at_ms,
                    claimed_at_ms: *claimed_at_ms,
                };
            }
        }
    }
    // which fault a time falls to: the last kill at or before it
    let fault_at = |t: u64| windows.iter().rposition(|w| w.kill_at_ms <= t);
    // a task belongs to the last fault killed before its hand-out, when it was due before
    // that fault's end: due in its window, or due before and still waiting at the kill (a
    // task due at the very end of one window and handed out after the next kill is that
    // next fault's)
    let in_window = |f: &First| {
        windows
            .iter()
            .rposition(|w| f.at_ms >= w.kill_at_ms && f.due_at_ms <= w.end_at_ms)
    };

    let mut out = Figures {
        windows: vec![WindowFigures::default(); windows.len()],
        ..Figures::default()
    };
    let n = windows.len();
    let (mut healthy, mut failed) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    let (mut healthy_claim, mut failed_claim) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    let (mut all_healthy, mut all_failed, mut outside) = (Vec::new(), Vec::new(), Vec::new());
    let mut by_partition = vec![vec![Vec::new(); usize::from(partitions.max(1))]; n];
    for (key, f) in &first {
        let late = f.at_ms as i64 - f.due_at_ms as i64;
        let late_claim = f.claimed_at_ms as i64 - f.due_at_ms as i64;
        if let Some(i) = in_window(f)
            && let Some(v) = by_partition[i].get_mut(usize::from(part(key)))
        {
            v.push(late);
        }
        match in_window(f) {
            Some(i) if windows[i].failed.contains(&part(key)) => {
                failed[i].push(late);
                failed_claim[i].push(late_claim);
                all_failed.push(late);
            }
            Some(i) => {
                healthy[i].push(late);
                healthy_claim[i].push(late_claim);
                all_healthy.push(late);
            }
            None => outside.push(late),
        }
    }
    for (i, w) in out.windows.iter_mut().enumerate() {
        w.healthy = Lateness::of(std::mem::take(&mut healthy[i]));
        w.failed = Lateness::of(std::mem::take(&mut failed[i]));
        w.healthy_claim = Lateness::of(std::mem::take(&mut healthy_claim[i]));
        w.failed_claim = Lateness::of(std::mem::take(&mut failed_claim[i]));
        w.by_partition = std::mem::take(&mut by_partition[i])
            .into_iter()
            .map(Lateness::of)
            .collect();
    }
    out.healthy_during_faults = Lateness::of(all_healthy);
    out.failed_during_faults = Lateness::of(all_failed);
    out.outside_faults = Lateness::of(outside);

    // availability and errors, each event given to the last kill before it
    let since = |i: usize, t: u64| t.saturating_sub(windows[i].kill_at_ms);
    for ev in events {
        match ev {
            Event::Deliver {
                key, claimed_at_ms, ..
            } => {
                if let Some(i) = fault_at(*claimed_at_ms)
                    && *claimed_at_ms > windows[i].kill_at_ms
                    && windows[i].failed.contains(&part(key))
                {
                    let w = &mut out.windows[i];
                    let d = since(i, *claimed_at_ms);
                    w.claims_back_ms = Some(w.claims_back_ms.map_or(d, |b| b.min(d)));
                }
            }
            Event::Enqueue {
                key,
                answer: EnqueueAnswer::Unknown,
                error,
                at_ms,
                ..
            } => match fault_at(*at_ms) {
                None => out.errors_before_faults += 1,
                Some(i) => {
                    let w = &mut out.windows[i];
                    if windows[i].failed.contains(&part(key)) {
                        w.enqueue_errors_failed += 1;
                        let d = since(i, *at_ms);
                        w.enqueue_errors_until_ms = w.enqueue_errors_until_ms.max(Some(d));
                    } else {
                        w.enqueue_errors_healthy += 1;
                        if w.healthy_error_examples.len() < ERROR_EXAMPLES {
                            w.healthy_error_examples.push(format!(
                                "enqueue {key}: {}",
                                error.as_deref().unwrap_or("?")
                            ));
                        }
                    }
                }
            },
            Event::Ack {
                key,
                token,
                answer,
                error,
                at_ms,
                ..
            } => {
                let Some(i) = fault_at(*at_ms) else {
                    if *answer == AckAnswer::Unknown {
                        out.errors_before_faults += 1;
                    }
                    continue;
                };
                let on_failed = windows[i].failed.contains(&part(key));
                let w = &mut out.windows[i];
                match answer {
                    AckAnswer::Acked if on_failed => {
                        let claimed_after = claims
                            .get(token.as_str())
                            .is_some_and(|(_, c)| *c > windows[i].kill_at_ms);
                        if claimed_after {
                            let d = since(i, *at_ms);
                            w.acks_back_ms = Some(w.acks_back_ms.map_or(d, |b| b.min(d)));
                        }
                    }
                    AckAnswer::Unknown if on_failed => {
                        w.ack_errors_failed += 1;
                        let d = since(i, *at_ms);
                        w.ack_errors_until_ms = w.ack_errors_until_ms.max(Some(d));
                    }
                    AckAnswer::Unknown => {
                        w.ack_errors_healthy += 1;
                        if w.healthy_error_examples.len() < ERROR_EXAMPLES {
                            w.healthy_error_examples
                                .push(format!("ack {key}: {}", error.as_deref().unwrap_or("?")));
                        }
                    }
                    _ => {}
                }
            }
            Event::Start { .. } | Event::Enqueue { .. } => {}
        }
    }

    for d in duplicates {
        let p = part(&d.key);
        let explains = |w: &Window| {
            w.failed.contains(&p)
                && d.acked_claimed_at_ms <= w.kill_at_ms + SLACK_MS
                && w.kill_at_ms <= (d.acked_claimed_at_ms + lease_ms).max(d.acked_at_ms) + SLACK_MS
                && d.claimed_at_ms + SLACK_MS >= w.kill_at_ms
        };
        let fault = windows.iter().position(explains);
        if fault.is_some() {
            out.duplicated_explained += 1;
        } else {
            out.duplicated_unexplained += 1;
        }
        out.duplicates.push(DuplicateCause {
            key: d.key.clone(),
            partition: p,
            on_failed_partition: windows.iter().any(|w| w.failed.contains(&p)),
            fault,
            kill_after_ack_ms: fault.map(|i| windows[i].kill_at_ms as i64 - d.acked_at_ms as i64),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const N: u16 = 6;

    /// A key of partition `p` (of 6), the `i`-th found.
    fn key_of(p: u16, i: usize) -> String {
        (0..)
            .map(|j| format!("t{j}"))
            .filter(|k| dueq::partition_of_key(k, N) == p)
            .nth(i)
            .unwrap()
    }

    fn deliver(key: &str, token: &str, due: u64, claimed: u64, at: u64) -> Event {
        Event::Deliver {
            id: format!("id-{key}"),
            key: key.into(),
            token: token.into(),
            attempt: 1,
            due_at_ms: due,
            claimed_at_ms: claimed,
            at_ms: at,
        }
    }

    fn ack(key: &str, token: &str, answer: AckAnswer, at: u64) -> Event {
        Event::Ack {
            id: format!("id-{key}"),
            key: key.into(),
            token: token.into(),
            answer,
            error: (answer == AckAnswer::Unknown).then(|| "boom".to_owned()),
            at_ms: at,
        }
    }

    #[test]
    fn lateness_splits_healthy_and_failed_partitions_by_window() {
        let (h, f, o) = (key_of(1, 0), key_of(0, 0), key_of(2, 0));
        let (f2, h2) = (key_of(0, 1), key_of(3, 0));
        let windows = [Window {
            kill_at_ms: 1_000,
            end_at_ms: 5_000,
            failed: vec![0, 4],
        }];
        let ev = vec![
            // due before the kill: baseline
            deliver(&o, "a", 500, 505, 510),
            // due before the kill, still waiting at it: the fault's
            deliver(&key_of(5, 0), "w", 990, 1_010, 1_012),
            // healthy, due in the window, 20 ms late
            deliver(&h, "b", 2_000, 2_015, 2_020),
            ack(&h, "b", AckAnswer::Acked, 2_030),
            // failed partition: handed out 2.5 s late, after the promotion
            deliver(&f, "c", 1_500, 3_990, 4_000),
            // redelivered later: the first hand-out counts
            deliver(&f, "c2", 1_500, 6_000, 6_000),
            ack(&f, "c2", AckAnswer::Acked, 6_010),
            ack(&f2, "x", AckAnswer::Unknown, 2_100),
            ack(&h2, "y", AckAnswer::Unknown, 2_200),
            Event::Enqueue {
                key: f2.clone(),
                answer: EnqueueAnswer::Unknown,
                id: None,
                due_at_ms: None,
                error: Some("down".into()),
                at_ms: 2_500,
            },
        ];
        let fig = figures(&ev, &windows, &[], N, 1_000);
        let w = &fig.windows[0];
        assert_eq!(w.healthy.tasks, 2);
        assert_eq!(w.by_partition.len(), 6);
        assert_eq!(w.by_partition[1].max_ms, Some(20));
        assert_eq!(w.by_partition[0].max_ms, Some(2_500));
        assert_eq!(w.healthy.max_ms, Some(22));
        assert_eq!(w.healthy_claim.max_ms, Some(20));
        assert_eq!(w.failed.max_ms, Some(2_500));
        assert_eq!(fig.outside_faults.max_ms, Some(10));
        assert_eq!(w.claims_back_ms, Some(2_990));
        assert_eq!(w.acks_back_ms, Some(5_010));
        assert_eq!((w.ack_errors_failed, w.ack_errors_healthy), (1, 1));
        assert_eq!(w.ack_errors_until_ms, Some(1_100));
        assert_eq!(
            (w.enqueue_errors_failed, w.enqueue_errors_until_ms),
            (1, Some(1_500))
        );
        assert_eq!(w.healthy_error_examples, [format!("ack {h2}: boom")]);
        assert_eq!(fig.healthy_during_faults.tasks, 2);
        assert_eq!(fig.failed_during_faults.tasks, 1);
        assert_eq!(fig.outside_faults.tasks, 1);
    }

    #[test]
    fn a_task_due_at_the_end_of_a_window_and_waiting_at_the_next_kill_is_the_next_ones() {
        let k = key_of(0, 0);
        let windows = [
            Window {
                kill_at_ms: 1_000,
                end_at_ms: 5_000,
                failed: vec![1],
            },
            Window {
                kill_at_ms: 5_001,
                end_at_ms: 9_000,
                failed: vec![0],
            },
        ];
        let ev = vec![deliver(&k, "a", 4_999, 7_500, 7_501)];
        let fig = figures(&ev, &windows, &[], N, 1_000);
        assert_eq!(fig.windows[0].healthy.tasks, 0);
        assert_eq!(fig.windows[1].failed.max_ms, Some(2_502));
        assert_eq!(fig.healthy_during_faults.tasks, 0);
    }

    #[test]
    fn a_duplicate_is_explained_only_by_a_kill_of_its_partition_within_its_lease() {
        let (f, h) = (key_of(0, 0), key_of(1, 0));
        let windows = [Window {
            kill_at_ms: 10_000,
            end_at_ms: 14_000,
            failed: vec![0],
        }];
        let dup = |key: &str, acked_claimed: u64, claimed: u64| Duplicate {
            key: key.into(),
            acked_claimed_at_ms: acked_claimed,
            acked_at_ms: acked_claimed + 5,
            claimed_at_ms: claimed,
        };
        let dups = [
            // acked 5 ms before the kill, delivered again after the failover
            dup(&f, 9_990, 13_000),
            // a healthy partition's: no excuse
            dup(&h, 9_990, 13_000),
            // acked long before the kill: no excuse
            dup(&f, 5_000, 13_000),
        ];
        let fig = figures(&[], &windows, &dups, N, 1_000);
        assert_eq!(
            (fig.duplicated_explained, fig.duplicated_unexplained),
            (1, 2)
        );
        assert_eq!(fig.duplicates[0].fault, Some(0));
        assert_eq!(fig.duplicates[0].kill_after_ack_ms, Some(5));
        assert!(!fig.duplicates[1].on_failed_partition);
        assert!(fig.duplicates[2].on_failed_partition);
        assert_eq!(fig.duplicates[2].fault, None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let l = Lateness::of((1..=100).collect());
        assert_eq!(
            (l.p50_ms, l.p99_ms, l.max_ms),
            (Some(50), Some(99), Some(100))
        );
        assert_eq!(Lateness::of(Vec::new()).p50_ms, None);
    }
}
