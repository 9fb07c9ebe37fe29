//! The OUTBOX workload: timers written through the PostgreSQL outbox (`enqueue_in_tx` in the
//! producers' transactions) and carried into Redis by a relay running in this process, against
//! the same tasks enqueued straight into Redis (W1's path) in the same run.
//!
//! Figures: `committed_rows_per_s` (producers: 4 at once, `OUTBOX_ROWS_PER_TX` rows per
//! transaction), `relayed_rows_per_s` (first commit to the last row in Redis), `lag_p50_ms` /
//! `lag_p99_ms` / `lag_max_ms` (a transaction's commit returning to the producer to the
//! relay's `relayed_at` stamp, written after Redis confirmed the enqueue; both are this
//! host's wall clock), `redis_cpu_us_per_row`; `relay_drain_rows_per_s` (the same number of
//! rows committed beforehand, 1 000 per transaction, then drained by one relay: the relay's
//! own ceiling); and `direct_tasks_per_s` with `outbox_vs_direct` (the same keyed tasks
//! through `enqueue_batch`, as W1 does).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use dueq::{Client, TaskSpec};
use dueq_outbox::{OutboxTask, Relay, RelayConfig, enqueue_in_tx};
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Mutex;

use super::measure::{Figure, Probe};

/// Rows per producer transaction (a business transaction writing a handful of timers).
pub const OUTBOX_ROWS_PER_TX: usize = 10;
const PRODUCERS: usize = 4;

/// Each transaction's row ids and the wall-clock ms its commit returned.
type Commits = Vec<(Vec<i64>, i64)>;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn fig(metric: &'static str, value: f64) -> Figure {
    Figure {
        workload: "OUTBOX".into(),
        metric,
        value,
    }
}

/// Deletes a run's rows without leaving tombstones (the bench's Redis is thrown away): a
/// relay in a later run would otherwise spend its time cancelling them.
async fn cleanup(pool: &sqlx::PgPool, queue: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM dueq_outbox WHERE queue = $1")
        .bind(queue)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Runs the workload once with `n` rows against the database at `postgres`.
pub async fn run(
    client: &Client,
    probe: &Probe,
    queue: &str,
    postgres: &str,
    n: usize,
) -> Result<Vec<Figure>> {
    let pool = PgPoolOptions::new()
        .max_connections(PRODUCERS as u32 + 4)
        .connect(postgres)
        .await
        .context("connecting to PostgreSQL (--postgres)")?;
    dueq_outbox::migrate(&pool).await?;
    let relay = Relay::new(pool.clone(), client.clone(), RelayConfig::default());
    // The retention setting is made before timing starts.
    client
        .queue(queue)?
        .update_settings(&dueq::SettingsPatch::default().succeeded_max(Some(10_000)))
        .await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let relay_task = tokio::spawn(async move {
        relay
            .run_until(async {
                let _ = stopped.await;
            })
            .await
    });
    // let the relay's first round (LISTEN, reconciler pass) finish before timing
    tokio::time::sleep(Duration::from_millis(300)).await;

    let txs = n.div_ceil(OUTBOX_ROWS_PER_TX);
    let next = Arc::new(AtomicU64::new(0));
    let commits: Arc<Mutex<Commits>> = Arc::new(Mutex::new(Vec::with_capacity(txs)));
    let q = client.queue(queue)?;
    let (cpu0, t0) = (probe.cpu_s().await?, Instant::now());
    let payload = vec![b'x'; 100];
    let mut producers = Vec::new();
    for _ in 0..PRODUCERS {
        let (pool, next, commits, payload) =
            (pool.clone(), next.clone(), commits.clone(), payload.clone());
        let queue = queue.to_owned();
        producers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= txs {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut tx = pool.begin().await?;
                let mut ids = Vec::with_capacity(OUTBOX_ROWS_PER_TX);
                for j in i * OUTBOX_ROWS_PER_TX..((i + 1) * OUTBOX_ROWS_PER_TX).min(n) {
                    let t =
                        OutboxTask::new(format!("bench:{j}"), payload.clone()).delay_ms(600_000);
                    ids.push(enqueue_in_tx(&mut tx, &queue, &t).await?.row_id);
                }
                tx.commit().await?;
                let at = now_ms();
                commits.lock().await.push((ids, at));
            }
        }));
    }
    for p in producers {
        p.await??;
    }
    let committed_s = t0.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    while q.stats().await?.enqueued_total < n as u64 {
        if Instant::now() > deadline {
            bail!("rows not all relayed in 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let relayed_s = t0.elapsed().as_secs_f64();
    let cpu1 = probe.cpu_s().await?;
    let _ = stop.send(());
    relay_task.await??;

    let stamps: HashMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>(
        "SELECT id, (extract(epoch FROM relayed_at) * 1000)::bigint FROM dueq_outbox
         WHERE queue = $1 AND relayed_at IS NOT NULL",
    )
    .bind(queue)
    .fetch_all(&pool)
    .await?
    .into_iter()
    .collect();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
    for (ids, at) in commits.lock().await.iter() {
        for id in ids {
            let relayed = stamps.get(id).context("a row has no relayed_at")?;
            hist.record(u64::try_from(relayed - at).unwrap_or(0))?;
        }
    }
    cleanup(&pool, queue).await?;

    // The relay alone: the rows committed first (1 000 per transaction, no relay running),
    // then one relay drains them.
    let backlog = format!("{queue}-backlog");
    for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
        let mut tx = pool.begin().await?;
        for j in chunk {
            let t = OutboxTask::new(format!("bench:{j}"), payload.clone()).delay_ms(600_000);
            enqueue_in_tx(&mut tx, &backlog, &t).await?;
        }
        tx.commit().await?;
    }
    let bq = client.queue(&backlog)?;
    bq.update_settings(&dueq::SettingsPatch::default().succeeded_max(Some(10_000)))
        .await?;
    let relay = Relay::new(pool.clone(), client.clone(), RelayConfig::default());
    let (cpu2, t2) = (probe.cpu_s().await?, Instant::now());
    loop {
        let r = relay.relay_once().await?;
        if !r.more {
            break;
        }
    }
    let drain_s = t2.elapsed().as_secs_f64().max(1e-9);
    let cpu3 = probe.cpu_s().await?;
    if bq.stats().await?.enqueued_total < n as u64 {
        bail!("the backlog was not all relayed");
    }
    cleanup(&pool, &backlog).await?;

    // The same keyed tasks straight into Redis, as W1 does.
    let direct = client.queue(&format!("{queue}-direct"))?;
    let specs: Vec<TaskSpec> = (0..n)
        .map(|j| {
            TaskSpec::new(payload.clone())
                .key(format!("bench:{j}"))
                .delay_ms(600_000)
        })
        .collect();
    let t1 = Instant::now();
    for chunk in specs.chunks(1_000) {
        direct.enqueue_batch(chunk).await?;
    }
    let direct_s = t1.elapsed().as_secs_f64().max(1e-9);
    let relayed_per_s = n as f64 / relayed_s.max(1e-9);
    let direct_per_s = n as f64 / direct_s;
    Ok(vec![
        fig("committed_rows_per_s", n as f64 / committed_s.max(1e-9)),
        fig("relayed_rows_per_s", relayed_per_s),
        fig("lag_p50_ms", hist.value_at_quantile(0.5) as f64),
        fig("lag_p99_ms", hist.value_at_quantile(0.99) as f64),
        fig("lag_max_ms", hist.max() as f64),
        fig("redis_cpu_us_per_row", (cpu1 - cpu0) * 1e6 / n as f64),
        fig("relay_drain_rows_per_s", n as f64 / drain_s),
        fig(
            "relay_drain_redis_cpu_us_per_row",
            (cpu3 - cpu2) * 1e6 / n as f64,
        ),
        fig("direct_tasks_per_s", direct_per_s),
        fig("outbox_vs_direct", relayed_per_s / direct_per_s),
        fig("relay_drain_vs_direct", n as f64 / drain_s / direct_per_s),
    ])
}
