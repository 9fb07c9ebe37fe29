//! `dueq chaos`: a short run with every fault kind must lose, duplicate, invent and run early
//! nothing; the same on a Redis Cluster with master failovers (`--cluster`), where a duplicate
//! must be a task of a killed master's partition; bad arguments are refused naming the flag.

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

/// Five seconds of faults on worker processes (SIGKILL), Redis (`kill -9` +
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
    // one replica per master: a durable write to two could never be confirmed
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--replicas", "2", "chaos", "--cluster"])
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
}

/// Runs `dueq [--replicas R] chaos --cluster` for 30 s (3 000 tasks, 2 workers) and checks
/// its report: nothing lost, early or unexpected, every duplicate a task of a killed master's
/// partition, every fault kind of the mode injected, the per-partition figures there.
fn cluster_run(replicas: &str, seed: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--replicas", replicas, "chaos", "--cluster", "--json"])
        .args([
            "--duration-ms",
            "30000",
            "--tasks",
            "3000",
            "--workers",
            "2",
        ])
        .args(["--seed", seed])
        .env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_REPLICAS")
        .env_remove("DUEQ_LOG")
        .output()
        .expect("run dueq chaos --cluster");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    assert!(out.status.success(), "{r}\nstderr: {stderr}");
    for zero in ["lost", "unexpected", "early"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["drained"], true, "{r}");
    assert!(r["confirmed"].as_u64().unwrap() > 2_000, "{r}");
    let k = &r["cluster"];
    assert_eq!(k["partitions"], 6, "{r}");
    assert_eq!(
        (k["masters"].as_u64(), k["replicas_per_master"].as_u64()),
        (Some(3), Some(1))
    );
    // every duplicate is a task of a partition whose master was killed within its lease
    assert_eq!(k["duplicated_unexplained"], 0, "{r}");
    assert_eq!(k["duplicated_explained"], r["duplicated"], "{r}");
    for d in k["duplicates"].as_array().unwrap() {
        assert_eq!(d["on_failed_partition"], true, "{d}: {r}");
        assert!(d["fault"].is_u64(), "{d}: {r}");
    }
    let log = k["fault_log"].as_array().unwrap();
    assert!(log.len() >= 3, "{r}");
    for f in log {
        // 2 of the 6 partitions on each master
        assert_eq!(f["partitions"].as_array().unwrap().len(), 2, "{f}");
        // a failover takes the node timeout (1 s) and an election
        assert!(f["promoted_after_ms"].as_u64().unwrap() >= 1_000, "{f}");
        assert!(f["window_ms"].as_u64().unwrap() > f["promoted_after_ms"].as_u64().unwrap());
    }
    // the failed partitions wait for the failover; the healthy ones are served meanwhile
    let during = |side: &str, what: &str| k[format!("{side}_during_faults")][what].as_i64();
    assert!(during("failed", "tasks").unwrap() > 0, "{r}");
    assert!(during("failed", "max_ms").unwrap() >= 1_000, "{r}");
    assert!(during("healthy", "tasks").unwrap() > 500, "{r}");
    assert!(during("healthy", "p50_ms").unwrap() < 100, "{r}");
    r
}

/// Master failovers of a Redis Cluster under a partitioned queue, with durable
/// writes (`--replicas 1`), so both fault kinds come: a master killed and restarted as its
/// replica's replica, and a master killed with the node kept down until the next fault
/// (durable writes to its partitions answer not_replicated meanwhile). About 35 s.
#[test]
fn cluster_chaos_run_with_durable_writes_loses_nothing() {
    let r = cluster_run("1", "29");
    let faults = r["faults"].as_object().unwrap();
    for kind in ["master_kill", "master_kill_no_replica"] {
        assert!(
            faults[kind]["injected"].as_u64().unwrap() >= 1,
            "{kind} never injected: {r}"
        );
    }
    // a no-replica fault: its partitions' writes fail until the killed node is back
    let log = r["cluster"]["fault_log"].as_array().unwrap();
    assert!(
        log.iter().any(|f| f["kind"] == "master_kill_no_replica"
            && f["restarted_after_ms"].as_u64() > f["promoted_after_ms"].as_u64()),
        "{r}"
    );
}

/// The same without durable writes: an ack the killed master had not yet replicated is
/// undone by the failover, and its task runs again (allowed only on the killed master's
/// partitions, within a lease of the kill).
#[test]
#[ignore = "a second 35 s cluster run on top of the durable one, which injects every fault \
            kind of the mode; run it from .ci/run"]
fn cluster_chaos_run_without_durable_writes_loses_nothing() {
    let r = cluster_run("0", "30");
    let faults = r["faults"].as_object().unwrap();
    assert!(
        faults["master_kill"]["injected"].as_u64().unwrap() >= 3,
        "{r}"
    );
    assert!(!faults.contains_key("master_kill_no_replica"), "{r}");
}
