//! `dueq work QUEUE -- COMMAND...`: a worker that runs a command per task.
//!
//! Several queues: `dueq work --queue orders=3 --queue reports=1 -- COMMAND` shares the
//! concurrency slots 3:1 among the queues with due work (`--strict`: the heaviest queue with
//! due work first); the library's [`WorkerBuilder::weight`](dueq::WorkerBuilder::weight) and
//! [`QueueOrder`] do it.
//!
//! The payload goes to the command's stdin, and the task's id, key, attempt, times, group,
//! headers and trace context to its environment ([`ENV_HELP`] lists the variables, and
//! `dueq work --help` shows it). Exit status 0 acknowledges the task; any other status (or a
//! command that cannot start) fails the attempt with the tail of its stderr as the error, and
//! the task is retried with backoff until it runs out of attempts. The command's stdout is
//! `dueq work`'s; its stderr passes through to `dueq work`'s, each line prefixed
//! `[QUEUE ID] ` (with `--log-format json`, each line is a log event with `queue`, `id` and
//! `line`).
//!
//! What it logs (target `dueq::cmd::work`, shown at the default level): one line at start
//! (queues and weights, concurrency, the Redis URL without its password), one per failed
//! attempt (id, key, attempt/max, exit status or signal, the last lines of stderr), one per
//! task that failed its last attempt (dead-lettered), one when a signal asks it to stop and
//! one when it has stopped (tasks finished and handed back).
//!
//! On SIGINT or SIGTERM it claims nothing more and waits up to `--shutdown-grace` (default
//! 30 s, as the Python and TypeScript workers) for running commands; those still running then
//! are killed with their process group and their tasks handed back at once. A second signal
//! stops at once.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, bail};
use dueq::{ClaimedTask, Client, Outcome, QueueOrder, Worker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStderr, Command};

use crate::args::WorkArgs;
use crate::human::duration;

/// The environment of each command, shown by `dueq work --help`.
pub const ENV_HELP: &str = "Each command's environment also holds:
  DUEQ_QUEUE               the task's queue
  DUEQ_TASK_ID             the task id
  DUEQ_TASK_KEY            its business key (empty without one)
  DUEQ_TASK_ATTEMPT        this attempt, from 1
  DUEQ_TASK_DUE_AT_MS      its due time, Unix epoch milliseconds
  DUEQ_TASK_CLAIMED_AT_MS  when this attempt was claimed (Redis time, epoch ms)
  DUEQ_TASK_GROUP          its group (empty without one)
  DUEQ_TASK_HEADERS        its headers, a JSON object
  TRACEPARENT, TRACESTATE  the run's trace context, when it has one";

/// Most stderr bytes kept as a failed attempt's error.
const STDERR_TAIL: usize = 2048;
/// Lines of the stderr tail in a failed attempt's log line.
const LOG_TAIL_LINES: usize = 3;
/// Longest stderr line passed through whole; a longer one goes out in pieces of this size.
const LINE_MAX: usize = 8192;
/// After the command exits, how long the rest of its stderr may take to arrive (a background
/// process it left may hold the pipe open: it is not waited for).
const STDERR_DRAIN: Duration = Duration::from_secs(1);

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

/// Runs the worker for `queues` (from [`queues`]) on the Redis at `url` until SIGINT or
/// SIGTERM.
pub async fn run(
    client: Client,
    url: &str,
    a: &WorkArgs,
    queues: &[(String, u32)],
    json_out: bool,
) -> Result<()> {
    if let Some(program) = a.command.first() {
        check_program(program)?;
    }
    let command: Arc<[String]> = a.command.clone().into();
    let on_test_clock = client.test_clock().is_some();
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
    let grace = duration(a.shutdown_grace_ms);
    tracing::info!(
        queues = %names.join(" "),
        order = %if a.strict { "strict" } else { "weighted" },
        concurrency = a.concurrency,
        lease = %a.lease_ms.map_or_else(|| "the task's".to_owned(), duration),
        shutdown_grace = %grace,
        redis = %dueq::redact_url(url),
        command = ?a.command,
        "dueq work started; SIGINT or SIGTERM stops it"
    );
    if on_test_clock {
        tracing::warn!(
            "TEST CLOCK: this Redis runs the test clock (dueq serve --test-clock); tasks are due \
             by its virtual time, which tests move forward"
        );
    }
    let handle = worker.start();
    let load = handle.load_probe();
    crate::shutdown_signal().await;
    let running = load().in_hand;
    if running > 0 && a.shutdown_grace_ms > 0 {
        tracing::info!(
            running,
            "stopping: waiting up to {grace} for running commands (a second signal stops at once)"
        );
    } else {
        tracing::info!(running, "stopping");
    }
    let stats = tokio::select! {
        stats = handle.shutdown() => stats?,
        () = crate::shutdown_signal() => {
            // returning ends the runtime, which drops the handlers: each kills its command
            tracing::warn!(
                running = load().in_hand,
                "second signal: stopping at once; the tasks of the commands killed come back \
                 when their leases run out"
            );
            return Ok(());
        }
    };
    tracing::info!(
        claimed = stats.claimed,
        finished = stats.succeeded + stats.retried + stats.dead,
        succeeded = stats.succeeded,
        retried = stats.retried,
        dead = stats.dead,
        handed_back = stats.released,
        "dueq work stopped"
    );
    if json_out {
        outln!(
            "{}",
            serde_json::json!({"claimed": stats.claimed, "succeeded": stats.succeeded,
                "retried": stats.retried, "dead": stats.dead, "released": stats.released,
                "lease_lost": stats.lease_lost, "redis_errors": stats.redis_errors})
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
/// shutdown, or its lease was lost) sends SIGTERM to the command's whole process group, so a
/// shell's children stop with it; `kill_on_drop` then kills the leader. Without libc, the
/// `kill` utility does it.
struct GroupGuard<'a> {
    pid: u32,
    task: &'a TaskInfo<'a>,
    /// Cleared once the command has exited, so a finished (and possibly reused) process
    /// group id is never signalled.
    armed: bool,
}

impl Drop for GroupGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::warn!(
            queue = %self.task.queue,
            id = %self.task.id,
            key = %self.task.key,
            "stopping the running command (shutdown grace over, or its lease was lost)"
        );
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.pid)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// What the log lines of one attempt name.
struct TaskInfo<'a> {
    queue: &'a str,
    id: &'a str,
    key: &'a str,
    attempt: u32,
    max_attempts: u32,
}

impl TaskInfo<'_> {
    /// Logs a failed attempt (`status`: how the command ended; `tail`: the end of its
    /// stderr), and the task's death when it was its last attempt: the queue's
    /// `max_attempts` as of the claim decides, as the nack script does.
    fn failed(&self, status: &str, tail: &str) {
        let last = last_lines(tail, LOG_TAIL_LINES);
        let last_attempt = self.attempt >= self.max_attempts;
        tracing::warn!(
            queue = %self.queue,
            id = %self.id,
            key = %self.key,
            attempt = %format!("{}/{}", self.attempt, self.max_attempts),
            status = %status,
            stderr = ?last,
            "{}",
            if last_attempt {
                "attempt failed, the last one"
            } else {
                "attempt failed; retried after a backoff"
            }
        );
        if last_attempt {
            tracing::error!(
                queue = %self.queue,
                id = %self.id,
                key = %self.key,
                attempts = self.attempt,
                status = %status,
                "task dead-lettered: it failed all its attempts (dueq dead list {})",
                self.queue
            );
        }
    }
}

/// The last `n` non-empty lines of `text`, joined by newlines.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Passes `stderr` through to this process's stderr line by line, prefixed `[QUEUE ID] `
/// (log events with `--log-format json`), keeping its last [`STDERR_TAIL`] bytes in `tail`.
async fn forward_stderr(
    mut stderr: ChildStderr,
    queue: Arc<str>,
    id: String,
    tail: Arc<Mutex<Vec<u8>>>,
) {
    let emit = |line: &[u8]| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        if crate::logging::json() {
            tracing::info!(queue = %queue, id = %id, line = %text, "stderr");
        } else {
            use std::io::Write as _;
            // one write per line: lines of commands running at once do not mix
            let out = format!("[{queue} {id}] {text}\n");
            let _ = std::io::stderr().lock().write_all(out.as_bytes());
        }
    };
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            t.extend_from_slice(&buf[..n]);
            if t.len() > 2 * STDERR_TAIL {
                let cut = t.len() - STDERR_TAIL;
                t.drain(..cut);
            }
        }
        let mut rest = &buf[..n];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&rest[..i]);
            emit(&line);
            line.clear();
            rest = &rest[i + 1..];
        }
        line.extend_from_slice(rest);
        while line.len() >= LINE_MAX {
            let piece: Vec<u8> = line.drain(..LINE_MAX).collect();
            emit(&piece);
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

async fn run_command(command: &[String], queue: &Arc<str>, task: ClaimedTask) -> Outcome {
    let Some((program, args)) = command.split_first() else {
        return Outcome::fail("no command given");
    };
    let id = task.id.as_str().to_owned();
    let info = TaskInfo {
        queue,
        id: &id,
        key: task.key.as_deref().unwrap_or("-"),
        attempt: task.attempt,
        max_attempts: task.max_attempts,
    };
    let mut cmd = Command::new(program);
    // the run's trace context (its consumer span's when spans are exported, else the
    // producer's), as OpenTelemetry's environment-variable carriers name it; never the one
    // `dueq work` itself was started with
    cmd.env_remove("TRACEPARENT").env_remove("TRACESTATE");
    for (name, value) in dueq::trace::run_context(&task).iter() {
        cmd.env(name.to_ascii_uppercase(), value);
    }
    let headers = serde_json::to_string(&task.headers).unwrap_or_default();
    let spawned = cmd
        .args(args)
        .env("DUEQ_QUEUE", &**queue)
        .env("DUEQ_TASK_ID", task.id.as_str())
        .env("DUEQ_TASK_KEY", task.key.as_deref().unwrap_or(""))
        .env("DUEQ_TASK_ATTEMPT", task.attempt.to_string())
        .env("DUEQ_TASK_DUE_AT_MS", task.due_at_ms.to_string())
        .env("DUEQ_TASK_CLAIMED_AT_MS", task.claimed_at_ms.to_string())
        .env("DUEQ_TASK_GROUP", task.group.as_deref().unwrap_or(""))
        .env("DUEQ_TASK_HEADERS", headers)
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
        Err(e) => {
            let error = format!("cannot start {program}: {e}");
            info.failed("not started", &error);
            return Outcome::retry(error);
        }
    };
    let mut group = child.id().map(|pid| GroupGuard {
        pid,
        task: &info,
        armed: true,
    });
    if let Some(mut stdin) = child.stdin.take() {
        let payload = task.payload;
        // written beside the wait so a command that does not read stdin cannot block us
        tokio::spawn(async move {
            let _ = stdin.write_all(&payload).await;
        });
    }
    let tail = Arc::new(Mutex::new(Vec::new()));
    let mut reader = child
        .stderr
        .take()
        .map(|e| tokio::spawn(forward_stderr(e, queue.clone(), id.clone(), tail.clone())));
    let waited = child.wait().await;
    if let Some(g) = group.as_mut() {
        g.armed = false;
    }
    if let Some(r) = reader.as_mut()
        && tokio::time::timeout(STDERR_DRAIN, &mut *r).await.is_err()
    {
        r.abort();
    }
    let tail = {
        let t = tail.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&t[t.len().saturating_sub(STDERR_TAIL)..])
            .trim()
            .to_owned()
    };
    match waited {
        Ok(status) if status.success() => Outcome::Success,
        Ok(status) => {
            let status = status.to_string();
            info.failed(&status, &tail);
            Outcome::retry(format!("{program} exited with {status}: {tail}"))
        }
        Err(e) => {
            let error = format!("waiting for {program}: {e}");
            info.failed("unknown", &error);
            Outcome::retry(error)
        }
    }
}
