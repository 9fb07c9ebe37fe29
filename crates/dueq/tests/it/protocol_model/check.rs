//! The invariants checked after every step, three ways: what the library reports (`get` by id
//! and by key, `stats`), and the raw keys of the queue (every task in exactly one place).

use std::collections::{BTreeMap, BTreeSet};

use dueq::{Task, TaskRef, TaskState};
use futures_util::future::join_all;

use super::model::{MTask, St};
use super::{Env, GROUPS, KEYS};

pub async fn all(env: &Env<'_>, ctx: &str) {
    let now = env.now();
    conservation(env, ctx);
    stats(env, now, ctx).await;
    gets(env, ctx).await;
    raw(env, ctx);
}

/// Every task the queue ever created is scheduled, active, succeeded, dead, cancelled or
/// deleted; the model's counts say so first (a wrong model would hide a wrong library).
fn conservation(env: &Env<'_>, ctx: &str) {
    let m = &env.model;
    let (s, a, d) = (
        m.scheduled().count() as u64,
        m.active().count() as u64,
        m.dead().count() as u64,
    );
    assert_eq!(
        m.c.enqueued,
        s + a + d + m.c.succeeded + m.c.cancelled + m.c.deleted + m.c.dead_trimmed,
        "{ctx}: model counts not conserved: {:?}",
        m.c
    );
    assert_eq!(m.c.enqueued, m.tasks.len() as u64, "{ctx}");
}

async fn stats(env: &Env<'_>, now: u64, ctx: &str) {
    let m = &env.model;
    let st = env.q.stats().await.unwrap();
    assert_eq!(st.now_ms, now, "{ctx}: stats read at the clock's time");
    let due = m.scheduled().filter(|t| t.due_at_ms <= now).count() as u64;
    let next_due = m.scheduled().map(|t| t.due_at_ms).min();
    let have = (
        st.scheduled,
        st.due,
        st.active,
        st.dead,
        st.succeeded_kept,
        st.next_due_at_ms,
    );
    let want = (
        m.scheduled().count() as u64,
        due,
        m.active().count() as u64,
        m.dead().count() as u64,
        m.kept().count() as u64,
        next_due,
    );
    assert_eq!(
        have, want,
        "{ctx}: stats (scheduled, due, active, dead, succeeded kept, next due)"
    );
    let have = (
        st.enqueued_total,
        st.succeeded_total,
        st.failed_total,
        st.retried_total,
        st.dead_total,
        st.cancelled_total,
        st.lease_expired_total,
    );
    let c = &m.c;
    let want = (
        c.enqueued,
        c.succeeded,
        c.failed,
        c.retried,
        c.dead,
        c.cancelled,
        c.lease_expired,
    );
    assert_eq!(
        have, want,
        "{ctx}: stats counters (enqueued, succeeded, failed, retried, dead, cancelled, \
         lease expired)"
    );
    // conservation on the library's own numbers (it counts no deletes from the DLQ, nor
    // the dead its cap dropped)
    assert_eq!(
        st.enqueued_total,
        st.scheduled
            + st.active
            + st.dead
            + st.succeeded_total
            + st.cancelled_total
            + c.deleted
            + c.dead_trimmed,
        "{ctx}: enqueued = scheduled + active + dead + succeeded + cancelled + deleted \
         + dead dropped by the cap"
    );
    let waiting: BTreeSet<&str> = m.scheduled().filter_map(|t| t.group.as_deref()).collect();
    assert_eq!(
        st.groups_waiting,
        waiting.len() as u64,
        "{ctx}: groups with scheduled tasks {waiting:?}"
    );
}

/// What `get` must show for model task `t` (`None` once it is gone), as comparable fields.
type View = (
    TaskState,
    Option<String>,
    Option<String>,
    Vec<u8>,
    u64,
    u32,
    u32,
    u64,
    Option<String>,
    u64,
    Option<u64>,
);

fn view_of_model(env: &Env<'_>, t: &MTask) -> Option<View> {
    let m = &env.model;
    let (state, attempt, state_at) = match &t.state {
        St::Scheduled => (TaskState::Scheduled, t.attempt, None),
        St::Active { deadline_ms, .. } => (TaskState::Active, t.attempt + 1, Some(*deadline_ms)),
        St::Dead { at_ms } => (TaskState::Dead, t.attempt, Some(*at_ms)),
        St::Succeeded { at_ms } => (TaskState::Succeeded, t.attempt, Some(*at_ms)),
        St::Gone => return None,
    };
    Some((
        state,
        t.key.clone(),
        t.group.clone(),
        t.payload.clone(),
        t.due_at_ms,
        attempt,
        m.max_attempts_of(t),
        m.lease_ms_of(t),
        t.last_error.clone(),
        t.created_at_ms,
        state_at,
    ))
}

fn view_of(t: Task) -> View {
    (
        t.state,
        t.key,
        t.group,
        t.payload,
        t.due_at_ms,
        t.attempt,
        t.max_attempts,
        t.lease_ms,
        t.last_error,
        t.created_at_ms,
        t.state_at_ms,
    )
}

/// `get` by id for every task ever created, and by key for every key of the pool.
async fn gets(env: &Env<'_>, ctx: &str) {
    let m = &env.model;
    let by_id = join_all(m.tasks.keys().map(|id| {
        let target = TaskRef::Id(id.clone());
        async move { env.q.get(&target).await }
    }))
    .await;
    for (t, got) in m.tasks.values().zip(by_id) {
        let got = got.unwrap();
        if let Some(g) = &got {
            assert_eq!(g.id, t.id, "{ctx}");
        }
        assert_eq!(
            got.map(view_of),
            view_of_model(env, t),
            "{ctx}: get {} (state, key, group, payload, due, attempt, max_attempts, lease_ms, \
             last_error, created_at, state_at)",
            t.id
        );
    }
    let by_key = join_all(KEYS.iter().map(|k| {
        let target = TaskRef::key(*k).unwrap();
        async move { env.q.get(&target).await }
    }))
    .await;
    for (k, got) in KEYS.iter().zip(by_key) {
        let got = got.unwrap().map(|t| t.id);
        assert_eq!(
            got.as_ref(),
            m.get_by_key(k),
            "{ctx}: get by key {k}: the key's live task, else the newest dead task under it"
        );
    }
}

/// The raw keys: each task in exactly the places its state puts it, nothing else there.
fn raw(env: &Env<'_>, ctx: &str) {
    let m = &env.model;
    let k = env.q.keys();
    let mut conn = env.server.lock().unwrap().conn();
    let mut p = redis::pipe();
    for id in m.tasks.keys() {
        let id = id.as_str();
        p.zscore(&k.sched, id)
            .zscore(&k.gdue, id)
            .zscore(&k.active, id)
            .hget(&k.leases, id)
            .zscore(&k.dead, id)
            .zscore(&k.done, id)
            .hexists(&k.tasks, id)
            .hget(&k.groups, id);
    }
    type Places = (
        Option<u64>,
        Option<u64>,
        Option<u64>,
        Option<String>,
        Option<u64>,
        Option<u64>,
        bool,
        Option<String>,
    );
    let places: Vec<Places> = if m.tasks.is_empty() {
        Vec::new()
    } else {
        p.query(&mut conn).unwrap()
    };
    for (t, (sched, gdue, active, lease, dead, done, rec, group)) in m.tasks.values().zip(places) {
        let token = lease.map(|l| l.split(' ').next().unwrap_or_default().to_owned());
        let (s, g) = if t.group.is_some() {
            (None, Some(t.due_at_ms))
        } else {
            (Some(t.due_at_ms), None)
        };
        let want = match &t.state {
            St::Scheduled => (s, g, None, None, None, true),
            St::Active { token, deadline_ms } => (
                None,
                None,
                Some(*deadline_ms),
                Some(token.as_str().to_owned()),
                None,
                true,
            ),
            St::Dead { at_ms } => (None, None, None, None, Some(*at_ms), true),
            St::Succeeded { .. } => (None, None, None, None, None, true),
            St::Gone => (None, None, None, None, None, false),
        };
        assert_eq!(
            (sched, gdue, active, token, dead, rec),
            want,
            "{ctx}: {} ({:?}) in (sched, gdue, active, lease token, dead, record)",
            t.id,
            t.state
        );
        let kept = match t.state {
            St::Succeeded { at_ms } => Some(at_ms),
            _ => None,
        };
        assert_eq!(done, kept, "{ctx}: {} in done (succeeded, kept)", t.id);
        let want_group = if t.state == St::Gone {
            None
        } else {
            t.group.clone()
        };
        assert_eq!(group, want_group, "{ctx}: {} group entry", t.id);
    }
    // nothing the model does not know about, and the indexes agree with each other
    type Sizes = (
        BTreeMap<String, String>,
        u64,
        u64,
        u64,
        u64,
        u64,
        u64,
        u64,
        BTreeMap<String, u64>,
    );
    let (keys, n_sched, n_gdue, n_gsched, n_active, n_leases, n_dead, n_tasks, gactive): Sizes =
        redis::pipe()
            .hgetall(&k.keys)
            .zcard(&k.sched)
            .zcard(&k.gdue)
            .zcard(&k.gsched)
            .zcard(&k.active)
            .hlen(&k.leases)
            .zcard(&k.dead)
            .hlen(&k.tasks)
            .hgetall(&k.gactive)
            .query(&mut conn)
            .unwrap();
    let want_keys: BTreeMap<String, String> = m
        .keys
        .iter()
        .map(|(k, id)| (k.clone(), id.as_str().to_owned()))
        .collect();
    assert_eq!(keys, want_keys, "{ctx}: the key index");
    let dead_keys: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(&k.dead_keys)
        .query(&mut conn)
        .unwrap();
    // the newest dead task's id, then how many dead tasks hold the key when more than one
    let want_dead_keys: BTreeMap<String, String> = m
        .dead_keys
        .iter()
        .map(|(k, id)| match m.dead_with_key(k) {
            n if n > 1 => (k.clone(), format!("{} {n}", id.as_str())),
            _ => (k.clone(), id.as_str().to_owned()),
        })
        .collect();
    assert_eq!(dead_keys, want_dead_keys, "{ctx}: the dead-key index");
    for (key, id) in &m.dead_keys {
        let t = &m.tasks[id];
        assert!(
            matches!(t.state, St::Dead { .. }) && t.key.as_deref() == Some(key),
            "{ctx}: model dead key {key} maps to {id} ({:?})",
            t.state
        );
    }
    for (key, id) in &m.keys {
        let t = &m.tasks[id];
        assert!(
            matches!(t.state, St::Scheduled | St::Active { .. }) && t.key.as_deref() == Some(key),
            "{ctx}: model key {key} maps to {id} ({:?})",
            t.state
        );
    }
    let live = m.tasks.values().filter(|t| t.state != St::Gone).count() as u64;
    let scheduled = m.scheduled().count() as u64;
    let active = m.active().count() as u64;
    assert_eq!(n_sched + n_gdue, scheduled, "{ctx}: sched + gdue members");
    assert_eq!(
        n_gsched, n_gdue,
        "{ctx}: gsched and gdue hold the same tasks"
    );
    // while tasks are active, each set also holds the pin that keeps it a hash table
    let with_pin = active + u64::from(active > 0);
    assert_eq!(
        (n_active, n_leases),
        (with_pin, with_pin),
        "{ctx}: active, leases (each with its pin while tasks are active)"
    );
    assert_eq!(
        (
            dueq_testkit::active_len(&mut conn, &k.active),
            dueq_testkit::leases_len(&mut conn, &k.leases)
        ),
        (active, active),
        "{ctx}: active, leases without the pin"
    );
    assert_eq!(n_dead, m.dead().count() as u64, "{ctx}: dead members");
    assert_eq!(n_tasks, live, "{ctx}: task records");
    let mut want_gactive = BTreeMap::new();
    for g in GROUPS {
        let n = m.active().filter(|t| t.group.as_deref() == Some(g)).count() as u64;
        if n > 0 {
            want_gactive.insert(g.to_owned(), n);
        }
    }
    assert_eq!(gactive, want_gactive, "{ctx}: active tasks per group");
}
