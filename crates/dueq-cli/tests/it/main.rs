//! End-to-end tests of the `dueq` binary against real `redis-server` processes.
// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod chaos;
mod cleanup;
mod commands;
mod flow;
mod readable;
mod relay;
mod replay;
mod schedules;
mod serve;
mod trace;
mod webhook;
mod work;

use std::process::{Command, Output};

/// The trace shipped beside the repository (`../shared/data`).
pub const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/olist_orders_union_sample.csv"
);

/// Held by the trace replays, which run for about 30 s each and compare timings with
/// 100 ms margins: two at once on a 2-core machine starve each other's driver.
pub static REPLAY_ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`REPLAY_ALONE`] (a replay that panicked leaves it usable).
pub fn replay_alone() -> std::sync::MutexGuard<'static, ()> {
    REPLAY_ALONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `dueq` with `args` against `url`.
pub fn dueq(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .arg("--redis")
        .arg(url)
        .args(args)
        .output()
        .expect("run dueq")
}

/// Runs `dueq --json ...` and parses the last stdout line.
pub fn dueq_json(url: &str, args: &[&str]) -> (bool, serde_json::Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = dueq(url, &all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("null");
    let v = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

/// Runs `dueq ARGS` without `--redis` (the embedded redis-server), asserts it succeeded and
/// returns its stdout.
pub fn dueq_embedded(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(args)
        .env_remove("DUEQ_REDIS_URL")
        .output()
        .expect("run dueq");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "dueq {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
