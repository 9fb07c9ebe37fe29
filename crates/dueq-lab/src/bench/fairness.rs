//! W7 (DESIGN section 6): fairness between groups. Group A has `w7` due tasks, group B
//! `w7_small` enqueued after them, `group_concurrency` 10; one worker (concurrency 1 000)
//! drains both. Figures: drain rate and Redis CPU per task (compare with W2 in the same
//! session), and how many of A's tasks had started when B's last one started (target: B's
//! all before A's 2 000th).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use dueq::{Client, Queue, SettingsPatch, TaskSpec};

use super::load::{fill, payload, timed_drain};
use super::measure::{Figure, Probe, fig};

pub(super) async fn run(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    a: usize,
    b: usize,
) -> Result<Vec<Figure>> {
    queue
        .update_settings(&SettingsPatch::default().group_concurrency(Some(10)))
        .await?;
    let p = payload();
    fill(
        queue,
        (0..a)
            .map(|_| TaskSpec::new(p.clone()).group("A"))
            .collect(),
    )
    .await?;
    fill(
        queue,
        (0..b)
            .map(|_| TaskSpec::new(p.clone()).group("B"))
            .collect(),
    )
    .await?;
    let a_started = Arc::new(AtomicU64::new(0));
    let a_at_last_b = Arc::new(AtomicU64::new(0));
    let (a2, l2) = (a_started.clone(), a_at_last_b.clone());
    let mut figs = timed_drain(client, queue, probe, a + b, "W7", move |task| {
        if task.group.as_deref() == Some("A") {
            a2.fetch_add(1, Ordering::Relaxed);
        } else {
            l2.store(a2.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        async {}
    })
    .await?;
    figs.push(fig(
        "W7",
        "a_started_before_last_b",
        a_at_last_b.load(Ordering::Relaxed) as f64,
    ));
    Ok(figs)
}

/// W7-REF: W7's tasks on a queue without groups under `concurrency` 20, the most W7's two
/// groups can have in flight at 10 each: what the same drain costs without the group rules.
pub(super) async fn reference(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    n: usize,
) -> Result<Vec<Figure>> {
    queue
        .update_settings(&SettingsPatch::default().concurrency(Some(20)))
        .await?;
    let p = payload();
    fill(queue, (0..n).map(|_| TaskSpec::new(p.clone())).collect()).await?;
    timed_drain(client, queue, probe, n, "W7-REF", |_| async {}).await
}

/// W7T: many tenants at once. `groups` groups of `per_group` due tasks each, enqueued
/// interleaved (one task of each group in turn), `group_concurrency` 10, one worker of
/// concurrency 1 000. Figures: the drain, and the most tasks of one group that ran at once
/// (counted at handler start and end; the target is at most 10).
pub(super) async fn tenants(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    groups: usize,
    per_group: usize,
) -> Result<Vec<Figure>> {
    queue
        .update_settings(&SettingsPatch::default().group_concurrency(Some(10)))
        .await?;
    let p = payload();
    let names: Vec<String> = (0..groups).map(|g| format!("tenant-{g}")).collect();
    let specs = (0..per_group)
        .flat_map(|_| {
            names
                .iter()
                .map(|g| TaskSpec::new(p.clone()).group(g.clone()))
        })
        .collect();
    fill(queue, specs).await?;
    // tasks of each group running now, and the most seen at once in any group
    let active: Arc<Vec<AtomicU64>> = Arc::new((0..groups).map(|_| AtomicU64::new(0)).collect());
    let most = Arc::new(AtomicU64::new(0));
    let (act, most2) = (active.clone(), most.clone());
    let n = groups * per_group;
    let mut figs = timed_drain(client, queue, probe, n, "W7T", move |task| {
        let (act, most2) = (act.clone(), most2.clone());
        async move {
            let g = task
                .group
                .as_deref()
                .and_then(|g| g.strip_prefix("tenant-"))
                .and_then(|g| g.parse::<usize>().ok())
                .and_then(|g| act.get(g));
            if let Some(g) = g {
                let now = g.fetch_add(1, Ordering::SeqCst) + 1;
                most2.fetch_max(now, Ordering::SeqCst);
                // a run long enough (1 ms, against 1 000 slots) for the group's other
                // tasks to be claimed meanwhile, so the limit binds
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.fetch_sub(1, Ordering::SeqCst);
            }
        }
    })
    .await?;
    figs.push(fig(
        "W7T",
        "most_active_in_a_group",
        most.load(Ordering::Relaxed) as f64,
    ));
    Ok(figs)
}
