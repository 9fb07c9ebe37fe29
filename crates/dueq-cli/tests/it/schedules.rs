//! Case C30 at the process level: three `dueq work` processes and two `dueq serve` processes
//! on one Redis all fire the same schedule, and each tick runs exactly once.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dueq_testkit::{RedisServer, wait_until};

use crate::dueq_json;
use crate::serve::serve;

const EVERY_MS: u64 = 300;

fn schedule_field(url: &str, field: &str) -> u64 {
    let (ok, s) = dueq_json(url, &["schedule", "get", "ticks", "beat"]);
    assert!(ok, "{s}");
    s[field].as_u64().unwrap_or(0)
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn c30_three_workers_and_two_servers_run_each_tick_once() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ran.txt");
    let (ok, r) = dueq_json(
        &url,
        &[
            "schedule",
            "set",
            "ticks",
            "beat",
            "--every-ms",
            &EVERY_MS.to_string(),
        ],
    );
    assert!(ok, "{r}");
    // each run appends one short line: O_APPEND keeps concurrent writers' lines whole
    let script = format!("echo \"$DUEQ_TASK_KEY\" >> {}", out.display());
    let workers: Vec<Child> = (0..3)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_dueq"))
                .args(["--redis", &url, "work", "ticks", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let servers = [
        serve(&["--redis", &url], &[]),
        serve(&["--redis", &url], &[]),
    ];
    // ticks fire ahead of their time: wait until 12 have come and run
    wait_until(Duration::from_secs(30), "12 ticks ran", || {
        let (_, s) = dueq_json(&url, &["stats", "ticks"]);
        s["succeeded_total"].as_u64().unwrap_or(0) >= 12
    });
    // no more ticks, then let every fired task run before stopping the processes
    let (ok, p) = dueq_json(&url, &["schedule", "pause", "ticks", "beat"]);
    assert!(ok, "{p}");
    let fired = schedule_field(&url, "fired_total");
    wait_until(Duration::from_secs(30), "every fired tick ran", || {
        let (_, s) = dueq_json(&url, &["stats", "ticks"]);
        s["succeeded_total"].as_u64() == Some(fired)
    });
    for w in workers {
        stop(w);
    }
    drop(servers);
    let text = std::fs::read_to_string(&out).unwrap();
    let mut runs: BTreeMap<u64, usize> = BTreeMap::new();
    for line in text.lines() {
        let tick: u64 = line
            .strip_prefix("schedule:beat:")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("unexpected task key {line:?}"));
        *runs.entry(tick).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks run more than once: {twice:?}");
    assert_eq!(runs.len() as u64, fired, "runs {runs:?}");
    let ticks: Vec<u64> = runs.keys().copied().collect();
    for t in &ticks {
        assert_eq!(t % EVERY_MS, 0, "tick {t} is off the schedule's grid");
    }
    // a tick is missed only when no process fires it within the grace (1 s), and every
    // missed tick is counted as skipped
    let gaps: u64 = ticks.windows(2).map(|w| (w[1] - w[0]) / EVERY_MS - 1).sum();
    assert!(
        gaps <= schedule_field(&url, "skipped_total"),
        "ticks missing without being counted: {ticks:?}"
    );
}
