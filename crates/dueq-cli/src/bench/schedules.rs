//! W8 of DESIGN section 6: many schedules firing every second, three worker clients (each
//! with its own connections, as separate processes would have) all firing and running them.
//!
//! Figures: `tasks` (distinct tick tasks due in the measured window) against `expected`
//! (schedules × seconds), tick lateness (handler start minus fire time, Redis clock), and
//! Redis CPU per tick over the window, which includes claiming and acking the tick's task
//! (the scheduling share alone is not separated).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{Client, Outcome, ScheduleSpec, Worker};
use futures_util::StreamExt;

use super::{Figure, Probe};

fn fig(metric: &'static str, value: f64) -> Figure {
    Figure {
        workload: "W8".to_owned(),
        metric,
        value,
    }
}

type Seen = Arc<Mutex<(HashSet<String>, Vec<i64>)>>;

/// Runs W8: `n` schedules every 1 000 ms, measured over `secs` seconds.
/// Sets `n` daily schedules that all fire about 45 minutes from now (UTC), so that none fires
/// while an idle run measures them.
pub async fn far_schedules(q: &dueq::Queue, n: usize) -> Result<()> {
    let now = q.stats().await?.now_ms;
    let at_min = (now / 60_000 + 45) % (24 * 60);
    let cron = format!("{} {} * * *", at_min % 60, at_min / 60);
    let specs: Vec<_> = (0..n)
        .map(|i| ScheduleSpec::new(format!("s{i}"), b"{}".to_vec()).cron(cron.clone()))
        .collect();
    let results: Vec<_> = futures_util::stream::iter(&specs)
        .map(|s| q.set_schedule(s))
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

pub async fn run(
    url: &str,
    probe: &Probe,
    queue_name: &str,
    n: usize,
    secs: u64,
) -> Result<Vec<Figure>> {
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::connect(url).await?);
    }
    let q = clients[0].queue(queue_name)?;
    let specs: Vec<_> = (0..n)
        .map(|i| ScheduleSpec::new(format!("s{i}"), b"{}".to_vec()).every_ms(1000))
        .collect();
    let results: Vec<_> = futures_util::stream::iter(&specs)
        .map(|s| q.set_schedule(s))
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r?;
    }
    let now = q.stats().await?.now_ms;
    let t0 = (now / 1000 + 2) * 1000;
    let t1 = t0 + secs * 1000;
    let seen: Seen = Arc::default();
    let mut workers = Vec::new();
    for c in &clients {
        let seen = seen.clone();
        workers.push(
            Worker::builder(c.clone())
                .concurrency(512)
                .handle(queue_name, move |t| {
                    let seen = seen.clone();
                    async move {
                        if (t0..t1).contains(&t.due_at_ms) {
                            let mut g = seen.lock().unwrap_or_else(|p| p.into_inner());
                            g.1.push(t.started_at_ms as i64 - t.due_at_ms as i64);
                            g.0.insert(t.key.unwrap_or_default());
                        }
                        Outcome::Success
                    }
                })
                .build()?
                .start(),
        );
    }
    let wait_redis = |at: u64| {
        let q = q.clone();
        async move {
            loop {
                let now = q.stats().await?.now_ms;
                if now >= at {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis((at - now).min(200))).await;
            }
        }
    };
    wait_redis(t0).await?;
    let cpu0 = probe.cpu_s().await?;
    wait_redis(t1).await?;
    let cpu1 = probe.cpu_s().await?;
    let expected = n as u64 * secs;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while (seen.lock().unwrap_or_else(|p| p.into_inner()).0.len() as u64) < expected
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for w in workers {
        w.shutdown().await?;
    }
    let (keys, mut lat) = {
        let g = seen.lock().unwrap_or_else(|p| p.into_inner());
        (g.0.len() as u64, g.1.clone())
    };
    lat.sort_unstable();
    let early = lat.first().is_some_and(|&l| l < 0);
    if early {
        bail!("W8: a tick task ran before its fire time");
    }
    let p = |q: f64| super::workloads::pct(&lat, q);
    Ok(vec![
        fig("tasks", keys as f64),
        fig("expected", expected as f64),
        fig("p50_ms", p(0.5)),
        fig("p99_ms", p(0.99)),
        fig("max_ms", lat.last().copied().unwrap_or(0) as f64),
        fig(
            "redis_cpu_us_per_tick",
            (cpu1 - cpu0) * 1e6 / expected.max(1) as f64,
        ),
    ])
}
