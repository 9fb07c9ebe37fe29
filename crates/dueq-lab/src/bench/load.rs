//! Loading a queue for a workload: the payload, filling in batches, waiting for the runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{Queue, TaskSpec};
use tokio::time::Instant;

const PAYLOAD_BYTES: usize = 100;
const BATCH: usize = 1_000;
/// Batches in flight at once over the multiplexed connection.
const IN_FLIGHT: usize = 4;

pub fn payload() -> Vec<u8> {
    vec![b'x'; PAYLOAD_BYTES]
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
