//! A readable CLI: durations as `30m`, `7d`, `1h30m`, `250ms`, `2s` or plain
//! milliseconds, a due time as RFC 3339, times shown as a local date-time and a relative form,
//! one spelling per enum value, an unknown queue an error for reads, and `settings get` with
//! the effective values, defaults marked.

use std::process::{Command, Output};

use dueq_testkit::RedisServer;

use crate::{dueq, dueq_json};

/// `dueq --redis URL ARGS` with `TZ=UTC`, so that dates print in UTC.
fn dueq_utc(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .env("TZ", "UTC")
        .arg("--redis")
        .arg(url)
        .args(args)
        .output()
        .expect("run dueq")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether `s` is `YYYY-MM-DD HH:MM:SS +HH:MM (REL)`, REL `in ...`, `... ago` or `now`.
fn is_when(s: &str) -> bool {
    let Some((date, rel)) = s.split_once(" (") else {
        return false;
    };
    let shape = date.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 | 19 => b == b' ',
        13 | 16 | 23 => b == b':',
        20 => b == b'+' || b == b'-',
        _ => b.is_ascii_digit(),
    });
    let rel = rel.strip_suffix(')').unwrap_or("");
    shape && date.len() == 26 && (rel == "now" || rel.starts_with("in ") || rel.ends_with(" ago"))
}

/// The value of `label:` in a `key: value` text block.
fn field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(label).map(str::trim))
        .unwrap_or_else(|| panic!("no {label} in:\n{text}"))
}

#[test]
fn every_duration_form_and_a_bad_one() {
    let server = RedisServer::start();
    let url = server.url();
    for (i, (flag, value, ms)) in [
        ("--delay", "30m", 1_800_000),
        ("--delay", "7d", 604_800_000),
        ("--delay", "1h30m", 5_400_000),
        ("--delay", "250ms", 250),
        ("--delay", "2s", 2_000),
        ("--delay", "60000", 60_000),
        // the old name, and readable values there too
        ("--delay-ms", "1500", 1_500),
        ("--delay-ms", "1m", 60_000),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("k{i}");
        let (ok, e) = dueq_json(&url, &["enqueue", "q", "--key", &key, flag, value]);
        assert!(ok, "{flag} {value}: {e}");
        let (_, t) = dueq_json(&url, &["get", "q", "--key", &key]);
        let due = t["due_at_ms"].as_u64().unwrap();
        let created = t["created_at_ms"].as_u64().unwrap();
        assert_eq!(due - created, ms, "{flag} {value}: {t}");
    }
    // the other duration flags read them as well
    let (ok, e) = dueq_json(
        &url,
        &[
            "enqueue", "q", "--key", "ttl", "--ttl", "1h", "--lease", "90s", "--delay", "1m",
        ],
    );
    assert!(ok, "{e}");
    let (_, t) = dueq_json(&url, &["get", "q", "--key", "ttl"]);
    let created = t["created_at_ms"].as_u64().unwrap();
    assert_eq!(
        t["expires_at_ms"].as_u64().unwrap() - created,
        3_600_000,
        "{t}"
    );
    let (ok, s) = dueq_json(&url, &["schedule", "set", "q", "hourly", "--every", "1h"]);
    assert!(ok, "{s}");
    let (_, g) = dueq_json(&url, &["schedule", "get", "q", "hourly"]);
    assert_eq!(g["every_ms"], 3_600_000, "{g}");
    // a bad one names its flag and the forms
    for (args, flag) in [
        (vec!["enqueue", "q", "--delay", "30x"], "--delay"),
        (vec!["enqueue", "q", "--delay-ms", "30x"], "--delay"),
        (vec!["enqueue", "q", "--ttl", "1.5h"], "--ttl"),
        (
            vec!["schedule", "set", "q", "s", "--every", "3x"],
            "--every",
        ),
        (
            vec!["work", "q", "--shutdown-grace", "1y", "--", "true"],
            "--shutdown-grace",
        ),
        (vec!["enqueue", "q", "--at", "tomorrow"], "--at"),
        (vec!["enqueue", "q", "--at", "2026-12-05T09:00:00"], "--at"),
    ] {
        let o = dueq(&url, &args);
        assert!(!o.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
        if flag != "--at" {
            assert!(
                err.contains("30m, 7d, 1h30m, 250ms, 2s or plain milliseconds"),
                "{err}"
            );
        }
    }
}

#[test]
fn a_due_time_in_rfc3339_and_text_times_with_date_and_distance() {
    let server = RedisServer::start();
    let url = server.url();
    let at = "2099-12-05T09:00:00+01:00";
    let at_ms = 4_100_140_800_000_u64; // 2099-12-05T08:00:00Z
    let out = stdout(&dueq_utc(&url, &["enqueue", "q", "--key", "a", "--at", at]));
    // "created ID due 2099-12-05 08:00:00 +00:00 (in ...)"
    let (_, when) = out.trim().split_once(" due ").unwrap();
    assert!(is_when(when), "{out}");
    assert!(when.starts_with("2099-12-05 08:00:00 +00:00 (in "), "{out}");
    let (_, t) = dueq_json(&url, &["get", "q", "--key", "a"]);
    assert_eq!(t["due_at_ms"], at_ms, "{t}");
    // epoch ms still work, under the new name and the old
    for flag in ["--at", "--due-at-ms"] {
        let (ok, r) = dueq_json(
            &url,
            &["reschedule", "q", "--key", "a", flag, "4100140800001"],
        );
        assert!(ok, "{r}");
        assert_eq!(r["due_at_ms"], at_ms + 1);
    }

    let text = stdout(&dueq_utc(&url, &["get", "q", "--key", "a"]));
    let due = field(&text, "due_at:");
    assert!(
        is_when(due) && due.starts_with("2099-12-05 08:00:00 +00:00 (in "),
        "{text}"
    );
    let created = field(&text, "created_at:");
    assert!(is_when(created) && !created.contains("(in "), "{text}");
    // in the local zone, whatever it is
    let local = stdout(&dueq(&url, &["get", "q", "--key", "a"]));
    assert!(is_when(field(&local, "due_at:")), "{local}");

    // stats: when the next task is due
    let text = stdout(&dueq(&url, &["stats", "q"]));
    assert!(text.lines().next().unwrap().contains("next_due"), "{text}");
    assert!(text.contains(" in "), "{text}");

    // schedules: next fire and the upcoming ones, dated
    let out = stdout(&dueq_utc(
        &url,
        &["schedule", "set", "q", "nightly", "--cron", "0 30 2 * * *"],
    ));
    assert!(out.starts_with("created; next fire "), "{out}");
    assert!(
        is_when(out.trim().trim_start_matches("created; next fire ")),
        "{out}"
    );
    let text = stdout(&dueq_utc(&url, &["schedule", "get", "q", "nightly"]));
    assert!(is_when(field(&text, "next_fire_at:")), "{text}");
    assert!(
        field(&text, "next_fire_at:").contains(" 02:30:00 +00:00 (in "),
        "{text}"
    );
    let upcoming: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("upcoming:"))
        .map(|l| l.trim_start_matches("upcoming:").trim())
        .collect();
    assert_eq!(upcoming.len(), 5, "{text}");
    assert!(upcoming.iter().all(|w| is_when(w)), "{text}");
    let list = stdout(&dueq_utc(&url, &["schedule", "list", "q"]));
    assert!(
        list.starts_with("nightly cron \"0 30 2 * * *\" tz=UTC; next fire 20"),
        "{list}"
    );

    // a dead task: when it died
    let (ok, _) = dueq_json(&url, &["enqueue", "d", "--max-attempts", "1"]);
    assert!(ok);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = dueq::Client::connect(&url).await.unwrap();
        let q = c.queue("d").unwrap();
        let t = q.claim(1, None).await.unwrap().tasks.remove(0);
        q.nack(&t.id, &t.lease_token, "boom", None, false)
            .await
            .unwrap();
    });
    let text = stdout(&dueq_utc(&url, &["dead", "list", "d"]));
    let line = text.lines().nth(1).unwrap();
    // attempts made of attempts allowed, as the dashboard and `dueq get` show them
    assert!(line.contains(" attempts=1/1 "), "{text}");
    let died = line
        .split(" died ")
        .nth(1)
        .unwrap()
        .split(" error=")
        .next()
        .unwrap();
    assert!(is_when(died) && !died.contains("(in "), "{text}");
}

/// `--misfire` takes `fire-once` and `fire_once`, and everything prints the API's `fire_once`.
#[test]
fn one_spelling_per_enum_value() {
    let server = RedisServer::start();
    let url = server.url();
    for (name, misfire) in [("a", "fire-once"), ("b", "fire_once")] {
        let (ok, r) = dueq_json(
            &url,
            &[
                "schedule",
                "set",
                "q",
                name,
                "--every",
                "1m",
                "--misfire",
                misfire,
            ],
        );
        assert!(ok, "{misfire}: {r}");
        let (_, g) = dueq_json(&url, &["schedule", "get", "q", name]);
        assert_eq!(g["misfire"], "fire_once", "{g}");
        let text = stdout(&dueq(&url, &["schedule", "get", "q", name]));
        assert!(field(&text, "misfire:").starts_with("fire_once"), "{text}");
    }
    let help = stdout(&dueq(&url, &["schedule", "set", "--help"]));
    assert!(
        help.contains("- fire_once:") && !help.contains("- fire-once"),
        "{help}"
    );
    let o = dueq(
        &url,
        &[
            "schedule",
            "set",
            "q",
            "c",
            "--every",
            "1m",
            "--misfire",
            "once",
        ],
    );
    assert!(!o.status.success());
}

/// Reading a queue that does not exist is an error with HTTP's 404 message; writes that
/// create a queue still work.
#[test]
fn an_unknown_queue_is_an_error_for_reads() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "orders"]);
    assert!(ok);
    for args in [
        vec!["stats", "ordrs"],
        vec!["settings", "get", "ordrs"],
        vec!["dead", "list", "ordrs"],
        vec!["dead", "retry", "ordrs", "000000000001"],
        vec!["dead", "retry", "ordrs", "--all"],
        vec!["dead", "delete", "ordrs", "--error-contains", "x"],
        vec!["purge", "ordrs", "--state", "dead"],
        vec!["queue", "delete", "ordrs", "--force"],
        vec!["schedule", "trigger", "ordrs", "nightly"],
        vec![
            "schedule", "backfill", "ordrs", "nightly", "--from", "0", "--to", "1000",
        ],
        vec!["schedule", "list", "ordrs"],
        vec!["schedule", "get", "ordrs", "nightly"],
        vec!["pause", "ordrs"],
        vec!["resume", "ordrs"],
        vec!["--json", "stats", "ordrs"],
    ] {
        let o = dueq(&url, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(r#"no queue "ordrs""#), "{args:?}: {err}");
    }
    // with JSON logs, the error is a JSON line too
    let o = dueq(&url, &["--log-format", "json", "stats", "ordrs"]);
    assert_eq!(o.status.code(), Some(1));
    let err: serde_json::Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(err["level"], "ERROR", "{err}");
    assert_eq!(
        err["message"], r#"error: not_found: no queue "ordrs""#,
        "{err}"
    );
    // nothing was created by them
    let (_, all) = dueq_json(&url, &["stats"]);
    assert_eq!(all["queue"], "orders", "{all}");
    // the existing queue reads fine; writes create queues
    let (ok, s) = dueq_json(&url, &["stats", "orders"]);
    assert!(ok, "{s}");
    let (ok, s) = dueq_json(&url, &["settings", "set", "fresh", r#"{"concurrency": 2}"#]);
    assert!(ok, "{s}");
    let (ok, s) = dueq_json(&url, &["settings", "get", "fresh"]);
    assert!(ok, "{s}");
    let (ok, s) = dueq_json(&url, &["pause", "later", "--create"]);
    assert!(ok, "{s}");
    let (ok, s) = dueq_json(&url, &["stats", "later"]);
    assert!(ok && s["paused"] == true, "{s}");
}

/// `settings get` shows the values in effect, defaults marked; `--json` adds `effective`.
#[test]
fn settings_get_shows_the_effective_values_with_defaults_marked() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, _) = dueq_json(&url, &["enqueue", "pay"]);
    assert!(ok);
    let text = stdout(&dueq(&url, &["settings", "get", "pay"]));
    assert_eq!(field(&text, "lease_ms:"), "30s (default)", "{text}");
    assert_eq!(field(&text, "max_attempts:"), "5 (default)", "{text}");
    assert_eq!(field(&text, "dead_max:"), "10000 (default)", "{text}");
    assert_eq!(
        field(&text, "backoff:"),
        "1s, x2 per attempt, up to 1h (default)",
        "{text}"
    );
    assert_eq!(field(&text, "concurrency:"), "none (default)", "{text}");
    let (ok, s) = dueq_json(
        &url,
        &[
            "settings",
            "set",
            "pay",
            r#"{"lease_ms": 90000, "rate_limit": {"max": 100, "per_ms": 1000}}"#,
        ],
    );
    assert!(ok, "{s}");
    let text = stdout(&dueq(&url, &["settings", "get", "pay"]));
    assert_eq!(field(&text, "lease_ms:"), "1m 30s", "{text}");
    assert_eq!(field(&text, "rate_limit:"), "100 per 1s", "{text}");
    assert_eq!(field(&text, "max_attempts:"), "5 (default)", "{text}");
    let (ok, j) = dueq_json(&url, &["settings", "get", "pay"]);
    assert!(ok, "{j}");
    // stored as before (null: the default), and what is in effect
    assert_eq!(j["lease_ms"], 90_000);
    assert_eq!(j["max_attempts"], serde_json::Value::Null);
    assert_eq!(j["effective"]["lease_ms"], 90_000);
    assert_eq!(j["effective"]["max_attempts"], 5);
    assert_eq!(j["effective"]["dead_max"], 10_000);
    assert_eq!(j["effective"]["on_expire"], "drop");
    assert_eq!(j["effective"]["concurrency"], serde_json::Value::Null);
}
