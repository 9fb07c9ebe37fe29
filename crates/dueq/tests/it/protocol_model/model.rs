//! The reference model: DESIGN sections 1 and 2 for one queue, written down plainly (no Redis,
//! no I/O). Each operation takes "now" (the frozen test clock) and returns what the library
//! must answer; the runner compares and applies.

use std::collections::BTreeMap;

use dueq::{
    Backoff, CancelOutcome, ClaimedTask, DeadRetryOutcome, Due, EnqueueOutcome, LeaseToken,
    NackOutcome, RescheduleOutcome, TaskId,
};

/// Where a task is (DESIGN 1). `Succeeded` is a task kept by retention (`succeeded_max`);
/// `Gone` covers succeeded without retention (or trimmed from it), cancelled, and deleted or
/// trimmed from the dead-letter queue: nothing of it is left in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum St {
    Scheduled,
    Active { token: LeaseToken, deadline_ms: u64 },
    Dead { at_ms: u64 },
    Succeeded { at_ms: u64 },
    Gone,
}

#[derive(Debug, Clone)]
pub struct MTask {
    pub id: TaskId,
    pub key: Option<String>,
    pub group: Option<String>,
    pub payload: Vec<u8>,
    pub state: St,
    /// The record's due time: the due time while scheduled, the one it was claimed at while
    /// active, the last one while dead.
    pub due_at_ms: u64,
    /// Finished attempts.
    pub attempt: u32,
    /// The task's own settings (`None`: the queue's).
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
    pub last_error: Option<String>,
    pub created_at_ms: u64,
}

/// The queue's counters, as `stats` reports them (plus `deleted`, which it does not count).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub enqueued: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub retried: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub lease_expired: u64,
    /// Deleted from the dead-letter queue, or dropped from it by its cap (not stats counters).
    pub deleted: u64,
    pub dead_trimmed: u64,
}

/// One task of an enqueue call.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub key: Option<String>,
    pub group: Option<String>,
    pub due: Due,
    pub replace: bool,
    pub max_attempts: Option<u32>,
    pub lease_ms: Option<u64>,
    pub payload: Vec<u8>,
}

/// What one enqueue must answer: `id` is `None` for a task it must create (the library picks
/// the id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub outcome: EnqueueOutcome,
    pub id: Option<TaskId>,
    pub due_at_ms: u64,
}

/// The queue settings of one sequence.
#[derive(Debug, Clone)]
pub struct Settings {
    pub max_attempts: u32,
    pub lease_ms: u64,
    /// `None`: the defaults (keep no succeeded task, 10 000 dead ones).
    pub succeeded_max: Option<u64>,
    pub dead_max: Option<u64>,
}

pub struct Model {
    /// Every task ever created, by id (ids sort in creation order).
    pub tasks: BTreeMap<TaskId, MTask>,
    /// Business key → its live (scheduled or active) task.
    pub keys: BTreeMap<String, TaskId>,
    /// Business key → the newest dead task under it (`dead_keys`): set when a keyed task
    /// dies, dropped when that task is retried, deleted or trimmed off the dead-letter queue.
    pub dead_keys: BTreeMap<String, TaskId>,
    pub c: Counters,
    /// The queue's settings.
    pub max_attempts: u32,
    pub lease_ms: u64,
    pub backoff: Backoff,
    /// Retention caps: succeeded tasks kept (0: none), dead tasks kept.
    pub succeeded_max: u64,
    pub dead_max: u64,
}

fn due_at(now: u64, due: Due) -> u64 {
    match due {
        Due::DelayMs(d) => now + d,
        Due::AtMs(t) => t,
        _ => unreachable!("the model uses delay and at only"),
    }
}

impl Model {
    pub fn new(settings: &Settings, backoff: Backoff) -> Self {
        Self {
            tasks: BTreeMap::new(),
            keys: BTreeMap::new(),
            dead_keys: BTreeMap::new(),
            c: Counters::default(),
            max_attempts: settings.max_attempts,
            lease_ms: settings.lease_ms,
            backoff,
            succeeded_max: settings.succeeded_max.unwrap_or(0),
            dead_max: settings.dead_max.unwrap_or(10_000),
        }
    }

    pub fn task(&self, id: &TaskId) -> &MTask {
        &self.tasks[id]
    }

    fn task_mut(&mut self, id: &TaskId) -> &mut MTask {
        self.tasks.get_mut(id).expect("a task the model knows")
    }

    pub fn max_attempts_of(&self, t: &MTask) -> u32 {
        t.max_attempts.unwrap_or(self.max_attempts)
    }

    pub fn lease_ms_of(&self, t: &MTask) -> u64 {
        t.lease_ms.unwrap_or(self.lease_ms)
    }

    /// The live task of `key`, if any (what cancel and reschedule by key act on).
    pub fn by_key(&self, key: &str) -> Option<&TaskId> {
        self.keys.get(key)
    }

    /// What `get` by `key` finds: the live task under it, else the newest dead one.
    pub fn get_by_key(&self, key: &str) -> Option<&TaskId> {
        self.keys.get(key).or_else(|| {
            self.dead_keys
                .get(key)
                .filter(|id| matches!(self.tasks[*id].state, St::Dead { .. }))
        })
    }

    /// Drops the dead-key entry of `id` if it points at it (the task left the dead-letter
    /// queue).
    fn drop_dead_key(&mut self, id: &TaskId) {
        if let Some(k) = self.tasks[id].key.clone()
            && self.dead_keys.get(&k) == Some(id)
        {
            // the next newest dead task under the key, if any (by death time, then id)
            let next = self
                .tasks
                .values()
                .filter(|t| &t.id != id && t.key.as_deref() == Some(k.as_str()))
                .filter_map(|t| match t.state {
                    St::Dead { at_ms } => Some((at_ms, t.id.as_str().to_owned(), t.id.clone())),
                    _ => None,
                })
                .max()
                .map(|(_, _, id)| id);
            match next {
                Some(n) => self.dead_keys.insert(k, n),
                None => self.dead_keys.remove(&k),
            };
        }
    }

    /// How many dead tasks hold business key `key`.
    pub fn dead_with_key(&self, key: &str) -> usize {
        self.tasks
            .values()
            .filter(|t| matches!(t.state, St::Dead { .. }) && t.key.as_deref() == Some(key))
            .count()
    }

    fn release_key(&mut self, id: &TaskId) {
        if let Some(k) = self.tasks[id].key.clone()
            && self.keys.get(&k) == Some(id)
        {
            self.keys.remove(&k);
        }
    }

    /// What enqueueing `t` must answer before the task exists (for a created task the caller
    /// then calls [`Model::created`] with the id the library chose).
    pub fn enqueue(&mut self, now: u64, t: &NewTask) -> Expected {
        let due = due_at(now, t.due);
        if let Some(k) = &t.key
            && let Some(id) = self.keys.get(k).cloned()
        {
            let (state, old_due) = {
                let m = &self.tasks[&id];
                (m.state.clone(), m.due_at_ms)
            };
            return match (state, t.replace) {
                (St::Active { .. }, true) => Expected {
                    outcome: EnqueueOutcome::InProgress,
                    id: Some(id),
                    due_at_ms: 0,
                },
                (St::Scheduled, true) => {
                    // keeps attempts, creation time, group and last error
                    let m = self.task_mut(&id);
                    m.due_at_ms = due;
                    m.payload = t.payload.clone();
                    m.max_attempts = t.max_attempts;
                    m.lease_ms = t.lease_ms;
                    Expected {
                        outcome: EnqueueOutcome::Replaced,
                        id: Some(id),
                        due_at_ms: due,
                    }
                }
                (St::Scheduled | St::Active { .. }, false) => Expected {
                    outcome: EnqueueOutcome::Existing,
                    id: Some(id),
                    due_at_ms: old_due,
                },
                (s, _) => panic!("model: key {k} indexes a task in state {s:?}"),
            };
        }
        Expected {
            outcome: EnqueueOutcome::Created,
            id: None,
            due_at_ms: due,
        }
    }

    /// Records the task the library created for `t` under `id`.
    pub fn created(&mut self, now: u64, t: &NewTask, id: TaskId, due_at_ms: u64) {
        if let Some(k) = &t.key {
            self.keys.insert(k.clone(), id.clone());
        }
        self.c.enqueued += 1;
        self.tasks.insert(
            id.clone(),
            MTask {
                id,
                key: t.key.clone(),
                group: t.group.clone(),
                payload: t.payload.clone(),
                state: St::Scheduled,
                due_at_ms,
                attempt: 0,
                max_attempts: t.max_attempts,
                lease_ms: t.lease_ms,
                last_error: None,
                created_at_ms: now,
            },
        );
    }

    pub fn scheduled(&self) -> impl Iterator<Item = &MTask> {
        self.tasks.values().filter(|t| t.state == St::Scheduled)
    }

    pub fn active(&self) -> impl Iterator<Item = &MTask> {
        self.tasks
            .values()
            .filter(|t| matches!(t.state, St::Active { .. }))
    }

    pub fn dead(&self) -> impl Iterator<Item = &MTask> {
        self.tasks
            .values()
            .filter(|t| matches!(t.state, St::Dead { .. }))
    }

    pub fn kept(&self) -> impl Iterator<Item = &MTask> {
        self.tasks
            .values()
            .filter(|t| matches!(t.state, St::Succeeded { .. }))
    }

    /// Scheduled tasks due at `now`, in claim order: due time, then id (FIFO).
    fn due_now(&self, now: u64) -> Vec<&MTask> {
        let mut v: Vec<&MTask> = self.scheduled().filter(|t| t.due_at_ms <= now).collect();
        v.sort_by(|a, b| (a.due_at_ms, &a.id).cmp(&(b.due_at_ms, &b.id)));
        v
    }

    /// Checks what a claim of up to `max` tasks at `now` handed out, then applies it.
    ///
    /// There are no limits, so it must hand out `min(max, due)` tasks, all due (never
    /// early), each scheduled; the ungrouped ones and each group's ones are the earliest
    /// due of their kind (the mix between groups is the claim script's round-robin).
    pub fn claim(
        &mut self,
        now: u64,
        max: usize,
        lease_ms: Option<u64>,
        got: &[ClaimedTask],
    ) -> Result<(), String> {
        let due = self.due_now(now);
        let want = max.min(due.len());
        if got.len() != want {
            return Err(format!(
                "claim of {max} handed out {} tasks; {} were due: {:?}",
                got.len(),
                due.len(),
                due.iter().map(|t| &t.id).collect::<Vec<_>>()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in got {
            if c.due_at_ms > now {
                return Err(format!(
                    "EARLY: {} handed out at {now}, due {}",
                    c.id, c.due_at_ms
                ));
            }
            if !seen.insert(c.id.clone()) {
                return Err(format!("{} handed out twice in one claim", c.id));
            }
            let Some(t) = self.tasks.get(&c.id) else {
                return Err(format!("claim handed out unknown task {}", c.id));
            };
            if t.state != St::Scheduled {
                return Err(format!("claim handed out {} in state {:?}", c.id, t.state));
            }
            if t.due_at_ms > now {
                return Err(format!(
                    "EARLY: {} handed out at {now}, the model has it due {}",
                    c.id, t.due_at_ms
                ));
            }
            let lease = lease_ms.unwrap_or_else(|| self.lease_ms_of(t));
            let have = (
                &c.key,
                &c.group,
                &c.payload,
                c.attempt,
                c.max_attempts,
                c.due_at_ms,
                c.lease_expires_at_ms,
                c.claimed_at_ms,
                &c.last_error,
            );
            let want = (
                &t.key,
                &t.group,
                &t.payload,
                t.attempt + 1,
                self.max_attempts_of(t),
                t.due_at_ms,
                now + lease,
                now,
                &t.last_error,
            );
            if have != want {
                return Err(format!(
                    "claimed {}: (key, group, payload, attempt, max_attempts, due, lease \
                     deadline, claimed at, last error) {have:?}, model {want:?}",
                    c.id
                ));
            }
        }
        // the earliest of each kind: ungrouped in due order, each group in its due order
        let mut kinds: BTreeMap<Option<&str>, Vec<&TaskId>> = BTreeMap::new();
        for t in &due {
            kinds.entry(t.group.as_deref()).or_default().push(&t.id);
        }
        for (g, ids) in &kinds {
            let taken: Vec<&TaskId> = got
                .iter()
                .filter(|c| c.group.as_deref() == *g)
                .map(|c| &c.id)
                .collect();
            let mut sorted = taken.clone();
            sorted.sort_by_key(|id| (self.tasks[*id].due_at_ms, (*id).clone()));
            if sorted != ids[..taken.len()] {
                return Err(format!(
                    "claim order in group {g:?}: took {taken:?}, the earliest due are {:?}",
                    &ids[..taken.len()]
                ));
            }
        }
        for c in got {
            let lease = lease_ms.unwrap_or_else(|| self.lease_ms_of(&self.tasks[&c.id]));
            self.task_mut(&c.id).state = St::Active {
                token: c.lease_token.clone(),
                deadline_ms: now + lease,
            };
        }
        Ok(())
    }

    /// Whether `token` is the current lease of `id`.
    pub fn holds(&self, id: &TaskId, token: &LeaseToken) -> bool {
        matches!(&self.tasks[id].state, St::Active { token: t, .. } if t == token)
    }

    /// An ack: true when the token is current (then the task is gone).
    pub fn ack(&mut self, now: u64, id: &TaskId, token: &LeaseToken) -> bool {
        if !self.holds(id, token) {
            return false;
        }
        self.release_key(id);
        self.c.succeeded += 1;
        if self.succeeded_max == 0 {
            self.task_mut(id).state = St::Gone;
            return true;
        }
        // kept: the finished attempt counts; the oldest kept ones beyond the cap go
        let t = self.task_mut(id);
        t.attempt += 1;
        t.state = St::Succeeded { at_ms: now };
        let cap = self.succeeded_max;
        self.trim(cap, |s| match s {
            St::Succeeded { at_ms } => Some(*at_ms),
            _ => None,
        });
        true
    }

    /// Drops the oldest (by time, then id) of the tasks `at` selects beyond `cap` (and their
    /// dead-key entries); returns how many.
    fn trim(&mut self, cap: u64, at: impl Fn(&St) -> Option<u64>) -> u64 {
        let mut kept: Vec<(u64, TaskId)> = self
            .tasks
            .values()
            .filter_map(|t| at(&t.state).map(|a| (a, t.id.clone())))
            .collect();
        kept.sort();
        let excess = kept.len().saturating_sub(cap as usize);
        // out of the retention set first, as the script does, so no victim takes another's
        // place in the dead-key index
        for (_, id) in &kept[..excess] {
            self.task_mut(id).state = St::Gone;
        }
        for (_, id) in &kept[..excess] {
            self.drop_dead_key(id);
        }
        excess as u64
    }

    /// A release (graceful stop): true when the token is current; the task is due again at
    /// its old due time, the attempt not counted.
    pub fn release(&mut self, id: &TaskId, token: &LeaseToken) -> bool {
        if !self.holds(id, token) {
            return false;
        }
        self.task_mut(id).state = St::Scheduled;
        true
    }

    /// A failed attempt of active task `id` (nack or expired lease).
    fn fail(
        &mut self,
        now: u64,
        id: &TaskId,
        retry_ms: u64,
        permanent: bool,
        err: &str,
    ) -> NackOutcome {
        self.c.failed += 1;
        let max = self.max_attempts_of(&self.tasks[id]);
        let t = self.task_mut(id);
        t.attempt += 1;
        t.last_error = Some(err.to_owned());
        if permanent || t.attempt >= max {
            self.release_key(id);
            if let Some(k) = self.tasks[id].key.clone() {
                self.dead_keys.insert(k, id.clone());
            }
            self.task_mut(id).state = St::Dead { at_ms: now };
            self.c.dead += 1;
            let cap = self.dead_max;
            self.c.dead_trimmed += self.trim(cap, |s| match s {
                St::Dead { at_ms } => Some(*at_ms),
                _ => None,
            });
            NackOutcome::Dead
        } else {
            let t = self.task_mut(id);
            t.state = St::Scheduled;
            t.due_at_ms = now + retry_ms;
            self.c.retried += 1;
            NackOutcome::Rescheduled {
                due_at_ms: now + retry_ms,
            }
        }
    }

    pub fn nack(
        &mut self,
        now: u64,
        id: &TaskId,
        token: &LeaseToken,
        retry_in_ms: Option<u64>,
        permanent: bool,
        err: &str,
    ) -> NackOutcome {
        if !self.holds(id, token) {
            return NackOutcome::LeaseLost;
        }
        let retry =
            retry_in_ms.unwrap_or_else(|| self.backoff.delay_ms(self.tasks[id].attempt + 1));
        self.fail(now, id, retry, permanent, err)
    }

    /// An extend: the new deadline, or `None` when the token is not current.
    pub fn extend(
        &mut self,
        now: u64,
        id: &TaskId,
        token: &LeaseToken,
        lease_ms: u64,
    ) -> Option<u64> {
        if !self.holds(id, token) {
            return None;
        }
        self.task_mut(id).state = St::Active {
            token: token.clone(),
            deadline_ms: now + lease_ms,
        };
        Some(now + lease_ms)
    }

    /// Lease recovery at `now`: (back to scheduled, dead).
    pub fn recover(&mut self, now: u64) -> (u64, u64) {
        let expired: Vec<TaskId> = self
            .active()
            .filter(|t| matches!(t.state, St::Active { deadline_ms, .. } if deadline_ms <= now))
            .map(|t| t.id.clone())
            .collect();
        let (mut back, mut dead) = (0, 0);
        for id in expired {
            self.c.lease_expired += 1;
            let retry = self.backoff.delay_ms(self.tasks[&id].attempt + 1);
            match self.fail(now, &id, retry, false, "lease expired") {
                NackOutcome::Dead => dead += 1,
                _ => back += 1,
            }
        }
        (back, dead)
    }

    pub fn cancel(&mut self, id: Option<&TaskId>) -> CancelOutcome {
        let Some(id) = id else {
            return CancelOutcome::NotFound;
        };
        match self.tasks.get(id).map(|t| &t.state) {
            Some(St::Scheduled) => {
                self.release_key(id);
                self.task_mut(id).state = St::Gone;
                self.c.cancelled += 1;
                CancelOutcome::Cancelled
            }
            Some(St::Active { .. }) => CancelOutcome::InProgress,
            _ => CancelOutcome::NotFound,
        }
    }

    pub fn reschedule(&mut self, now: u64, id: Option<&TaskId>, due: Due) -> RescheduleOutcome {
        let Some(id) = id else {
            return RescheduleOutcome::NotFound;
        };
        match self.tasks.get(id).map(|t| &t.state) {
            Some(St::Scheduled) => {
                let due_at_ms = due_at(now, due);
                self.task_mut(id).due_at_ms = due_at_ms;
                RescheduleOutcome::Rescheduled { due_at_ms }
            }
            Some(St::Active { .. }) => RescheduleOutcome::InProgress,
            _ => RescheduleOutcome::NotFound,
        }
    }

    pub fn dead_retry(&mut self, now: u64, id: &TaskId) -> DeadRetryOutcome {
        if !matches!(self.tasks[id].state, St::Dead { .. }) {
            return DeadRetryOutcome::NotFound;
        }
        if let Some(k) = self.tasks[id].key.clone() {
            match self.keys.get(&k) {
                Some(other) if other != id => return DeadRetryOutcome::Conflict,
                _ => {
                    self.keys.insert(k, id.clone());
                }
            }
        }
        self.drop_dead_key(id);
        let t = self.task_mut(id);
        t.state = St::Scheduled;
        t.attempt = 0;
        t.due_at_ms = now;
        t.last_error = None;
        DeadRetryOutcome::Retried
    }

    pub fn dead_delete(&mut self, id: &TaskId) -> bool {
        if !matches!(self.tasks[id].state, St::Dead { .. }) {
            return false;
        }
        self.drop_dead_key(id);
        self.task_mut(id).state = St::Gone;
        self.c.deleted += 1;
        true
    }
}
