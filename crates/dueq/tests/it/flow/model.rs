//! A property test of the limiter (claim script) against a simple model, on a real Redis:
//! random settings (queue and group concurrency and rate limits), then random sequences of
//! enqueues (grouped or not), claims, acks, claims under the shortest lease (`MIN_LEASE_MS`)
//! that then expire and are recovered, and time passing. After every claim the model checks
//! safety (every limit holds over all claims so far, by the Redis clock the claims report; no
//! task handed out twice while active, none before its due time) and liveness (a claim that
//! hands out nothing had nothing it could hand out).
//!
//! Time is the frozen test clock (`dueq::FrozenClock`, debug builds only), moved by the `Sleep`
//! steps and past the short leases by `Recover`, so a lease of a second costs no real second.
#![cfg(debug_assertions)]

use std::collections::{BTreeMap, HashMap};

use dueq::{
    BackoffSettings, ClaimedTask, FrozenClock, MIN_LEASE_MS, Queue, RateLimit, SettingsPatch,
    TaskId, TaskSpec,
};
use dueq_testkit::RedisServer;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        n: usize,
        group: Option<u8>,
    },
    Claim {
        max: usize,
    },
    /// Claims under the shortest lease; the next `Recover` moves the clock past it.
    ClaimShort {
        max: usize,
    },
    Ack {
        share: u8,
    },
    Recover,
    /// The clock moves on by this many ms.
    Sleep {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..12usize, prop::option::of(0..3u8)).prop_map(|(n, group)| Op::Enqueue { n, group }),
        4 => (1..15usize).prop_map(|max| Op::Claim { max }),
        1 => (1..5usize).prop_map(|max| Op::ClaimShort { max }),
        3 => (0..=4u8).prop_map(|share| Op::Ack { share }),
        1 => Just(Op::Recover),
        2 => (0..40u64).prop_map(|ms| Op::Sleep { ms }),
    ]
}

#[derive(Debug, Clone)]
struct Limits {
    conc: Option<u32>,
    rate: Option<(u64, u64)>,
    gconc: Option<u32>,
    grate: Option<(u64, u64)>,
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        prop::option::of(1..8u32),
        prop::option::of((1..8u64, 20..80u64)),
        prop::option::of(1..4u32),
        prop::option::of((1..4u64, 20..80u64)),
    )
        .prop_map(|(conc, rate, gconc, grate)| Limits {
            conc,
            rate,
            gconc,
            grate,
        })
}

/// What the model knows of one task.
#[derive(Debug, Clone)]
struct Known {
    group: Option<String>,
    /// Due time while scheduled (`None` while active).
    due_at_ms: Option<u64>,
}

#[derive(Default)]
struct Model {
    tasks: HashMap<TaskId, Known>,
    /// Claim times (Redis clock) with the group of each task handed out.
    claims: Vec<(u64, Option<String>)>,
    held: Vec<ClaimedTask>,
    short: Vec<ClaimedTask>,
}

impl Model {
    fn active(&self, group: Option<&str>) -> usize {
        self.tasks
            .values()
            .filter(|t| t.due_at_ms.is_none() && (group.is_none() || t.group.as_deref() == group))
            .count()
    }

    fn in_window(&self, now: u64, per_ms: u64, group: Option<&str>) -> u64 {
        self.claims
            .iter()
            .filter(|(t, g)| t + per_ms > now && (group.is_none() || g.as_deref() == group))
            .count() as u64
    }

    /// Checks every limit over the claims so far, at `now`.
    fn check_safety(&self, l: &Limits, now: u64) {
        if let Some(c) = l.conc {
            assert!(
                self.active(None) <= c as usize,
                "queue concurrency {c} exceeded"
            );
        }
        if let Some((max, per)) = l.rate {
            let n = self.in_window(now, per, None);
            assert!(n <= max, "{n} claims in {per} ms (limit {max})");
        }
        let groups: Vec<String> = self
            .tasks
            .values()
            .filter_map(|t| t.group.clone())
            .collect();
        for g in &groups {
            if let Some(c) = l.gconc {
                assert!(
                    self.active(Some(g)) <= c as usize,
                    "group {g}: concurrency {c} exceeded"
                );
            }
            if let Some((max, per)) = l.grate {
                let n = self.in_window(now, per, Some(g));
                assert!(n <= max, "group {g}: {n} claims in {per} ms (limit {max})");
            }
        }
    }

    /// Whether some task could be handed out at `now` within every limit.
    fn claimable(&self, l: &Limits, now: u64) -> bool {
        if l.conc.is_some_and(|c| self.active(None) >= c as usize) {
            return false;
        }
        if l.rate
            .is_some_and(|(max, per)| self.in_window(now, per, None) >= max)
        {
            return false;
        }
        let mut due_groups: BTreeMap<Option<String>, ()> = BTreeMap::new();
        for t in self.tasks.values() {
            if t.due_at_ms.is_some_and(|d| d <= now) {
                due_groups.insert(t.group.clone(), ());
            }
        }
        due_groups.keys().any(|g| match g {
            None => true,
            Some(g) => {
                !(l.gconc.is_some_and(|c| self.active(Some(g)) >= c as usize)
                    || l.grate
                        .is_some_and(|(max, per)| self.in_window(now, per, Some(g)) >= max))
            }
        })
    }

    fn claimed(&mut self, l: &Limits, now: u64, tasks: &[ClaimedTask]) {
        for t in tasks {
            let k = self.tasks.get_mut(&t.id).expect("a task the model knows");
            let due = k.due_at_ms.expect("handed out while active");
            assert!(due <= now, "handed out {} ms early", due - now);
            assert_eq!(k.group, t.group);
            k.due_at_ms = None;
            self.claims.push((now, t.group.clone()));
        }
        self.check_safety(l, now);
    }
}

async fn run_case(clock: &FrozenClock, q: &Queue, l: &Limits, ops: &[Op]) {
    // the held (non-short) leases last an hour: the clock moved past the short ones never
    // reaches them
    let mut patch = SettingsPatch::default()
        .max_attempts(Some(1_000))
        .lease_ms(Some(3_600_000))
        .backoff(Some(BackoffSettings::new(1, 1.0, 1)));
    patch = patch
        .concurrency(l.conc)
        .rate_limit(l.rate.map(|(m, p)| RateLimit::new(m, p)))
        .group_concurrency(l.gconc)
        .group_rate_limit(l.grate.map(|(m, p)| RateLimit::new(m, p)));
    q.update_settings(&patch).await.unwrap();
    let mut m = Model::default();
    for op in ops {
        match op {
            Op::Enqueue { n, group } => {
                let g = group.map(|g| format!("g{g}"));
                let specs: Vec<TaskSpec> = (0..*n)
                    .map(|_| match &g {
                        Some(g) => TaskSpec::new(b"x".to_vec()).group(g.clone()),
                        None => TaskSpec::new(b"x".to_vec()),
                    })
                    .collect();
                for e in q.enqueue_batch(&specs).await.unwrap() {
                    m.tasks.insert(
                        e.id,
                        Known {
                            group: g.clone(),
                            due_at_ms: Some(e.due_at_ms),
                        },
                    );
                }
            }
            Op::Claim { max } | Op::ClaimShort { max } => {
                let short = matches!(op, Op::ClaimShort { .. });
                let c = q.claim(*max, short.then_some(MIN_LEASE_MS)).await.unwrap();
                let could = m.claimable(l, c.now_ms);
                m.claimed(l, c.now_ms, &c.tasks);
                assert!(
                    !c.tasks.is_empty() || !could,
                    "nothing handed out although the model had a claimable task"
                );
                if short {
                    m.short.extend(c.tasks);
                } else {
                    m.held.extend(c.tasks);
                }
            }
            Op::Ack { share } => {
                let n = m.held.len() * usize::from(*share) / 4;
                let acked: Vec<ClaimedTask> = m.held.drain(..n).collect();
                let items: Vec<_> = acked
                    .iter()
                    .map(|t| (t.id.clone(), t.lease_token.clone()))
                    .collect();
                if !items.is_empty() {
                    q.ack_batch(&items).await.unwrap();
                }
                for t in acked {
                    m.tasks.remove(&t.id);
                }
            }
            Op::Recover => {
                if m.short.is_empty() {
                    continue;
                }
                // past the last short lease's deadline
                let last = m.short.iter().map(|t| t.lease_expires_at_ms).max().unwrap();
                clock.set_ms(last.max(clock.now_ms().unwrap()) + 1);
                let r = q.recover().await.unwrap();
                assert_eq!(
                    r.recovered as usize,
                    m.short.len(),
                    "every short lease expired"
                );
                for t in m.short.drain(..) {
                    // back to scheduled after the 1 ms backoff (20 % jitter keeps it >= 1)
                    m.tasks.get_mut(&t.id).unwrap().due_at_ms = Some(r.now_ms + 1);
                }
            }
            Op::Sleep { ms } => {
                clock.advance_ms(*ms);
            }
        }
    }
}

#[test]
fn limiter_matches_the_model() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // frozen at the Redis time of the start; it only moves forward, across cases too
    let start_ms = {
        let mut c = server.conn();
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut c).unwrap();
        s * 1_000 + us / 1_000
    };
    let clock = FrozenClock::frozen_at(start_ms);
    let client = rt
        .block_on(
            dueq::Client::builder(&server.url())
                .frozen_clock(clock.clone())
                .connect(),
        )
        .unwrap();
    let case = std::sync::atomic::AtomicU32::new(0);
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(l in limits(), ops in prop::collection::vec(op(), 1..40))| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let q = client.queue(&format!("model-{n}")).unwrap();
        rt.block_on(run_case(&clock, &q, &l, &ops));
    });
}
