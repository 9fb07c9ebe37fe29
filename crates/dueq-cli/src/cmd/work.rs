//! `dueq work QUEUE -- COMMAND...`: a worker that runs a command per task.
//!
//! Several queues: `dueq work --queue orders=3 --queue reports=1 -- COMMAND` shares the
//! concurrency slots 3:1 among the queues with due work (`--strict`: the heaviest queue with
//! due work first); the library's [`WorkerBuilder::weight`](dueq::WorkerBuilder::weight) and
//! [`QueueOrder`] do it.
//!
//! The payload goes to the command's stdin; `DUEQ_QUEUE`, `DUEQ_TASK_ID`, `DUEQ_TASK_KEY`,
//! `DUEQ_TASK_ATTEMPT`, `DUEQ_TASK_DUE_AT_MS`, `DUEQ_TASK_CLAIMED_AT_MS` (Redis time of
//! the claim) and `DUEQ_TASK_GROUP` (empty without one) are set in its environment. Exit status 0
//! acknowledges the task; any other status (or a command that cannot start) fails the attempt
//! with the tail of its stderr as the error, and the task is retried with backoff until it runs
//! out of attempts. On SIGINT or SIGTERM running commands are killed (after
//! `--shutdown-grace-ms`) and their tasks handed back at once.

use std::process::Stdio;
use std::sync::Arc;

use anyhow::{Result, bail};
use dueq::{ClaimedTask, Client, Outcome, QueueOrder, Worker};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::args::WorkArgs;

/// Most stderr bytes kept as a failed attempt's error.
const STDERR_TAIL: usize = 2048;

/// The queues to serve with their weights: the positional queue (weight 1) first, then each
/// `--queue`, in the order given.
///
/// # Errors
/// No queue, or a queue given twice (weights are checked while parsing).
pub fn queues(a: &WorkArgs) -> Result<Vec<(String, u32)>> {
    let mut queues: Vec<(String, u32)> = Vec::new();
    for (name, weight) in a
        .queue
        .iter()
        .map(|q| (q, 1))
        .chain(a.queues.iter().map(|(q, w)| (q, *w)))
    {
        if queues.iter().any(|(q, _)| q == name) {
            bail!("--queue: queue {name:?} is given twice");
        }
        queues.push((name.clone(), weight));
    }
    if queues.is_empty() {
        bail!("no queue: give one (dueq work QUEUE -- COMMAND) or several (--queue NAME[=WEIGHT])");
    }
    Ok(queues)
}

/// Runs the worker for `queues` (from [`queues`]) until SIGINT or SIGTERM.
pub async fn run(
    client: Client,
    a: &WorkArgs,
    queues: &[(String, u32)],
    json_out: bool,
) -> Result<()> {
    if let Some(program) = a.command.first() {
        check_program(program)?;
    }
    let command: Arc<[String]> = a.command.clone().into();
    let mut b = Worker::builder(client)
        .concurrency(a.concurrency)
        .shutdown_grace_ms(a.shutdown_grace_ms)
        .heartbeat_ms(a.heartbeat_ms);
    if let Some(l) = a.lease_ms {
        b = b.lease_ms(l);
    }
    if a.strict {
        b = b.queue_order(QueueOrder::Strict);
    }
    for (name, weight) in queues {
        let command = command.clone();
        let queue: Arc<str> = name.as_str().into();
        b = b
            .handle(name, move |task| {
                let command = command.clone();
                let queue = queue.clone();
                async move { run_command(&command, &queue, task).await }
            })
            .weight(name, *weight);
    }
    let worker = b.build()?;
    let names: Vec<String> = queues.iter().map(|(q, w)| format!("{q}={w}")).collect();
    tracing::info!(queues = %names.join(" "), strict = a.strict, "working; SIGINT or SIGTERM stops");
    let stats = worker.run_until(crate::shutdown_signal()).await?;
    if json_out {
        outln!(
            "{}",
            serde_json::json!({"claimed": stats.claimed, "succeeded": stats.succeeded,
                "retried": stats.retried, "dead": stats.dead, "released": stats.released,
                "lease_lost": stats.lease_lost, "redis_errors": stats.redis_errors})
        );
    } else {
        eprintln!(
            "stopped: {} claimed, {} succeeded, {} retried, {} dead, {} handed back",
            stats.claimed, stats.succeeded, stats.retried, stats.dead, stats.released
        );
    }
    Ok(())
}

/// Refuses a program that cannot run (a typo would otherwise fail, retry and dead-letter every
/// task): a path must name an executable file; a bare name must be one in a `PATH` directory.
fn check_program(program: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        runnable(Path::new(program))
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| runnable(&d.join(program))))
    };
    if !found {
        bail!("cannot run {program:?}: no such executable file (a bare name is looked up in PATH)");
    }
    Ok(())
}

/// While alive, the command may still be running: dropping it (the handler was aborted at
/// shutdown) sends SIGTERM to the command's whole process group, so a shell's children stop
/// with it; `kill_on_drop` then kills the leader. Without libc, the `kill` utility does it.
struct GroupGuard {
    pid: u32,
    /// Cleared once the command has exited, so a finished (and possibly reused) process
    /// group id is never signalled.
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.pid)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

async fn run_command(command: &[String], queue: &str, task: ClaimedTask) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        return Outcome::fail("no command given");
    };
    let spawned = Command::new(program)
        .args(args)
        .env("DUEQ_QUEUE", queue)
        .env("DUEQ_TASK_ID", task.id.as_str())
        .env("DUEQ_TASK_KEY", task.key.as_deref().unwrap_or(""))
        .env("DUEQ_TASK_ATTEMPT", task.attempt.to_string())
        .env("DUEQ_TASK_DUE_AT_MS", task.due_at_ms.to_string())
        .env("DUEQ_TASK_CLAIMED_AT_MS", task.claimed_at_ms.to_string())
        .env("DUEQ_TASK_GROUP", task.group.as_deref().unwrap_or(""))
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        // its own process group, so stopping it reaches what it started too
        .process_group(0)
        // dropping the handler (shutdown) kills the command
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::retry(format!("cannot start {program}: {e}")),
    };
    let mut group = child.id().map(|pid| GroupGuard { pid, armed: true });
    if let Some(mut stdin) = child.stdin.take() {
        let payload = task.payload;
        // written beside the wait so a command that does not read stdin cannot block us
        tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
    }
    let waited = child.wait_with_output().await;
    if let Some(g) = group.as_mut() {
        g.armed = false;
    }
    match waited {
        Ok(out) if out.status.success() => Outcome::Success,
        Ok(out) => {
            let tail = &out.stderr[out.stderr.len().saturating_sub(STDERR_TAIL)..];
            Outcome::retry(format!(
                "{program} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(tail).trim()
            ))
        }
        Err(e) => Outcome::retry(format!("waiting for {program}: {e}")),
    }
}
