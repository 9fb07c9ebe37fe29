//! The steps a sequence is made of, how they are drawn, and how a failure report prints them
//! (one line per step).

use std::fmt;

use dueq::Due;
use proptest::prelude::*;

use super::model::Settings;
use super::{GROUPS, KEYS, LEASE_MS, MAX_ATTEMPTS, WORKERS};

/// Leases drawn for tasks, claims and extends: the shortest allowed to 3 s.
fn lease_ms() -> impl Strategy<Value = u64> {
    dueq::MIN_LEASE_MS..3_000u64
}

/// When a task is due: a delay, or an absolute time relative to now (may be in the past).
#[derive(Clone, Copy)]
pub enum When {
    In(u64),
    At(i64),
}

impl When {
    pub fn due(self, now: u64) -> Due {
        match self {
            When::In(d) => Due::DelayMs(d),
            When::At(rel) => Due::AtMs(now.saturating_add_signed(rel)),
        }
    }
}

#[derive(Clone)]
pub struct New {
    pub key: Option<usize>,
    pub group: Option<usize>,
    pub when: When,
    pub replace: bool,
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
}

/// A task by id (`pick` among every task the model has seen) or by business key.
#[derive(Clone, Copy)]
pub enum Target {
    Id(u8),
    Key(usize),
}

/// A lease chosen among the ones workers still hold (`stale: false`: what a live worker does
/// next) or among every lease ever handed out (`stale: true`: a zombie or a repeated call).
#[derive(Clone, Copy)]
pub struct Pick {
    pub pick: u8,
    pub stale: bool,
}

#[derive(Clone)]
pub enum Op {
    /// One task (`Queue::enqueue`) or a batch (`Queue::enqueue_batch`).
    Enqueue(Vec<New>),
    Claim {
        worker: usize,
        max: usize,
        lease_ms: Option<u64>,
    },
    Ack(Pick),
    Nack {
        lease: Pick,
        retry_in_ms: Option<u64>,
        permanent: bool,
    },
    Extend {
        lease: Pick,
        lease_ms: u64,
    },
    /// The holder hands the lease back unfinished (a graceful stop).
    Release(Pick),
    Cancel(Target),
    Reschedule(Target, When),
    DeadRetry(u8),
    DeadDelete(u8),
    /// The clock moves on by this many ms.
    Advance(u64),
    /// Lease recovery runs (what any live claimer does).
    Recover,
    /// The clock moves past every lease deadline, then recovery runs.
    ExpireAll,
    /// A worker vanishes with its leases (its client dropped); a new one takes its place;
    /// the clock moves past the lost leases' deadlines and recovery runs.
    Crash(usize),
    /// `kill -9` and restart of Redis (AOF `appendfsync always`); every client reconnects.
    Restart,
}

// One line per step in a failure report (proptest prints the shrunk list with `{:#?}`).

impl fmt::Debug for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            When::In(d) => write!(f, "in {d}"),
            When::At(rel) => write!(f, "at now{rel:+}"),
        }
    }
}

impl fmt::Debug for New {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.when)?;
        if let Some(k) = self.key {
            write!(f, " key {}", KEYS[k])?;
        }
        if let Some(g) = self.group {
            write!(f, " group {}", GROUPS[g])?;
        }
        if self.replace {
            write!(f, " replace")?;
        }
        if let Some(m) = self.max_attempts {
            write!(f, " max_attempts {m}")?;
        }
        if let Some(l) = self.lease_ms {
            write!(f, " lease {l}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Id(p) => write!(f, "task #{p}"),
            Target::Key(k) => write!(f, "key {}", KEYS[*k]),
        }
    }
}

impl fmt::Debug for Pick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.stale { "stale" } else { "held" };
        write!(f, "{kind} lease #{}", self.pick)
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Enqueue(items) if items.len() == 1 => write!(f, "Enqueue({:?})", items[0]),
            Op::Enqueue(items) => {
                write!(f, "EnqueueBatch(")?;
                for (i, n) in items.iter().enumerate() {
                    write!(f, "{}{n:?}", if i > 0 { "; " } else { "" })?;
                }
                write!(f, ")")
            }
            Op::Claim {
                worker,
                max,
                lease_ms,
            } => {
                write!(f, "Claim(worker {worker}, max {max}")?;
                if let Some(l) = lease_ms {
                    write!(f, ", lease {l}")?;
                }
                write!(f, ")")
            }
            Op::Ack(p) => write!(f, "Ack({p:?})"),
            Op::Nack {
                lease,
                retry_in_ms,
                permanent,
            } => {
                write!(f, "Nack({lease:?}")?;
                if let Some(r) = retry_in_ms {
                    write!(f, ", retry in {r}")?;
                }
                if *permanent {
                    write!(f, ", permanent")?;
                }
                write!(f, ")")
            }
            Op::Extend { lease, lease_ms } => write!(f, "Extend({lease:?}, {lease_ms})"),
            Op::Release(p) => write!(f, "Release({p:?})"),
            Op::Cancel(t) => write!(f, "Cancel({t:?})"),
            Op::Reschedule(t, w) => write!(f, "Reschedule({t:?}, {w:?})"),
            Op::DeadRetry(p) => write!(f, "DeadRetry(#{p})"),
            Op::DeadDelete(p) => write!(f, "DeadDelete(#{p})"),
            Op::Advance(ms) => write!(f, "Advance({ms})"),
            Op::Recover => write!(f, "Recover"),
            Op::ExpireAll => write!(f, "ExpireAll"),
            Op::Crash(w) => write!(f, "Crash(worker {w})"),
            Op::Restart => write!(f, "Restart"),
        }
    }
}

/// Due times cluster near "now" and near each other, so claims meet tasks 1 ms before and at
/// their due time (the never-early boundary), not only far from it.
pub fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        3 => Just(When::In(0)),
        3 => (1..=3u64).prop_map(When::In),
        2 => (4..100u64).prop_map(When::In),
        2 => (100..2_000u64).prop_map(When::In),
        2 => (-500..=3i64).prop_map(When::At),
    ]
}

/// How far the clock moves: often 1 ms (to step over a due time or a lease deadline), else
/// far enough for leases (1 to 3 s) and retries (5 to 800 ms) to come due.
pub fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(1u64),
        2 => 2..=10u64,
        2 => 10..300u64,
        2 => 300..3_000u64,
    ]
}

pub fn new_task() -> impl Strategy<Value = New> {
    (
        prop::option::weighted(0.6, 0..KEYS.len()),
        prop::option::weighted(0.3, 0..GROUPS.len()),
        when(),
        prop::bool::weighted(0.3),
        prop::option::weighted(0.3, 1..=3u32),
        prop::option::weighted(0.2, lease_ms()),
    )
        .prop_map(|(key, group, when, replace, max_attempts, lease_ms)| New {
            key,
            group,
            when,
            replace,
            max_attempts,
            lease_ms,
        })
}

pub fn pick() -> impl Strategy<Value = Pick> {
    (any::<u8>(), prop::bool::weighted(0.35)).prop_map(|(pick, stale)| Pick { pick, stale })
}

pub fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        any::<u8>().prop_map(Target::Id),
        (0..KEYS.len()).prop_map(Target::Key),
    ]
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec(new_task(), 1..4).prop_map(Op::Enqueue),
        6 => (0..WORKERS, 1..6usize, prop::option::weighted(0.3, lease_ms()))
            .prop_map(|(worker, max, lease_ms)| Op::Claim { worker, max, lease_ms }),
        5 => pick().prop_map(Op::Ack),
        4 => (pick(), prop::option::weighted(0.5, prop_oneof![0..=3u64, 0..1_500u64]), prop::bool::weighted(0.3))
            .prop_map(|(lease, retry_in_ms, permanent)| Op::Nack { lease, retry_in_ms, permanent }),
        2 => (pick(), lease_ms()).prop_map(|(lease, lease_ms)| Op::Extend { lease, lease_ms }),
        1 => pick().prop_map(Op::Release),
        2 => target().prop_map(Op::Cancel),
        2 => (target(), when()).prop_map(|(t, w)| Op::Reschedule(t, w)),
        3 => any::<u8>().prop_map(Op::DeadRetry),
        1 => any::<u8>().prop_map(Op::DeadDelete),
        5 => advance().prop_map(Op::Advance),
        1 => Just(Op::Recover),
        2 => Just(Op::ExpireAll),
        2 => (0..WORKERS).prop_map(Op::Crash),
        1 => Just(Op::Restart),
    ]
}

/// A sequence's queue settings: retention of succeeded tasks (none, 1, 3) and the dead-letter
/// cap (default, 1: the smallest allowed, 2), so that trimming happens.
pub fn settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![3 => Just(None), 1 => Just(Some(1)), 1 => Just(Some(3))],
        prop_oneof![3 => Just(None), 1 => Just(Some(1)), 1 => Just(Some(2))],
    )
        .prop_map(|(succeeded_max, dead_max)| Settings {
            max_attempts: MAX_ATTEMPTS,
            lease_ms: LEASE_MS,
            succeeded_max,
            dead_max,
        })
}
