//! The worker processes of a `dueq chaos` run: started as `dueq chaos-worker` children of
//! this binary, killed with SIGKILL as a fault, stopped by closing their stdin. Apart from
//! the run's driver so that what may outlive what is in one place: every child is
//! `kill_on_drop`, so an early return, a panic or Ctrl-C in the driver kills them.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::process::{Child, ChildStdin, Command};

use super::config::{LEASE_MS, QUEUE};
use super::ledger::Reader;

/// Longest wait for a worker to exit once its stdin is closed, before SIGKILL.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// One worker process.
pub struct WorkerProc {
    child: Child,
    /// Closing it tells the worker to stop.
    stdin: Option<ChildStdin>,
}

/// The worker processes of a run.
pub struct Workers {
    /// This binary.
    pub exe: PathBuf,
    /// The run's Redis.
    pub url: String,
    /// Where the ledgers go.
    pub dir: PathBuf,
    /// The processes running now, one per slot.
    pub procs: Vec<WorkerProc>,
    /// Processes started so far (the next ledger is `worker-{started + 1}.jsonl`).
    pub started: u32,
    /// Durable writes (`--replicas`) of each worker's client.
    pub replicas: u8,
    /// Partitions of the queue (above 1: acks per partition, at once).
    pub partitions: u16,
}

impl Workers {
    /// Starts one more worker process, its ledger followed by `reader`.
    pub fn spawn(&mut self, reader: &mut Reader) -> Result<WorkerProc> {
        self.started += 1;
        let ledger = self.dir.join(format!("worker-{}.jsonl", self.started));
        reader.add(ledger.clone());
        let mut child = Command::new(&self.exe)
            .arg("--redis")
            .arg(&self.url)
            .arg("--replicas")
            .arg(self.replicas.to_string())
            .arg("chaos-worker")
            .arg("--ledger")
            .arg(&ledger)
            .arg("--queue")
            .arg(QUEUE)
            .arg("--lease-ms")
            .arg(LEASE_MS.to_string())
            .arg("--partitions")
            .arg(self.partitions.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting a worker process ({})", self.exe.display()))?;
        let stdin = child.stdin.take();
        Ok(WorkerProc { child, stdin })
    }

    /// SIGKILL of worker `i` (waited for), and a new one in its place.
    pub async fn kill(&mut self, i: usize, reader: &mut Reader) -> Result<()> {
        self.procs[i]
            .child
            .kill()
            .await
            .context("killing a worker process")?;
        self.procs[i] = self.spawn(reader)?;
        Ok(())
    }

    /// Closes every worker's stdin and waits for it to exit; SIGKILL after 5 s.
    pub async fn stop_all(&mut self) {
        for p in &mut self.procs {
            p.stdin = None;
        }
        for p in &mut self.procs {
            if tokio::time::timeout(WORKER_STOP_TIMEOUT, p.child.wait())
                .await
                .is_err()
            {
                tracing::warn!("a worker process did not stop within 5 s; killing it");
                let _ = p.child.kill().await;
            }
        }
    }
}
