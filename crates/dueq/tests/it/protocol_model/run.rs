//! The runner: one sequence's world (a Redis, the frozen clock, a producer and the workers,
//! each with its own client, and the model), and each step run against both.

use std::sync::Mutex;

use dueq::{
    AckOutcome, CancelOutcome, Client, DeadRetryOutcome, EnqueueOutcome, FrozenClock, NackOutcome,
    Queue, RescheduleOutcome, TaskId, TaskRef, TaskSpec,
};
use dueq_testkit::{RedisServer, wait_until_async};

use super::model::{self, Model, NewTask};
use super::ops::{New, Op, Pick, Target};
use super::{GROUPS, KEYS, backoff};
use crate::support::DEADLINE;

/// A lease as the runner remembers it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub id: TaskId,
    pub token: dueq::LeaseToken,
    pub worker: usize,
    /// The worker's incarnation that got it (a crash starts a new one).
    pub incarnation: u32,
    /// Its holder is done with it (acked or nacked it, or was told it lost it).
    pub done: bool,
}

pub struct Worker {
    pub client: Client,
    pub queue: Queue,
    pub incarnation: u32,
}

/// What the run exercised, summed over every sequence (printed at the end, so a change that
/// makes the mix miss a path shows).
#[derive(Debug, Default)]
pub struct Tally {
    pub steps: u64,
    pub created: u64,
    pub existing: u64,
    pub replaced: u64,
    pub in_progress: u64,
    pub claimed: u64,
    pub acked: u64,
    pub stale_refused: u64,
    pub retried: u64,
    pub dead: u64,
    pub extended: u64,
    pub released: u64,
    pub cancelled: u64,
    pub rescheduled: u64,
    pub dead_retried: u64,
    pub dead_conflicts: u64,
    pub dead_deleted: u64,
    pub expired: u64,
    pub crashes: u64,
    pub restarts: u64,
    pub dead_trimmed: u64,
}

pub static TALLY: Mutex<Option<Tally>> = Mutex::new(None);

pub fn tally(f: impl FnOnce(&mut Tally)) {
    f(TALLY.lock().unwrap().get_or_insert_with(Tally::default));
}

/// One sequence's world: the Redis, the clock, a producer, the workers, the model.
pub struct Env<'a> {
    pub server: &'a Mutex<RedisServer>,
    pub url: String,
    pub clock: FrozenClock,
    pub name: String,
    pub producer: Client,
    pub q: Queue,
    pub workers: Vec<Worker>,
    pub model: Model,
    pub leases: Vec<Lease>,
    /// Payloads are numbered so a replace is visible.
    pub seq: u64,
}

pub async fn connect(url: &str, clock: &FrozenClock, name: &str) -> (Client, Queue) {
    let client = Client::builder(url)
        .frozen_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let q = client.queue(name).unwrap().with_backoff(backoff());
    (client, q)
}

impl Env<'_> {
    pub fn now(&self) -> u64 {
        self.clock.now_ms().expect("the clock is frozen")
    }

    /// The lease `p` designates, if there is one to choose from. A stale pick prefers the
    /// sharpest fencing case: a lease lost to a later claim of the same task (then one lost
    /// otherwise, then any).
    fn lease(&self, p: Pick) -> Option<usize> {
        let all = 0..self.leases.len();
        let lost = |i: &usize| {
            let l = &self.leases[*i];
            !self.model.holds(&l.id, &l.token)
        };
        let candidates: Vec<usize> = if p.stale {
            let lost: Vec<usize> = all.clone().filter(lost).collect();
            let taken: Vec<usize> = lost
                .iter()
                .copied()
                .filter(|&i| deadline(self.model.task(&self.leases[i].id)).is_some())
                .collect();
            [taken, lost, all.collect()]
                .into_iter()
                .find(|v| !v.is_empty())
                .unwrap_or_default()
        } else {
            all.filter(|&i| {
                let l = &self.leases[i];
                !l.done && self.workers[l.worker].incarnation == l.incarnation
            })
            .collect()
        };
        (!candidates.is_empty()).then(|| candidates[usize::from(p.pick) % candidates.len()])
    }

    /// The queue handle of the worker holding lease `i` (a crashed worker's leases are tried
    /// through its successor: the token is what counts).
    fn holder(&self, i: usize) -> &Queue {
        &self.workers[self.leases[i].worker].queue
    }

    fn task_id(&self, pick: u8) -> Option<TaskId> {
        let n = self.model.tasks.len();
        (n > 0).then(|| {
            self.model
                .tasks
                .keys()
                .nth(usize::from(pick) % n)
                .unwrap()
                .clone()
        })
    }

    /// A dead task if there is one, else any task (a retry or delete that finds nothing).
    fn dead_id(&self, pick: u8) -> Option<TaskId> {
        let dead: Vec<&TaskId> = self.model.dead().map(|t| &t.id).collect();
        if dead.is_empty() {
            return self.task_id(pick);
        }
        Some(dead[usize::from(pick) % dead.len()].clone())
    }

    fn target(&self, t: Target) -> Option<(TaskRef, Option<TaskId>)> {
        match t {
            Target::Id(p) => self
                .task_id(p)
                .map(|id| (TaskRef::Id(id.clone()), Some(id))),
            Target::Key(k) => Some((
                TaskRef::key(KEYS[k]).unwrap(),
                self.model.by_key(KEYS[k]).cloned(),
            )),
        }
    }

    pub async fn step(&mut self, op: &Op) {
        let now = self.now();
        match op {
            Op::Enqueue(items) => self.enqueue(now, items).await,
            &Op::Claim {
                worker,
                max,
                lease_ms,
            } => {
                let c = self.workers[worker]
                    .queue
                    .claim(max, lease_ms)
                    .await
                    .unwrap();
                assert_eq!(c.now_ms, now, "the claim ran at the test clock's time");
                for t in &c.tasks {
                    assert!(
                        t.due_at_ms <= c.now_ms && t.claimed_at_ms >= t.due_at_ms,
                        "EARLY: {} handed out at {}, due {}",
                        t.id,
                        c.now_ms,
                        t.due_at_ms
                    );
                }
                if let Err(e) = self.model.claim(now, max, lease_ms, &c.tasks) {
                    panic!("{e}");
                }
                tally(|t| t.claimed += c.tasks.len() as u64);
                let incarnation = self.workers[worker].incarnation;
                self.leases.extend(c.tasks.iter().map(|t| Lease {
                    id: t.id.clone(),
                    token: t.lease_token.clone(),
                    worker,
                    incarnation,
                    done: false,
                }));
            }
            &Op::Ack(p) => {
                let Some(i) = self.lease(p) else { return };
                let l = self.leases[i].clone();
                let got = self.holder(i).ack(&l.id, &l.token).await.unwrap();
                let want = if self.model.ack(now, &l.id, &l.token) {
                    AckOutcome::Acked
                } else {
                    AckOutcome::LeaseLost
                };
                assert_eq!(got, want, "ack of {} with token {}", l.id, l.token);
                tally(|t| match got {
                    AckOutcome::Acked => t.acked += 1,
                    _ => t.stale_refused += 1,
                });
                self.leases[i].done = true;
            }
            &Op::Nack {
                lease,
                retry_in_ms,
                permanent,
            } => {
                let Some(i) = self.lease(lease) else { return };
                let l = self.leases[i].clone();
                let err = format!("failed at {now}");
                let got = self
                    .holder(i)
                    .nack(&l.id, &l.token, &err, retry_in_ms, permanent)
                    .await
                    .unwrap();
                let want = self
                    .model
                    .nack(now, &l.id, &l.token, retry_in_ms, permanent, &err);
                assert_eq!(got, want, "nack of {} with token {}", l.id, l.token);
                tally(|t| match got {
                    NackOutcome::Rescheduled { .. } => t.retried += 1,
                    NackOutcome::Dead => t.dead += 1,
                    _ => t.stale_refused += 1,
                });
                self.leases[i].done = true;
            }
            &Op::Extend { lease, lease_ms } => {
                let Some(i) = self.lease(lease) else { return };
                let l = self.leases[i].clone();
                let got = self
                    .holder(i)
                    .extend(&l.id, &l.token, lease_ms)
                    .await
                    .unwrap();
                let want = self.model.extend(now, &l.id, &l.token, lease_ms);
                assert_eq!(got, want, "extend of {} with token {}", l.id, l.token);
                tally(|t| match got {
                    Some(_) => t.extended += 1,
                    None => t.stale_refused += 1,
                });
                if got.is_none() {
                    self.leases[i].done = true;
                }
            }
            &Op::Release(p) => {
                let Some(i) = self.lease(p) else { return };
                let l = self.leases[i].clone();
                let got = self
                    .holder(i)
                    .release(&[(l.id.clone(), l.token.clone())])
                    .await
                    .unwrap();
                let want = self.model.release(&l.id, &l.token);
                assert_eq!(
                    got,
                    vec![want],
                    "release of {} with token {}",
                    l.id,
                    l.token
                );
                tally(|t| match want {
                    true => t.released += 1,
                    false => t.stale_refused += 1,
                });
                self.leases[i].done = true;
            }
            &Op::Cancel(t) => {
                let Some((target, id)) = self.target(t) else {
                    return;
                };
                let got = self.q.cancel(&target).await.unwrap();
                let want = self.model.cancel(id.as_ref());
                assert_eq!(got, want, "cancel of {target:?}");
                if got == CancelOutcome::Cancelled {
                    tally(|t| t.cancelled += 1);
                }
            }
            &Op::Reschedule(t, w) => {
                let Some((target, id)) = self.target(t) else {
                    return;
                };
                let due = w.due(now);
                let got = self.q.reschedule(&target, due).await.unwrap();
                let want = self.model.reschedule(now, id.as_ref(), due);
                assert_eq!(got, want, "reschedule of {target:?} to {due:?}");
                if matches!(got, RescheduleOutcome::Rescheduled { .. }) {
                    tally(|t| t.rescheduled += 1);
                }
            }
            &Op::DeadRetry(p) => {
                let Some(id) = self.dead_id(p) else { return };
                let got = self.q.dead_retry(std::slice::from_ref(&id)).await.unwrap();
                let want = self.model.dead_retry(now, &id);
                assert_eq!(got, vec![want], "dead retry of {id}");
                tally(|t| match want {
                    DeadRetryOutcome::Retried => t.dead_retried += 1,
                    DeadRetryOutcome::Conflict => t.dead_conflicts += 1,
                    _ => {}
                });
            }
            &Op::DeadDelete(p) => {
                let Some(id) = self.dead_id(p) else { return };
                let got = self.q.dead_delete(std::slice::from_ref(&id)).await.unwrap();
                let want = self.model.dead_delete(&id);
                assert_eq!(got, vec![want], "dead delete of {id}");
                if want {
                    tally(|t| t.dead_deleted += 1);
                }
            }
            &Op::Advance(ms) => {
                self.clock.advance_ms(ms);
            }
            Op::Recover => self.recover().await,
            Op::ExpireAll => {
                let last = self.model.active().filter_map(deadline).max();
                if let Some(d) = last.filter(|&d| d > now) {
                    self.clock.set_ms(d);
                }
                self.recover().await;
                assert_eq!(self.model.active().count(), 0, "every lease expired");
            }
            &Op::Crash(w) => {
                tally(|t| t.crashes += 1);
                let (client, queue) = connect(&self.url, &self.clock, &self.name).await;
                let incarnation = self.workers[w].incarnation + 1;
                let old = std::mem::replace(
                    &mut self.workers[w],
                    Worker {
                        client,
                        queue,
                        incarnation,
                    },
                );
                // the vanished worker's leases: still current in Redis until they expire
                let lost: Vec<&Lease> = self
                    .leases
                    .iter()
                    .filter(|l| {
                        l.worker == w
                            && l.incarnation == old.incarnation
                            && self.model.holds(&l.id, &l.token)
                    })
                    .collect();
                let last = lost
                    .iter()
                    .filter_map(|l| deadline(self.model.task(&l.id)))
                    .max();
                let lost: Vec<TaskId> = lost.iter().map(|l| l.id.clone()).collect();
                drop(old);
                if let Some(d) = last.filter(|&d| d > now) {
                    self.clock.set_ms(d);
                }
                self.recover().await;
                for id in &lost {
                    assert!(
                        !matches!(self.model.task(id).state, model::St::Active { .. }),
                        "{id} of the crashed worker was recovered"
                    );
                }
            }
            Op::Restart => {
                tally(|t| t.restarts += 1);
                {
                    let mut s = self.server.lock().unwrap();
                    s.kill9();
                    s.restart();
                }
                let clients: Vec<Client> = std::iter::once(self.producer.clone())
                    .chain(self.workers.iter().map(|w| w.client.clone()))
                    .collect();
                for c in clients {
                    wait_until_async(DEADLINE, "a client reconnects after the restart", || {
                        let c = c.clone();
                        async move { c.ping().await.is_ok() }
                    })
                    .await;
                }
            }
        }
    }

    async fn enqueue(&mut self, now: u64, items: &[New]) {
        let news: Vec<NewTask> = items
            .iter()
            .map(|n| {
                self.seq += 1;
                NewTask {
                    key: n.key.map(|k| KEYS[k].to_owned()),
                    group: n.group.map(|g| GROUPS[g].to_owned()),
                    due: n.when.due(now),
                    replace: n.replace,
                    max_attempts: n.max_attempts,
                    lease_ms: n.lease_ms,
                    payload: format!("p{}", self.seq).into_bytes(),
                }
            })
            .collect();
        let specs: Vec<TaskSpec> = news
            .iter()
            .map(|n| {
                let mut s = TaskSpec::new(n.payload.clone()).due(n.due);
                if let Some(k) = &n.key {
                    s = s.key(k.clone());
                }
                if let Some(g) = &n.group {
                    s = s.group(g.clone());
                }
                if n.replace {
                    s = s.on_conflict(dueq::OnConflict::Replace);
                }
                if let Some(m) = n.max_attempts {
                    s = s.max_attempts(m);
                }
                if let Some(l) = n.lease_ms {
                    s = s.lease_ms(l);
                }
                s
            })
            .collect();
        let got = if specs.len() == 1 {
            vec![self.q.enqueue(specs[0].clone()).await.unwrap()]
        } else {
            self.q.enqueue_batch(&specs).await.unwrap()
        };
        assert_eq!(got.len(), news.len(), "one answer per task");
        for (i, (n, e)) in news.iter().zip(&got).enumerate() {
            let want = self.model.enqueue(now, n);
            let have = (
                e.outcome,
                want.id.clone().map(|_| e.id.clone()),
                e.due_at_ms,
            );
            assert_eq!(
                have,
                (want.outcome, want.id.clone(), want.due_at_ms),
                "enqueue item {i} of {n:?}"
            );
            tally(|t| match e.outcome {
                EnqueueOutcome::Created => t.created += 1,
                EnqueueOutcome::Existing => t.existing += 1,
                EnqueueOutcome::Replaced => t.replaced += 1,
                _ => t.in_progress += 1,
            });
            if want.id.is_none() {
                assert!(
                    !self.model.tasks.contains_key(&e.id),
                    "new task {} reuses an id",
                    e.id
                );
                if let Some(last) = self.model.tasks.keys().next_back() {
                    assert!(&e.id > last, "ids grow in enqueue order (FIFO)");
                }
                self.model.created(now, n, e.id.clone(), e.due_at_ms);
            }
        }
    }

    async fn recover(&mut self) {
        let now = self.now();
        let r = self.q.recover().await.unwrap();
        let (back, dead) = self.model.recover(now);
        tally(|t| t.expired += back + dead);
        assert_eq!(r.now_ms, now);
        assert_eq!(
            (r.recovered, r.dead),
            (back, dead),
            "recover: (back to scheduled, dead)"
        );
        let next = self.model.active().filter_map(deadline).min();
        assert_eq!(r.next_lease_deadline_ms, next, "earliest lease deadline");
    }
}

pub fn deadline(t: &model::MTask) -> Option<u64> {
    match t.state {
        model::St::Active { deadline_ms, .. } => Some(deadline_ms),
        _ => None,
    }
}
