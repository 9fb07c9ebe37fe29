//! Loading a queue for a workload: the payload, filling in batches, waiting for the runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{ClaimedTask, Client, Outcome, Queue, TaskSpec, Worker};
use tokio::time::Instant;

use super::measure::{Figure, Probe, client_cpu_s, throughput};

const PAYLOAD_BYTES: usize = 100;
const BATCH: usize = 1_000;
/// Batches in flight at once over the multiplexed connection.
const IN_FLIGHT: usize = 4;

pub fn payload() -> Vec<u8> {
    vec![b'x'; PAYLOAD_BYTES]
}

/// Drains the `n` due tasks of `queue` with one worker of concurrency 1 000 whose handler runs
/// `run` and succeeds: the throughput figures of workload `name`, from the first handler start
/// to the last ack (Redis and client CPU over the same span).
pub async fn timed_drain<F, Fut>(
    client: &Client,
    queue: &Queue,
    probe: &Probe,
    n: usize,
    name: &'static str,
    run: F,
) -> Result<Vec<Figure>>
where
    F: Fn(ClaimedTask) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let first = Arc::new(Mutex::new(None::<Instant>));
    let f2 = first.clone();
    let run = Arc::new(run);
    let (cpu0, ccpu0) = (probe.cpu_s().await?, client_cpu_s());
    let worker = Worker::builder(client.clone())
        .concurrency(1_000)
        .handle(queue.name(), move |task| {
            f2.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(Instant::now);
            let ran = run(task);
            async move {
                ran.await;
                Outcome::Success
            }
        })
        .build()?
        .start();
    wait_succeeded(&worker, n, Duration::from_micros(500)).await?;
    let end = Instant::now();
    let (cpu1, ccpu1) = (probe.cpu_s().await?, client_cpu_s());
    worker.shutdown().await?;
    let start = first
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .unwrap_or(end);
    let secs = (end - start).as_secs_f64().max(1e-9);
    Ok(throughput(name, n, secs, cpu1 - cpu0, ccpu1 - ccpu0))
}

/// Waits until `worker` has acknowledged `n` tasks (at most 10 minutes).
pub async fn wait_succeeded(worker: &dueq::WorkerHandle, n: usize, poll: Duration) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while worker.stats().succeeded < n as u64 {
        if Instant::now() > deadline {
            bail!("tasks did not all run in 10 minutes");
        }
        tokio::time::sleep(poll).await;
    }
    Ok(())
}

/// Enqueues `specs` in batches of 1 000 with a few batches in flight.
pub async fn fill(queue: &Queue, specs: Vec<TaskSpec>) -> Result<()> {
    let specs = Arc::new(specs);
    let chunks = specs.len().div_ceil(BATCH);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..IN_FLIGHT {
        let (q, specs, next) = (queue.clone(), specs.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= chunks {
                    return Ok::<_, dueq::Error>(());
                }
                let end = ((i + 1) * BATCH).min(specs.len());
                q.enqueue_batch(&specs[i * BATCH..end]).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
