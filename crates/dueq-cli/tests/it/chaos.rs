//! `dueq chaos`: a short run with every fault kind must lose, duplicate, invent and run early
//! nothing; bad arguments are refused naming the flag.

use std::process::{Command, Output};

fn chaos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .arg("chaos")
        .args(args)
        .env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_REPLICAS")
        .env_remove("DUEQ_LOG")
        .output()
        .expect("run dueq chaos")
}

/// Issue 11 item 4: five seconds of faults on worker processes (SIGKILL), Redis (`kill -9` +
/// restart on its AOF, `CLIENT KILL`, `FUNCTION FLUSH`, `DEBUG SLEEP`, `CLIENT PAUSE`); every
/// kind comes at least once (the run cycles through them before going random).
#[test]
fn short_chaos_run_loses_nothing_and_injects_every_fault() {
    let dir = tempfile::tempdir().unwrap();
    let ledgers = dir.path().join("ledgers");
    let out = chaos(&[
        "--duration-ms",
        "5000",
        "--json",
        "--ledger-dir",
        ledgers.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    assert!(out.status.success(), "{r}\nstderr: {stderr}");
    for zero in ["lost", "duplicated", "unexpected", "early"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["drained"], true, "{r}");
    assert_eq!(r["tasks"], 1250, "{r}");
    assert!(r["confirmed"].as_u64().unwrap() > 0, "{r}");
    assert!(r["acked"].as_u64().unwrap() > 0, "{r}");
    let faults = r["faults"].as_object().unwrap();
    for kind in [
        "worker_sigkill",
        "redis_kill9_restart",
        "client_kill_normal",
        "client_kill_pubsub",
        "function_flush",
        "debug_sleep_300ms",
        "client_pause_300ms",
    ] {
        assert!(
            faults[kind]["injected"].as_u64().unwrap() >= 1,
            "{kind} never injected: {r}"
        );
    }
    // one more process per SIGKILL, each with its own ledger, kept with --ledger-dir
    let processes = r["worker_processes"].as_u64().unwrap();
    assert_eq!(
        processes,
        3 + faults["worker_sigkill"]["injected"].as_u64().unwrap(),
        "{r}"
    );
    let lines = |name: &str| {
        std::fs::read_to_string(ledgers.join(name))
            .unwrap()
            .lines()
            .count() as u64
    };
    assert_eq!(lines("producer.jsonl"), 1250);
    let workers: u64 = (1..=processes)
        .map(|n| lines(&format!("worker-{n}.jsonl")))
        .sum();
    // a start line per process, a line per delivery (a replayed one again) and per ack answer
    assert!(
        workers >= processes + 2 * r["acked"].as_u64().unwrap(),
        "{workers} lines: {r}"
    );
}

#[test]
fn chaos_refuses_bad_arguments_naming_the_flag() {
    for (args, flag) in [
        (&["--workers", "0"][..], "--workers"),
        (&["--duration-ms", "0"][..], "--duration-ms"),
        (&["--duration-ms", "600001"][..], "--duration-ms"),
        (&["--tasks", "0"][..], "--tasks"),
    ] {
        let out = chaos(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    // kept ledgers never mix with older ones
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("producer.jsonl"), "").unwrap();
    let out = chaos(&["--ledger-dir", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--ledger-dir") && stderr.contains("not empty"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--replicas", "1", "chaos"])
        .env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_REPLICAS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--replicas"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // never someone else's Redis
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", "redis://127.0.0.1:1", "chaos"])
        .env_remove("DUEQ_REPLICAS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--redis"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
