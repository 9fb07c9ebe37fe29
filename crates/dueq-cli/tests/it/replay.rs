//! `dueq replay` on the real trace: with 30 trace minutes lasting at least one real second,
//! what ran must match the CSV exactly.

use std::process::Command;

use crate::TRACE;

/// 2018-07-10..2018-07-12 (65 orders; 21 cancel-unpaid tasks must run, 44 must be cancelled in
/// time) at 1800x: 30 trace minutes last 1 s. Quiet stretches longer than 3 trace minutes are
/// shortened to 100 ms, so the closest approval and due time are still at least 100 ms apart
/// in real time (the report says how close), far above scheduling jitter. Runs on the embedded
/// redis-server (no `--redis`), which also tests that default.
#[test]
fn replay_window_matches_the_csv_exactly() {
    window_matches_the_csv(&[]);
}

/// The same window through a queue of 4 partitions: keys found in their partitions, tasks
/// claimed from all of them, stats added up.
#[test]
fn replay_window_matches_the_csv_exactly_over_partitions() {
    window_matches_the_csv(&["--partitions", "4"]);
}

fn window_matches_the_csv(extra: &[&str]) {
    let _alone = crate::replay_alone();
    let mut args = vec![
        "replay",
        "--json",
        "--trace",
        TRACE,
        "--from",
        "2018-07-10",
        "--to",
        "2018-07-12",
        "--speedup",
        "1800",
        "--max-gap-ms",
        "100",
    ];
    args.extend(extra);
    let stdout = crate::dueq_embedded(&args);
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(r["orders"], 65);
    assert!(r["min_cancel_margin_ms"].as_u64().unwrap() >= 100, "{r}");
    for kind in ["cancel-unpaid", "auto-confirm", "review-reminder"] {
        assert_eq!(
            r["expected_runs"][kind], r["actual_runs"][kind],
            "{kind}: {r}"
        );
    }
    // the CSV says: 21 cancel-unpaid run, 44 are cancelled in time
    assert_eq!(r["expected_runs"]["cancel-unpaid"], 21);
    assert_eq!(r["cancels"]["cancelled"], 44);
    assert_eq!(r["tasks_enqueued"]["auto-confirm"], 56);
    for zero in [
        "explained_mismatches",
        "early_runs",
        "lost_tasks",
        "unexplained_mismatches",
        "duplicate_runs",
    ] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
}

#[test]
fn replay_refuses_bad_input() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dueq"))
            .arg("replay")
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--trace", "/nonexistent.csv"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.csv"));
    let out = run(&["--trace", TRACE, "--speedup", "0"]);
    assert!(!out.status.success());
    let out = run(&["--trace", TRACE, "--from", "yesterday"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from"));
    for bad in ["0", "1025"] {
        let out = run(&["--trace", TRACE, "--partitions", bad]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("--partitions"));
    }
}
