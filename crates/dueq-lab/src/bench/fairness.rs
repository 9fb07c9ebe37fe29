//! W7 (DESIGN section 6): fairness between groups. Group A has `w7` due tasks, group B
//! `w7_small` enqueued after them, `group_concurrency` 10; one worker (concurrency 1 000)
//! drains both. Figures: drain rate and Redis CPU per task (compare with W2 in the same
//! session), and how many of A's tasks had started when B's last one started (target: B's
//! all before A's 2 000th).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use dueq::{Client, Outcome, Queue, SettingsPatch, TaskSpec, Worker};
use tokio::time::Instant;

use super::load::{fill, payload, wait_succeeded};
use super::measure::{Figure, Probe, client_cpu_s, fig, throughput};

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
    let first = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let (a2, l2, f2) = (a_started.clone(), a_at_last_b.clone(), first.clone());
    let (cpu0, ccpu0) = (probe.cpu_s().await?, client_cpu_s());
    let worker = Worker::builder(client.clone())
        .concurrency(1_000)
        .handle(queue.name(), move |task| {
            let (a2, l2, f2) = (a2.clone(), l2.clone(), f2.clone());
            async move {
                f2.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(Instant::now);
                if task.group.as_deref() == Some("A") {
                    a2.fetch_add(1, Ordering::Relaxed);
                } else {
                    l2.store(a2.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                Outcome::Success
            }
        })
        .build()?
        .start();
    wait_succeeded(&worker, a + b, Duration::from_micros(500)).await?;
    let end = Instant::now();
    let (cpu1, ccpu1) = (probe.cpu_s().await?, client_cpu_s());
    worker.shutdown().await?;
    let start = first
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(end);
    let secs = (end - start).as_secs_f64().max(1e-9);
    let mut figs = throughput("W7", a + b, secs, cpu1 - cpu0, ccpu1 - ccpu0);
    figs.push(fig(
        "W7",
        "a_started_before_last_b",
        a_at_last_b.load(Ordering::Relaxed) as f64,
    ));
    Ok(figs)
}
