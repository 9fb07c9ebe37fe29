//! W8 of DESIGN section 6: many schedules firing every second, three worker clients (each
//! with its own connections, as separate processes would have) all firing and running them.
//!
//! Figures, Redis clock throughout:
//! - `tasks` (distinct tick tasks due in the measured window) against `expected` (schedules
//!   × seconds);
//! - `fire_late_p99_ms`, `fire_late_max_ms`: how late each tick fired, its task's enqueue time
//!   minus its fire time, 0 when it fired ahead (the tick's lateness: from then on the task is
//!   claimable at its due millisecond), and `fired_ahead_pct`;
//! - `start_p50_ms`, `start_p99_ms`, `start_max_ms`: handler start minus fire time (every
//!   schedule shares each tick, so this is the time the workers take to drain the burst);
//! - `redis_cpu_us_per_tick`: Redis CPU over the window per tick, claiming and acking the
//!   tasks included; `fire_redis_cpu_us_per_tick`: the scheduling alone, measured afterwards
//!   on a second queue of as many schedules fired by three firers and no worker.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{Client, Outcome, ScheduleFirer, ScheduleSpec, Worker};
use futures_util::StreamExt;

use super::measure::{Figure, Probe, pct};

fn fig(metric: &'static str, value: f64) -> Figure {
    Figure {
        workload: "W8".to_owned(),
        metric,
        value,
    }
}

/// Keys seen, handler start lateness and firing lateness per tick task (ms).
type Seen = Arc<Mutex<(HashSet<String>, Vec<i64>, Vec<i64>)>>;

/// Seconds of the scheduling-only measurement: one refill of the ticks fired ahead of every
/// schedule (`MAX_TICKS_AHEAD` less `REFILL_AT` ticks every second: every ten seconds).
const FIRE_ONLY_SECS: u64 = 10;

/// Sets `n` daily schedules that all fire about 45 minutes from now (UTC), so that none fires
/// while an idle run measures them.
pub async fn far_schedules(q: &dueq::Queue, n: usize) -> Result<()> {
    let now = q.stats().await?.now_ms;
    let at_min = (now / 60_000 + 45) % (24 * 60);
    let cron = format!("{} {} * * *", at_min % 60, at_min / 60);
    set_many(q, n, |s| s.cron(cron.clone())).await
}

/// Sets `n` schedules `s0..` on `q`, each with its timing from `timing`, 32 at a time.
async fn set_many(
    q: &dueq::Queue,
    n: usize,
    timing: impl Fn(ScheduleSpec) -> ScheduleSpec,
) -> Result<()> {
    let specs: Vec<_> = (0..n)
        .map(|i| timing(ScheduleSpec::new(format!("s{i}"), b"{}".to_vec())))
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

/// Runs W8: `n` schedules every 1 000 ms, measured over `secs` seconds.
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
    set_every_second(&q, n).await?;
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
                            g.2.push((t.created_at_ms as i64 - t.due_at_ms as i64).max(-1));
                            g.0.insert(t.key.unwrap_or_default());
                        }
                        Outcome::Success
                    }
                })
                .build()?
                .start(),
        );
    }
    wait_redis(&q, t0).await?;
    let cpu0 = probe.cpu_s().await?;
    wait_redis(&q, t1).await?;
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
    let (keys, mut lat, mut fired) = {
        let g = seen.lock().unwrap_or_else(|p| p.into_inner());
        (g.0.len() as u64, g.1.clone(), g.2.clone())
    };
    lat.sort_unstable();
    let early = lat.first().is_some_and(|&l| l < 0);
    if early {
        bail!("W8: a tick task ran before its fire time");
    }
    let ahead = fired.iter().filter(|&&l| l < 0).count();
    for l in &mut fired {
        *l = (*l).max(0);
    }
    fired.sort_unstable();
    let p = |v: &[i64], q: f64| pct(v, q);
    // whole refill periods (a schedule every second is refilled every few seconds), also in
    // a short run
    let fire_secs = FIRE_ONLY_SECS;
    let fire_cpu = fire_only(&clients, probe, &format!("{queue_name}-fire"), n, fire_secs).await?;
    Ok(vec![
        fig("tasks", keys as f64),
        fig("expected", expected as f64),
        fig("fire_late_p99_ms", p(&fired, 0.99)),
        fig(
            "fire_late_max_ms",
            fired.last().copied().unwrap_or(0) as f64,
        ),
        fig(
            "fired_ahead_pct",
            100.0 * ahead as f64 / fired.len().max(1) as f64,
        ),
        fig("start_p50_ms", p(&lat, 0.5)),
        fig("start_p99_ms", p(&lat, 0.99)),
        fig("start_max_ms", lat.last().copied().unwrap_or(0) as f64),
        fig(
            "redis_cpu_us_per_tick",
            (cpu1 - cpu0) * 1e6 / expected.max(1) as f64,
        ),
        fig("fire_redis_cpu_us_per_tick", fire_cpu),
    ])
}

/// Redis CPU per tick of the firing alone: `n` schedules every second on queue `name`,
/// fired by one [`ScheduleFirer`] per client and run by no worker, over `secs` seconds.
async fn fire_only(
    clients: &[Client],
    probe: &Probe,
    name: &str,
    n: usize,
    secs: u64,
) -> Result<f64> {
    let q = clients[0].queue(name)?;
    set_every_second(&q, n).await?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let firers: Vec<_> = clients
        .iter()
        .map(|c| {
            let firer = ScheduleFirer::for_queues(c.clone(), vec![c.queue(name)?]);
            let mut stopped = stopped.clone();
            Ok(tokio::spawn(async move {
                firer
                    .run(async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await;
            }))
        })
        .collect::<Result<_>>()?;
    // from a whole second on, once the first steps (which fire a look-ahead's worth of ticks
    // of every schedule at once) are past, so the window sees the steady refills: each
    // schedule's ticks of every measured second once
    let now = q.stats().await?.now_ms;
    let from = now / 1000 + 2 + dueq::schedule::FIRE_AHEAD_MS / 2000;
    wait_redis(&q, from * 1000).await?;
    let (cpu0, fired0) = (probe.cpu_s().await?, q.stats().await?.enqueued_total);
    wait_redis(&q, (from + secs) * 1000).await?;
    let (cpu1, fired1) = (probe.cpu_s().await?, q.stats().await?.enqueued_total);
    let _ = stop.send(true);
    for f in firers {
        f.await?;
    }
    if fired1 <= fired0 {
        bail!("W8: the scheduling-only part fired no tick");
    }
    Ok((cpu1 - cpu0) * 1e6 / (fired1 - fired0) as f64)
}

/// Sets `n` schedules `s0..` every 1 000 ms on `q`.
async fn set_every_second(q: &dueq::Queue, n: usize) -> Result<()> {
    set_many(q, n, |s| s.every_ms(1000)).await
}

/// Waits until the Redis clock reaches `at` (epoch ms).
async fn wait_redis(q: &dueq::Queue, at: u64) -> Result<()> {
    loop {
        let now = q.stats().await?.now_ms;
        if now >= at {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis((at - now).min(200))).await;
    }
}
