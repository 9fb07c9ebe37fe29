//! `dueq bench --smoke` runs every workload at tiny sizes, so the bench cannot rot (figures
//! from a debug build on a busy machine mean nothing; only their presence and sanity count).

use std::collections::HashMap;

#[test]
fn bench_smoke_reports_every_metric() {
    let stdout = crate::dueq_embedded(&["bench", "--smoke", "--runs", "1", "--json"]);
    let mut medians: HashMap<(String, String), f64> = HashMap::new();
    let mut ratios = HashMap::new();
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v.get("ratio_of").is_some() {
            ratios.insert(v["workload"].as_str().unwrap().to_owned(), v);
        } else if v.get("median_of").is_some() {
            medians.insert(
                (
                    v["workload"].as_str().unwrap().to_owned(),
                    v["metric"].as_str().unwrap().to_owned(),
                ),
                v["value"].as_f64().unwrap(),
            );
        } else {
            assert_eq!(v["run"], 1, "{v}");
        }
    }
    let get = |w: &str, m: &str| {
        *medians
            .get(&(w.to_owned(), m.to_owned()))
            .unwrap_or_else(|| panic!("no {w} {m} in {stdout}"))
    };
    for w in ["W1", "W2"] {
        assert!(get(w, "tasks_per_s") > 0.0);
        assert!(get(w, "redis_cpu_us_per_task") > 0.0);
        get(w, "client_cpu_us_per_task");
    }
    assert!(get("W3", "min_ms") >= 0.0, "a task ran early");
    for m in ["p50_ms", "p90_ms", "p99_ms", "max_ms"] {
        get("W3", m);
    }
    assert!(get("IDLE", "redis_commands_per_s") <= 3.0);
    get("IDLE", "redis_cpu_s");
    for n in ["1000", "10000"] {
        assert!(get(&format!("W4-{n}"), "claim_ms") > 0.0);
        assert!(get(&format!("W4-{n}"), "due_to_100th_ms") >= 0.0);
    }
    assert!(get("W5", "bytes_per_task") > 100.0);
    // many tenants: no group over its limit; the targets that are ratios come computed
    assert!(get("W7T", "most_active_in_a_group") <= 10.0);
    assert!(get("W7-REF", "tasks_per_s") > 0.0);
    for (r, target) in [("W7/W7-REF", ">= 0.80"), ("W7T/W2", ">= 0.60")] {
        let v = ratios
            .get(r)
            .unwrap_or_else(|| panic!("no ratio {r} in {stdout}"));
        assert!(v["value"].as_f64().unwrap() > 0.0, "{v}");
        assert_eq!(v["target"], target);
    }
}

/// W8 at smoke sizes (100 schedules every second for 2 s): every tick ran once, none early,
/// and every figure is there.
#[test]
fn bench_w8_runs_every_tick_once() {
    let stdout = crate::dueq_embedded(&[
        "bench",
        "--smoke",
        "--workload",
        "W8",
        "--runs",
        "1",
        "--json",
    ]);
    let fig = |m: &str| {
        stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v.get("median_of").is_some() && v["metric"] == m)
            .unwrap_or_else(|| panic!("no W8 {m} in {stdout}"))["value"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(fig("tasks"), fig("expected"), "{stdout}");
    assert!(fig("fired_ahead_pct") > 0.0, "{stdout}");
    for m in [
        "fire_late_p99_ms",
        "start_p50_ms",
        "start_p99_ms",
        "redis_cpu_us_per_tick",
        "fire_redis_cpu_us_per_tick",
    ] {
        assert!(fig(m) >= 0.0, "{m}: {stdout}");
    }
}

/// IDLE over a queue whose schedules all fire later: the worker's schedule firer sleeps to
/// their next fire time, so the idle cost stays that of IDLE (DESIGN: 10 000 schedules cost no
/// more at idle than one).
#[test]
fn bench_idle_with_schedules_stays_idle() {
    let stdout = crate::dueq_embedded(&[
        "bench",
        "--smoke",
        "--workload",
        "IDLE-SCHEDULES",
        "--runs",
        "1",
        "--json",
    ]);
    let v = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v.get("median_of").is_some() && v["metric"] == "redis_commands_per_s")
        .unwrap_or_else(|| panic!("no IDLE-SCHEDULES redis_commands_per_s in {stdout}"));
    assert_eq!(v["workload"], "IDLE-SCHEDULES");
    assert!(v["value"].as_f64().unwrap() <= 3.0, "{v}");
}

/// W9 at smoke sizes on its own local 3-master cluster: every figure is there, each master
/// holds some of the 6 partitions, the Redis CPU adds up over the masters; and it refuses
/// `--redis` (it needs a cluster of its own).
#[test]
fn bench_w9_runs_on_a_local_cluster() {
    let stdout = crate::dueq_embedded(&[
        "bench",
        "--smoke",
        "--workload",
        "W9",
        "--runs",
        "1",
        "--json",
    ]);
    let medians: HashMap<(String, String), f64> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("median_of").is_some())
        .map(|v| {
            (
                (
                    v["workload"].as_str().unwrap().to_owned(),
                    v["metric"].as_str().unwrap().to_owned(),
                ),
                v["value"].as_f64().unwrap(),
            )
        })
        .collect();
    let get = |w: &str, m: &str| {
        *medians
            .get(&(w.to_owned(), m.to_owned()))
            .unwrap_or_else(|| panic!("no {w} {m} in {stdout}"))
    };
    for p in ["P1", "P6"] {
        let placed: f64 = (1..=3)
            .map(|m| get(&format!("W9-{p}-M{m}"), "partitions"))
            .sum();
        assert_eq!(placed, if p == "P1" { 1.0 } else { 6.0 });
        for w in ["W1", "W2"] {
            let name = format!("W9-{p}-{w}");
            assert!(get(&name, "tasks_per_s") > 0.0);
            let total = get(&name, "redis_cpu_us_per_task");
            let masters: f64 = (1..=3)
                .map(|m| get(&format!("{name}-M{m}"), "redis_cpu_us_per_task"))
                .sum();
            assert!(
                (total - masters).abs() <= total * 0.01 + 1e-6,
                "{total} vs {masters}"
            );
            get(&name, "cpu_spread_pct");
            get(&name, "cpu_max_dev_pct");
        }
    }
    for m in 1..=3 {
        assert!(get(&format!("W9-P6-M{m}"), "partitions") >= 1.0);
    }
    for n in ["1000", "10000"] {
        assert!(get(&format!("W9-P6-W4-{n}"), "claim_ms") > 0.0);
    }

    let out = crate::dueq("redis://127.0.0.1:1", &["bench", "--workload", "W9"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("W9 starts its own local"), "{stderr}");
}
