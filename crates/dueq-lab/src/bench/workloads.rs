//! The workloads. Each returns its figures for one run; setup (filling the queue) is not timed.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{Client, Outcome, Queue, TaskSpec, Worker};
use tokio::time::Instant;

use super::load::{fill, payload, timed_drain, wait_succeeded};
use super::measure::{
    Figure, Probe, client_commands, client_cpu_s, fig, median, pct, settle_tables, throughput,
};
use super::sizes::Sizes;

/// A workload of DESIGN section 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Enqueue delayed tasks in batches of 1 000.
    W1,
    /// Drain due tasks through the worker runtime (leases, acks).
    W2,
    /// W2 with half the tasks at priority 0 and half at 9, the claim order checked (not in
    /// the default set).
    W2Prio,
    /// Lateness of tasks due evenly over a span, worker idle and waiting.
    W3,
    /// An idle worker over future tasks: Redis commands per second.
    Idle,
    /// One claim of 100 due tasks over growing numbers of pending tasks.
    W4,
    /// Memory per pending task with a 100-byte payload.
    W5,
    /// Fairness: a flooding group and a small one, `group_concurrency` 10.
    W7,
    /// W7's tasks without groups under `concurrency` 20: what W7's drain is compared with.
    W7Ref,
    /// Many tenants: 1 000 groups of 100 due tasks, `group_concurrency` 10.
    W7T,
    /// Schedules firing every second, three worker clients (not in the default set).
    W8,
    /// IDLE with 10 000 schedules due in about 45 minutes (not in the default set).
    IdleSchedules,
    /// Timers through the PostgreSQL outbox and a relay (needs `--postgres`; not in the
    /// default set).
    Outbox,
    /// Partitions: W1, W2 and W4 on a local 3-master Redis Cluster with 1 and 6 partitions,
    /// Redis CPU per master (not in the default set; refuses `--redis`).
    W9,
}

impl Workload {
    /// Every workload in the documented order.
    pub const ALL: [Workload; 9] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::Idle,
        Workload::W4,
        Workload::W5,
        Workload::W7,
        Workload::W7Ref,
        Workload::W7T,
    ];

    /// Its name in flags and output.
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "W1",
            Workload::W2 => "W2",
            Workload::W2Prio => "W2-PRIO",
            Workload::W3 => "W3",
            Workload::Idle => "IDLE",
            Workload::W4 => "W4",
            Workload::W5 => "W5",
            Workload::W7 => "W7",
            Workload::W7Ref => "W7-REF",
            Workload::W7T => "W7T",
            Workload::W8 => "W8",
            Workload::IdleSchedules => "IDLE-SCHEDULES",
            Workload::Outbox => "OUTBOX",
            Workload::W9 => "W9",
        }
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        // W2_PRIO and IDLE_SCHEDULES too: one spelling printed, both accepted
        let dashed = s.replace('_', "-");
        Workload::ALL
            .into_iter()
            .chain([
                Workload::W2Prio,
                Workload::W8,
                Workload::IdleSchedules,
                Workload::Outbox,
                Workload::W9,
            ])
            .find(|w| w.name().eq_ignore_ascii_case(&dashed))
            .ok_or_else(|| {
                format!(
                    "unknown workload {s:?}: use W1, W2, W2-PRIO, W3, IDLE, W4, W5, W7, W7-REF, \
                     W7T, W8, IDLE-SCHEDULES, OUTBOX, W9"
                )
            })
    }
}

fn future_specs(n: usize, delay_ms: u64) -> Vec<TaskSpec> {
    let p = payload();
    (0..n)
        .map(|_| TaskSpec::new(p.clone()).delay_ms(delay_ms))
        .collect()
}

/// Runs one workload once against `url`.
pub async fn run(
    w: Workload,
    url: &str,
    sizes: &Sizes,
    run: usize,
    postgres: Option<&str>,
) -> Result<Vec<Figure>> {
    let client = Client::connect(url).await?;
    let probe = Probe::new(client.clone());
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let queue_name = format!("bench-{}-{stamp}-{run}", w.name());
    let queue = client.queue(&queue_name)?;
    match w {
        Workload::W1 => w1(&queue, &probe, sizes.w1).await,
        Workload::W2 => w2(&client, &queue, &probe, sizes.w2).await,
        Workload::W2Prio => w2_prio(&client, &queue, &probe, sizes.w2).await,
        Workload::W3 => w3(&client, &queue, sizes.w3, sizes.w3_span_ms).await,
        Workload::Idle => {
            fill(&queue, future_specs(sizes.idle_tasks, 3_600_000)).await?;
            idle(url, &client, &queue, &probe, "IDLE", sizes.idle).await
        }
        Workload::IdleSchedules => {
            super::schedules::far_schedules(&queue, sizes.idle_schedules).await?;
            idle(url, &client, &queue, &probe, "IDLE-SCHEDULES", sizes.idle).await
        }
        Workload::W4 => {
            let queues = sizes
                .w4
                .iter()
                .enumerate()
                .map(|(i, n)| Ok((client.queue(&format!("{queue_name}-{i}"))?, *n)))
                .collect::<Result<Vec<_>>>()?;
            w4(url, &client, &queues).await
        }
        Workload::W5 => w5(&queue, &probe, sizes.w5).await,
        Workload::W7 => {
            super::fairness::run(&client, &queue, &probe, sizes.w7, sizes.w7_small).await
        }
        Workload::W7Ref => {
            let n = sizes.w7 + sizes.w7_small;
            super::fairness::reference(&client, &queue, &probe, n).await
        }
        Workload::W7T => {
            let (g, n) = (sizes.w7t_groups, sizes.w7t_per_group);
            super::fairness::tenants(&client, &queue, &probe, g, n).await
        }
        Workload::W8 => {
            super::schedules::run(url, &probe, &queue_name, sizes.w8, sizes.w8_secs).await
        }
        Workload::Outbox => {
            let pg =
                anyhow::Context::context(postgres, "the OUTBOX workload needs --postgres URL")?;
            super::outbox::run(&client, &probe, &queue_name, pg, sizes.outbox).await
        }
        Workload::W9 => bail!("W9 runs on its own local cluster (see bench::run)"),
    }
}

pub(super) async fn w1(queue: &Queue, probe: &Probe, n: usize) -> Result<Vec<Figure>> {
    let specs = future_specs(n, 600_000);
    let (cpu0, ccpu0) = (probe.cpu_s().await?, client_cpu_s());
    let t = Instant::now();
    fill(queue, specs).await?;
    let secs = t.elapsed().as_secs_f64();
    let (cpu1, ccpu1) = (probe.cpu_s().await?, client_cpu_s());
    Ok(throughput("W1", n, secs, cpu1 - cpu0, ccpu1 - ccpu0))
}

pub(super) async fn w2(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    n: usize,
) -> Result<Vec<Figure>> {
    fill(queue, future_specs(n, 0)).await?;
    let (figures, _) = drain(client, queue, probe, n, "W2").await?;
    Ok(figures)
}

/// W2 over a queue whose tasks alternate between priority 0 and 9, all due: the drain rate,
/// and the order check. Every priority-0 task must start before the priority-9 ones, but for
/// those of the one claim that took the last priority-0 tasks (their handlers start side by
/// side): at most one claim batch (the worker's concurrency) of them.
async fn w2_prio(client: &Client, queue: &Queue, probe: &Probe, n: usize) -> Result<Vec<Figure>> {
    let p = payload();
    let specs = (0..n)
        .map(|i| TaskSpec::new(p.clone()).priority(if i % 2 == 0 { 0 } else { 9 }))
        .collect();
    fill(queue, specs).await?;
    let (mut figures, starts) = drain(client, queue, probe, n, "W2-PRIO").await?;
    let last_first = starts.iter().rposition(|p| *p == 0).unwrap_or(0);
    let early_nines = starts[..last_first].iter().filter(|p| **p == 9).count();
    if early_nines > DRAIN_CONCURRENCY {
        bail!(
            "W2-PRIO: {early_nines} priority-9 tasks started before the last priority-0 one \
             (at most one claim of {DRAIN_CONCURRENCY} may)"
        );
    }
    figures.push(fig(
        "W2-PRIO",
        "prio9_before_last_prio0",
        early_nines as f64,
    ));
    Ok(figures)
}

/// The worker's concurrency (and so its largest claim) in W2 and W2-PRIO.
const DRAIN_CONCURRENCY: usize = 1_000;

/// Drains `n` due tasks of `queue` with a no-op handler: the throughput figures (from the first
/// handler start to the last ack), and each task's priority in handler start order.
async fn drain(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    n: usize,
    name: &'static str,
) -> Result<(Vec<Figure>, Vec<u8>)> {
    let starts = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let s2 = starts.clone();
    let figures = timed_drain(client, queue, probe, n, name, move |task| {
        s2.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.priority);
        async {}
    })
    .await?;
    let order = std::mem::take(&mut *starts.lock().unwrap_or_else(|p| p.into_inner()));
    Ok((figures, order))
}

/// Handler start minus due time (Redis clock) of every task, after they all ran.
async fn lateness_of(
    client: &Client,
    queue: &Queue,
    specs: Vec<TaskSpec>,
    concurrency: usize,
) -> Result<Vec<i64>> {
    let n = specs.len();
    let lat: Arc<Mutex<Vec<i64>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let l2 = lat.clone();
    let worker = Worker::builder(client.clone())
        .concurrency(concurrency)
        .handle(queue.name(), move |task| {
            let l2 = l2.clone();
            async move {
                let late = task.started_at_ms as i64 - task.due_at_ms as i64;
                l2.lock().unwrap_or_else(|p| p.into_inner()).push(late);
                Outcome::Success
            }
        })
        .build()?
        .start();
    // let the worker subscribe and go idle
    tokio::time::sleep(Duration::from_millis(300)).await;
    fill(queue, specs).await?;
    wait_succeeded(&worker, n, Duration::from_millis(5)).await?;
    worker.shutdown().await?;
    let v = lat.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(v)
}

async fn w3(client: &Client, queue: &Queue, n: usize, span_ms: u64) -> Result<Vec<Figure>> {
    let t0 = queue.stats().await?.now_ms + 1_000;
    let p = payload();
    let specs = (0..n)
        .map(|i| TaskSpec::new(p.clone()).due_at_ms(t0 + i as u64 * span_ms / n.max(1) as u64))
        .collect();
    let mut lat = lateness_of(client, queue, specs, 64).await?;
    lat.sort_unstable();
    Ok(vec![
        fig("W3", "p50_ms", pct(&lat, 0.50)),
        fig("W3", "p90_ms", pct(&lat, 0.90)),
        fig("W3", "p99_ms", pct(&lat, 0.99)),
        fig("W3", "max_ms", lat.last().copied().unwrap_or(0) as f64),
        fig("W3", "min_ms", lat.first().copied().unwrap_or(0) as f64),
    ])
}

/// An idle worker over what the queue holds (nothing due during `span`): Redis commands per
/// second of its process, Redis calls and CPU.
async fn idle(
    url: &str,
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    name: &'static str,
    span: Duration,
) -> Result<Vec<Figure>> {
    let worker = Worker::builder(client.clone())
        .handle(queue.name(), |_t| async { Outcome::Success })
        .build()?
        .start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (c0, cpu0) = (probe.commands().await?, probe.cpu_s().await?);
    let client_cmds = client_commands(url, span).await?;
    let (c1, cpu1) = (probe.commands().await?, probe.cpu_s().await?);
    worker.shutdown().await?;
    // the probe's own INFO calls between the two readings: cpu_s() before, commands() after
    let calls = (c1 - c0 - 2.0).max(0.0);
    Ok(vec![
        fig(
            name,
            "redis_commands_per_s",
            client_cmds as f64 / span.as_secs_f64(),
        ),
        fig(name, "redis_calls_per_s", calls / span.as_secs_f64()),
        fig(name, "redis_cpu_s", cpu1 - cpu0),
    ])
}

/// W4 over every size at once, so that the machine's drift hits all sizes alike: each queue
/// is filled in turn (and its claim timed right after the fill, while Redis is still moving
/// the hash tables it doubled: see `settle_tables`); then every queue's tables are settled,
/// the state of a queue that stays near its size, and claims are timed round-robin over the
/// queues, 101 per queue. Last, per queue, due time to the 100th handler start.
pub(super) async fn w4(
    url: &str,
    client: &Client,
    queues: &[(Queue, usize)],
) -> Result<Vec<Figure>> {
    const ROUNDS: usize = 101;
    let mut after_fill = Vec::new();
    for (queue, pending) in queues {
        // fill in slices so 10 M specs never sit in memory at once
        let mut left = *pending;
        while left > 0 {
            let k = left.min(100_000);
            fill(queue, future_specs(k, 3_600_000)).await?;
            left -= k;
        }
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            times.push(time_one_claim(queue).await?);
        }
        after_fill.push(median(&mut times));
    }
    for (queue, pending) in queues {
        // a partitioned queue (W9): each partition holds about its share
        let parts = queue.settings().await?.partitions.unwrap_or(1).max(1);
        for p in 0..parts {
            let keys = dueq::QueueKeys::partition(queue.name(), p, parts)?;
            settle_tables(url, &keys, pending.div_ceil(usize::from(parts))).await?;
        }
    }
    let mut at_rest = vec![Vec::new(); queues.len()];
    for _ in 0..ROUNDS {
        for (i, (queue, _)) in queues.iter().enumerate() {
            at_rest[i].push(time_one_claim(queue).await?);
        }
    }
    let mut out = Vec::new();
    for (i, (queue, pending)) in queues.iter().enumerate() {
        let name = format!("W4-{pending}");
        let due = queue.stats().await?.now_ms + 500;
        let p = payload();
        let specs = (0..100)
            .map(|_| TaskSpec::new(p.clone()).due_at_ms(due))
            .collect();
        let lat = lateness_of(client, queue, specs, 200).await?;
        let last = lat.iter().copied().max().unwrap_or(0);
        out.push(fig(name.clone(), "claim_ms", median(&mut at_rest[i])));
        out.push(fig(name.clone(), "claim_after_fill_ms", after_fill[i]));
        out.push(fig(name, "due_to_100th_ms", last as f64));
    }
    Ok(out)
}

/// Enqueues 100 due tasks, times one claim of them (round trip included, ms) and
/// acknowledges them.
async fn time_one_claim(queue: &Queue) -> Result<f64> {
    fill(queue, future_specs(100, 0)).await?;
    let t = Instant::now();
    let c = queue.claim(100, None).await?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if c.tasks.len() != 100 {
        bail!("W4 {}: claimed {} of 100", queue.name(), c.tasks.len());
    }
    let acks: Vec<_> = c.tasks.into_iter().map(|t| (t.id, t.lease_token)).collect();
    queue.ack_batch(&acks).await?;
    Ok(ms)
}

async fn w5(queue: &Queue, probe: &Probe, n: usize) -> Result<Vec<Figure>> {
    // one task first so the queue's fixed keys exist before the baseline
    fill(queue, future_specs(1, 3_600_000)).await?;
    let m0 = probe.used_memory().await?;
    fill(queue, future_specs(n, 3_600_000)).await?;
    let m1 = probe.used_memory().await?;
    Ok(vec![fig("W5", "bytes_per_task", (m1 - m0) / n as f64)])
}
