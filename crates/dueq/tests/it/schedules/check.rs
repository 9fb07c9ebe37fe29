//! Checks shared by the schedule tests: the scheduled tasks by tick, the invariants that hold
//! with no worker running, the schedule's view, and claims that must hand out nothing early.

use std::collections::BTreeMap;
use std::time::Duration;

use dueq::{Queue, Task, TaskState};

use crate::support::{Ctx, DEADLINE, schedule_keys};

/// Every scheduled task of the queue (browse, all pages).
pub(super) async fn scheduled(q: &Queue) -> Vec<Task> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let p = q
            .browse(TaskState::Scheduled, after.as_deref(), 500)
            .await
            .unwrap();
        out.extend(p.tasks);
        match p.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// Tick ms → tasks of schedule `name` among `tasks`.
pub(super) fn ticks_of(tasks: &[Task], name: &str) -> BTreeMap<u64, Vec<Task>> {
    let prefix = format!("schedule:{name}:");
    let mut m: BTreeMap<u64, Vec<Task>> = BTreeMap::new();
    for t in tasks {
        if let Some(k) = t.key.as_deref().and_then(|k| k.strip_prefix(&prefix)) {
            let tick: u64 = k.parse().unwrap();
            assert_eq!(t.due_at_ms, tick, "task of tick {tick} due at another time");
            m.entry(tick).or_default().push(t.clone());
        }
    }
    m
}

pub(super) fn hget(ctx: &Ctx, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(&mut ctx.raw())
        .unwrap()
}

/// `schedule:` entries of the queue's `keys` hash whose task is missing from `tasks`.
fn orphan_keys(ctx: &Ctx, q: &Queue) -> Vec<(String, String)> {
    schedule_keys(ctx, q)
        .into_iter()
        .filter(|(_, id)| {
            let e: bool = redis::cmd("HEXISTS")
                .arg(&q.keys().tasks)
                .arg(id)
                .query(&mut ctx.raw())
                .unwrap();
            !e
        })
        .collect()
}

/// Asserts every invariant that must hold of schedule `name` with no worker running (every
/// task it made still scheduled): one task per tick, none in a forbidden span, counters add
/// up, no orphaned keys.
pub(super) async fn check_common(
    ctx: &Ctx,
    q: &Queue,
    name: &str,
    spans: &[(u64, u64)],
) -> Vec<u64> {
    let tasks = scheduled(q).await;
    let by_tick = ticks_of(&tasks, name);
    let dups: Vec<_> = by_tick
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(t, v)| (*t, v.iter().map(|x| x.payload.clone()).collect::<Vec<_>>()))
        .collect();
    assert!(dups.is_empty(), "ticks with several tasks: {dups:?}");
    let in_span: Vec<_> = by_tick
        .keys()
        .filter(|&&t| spans.iter().any(|&(a, b)| t > a && t <= b))
        .copied()
        .collect();
    assert!(
        in_span.is_empty(),
        "tasks of ticks inside a paused/deleted span: {in_span:?} spans {spans:?}"
    );
    let st = q.stats().await.unwrap();
    assert_eq!(
        st.enqueued_total - st.cancelled_total,
        tasks.len() as u64,
        "enqueued - cancelled != live tasks: {st:?}"
    );
    assert_eq!(st.scheduled, tasks.len() as u64, "{st:?}");
    let orphans = orphan_keys(ctx, q);
    assert!(
        orphans.is_empty(),
        "keys pointing to missing tasks: {orphans:?}"
    );
    by_tick.keys().copied().collect()
}

/// Waits until the schedule's view satisfies `f`.
pub(super) async fn wait_view(
    q: &Queue,
    name: &str,
    what: &str,
    f: impl Fn(&dueq::Schedule) -> bool,
) {
    let start = std::time::Instant::now();
    loop {
        let s = q.schedule(name).await.unwrap().unwrap();
        if f(&s) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: never; last view {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing claimable before its due time at frozen `now`.
pub(super) async fn claim_none_early(q: &Queue, now: u64) {
    let c = q.claim(1000, None).await.unwrap().tasks;
    for t in &c {
        assert!(
            t.due_at_ms <= now,
            "handed out early: due {} now {now}",
            t.due_at_ms
        );
    }
    // hand them back so they stay countable
    let items: Vec<_> = c
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    if !items.is_empty() {
        q.release(&items).await.unwrap();
    }
}
