//! `dueq work QUEUE -- COMMAND`: commands run per task; exit codes ack or retry; SIGTERM waits
//! `--shutdown-grace` for running commands, and with `--shutdown-grace 0` hands running tasks
//! back at once (case C10 at the process level); what it logs, and its commands' stderr
//! passed through.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq_testkit::{RedisServer, wait_until};

use crate::{dueq, dueq_json};

fn spawn_worker(url: &str, queue: &str, command: &[&str]) -> Child {
    spawn_worker_with(url, queue, &[], command)
}

/// `dueq work QUEUE ARGS -- COMMAND`; its stderr goes to the test's (shown on failure).
fn spawn_worker_with(url: &str, queue: &str, args: &[&str], command: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", url, "work", queue])
        .args(args)
        .arg("--")
        .args(command)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// A `dueq work` whose stderr lines are collected.
struct Logged {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Logged {
    fn spawn(url: &str, global: &[&str], queue: &str, command: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dueq"))
            .env_remove("DUEQ_LOG")
            .env_remove("DUEQ_LOG_FORMAT")
            .args(["--redis", url])
            .args(global)
            .args(["work", queue, "--"])
            .args(command)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn has(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
    }

    /// SIGTERM, waits for the exit (asserting success) and returns every stderr line.
    fn stop(mut self) -> Vec<String> {
        sigterm(&self.child);
        assert!(self.child.wait().unwrap().success());
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

fn stat(url: &str, queue: &str, field: &str) -> u64 {
    let (_, s) = dueq_json(url, &["stats", queue]);
    s[field].as_u64().unwrap_or(0)
}

#[test]
fn runs_each_task_with_payload_on_stdin_and_env() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    for i in 0..3 {
        let payload = format!("task-{i}");
        let key = format!("k{i}");
        let o = dueq(
            &url,
            &["enqueue", "jobs", "--payload", &payload, "--key", &key],
        );
        assert!(o.status.success());
    }
    let script = format!(
        "printf '%s %s %s\\n' \"$(cat)\" \"$DUEQ_TASK_KEY\" \"$DUEQ_TASK_ATTEMPT\" >> {}",
        out.display()
    );
    let mut w = spawn_worker(&url, "jobs", &["sh", "-c", &script]);
    wait_until(Duration::from_secs(10), "3 tasks succeeded", || {
        stat(&url, "jobs", "succeeded_total") == 3
    });
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    let mut lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    assert_eq!(lines, ["task-0 k0 1", "task-1 k1 1", "task-2 k2 1"]);
}

/// Enqueues one task to `jobs` with `options`, runs `dueq work jobs` with a command that
/// writes its environment (`env`) until the task succeeded, and answers that environment.
/// The worker runs without the DUEQ_, TRACE and OTEL variables of the test's own
/// environment, so each one the command gets is one dueq set, but with `worker_env`.
fn command_env(url: &str, options: &[&str], worker_env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env.txt");
    let done = stat(url, "jobs", "succeeded_total") + 1;
    let mut args = vec!["enqueue", "jobs", "--payload", "p"];
    args.extend(options);
    let o = dueq(url, &args);
    assert!(o.status.success(), "{o:?}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("DUEQ_") || n.starts_with("TRACE") || n.starts_with("OTEL_") {
            cmd.env_remove(&name);
        }
    }
    cmd.envs(worker_env.iter().copied());
    let script = format!("env > {}", out.display());
    let mut w = cmd
        .args(["--redis", url, "work", "jobs", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "the task succeeded", || {
        stat(url, "jobs", "succeeded_total") == done
    });
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    std::fs::read_to_string(&out).unwrap()
}

#[test]
fn help_lists_every_variable_a_command_gets() {
    let server = RedisServer::start();
    let url = server.url();
    let env = command_env(
        &url,
        &[
            "--key",
            "k1",
            "--group",
            "g1",
            "--header",
            "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "--header",
            "tracestate=vendor=1",
        ],
        &[],
    );
    let vars: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("DUEQ_") || name.starts_with("TRACE"))
        .collect();
    for set in [
        "DUEQ_TASK_GROUP=g1",
        "DUEQ_TASK_KEY=k1",
        "TRACEPARENT=00-",
        "TRACESTATE=",
    ] {
        assert!(env.lines().any(|l| l.starts_with(set)), "no {set}: {env}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["work", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for var in vars {
        assert!(
            help.contains(var),
            "`dueq work --help` does not name {var}:\n{help}"
        );
    }
}

/// W3C Trace Context: a traceparent that is not valid is not handed on, nor its tracestate,
/// and nor is the trace context `dueq work` was started with; the task keeps its headers as
/// given.
#[test]
fn a_malformed_traceparent_is_not_handed_on() {
    let server = RedisServer::start();
    let url = server.url();
    let env = command_env(
        &url,
        &[
            "--header",
            "traceparent=garbage",
            "--header",
            "tracestate=vendor=1",
        ],
        // the worker's own trace context is not the run's either
        &[
            (
                "TRACEPARENT",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("TRACESTATE", "worker=1"),
        ],
    );
    for name in ["TRACEPARENT=", "TRACESTATE="] {
        assert!(!env.lines().any(|l| l.starts_with(name)), "{env}");
    }
    assert!(env.contains(r#""traceparent":"garbage""#), "{env}");
}

#[test]
fn failing_command_retries_then_dead_letters_with_its_stderr() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(&url, &["enqueue", "jobs", "--max-attempts", "2"]);
    assert!(ok);
    let id = e["id"].as_str().unwrap().to_owned();
    // the backoff after attempt 1 is about a second (default policy)
    let mut w = spawn_worker(&url, "jobs", &["sh", "-c", "echo broken >&2; exit 3"]);
    wait_until(Duration::from_secs(15), "task dead", || {
        stat(&url, "jobs", "dead") == 1
    });
    sigterm(&w);
    w.wait().unwrap();
    let (ok, page) = dueq_json(&url, &["dead", "list", "jobs"]);
    assert!(ok);
    let t = &page["tasks"][0];
    assert_eq!(t["id"], id.as_str());
    assert_eq!(t["attempt"], 2);
    let err = t["last_error"].as_str().unwrap();
    assert!(err.contains("broken") && err.contains('3'), "{err}");
    // retry from the dead-letter queue, then delete works on what is there
    let (ok, _) = dueq_json(&url, &["dead", "retry", "jobs", &id]);
    assert!(ok);
    assert_eq!(stat(&url, "jobs", "dead"), 0);
    assert_eq!(stat(&url, "jobs", "scheduled"), 1);
}

/// Case C10 (shared/cases/CASES.md) as a real process: a `dueq work` holding a task with a
/// 1-hour lease gets SIGTERM; the task is handed back at once and another worker runs it
/// within about a second, not after an hour.
#[test]
fn c10_sigterm_hands_the_lease_back_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "jobs", "--lease-ms", "3600000"]);
    assert!(ok);
    // a future task must never be held before it is due
    let (ok, _) = dueq_json(&url, &["enqueue", "jobs", "--delay-ms", "600000"]);
    assert!(ok);
    // C10 as such: no grace, the task is handed back at once (the default waits 30 s)
    let mut slow = spawn_worker_with(&url, "jobs", &["--shutdown-grace", "0"], &["sleep", "30"]);
    wait_until(Duration::from_secs(10), "task active", || {
        stat(&url, "jobs", "active") == 1
    });
    let stopped_at = Instant::now();
    sigterm(&slow);
    assert!(slow.wait().unwrap().success());
    assert!(
        stopped_at.elapsed() < Duration::from_secs(5),
        "shutdown took too long"
    );
    assert_eq!(stat(&url, "jobs", "active"), 0);
    assert_eq!(
        stat(&url, "jobs", "due"),
        1,
        "the task is due again at once"
    );

    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let cmd = format!("touch {}", marker.display());
    let started = Instant::now();
    let mut fast = spawn_worker(&url, "jobs", &["sh", "-c", &cmd]);
    wait_until(Duration::from_secs(5), "second worker ran it", || {
        marker.exists()
    });
    assert!(started.elapsed() < Duration::from_secs(3));
    // the marker exists as soon as `touch` ran, a moment before the command exits and the
    // worker acks: wait for the ack before stopping it
    wait_until(Duration::from_secs(5), "second worker acked it", || {
        stat(&url, "jobs", "succeeded_total") == 1
    });
    sigterm(&fast);
    fast.wait().unwrap();
    assert_eq!(stat(&url, "jobs", "succeeded_total"), 1);
    assert_eq!(
        stat(&url, "jobs", "scheduled"),
        1,
        "the future task stays scheduled"
    );
}

/// Stopping `dueq work` stops what the command started too (its whole process group), so a
/// handed-back task does not keep running in an orphaned grandchild while it reruns elsewhere.
#[test]
fn sigterm_stops_the_commands_children_too() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "jobs"]);
    assert!(ok);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let mut w = spawn_worker_with(
        &url,
        "jobs",
        &["--shutdown-grace", "0"],
        &["sh", "-c", &script],
    );
    wait_until(Duration::from_secs(10), "grandchild started", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    wait_until(Duration::from_secs(5), "grandchild gone", || {
        !Command::new("kill")
            .args(["-0", &pid])
            .status()
            .unwrap()
            .success()
    });
    assert_eq!(stat(&url, "jobs", "due"), 1, "the task was handed back");
}

/// Live workers: the ids of the `dueq work` processes with pid `pid` in
/// `dueq --json workers`, and their expiry times.
fn listed(url: &str, pid: u32) -> Vec<(String, u64)> {
    let (ok, v) = dueq_json(url, &["workers"]);
    assert!(ok, "{v}");
    v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["pid"] == pid)
        .map(|w| {
            (
                w["id"].as_str().unwrap().to_owned(),
                w["expires_at_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn spawn_listed_worker(url: &str, queue: &str, heartbeat_ms: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", url, "work", queue, "--concurrency", "3"])
        .args(["--heartbeat-ms", heartbeat_ms, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// A SIGKILLed worker cannot say goodbye: it leaves the list when its heartbeat expires (3
/// beats of 200 ms here), by the Redis clock; a SIGTERMed one removes itself at once.
#[test]
fn a_killed_worker_leaves_the_workers_list_within_its_heartbeat_expiry() {
    let server = RedisServer::start();
    let url = server.url();
    let mut killed = spawn_listed_worker(&url, "jobs", "200");
    let mut stopped = spawn_listed_worker(&url, "jobs", "200");
    wait_until(Duration::from_secs(10), "both workers are listed", || {
        listed(&url, killed.id()).len() == 1 && listed(&url, stopped.id()).len() == 1
    });
    let text = dueq(&url, &["workers", "--queue", "jobs"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("id "), "{text}");
    assert!(text.contains(&format!(" {} ", killed.id())), "{text}");
    assert!(text.contains(" rust "), "the language column: {text}");
    assert!(text.contains("jobs"), "{text}");

    killed.kill().unwrap(); // SIGKILL
    killed.wait().unwrap();
    let at = Instant::now();
    let mut raw = server.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut raw).unwrap();
    let killed_at_ms = s * 1000 + us / 1000;
    let expires_at_ms = listed(&url, killed.id()).first().map_or(0, |e| e.1);
    assert!(
        expires_at_ms <= killed_at_ms + 600,
        "expiry {expires_at_ms} is at most 3 beats after the kill at {killed_at_ms}"
    );
    wait_until(Duration::from_secs(10), "the killed worker is gone", || {
        listed(&url, killed.id()).is_empty()
    });
    assert!(
        at.elapsed() < Duration::from_millis(600 + 2_000),
        "gone {:?} after the kill (expiry 600 ms)",
        at.elapsed()
    );

    sigterm(&stopped);
    assert!(stopped.wait().unwrap().success());
    assert!(
        listed(&url, stopped.id()).is_empty(),
        "a graceful stop removes the entry at once"
    );
    let (ok, v) = dueq_json(&url, &["workers"]);
    assert!(ok);
    assert_eq!(v, serde_json::json!({"workers": []}));
}

#[test]
fn workers_command_and_heartbeat_flag_refuse_bad_input() {
    let server = RedisServer::start();
    let url = server.url();
    let o = dueq(&url, &["workers", "--queue", "a{b}"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("queue name"), "{err}");
    let o = dueq(&url, &["work", "jobs", "--heartbeat-ms", "5", "--", "true"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("heartbeat_ms 5 is out of range"), "{err}");
    let o = dueq(&url, &["workers"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no live workers"));
}

/// When the lease of a running command is lost (here: another owner's token in its place, as
/// after it expired and was recovered), `dueq work` kills the command and what it started,
/// sends no ack, and keeps working.
#[test]
fn a_command_whose_lease_is_lost_is_killed() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(&url, &["enqueue", "jobs"]);
    assert!(ok, "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let mut w = Command::new(env!("CARGO_BIN_EXE_dueq"))
        // no grace: the rerun of the recovered task is not waited for at the end
        .args(["--redis", &url, "work", "jobs", "--lease-ms", "1000"])
        .args(["--shutdown-grace", "0", "--"])
        .args(["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "grandchild started", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    let _: () = redis::cmd("HSET")
        .arg("dueq:{jobs}:leases")
        .arg(&id)
        .arg("someone-else 99999999999999 0")
        .query(&mut server.conn())
        .unwrap();
    wait_until(Duration::from_secs(10), "grandchild killed", || {
        !Command::new("kill")
            .args(["-0", &pid])
            .status()
            .unwrap()
            .success()
    });
    assert!(w.try_wait().unwrap().is_none(), "dueq work exited");
    assert_eq!(stat(&url, "jobs", "succeeded_total"), 0);
    sigterm(&w);
    assert!(w.wait().unwrap().success());
}

/// Enqueues `n` tasks due now on `queue` (one batch).
fn backlog(url: &str, queue: &str, n: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = dueq::Client::connect(url).await.unwrap();
        let specs: Vec<dueq::TaskSpec> =
            (0..n).map(|_| dueq::TaskSpec::new(b"x".to_vec())).collect();
        c.queue(queue).unwrap().enqueue_batch(&specs).await.unwrap();
    });
}

/// Runs `dueq work ARGS -- sh -c 'echo $DUEQ_QUEUE >> out'` with one slot until `total` tasks
/// succeeded over `queues`, and returns the queues of the runs in order.
fn run_order(url: &str, args: &[&str], queues: &[&str], total: u64) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let script = format!("echo \"$DUEQ_QUEUE\" >> {}", out.display());
    let mut w = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", url, "work", "--concurrency", "1"])
        .args(args)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "every task succeeded", || {
        queues
            .iter()
            .map(|q| stat(url, q, "succeeded_total"))
            .sum::<u64>()
            == total
    });
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `dueq work --queue a=3 --queue b=1`: with one slot and a backlog on
/// both, about three of every four runs are of `a` while both have due work; with `--strict`
/// every task of the heavier queue runs before any of the lighter one.
#[test]
fn queue_weights_share_the_slots_and_strict_serves_the_heaviest_first() {
    let server = RedisServer::start();
    let url = server.url();
    backlog(&url, "a", 40);
    backlog(&url, "b", 40);
    let order = run_order(&url, &["--queue", "a=3", "--queue", "b=1"], &["a", "b"], 80);
    assert_eq!(order.len(), 80);
    let a = order[..40].iter().filter(|q| *q == "a").count();
    assert!(
        (26..=34).contains(&a),
        "a ran {a} of the first 40: {order:?}"
    );

    // the positional queue is weight 1 beside the --queue ones
    backlog(&url, "c", 10);
    backlog(&url, "d", 10);
    let order = run_order(&url, &["c", "--queue", "d=2", "--strict"], &["c", "d"], 20);
    let expected: Vec<&str> = ["d"; 10].into_iter().chain(["c"; 10]).collect();
    assert_eq!(order, expected);
}

#[test]
fn bad_queue_arguments_are_refused_before_anything_starts() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "a"]);
    assert!(ok);
    for (args, message) in [
        (
            vec!["--queue", "a=0"],
            "the weight of queue \"a\" must be a whole number from 1 to 1000, not \"0\"",
        ),
        (vec!["--queue", "a=-1"], "not \"-1\""),
        (vec!["--queue", "a=x"], "not \"x\""),
        (vec!["--queue", "a=1001"], "not \"1001\""),
        (
            vec!["--queue", "a=1", "--queue", "a=2"],
            "--queue: queue \"a\" is given twice",
        ),
        (
            vec!["a", "--queue", "a"],
            "--queue: queue \"a\" is given twice",
        ),
        (vec![], "no queue"),
        (vec!["--queue", "a{b}=2"], "queue name"),
    ] {
        let mut all = vec!["work"];
        all.extend_from_slice(&args);
        all.extend_from_slice(&["--", "true"]);
        let o = dueq(&url, &all);
        assert!(!o.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(message), "{args:?}: {err}");
        if message.starts_with("the weight") {
            assert!(err.contains("--queue <NAME[=WEIGHT]>"), "{err}");
        }
    }
    assert_eq!(stat(&url, "a", "due"), 1, "nothing was claimed");
    let (ok, v) = dueq_json(&url, &["workers"]);
    assert!(ok);
    assert_eq!(v, serde_json::json!({"workers": []}));
}

/// The log of a real run with a failing command: a start line naming the
/// queue, concurrency and Redis; a line per failed attempt with attempt/max, exit status and
/// the stderr tail; a dead-lettered line; the command's stderr passed through with a
/// `[QUEUE ID]` prefix; a stop line.
#[test]
fn work_logs_start_failures_dead_tasks_and_stop_and_passes_stderr_through() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, s) = dueq_json(
        &url,
        &[
            "settings",
            "set",
            "jobs",
            r#"{"max_attempts": 2, "backoff": {"base_ms": 10, "factor": 1.0, "max_ms": 10}}"#,
        ],
    );
    assert!(ok, "{s}");
    let (ok, e) = dueq_json(&url, &["enqueue", "jobs", "--key", "order:7"]);
    assert!(ok, "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let w = Logged::spawn(
        &url,
        &[],
        "jobs",
        &["sh", "-c", "echo first >&2; echo card declined >&2; exit 3"],
    );
    wait_until(Duration::from_secs(20), "the task died", || {
        stat(&url, "jobs", "dead") == 1
    });
    // the dead line follows the nack that the stats saw, by a moment at most
    wait_until(Duration::from_secs(5), "the dead line", || {
        w.has("dead-lettered")
    });
    let lines = w.stop();
    let all = lines.join("\n");
    let find = |needles: &[&str]| {
        lines
            .iter()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .unwrap_or_else(|| panic!("no line with {needles:?} in:\n{all}"))
    };
    let start = find(&["dueq work started"]);
    assert!(
        start.contains("queues=jobs=1") && start.contains("concurrency=4"),
        "{start}"
    );
    assert!(start.contains(&format!("redis={url}")), "{start}");
    assert!(start.contains("shutdown_grace=30s"), "{start}");
    for attempt in ["attempt=1/2", "attempt=2/2"] {
        let failed = find(&["attempt failed", attempt]);
        assert!(
            failed.contains(&id) && failed.contains("key=order:7"),
            "{failed}"
        );
        assert!(failed.contains("exit status: 3"), "{failed}");
        assert!(failed.contains("card declined"), "{failed}");
    }
    let dead = find(&["dead-lettered"]);
    assert!(dead.contains(&id) && dead.contains("attempts=2"), "{dead}");
    let prefix = format!("[jobs {id}] ");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with(&prefix) && l.ends_with("card declined"))
            .count(),
        2,
        "{all}"
    );
    assert!(
        lines.iter().any(|l| *l == format!("{prefix}first")),
        "{all}"
    );
    let stop = find(&["dueq work stopped"]);
    assert!(
        stop.contains("finished=2") && stop.contains("dead=1") && stop.contains("handed_back=0"),
        "{stop}"
    );
    // the error kept in the dead-letter queue is still the stderr tail
    let (_, page) = dueq_json(&url, &["dead", "list", "jobs"]);
    let err = page["tasks"][0]["last_error"].as_str().unwrap();
    assert!(
        err.contains("first") && err.contains("card declined"),
        "{err}"
    );
}

/// `--log-format json`: every stderr line is one JSON object, the command's stderr included
/// (as events with its queue, id and line).
#[test]
fn work_logs_json_lines_with_log_format_json() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(&url, &["enqueue", "jobs", "--max-attempts", "1"]);
    assert!(ok, "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let w = Logged::spawn(
        &url,
        &["--log-format", "json"],
        "jobs",
        &["sh", "-c", "echo oops >&2; exit 1"],
    );
    wait_until(Duration::from_secs(10), "the task died", || {
        w.has("dead-lettered")
    });
    let lines = w.stop();
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let msg = |m: &str| {
        events
            .iter()
            .find(|v| v["message"].as_str().unwrap_or("").contains(m))
    };
    let start = msg("dueq work started").expect("a start event");
    assert_eq!(start["level"], "INFO");
    assert_eq!(start["queues"], "jobs=1");
    let failed = msg("attempt failed").expect("a failed-attempt event");
    assert_eq!(
        (&failed["id"], &failed["attempt"]),
        (&id.as_str().into(), &"1/1".into())
    );
    let line = events
        .iter()
        .find(|v| v["message"] == "stderr")
        .expect("the command's stderr as an event");
    assert_eq!(
        (&line["queue"], &line["id"], &line["line"]),
        (&"jobs".into(), &id.as_str().into(), &"oops".into())
    );
    assert!(msg("dueq work stopped").is_some());
}

/// SIGTERM waits (default grace 30 s) for a running command: it finishes, its task is
/// acknowledged, not handed back.
#[test]
fn sigterm_waits_for_a_running_command_to_finish() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "jobs"]);
    assert!(ok);
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let marker = dir.path().join("done");
    let script = format!(
        "touch {}; sleep 2; touch {}",
        started.display(),
        marker.display()
    );
    let w = Logged::spawn(&url, &[], "jobs", &["sh", "-c", &script]);
    wait_until(Duration::from_secs(10), "the command started", || {
        started.exists()
    });
    assert!(!marker.exists());
    let lines = w.stop();
    let all = lines.join("\n");
    assert!(marker.exists(), "the command was not let finish:\n{all}");
    assert_eq!(stat(&url, "jobs", "succeeded_total"), 1, "{all}");
    assert_eq!(stat(&url, "jobs", "due") + stat(&url, "jobs", "active"), 0);
    assert!(
        all.contains("waiting up to 30s for running commands"),
        "{all}"
    );
    assert!(all.contains("handed_back=0"), "{all}");
}

/// `--shutdown-grace 0` keeps the old behaviour: the running command is killed at once and
/// its task handed back.
#[test]
fn shutdown_grace_0_kills_the_running_command_and_hands_its_task_back() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "jobs"]);
    assert!(ok);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let marker = dir.path().join("done");
    let script = format!(
        "echo $$ > {}; sleep 2; touch {}",
        pidfile.display(),
        marker.display()
    );
    let mut w = spawn_worker_with(
        &url,
        "jobs",
        &["--shutdown-grace", "0"],
        &["sh", "-c", &script],
    );
    wait_until(Duration::from_secs(10), "the command started", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    sigterm(&w);
    assert!(w.wait().unwrap().success());
    wait_until(Duration::from_secs(5), "the command is gone", || {
        !Command::new("kill")
            .args(["-0", &pid])
            .status()
            .unwrap()
            .success()
    });
    assert!(!marker.exists(), "the command ran to its end");
    assert_eq!(stat(&url, "jobs", "due"), 1, "the task was handed back");
    assert_eq!(stat(&url, "jobs", "succeeded_total"), 0);
}
