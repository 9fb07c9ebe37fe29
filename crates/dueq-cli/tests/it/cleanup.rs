//! The bulk cleanup commands (DESIGN 4.3, mirroring the routes of 4.2): `dead retry|delete`
//! by filter, `purge`, `queue delete`, `schedule trigger|backfill`, and the language column
//! of `dueq workers`, against a real Redis.

use std::process::Output;

use dueq::{Client, Queue, SettingsPatch, TaskRef, TaskSpec, TaskState, WorkerBeat};
use dueq_testkit::RedisServer;
use serde_json::{Value, json};

use crate::{dueq, dueq_json};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dueq --json ARGS`, which must succeed.
fn ok_json(url: &str, args: &[&str]) -> Value {
    let (ok, v) = dueq_json(url, args);
    assert!(ok, "dueq {args:?} failed: {v}");
    v
}

fn stat(url: &str, queue: &str, field: &str) -> u64 {
    let s = ok_json(url, &["stats", queue]);
    s[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {s}"))
}

async fn queue(url: &str, name: &str) -> Queue {
    Client::connect(url).await.unwrap().queue(name).unwrap()
}

/// Makes `n` dead tasks in `queue` (keys `{prefix}{i}`, every third in group `g1`): each
/// enqueued with one attempt, claimed and failed with the error "card declined" (even `i`)
/// or "gateway timeout" (odd `i`).
fn dead_tasks(url: &str, name: &str, prefix: &str, n: usize) {
    rt().block_on(async {
        let q = queue(url, name).await;
        let specs: Vec<TaskSpec> = (0..n)
            .map(|i| {
                let s = TaskSpec::new(b"x".to_vec())
                    .key(format!("{prefix}{i}"))
                    .max_attempts(1);
                if i % 3 == 0 { s.group("g1") } else { s }
            })
            .collect();
        for chunk in specs.chunks(1_000) {
            q.enqueue_batch(chunk).await.unwrap();
        }
        let mut left = n;
        while left > 0 {
            let c = q.claim(1_000, None).await.unwrap();
            assert!(!c.tasks.is_empty(), "{left} tasks not claimed");
            let items: Vec<_> = c
                .tasks
                .iter()
                .map(|t| {
                    let i: usize = t.key.as_deref().unwrap()[prefix.len()..].parse().unwrap();
                    let error = if i.is_multiple_of(2) {
                        "card declined"
                    } else {
                        "gateway timeout"
                    };
                    (&t.id, &t.lease_token, error, None, false)
                })
                .collect();
            q.nack_batch(&items).await.unwrap();
            left -= c.tasks.len();
        }
    });
    assert!(stat(url, name, "dead") >= n as u64);
}

/// The report of a bulk run as `--json` prints it.
fn report(v: &Value) -> (u64, u64, u64, u64) {
    let n = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f} in {v}"));
    (n("looked_at"), n("matched"), n("done"), n("conflicts"))
}

#[test]
fn bulk_retry_by_filter_counts_exactly_and_keeps_to_its_limit_over_steps() {
    let server = RedisServer::start();
    let url = server.url();
    dead_tasks(&url, "pay", "order:", 300);

    // a dry run counts exactly and changes nothing (one line of text, JSON as HTTP answers)
    let v = ok_json(
        &url,
        &[
            "dead",
            "retry",
            "pay",
            "--error-contains",
            "declined",
            "--dry-run",
        ],
    );
    assert_eq!(
        v,
        json!({"looked_at": 300, "matched": 150, "done": 0, "conflicts": 0})
    );
    let o = dueq(
        &url,
        &[
            "dead",
            "retry",
            "pay",
            "--error-contains",
            "declined",
            "--key-prefix",
            "order:1",
            "--dry-run",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let want = (0..300)
        .filter(|i| i % 2 == 0 && i.to_string().starts_with('1'))
        .count();
    assert_eq!(
        stdout(&o),
        format!("dry run: {want} of 300 dead tasks match; nothing retried\n")
    );
    assert_eq!(stat(&url, "pay", "dead"), 300);

    // --limit counts over the whole run: with a step per Redis call (200 dead tasks each)
    // the timeouts are spread over two steps, and together they retry exactly 60
    let v = ok_json(
        &url,
        &[
            "dead",
            "retry",
            "pay",
            "--error-contains",
            "timeout",
            "--limit",
            "60",
            "--step",
            "0",
        ],
    );
    assert_eq!(v["done"], 60, "{v}");
    assert_eq!(v["conflicts"], 0, "{v}");
    assert_eq!(stat(&url, "pay", "dead"), 240);
    assert_eq!(stat(&url, "pay", "scheduled"), 60);

    // the rest of the timeouts, in steps: no progress lines on a pipe for a run this small
    let o = dueq(
        &url,
        &[
            "dead",
            "retry",
            "pay",
            "--error-contains",
            "timeout",
            "--step",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "retried 90 of 90 matching dead tasks (240 looked at)\n"
    );
    assert_eq!(stderr(&o), "");
    assert_eq!(stat(&url, "pay", "dead"), 150);
    assert_eq!(stat(&url, "pay", "scheduled"), 150);

    // a key live again on a new task: that retry is refused and counted as a conflict
    dead_tasks(&url, "pay2", "again:", 3);
    let (ok, e) = dueq_json(
        &url,
        &["enqueue", "pay2", "--key", "again:1", "--delay", "1h"],
    );
    assert!(ok, "{e}");
    let o = dueq(&url, &["dead", "retry", "pay2", "--key-prefix", "again:"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "retried 2 of 3 matching dead tasks (3 looked at); 1 not retried: their key is live on \
         another task or in its unique window\n"
    );
    assert_eq!(stat(&url, "pay2", "dead"), 1);

    // retried tasks start afresh
    rt().block_on(async {
        let q = queue(&url, "pay").await;
        let t = q
            .get(&TaskRef::key("order:3").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((t.state, t.attempt), (TaskState::Scheduled, 0));
    });
}

#[test]
fn bulk_runs_without_a_filter_are_refused_unless_all() {
    let server = RedisServer::start();
    let url = server.url();
    dead_tasks(&url, "pay", "k", 30);
    for args in [
        vec!["dead", "retry", "pay"],
        vec!["dead", "retry", "pay", "--dry-run"],
        vec!["dead", "retry", "pay", "--limit", "5"],
        vec!["dead", "retry", "pay", "--spread", "1m"],
        vec!["dead", "delete", "pay"],
        vec!["dead", "delete", "pay", "--limit", "5"],
    ] {
        let o = dueq(&url, &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        for flag in [
            "--error-contains",
            "--died-after",
            "--died-before",
            "--key-prefix",
            "--group",
            "--all",
        ] {
            assert!(err.contains(flag), "{args:?}: {err}");
        }
        assert_eq!(stdout(&o), "", "{args:?}");
    }
    assert_eq!(stat(&url, "pay", "dead"), 30);
    // ids and filters, --all and a filter, a spread on a delete: refused by the parser
    for args in [
        vec!["dead", "retry", "pay", "000000000001", "--group", "g1"],
        vec!["dead", "retry", "pay", "000000000001", "--spread", "1m"],
        vec!["dead", "retry", "pay", "--all", "--group", "g1"],
        vec!["dead", "delete", "pay", "--all", "--spread", "1m"],
        vec!["dead", "retry", "pay", "--all", "--limit", "0"],
    ] {
        let o = dueq(&url, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    // an unknown queue: the message of the other commands
    let o = dueq(&url, &["dead", "retry", "pyy", "--all"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(r#"not_found: no queue "pyy""#),
        "{}",
        stderr(&o)
    );
    assert_eq!(stat(&url, "pay", "dead"), 30);

    // --all takes every dead task; --limit caps it
    let v = ok_json(&url, &["dead", "retry", "pay", "--all", "--limit", "7"]);
    assert_eq!(report(&v).2, 7, "{v}");
    // a run cut by --limit says that more may match than it counted
    let o = dueq(&url, &["dead", "retry", "pay", "--all", "--limit", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let matched: u64 = out
        .strip_prefix("retried 3 of ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    let tail = if matched > 3 {
        format!(
            "; stopped at --limit 3: {} more of those looked at match, and more may beyond \
             them (--dry-run counts them all)\n",
            matched - 3
        )
    } else {
        "; stopped at --limit 3: more may match (--dry-run counts them)\n".to_owned()
    };
    assert!(out.ends_with(&tail), "{out}");
    let v = ok_json(&url, &["dead", "retry", "pay", "--all"]);
    assert_eq!(report(&v), (20, 20, 20, 0));
    assert_eq!(stat(&url, "pay", "dead"), 0);
    assert_eq!(stat(&url, "pay", "scheduled"), 30);
}

#[test]
fn a_filter_that_matches_nothing_says_so_and_a_list_names_its_next_page() {
    let server = RedisServer::start();
    let url = server.url();
    dead_tasks(&url, "pay", "k", 12);
    // every task died after this time: the death-time index skips all of them
    for args in [
        vec!["dead", "retry", "pay", "--died-before", "1", "--dry-run"],
        vec!["dead", "delete", "pay", "--died-before", "1"],
    ] {
        let o = dueq(&url, &args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let verb = if args[1] == "retry" {
            "retried"
        } else {
            "deleted"
        };
        let dry = if args.contains(&"--dry-run") {
            "dry run: "
        } else {
            ""
        };
        assert_eq!(
            stdout(&o),
            format!("{dry}no dead task matches; nothing {verb}\n"),
            "{args:?}"
        );
    }
    assert_eq!(stat(&url, "pay", "dead"), 12);
    let o = dueq(&url, &["dead", "list", "pay", "--limit", "5"]);
    let text = stdout(&o);
    assert!(
        text.ends_with("showing 1 to 5 of 12, newest first; next page: --offset 5 --limit 5\n"),
        "{text}"
    );
    let o = dueq(
        &url,
        &["dead", "list", "pay", "--offset", "10", "--limit", "5"],
    );
    let text = stdout(&o);
    assert_eq!(
        text.lines().count(),
        3,
        "the header and the last two: {text}"
    );
    assert!(!text.contains("next page"), "{text}");
}

#[test]
fn bulk_retry_spreads_due_times_over_spread() {
    let server = RedisServer::start();
    let url = server.url();
    dead_tasks(&url, "pay", "k", 300);
    // the group g1 (every third) without a spread: all due at once
    let v = ok_json(&url, &["dead", "retry", "pay", "--group", "g1"]);
    assert_eq!(report(&v), (300, 100, 100, 0));
    assert_eq!(stat(&url, "pay", "due"), 100);
    // the rest over an hour
    let before = redis_now_ms(&server);
    let o = dueq(&url, &["dead", "retry", "pay", "--all", "--spread", "1h"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "retried 200 of 200 matching dead tasks (200 looked at), due over the next 1h\n"
    );
    let after = redis_now_ms(&server);
    let due: Vec<u64> = rt().block_on(async {
        let q = queue(&url, "pay").await;
        let mut v = Vec::new();
        for i in (0..300).filter(|i| i % 3 != 0) {
            let t = q
                .get(&TaskRef::key(format!("k{i}")).unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(t.state, TaskState::Scheduled);
            v.push(t.due_at_ms);
        }
        v
    });
    let hour = 3_600_000;
    assert!(
        due.iter().all(|d| (before..after + hour).contains(d)),
        "{due:?}"
    );
    // spread evenly: the range covered, few due in any minute
    let (lo, hi) = (due.iter().min().unwrap(), due.iter().max().unwrap());
    assert!(hi - lo > hour / 2, "{lo}..{hi}");
    let first_minute = due.iter().filter(|d| **d < before + 60_000).count();
    assert!(
        first_minute <= 15,
        "{first_minute} of 200 due in the first minute"
    );
    assert_eq!(stat(&url, "pay", "scheduled"), 300);
    assert!(stat(&url, "pay", "due") < 110);
}

#[test]
fn bulk_delete_by_group_time_and_error() {
    let server = RedisServer::start();
    let url = server.url();
    let t0 = redis_now_ms(&server);
    dead_tasks(&url, "pay", "k", 300);
    // the list names each dead task's group, when it has one
    let o = dueq(&url, &["dead", "list", "pay", "--limit", "3"]);
    let groups: Vec<bool> = stdout(&o)
        .lines()
        .skip(1)
        .take(3)
        .map(|l| l.contains(" group=g"))
        .collect();
    assert!(groups.contains(&true), "{}", stdout(&o));
    let v = ok_json(
        &url,
        &["dead", "delete", "pay", "--group", "g1", "--step", "0"],
    );
    assert_eq!(report(&v), (300, 100, 100, 0));
    assert_eq!(stat(&url, "pay", "dead"), 200);
    // a death-time window: all died after t0 (RFC 3339 and epoch ms both read)
    let early = jiff::Timestamp::from_millisecond(i64::try_from(t0).unwrap() - 60_000)
        .unwrap()
        .to_string();
    let v = ok_json(
        &url,
        &[
            "dead",
            "delete",
            "pay",
            "--died-before",
            &early,
            "--dry-run",
        ],
    );
    assert_eq!(report(&v), (0, 0, 0, 0));
    let v = ok_json(
        &url,
        &[
            "dead",
            "delete",
            "pay",
            "--died-after",
            &t0.to_string(),
            "--dry-run",
        ],
    );
    assert_eq!(report(&v), (200, 200, 0, 0));
    // after before: refused with the library's message, nothing deleted
    let o = dueq(
        &url,
        &[
            "dead",
            "delete",
            "pay",
            "--died-after",
            &t0.to_string(),
            "--died-before",
            &early,
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("died_after_ms must be before"),
        "{}",
        stderr(&o)
    );
    // the timeouts left: odd numbers not divisible by 3
    let o = dueq(
        &url,
        &["dead", "delete", "pay", "--error-contains", "timeout"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "deleted 100 of 100 matching dead tasks (200 looked at)\n"
    );
    assert_eq!(stat(&url, "pay", "dead"), 100);
    assert_eq!(stat(&url, "pay", "scheduled"), 0);
    // the single-task form is still there
    let (ok, page) = dueq_json(&url, &["dead", "list", "pay", "--limit", "1"]);
    assert!(ok);
    let id = page["tasks"][0]["id"].as_str().unwrap().to_owned();
    let v = ok_json(&url, &["dead", "delete", "pay", &id]);
    assert_eq!(v, json!({"id": id, "outcome": "deleted"}));
    assert_eq!(stat(&url, "pay", "dead"), 99);
}

fn redis_now_ms(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    s * 1000 + us / 1000
}

#[test]
fn purge_drops_each_state_in_steps_with_progress_lines() {
    let server = RedisServer::start();
    let url = server.url();
    const N: usize = 10_500;
    let ok_id = rt().block_on(async {
        let q = queue(&url, "old").await;
        q.update_settings(&SettingsPatch::default().succeeded_max(Some(100)))
            .await
            .unwrap();
        let specs: Vec<_> = (0..N)
            .map(|_| TaskSpec::new(b"s".to_vec()).delay_ms(3_600_000))
            .collect();
        for chunk in specs.chunks(1_000) {
            q.enqueue_batch(chunk).await.unwrap();
        }
        // three succeeded tasks kept by retention
        let mut ids = Vec::new();
        for _ in 0..3 {
            q.enqueue(TaskSpec::new(b"ok".to_vec())).await.unwrap();
            let c = q.claim(1, None).await.unwrap();
            q.ack(&c.tasks[0].id, &c.tasks[0].lease_token)
                .await
                .unwrap();
            ids.push(c.tasks[0].id.clone());
        }
        ids[0].as_str().to_owned()
    });
    dead_tasks(&url, "old", "d", 20);
    assert_eq!(stat(&url, "old", "scheduled"), N as u64);

    // a step per Redis call (1 000 tasks): one progress line at 10 000, the counts on stdout
    let o = dueq(
        &url,
        &["purge", "old", "--state", "scheduled", "--step", "0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("dropped {N} scheduled tasks of old (counted as cancelled)\n")
    );
    assert_eq!(
        stderr(&o),
        "purging scheduled tasks: 10000 dropped, 500 left\n"
    );
    let s = ok_json(&url, &["stats", "old"]);
    assert_eq!(
        (&s["scheduled"], &s["dead"], &s["cancelled_total"]),
        (&json!(0), &json!(20), &json!(N)),
        "{s}"
    );

    let v = ok_json(&url, &["purge", "old", "--state", "dead"]);
    assert_eq!(v, json!({"dropped": 20, "left": 0}));
    assert_eq!(stat(&url, "old", "dead"), 0);

    let (ok, t) = dueq_json(&url, &["get", "old", &ok_id]);
    assert!(ok, "{t}");
    assert_eq!(t["state"], "succeeded");
    let v = ok_json(&url, &["purge", "old", "--state", "succeeded"]);
    assert_eq!(v, json!({"dropped": 3, "left": 0}));
    let (ok, _) = dueq_json(&url, &["get", "old", &ok_id]);
    assert!(!ok, "the succeeded task is gone");
    let v = ok_json(&url, &["purge", "old", "--state", "succeeded"]);
    assert_eq!(v, json!({"dropped": 0, "left": 0}));

    // bad input
    let o = dueq(&url, &["purge", "nope", "--state", "dead"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(r#"not_found: no queue "nope""#),
        "{}",
        stderr(&o)
    );
    let o = dueq(&url, &["purge", "old", "--state", "active"]);
    assert_eq!(o.status.code(), Some(2));
    let o = dueq(&url, &["purge", "old"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn queue_delete_refuses_a_queue_with_work_unless_forced() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(&url, &["enqueue", "busy", "--delay", "1h"]);
    assert!(ok, "{e}");
    let (ok, e) = dueq_json(&url, &["schedule", "set", "busy", "tick", "--every", "1h"]);
    assert!(ok, "{e}");
    let o = dueq(&url, &["queue", "delete", "busy"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "not_empty: queue busy has scheduled or running tasks: purge them first, or delete \
             with --force"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "");
    assert_eq!(stat(&url, "busy", "scheduled"), 1);

    let v = ok_json(&url, &["queue", "delete", "busy", "--force"]);
    assert_eq!(v, json!({"deleted": true}));
    // gone: its schedule too, and the queue is unknown now
    let o = dueq(&url, &["stats", "busy"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(r#"no queue "busy""#), "{}", stderr(&o));
    let o = dueq(&url, &["queue", "delete", "busy", "--force"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(r#"not_found: no queue "busy""#),
        "{}",
        stderr(&o)
    );

    // a queue with only dead tasks needs no --force
    dead_tasks(&url, "done", "k", 2);
    let o = dueq(&url, &["queue", "delete", "done"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "deleted queue done\n");
    let v = ok_json(&url, &["stats"]);
    assert_eq!(v, Value::Null, "no queue is left: {v}");
}

#[test]
fn schedule_trigger_runs_once_now_and_backfill_twice_adds_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    // hourly: its next fire time stays put while the test runs
    let v = ok_json(
        &url,
        &[
            "schedule",
            "set",
            "jobs",
            "hourly",
            "--every",
            "1h",
            "--payload",
            "{\"n\":1}",
        ],
    );
    assert_eq!(v["outcome"], "created", "{v}");
    let before = ok_json(&url, &["schedule", "get", "jobs", "hourly"]);

    let t = ok_json(&url, &["schedule", "trigger", "jobs", "hourly"]);
    let id = t["id"].as_str().unwrap().to_owned();
    let key = t["key"].as_str().unwrap().to_owned();
    let ms: u64 = key
        .strip_prefix("schedule:hourly:manual:")
        .unwrap_or_else(|| panic!("{t}"))
        .parse()
        .unwrap();
    assert!(ms.abs_diff(t["due_at_ms"].as_u64().unwrap()) < 1_000, "{t}");
    let task = ok_json(&url, &["get", "jobs", &id]);
    assert_eq!(
        (&task["state"], &task["key"], &task["payload"]),
        (&json!("scheduled"), &json!(key), &json!({"n": 1})),
        "{task}"
    );
    // the grid did not move and no tick counted
    let after = ok_json(&url, &["schedule", "get", "jobs", "hourly"]);
    assert_eq!(
        after["next_fire_at_ms"], before["next_fire_at_ms"],
        "{after}"
    );
    assert_eq!(after["fired_total"], 0, "{after}");
    // the text form
    let o = dueq(&url, &["schedule", "trigger", "jobs", "hourly"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o);
    assert!(
        line.starts_with("enqueued ") && line.contains(" key=schedule:hourly:manual:"),
        "{line}"
    );
    assert_eq!(stat(&url, "jobs", "scheduled"), 2);
    let o = dueq(&url, &["schedule", "trigger", "jobs", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("queue jobs has no schedule nope"),
        "{}",
        stderr(&o)
    );

    // ten past ticks of a schedule every second, the range given as RFC 3339 and as epoch ms
    let v = ok_json(&url, &["schedule", "set", "jobs", "tick", "--every", "1s"]);
    assert_eq!(v["outcome"], "created", "{v}");
    let from_ms = (redis_now_ms(&server) / 1000 - 60) * 1000;
    let to_ms = from_ms + 10_000;
    let from = jiff::Timestamp::from_millisecond(i64::try_from(from_ms).unwrap())
        .unwrap()
        .to_string();
    let args = [
        "schedule",
        "backfill",
        "jobs",
        "tick",
        "--from",
        from.as_str(),
        "--to",
        &to_ms.to_string(),
    ];
    let v = ok_json(&url, &args);
    assert_eq!(v, json!({"ticks": 10, "created": 10, "existing": 0}));
    let o = dueq(&url, &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "10 ticks in the range: 0 enqueued (due now), 10 already present\n"
    );
    assert_eq!(stat(&url, "jobs", "scheduled"), 12);
    let task = ok_json(
        &url,
        &["get", "jobs", "--key", &format!("schedule:tick:{from_ms}")],
    );
    assert_eq!(task["state"], "scheduled", "{task}");
    // a future range is refused, nothing written
    let future = (redis_now_ms(&server) + 3_600_000).to_string();
    let o = dueq(
        &url,
        &[
            "schedule",
            "backfill",
            "jobs",
            "tick",
            "--from",
            &to_ms.to_string(),
            "--to",
            &future,
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in the future"), "{}", stderr(&o));
    assert_eq!(stat(&url, "jobs", "scheduled"), 12);
}

#[test]
fn workers_show_their_language() {
    let server = RedisServer::start();
    let url = server.url();
    rt().block_on(async {
        let c = Client::connect(&url).await.unwrap();
        let mut py = WorkerBeat::new("py-1", vec!["jobs".to_owned()]);
        py.language = "python".to_owned();
        py.pid = 4242;
        assert!(c.beat_worker(&py).await.unwrap());
        let mut quiet = WorkerBeat::new("quiet-1", vec!["jobs".to_owned()]);
        quiet.pid = 4343;
        assert!(c.beat_worker(&quiet).await.unwrap());
    });
    let v = ok_json(&url, &["workers"]);
    let langs: Vec<(String, String)> = v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["id"].as_str().unwrap().to_owned(),
                w["language"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut langs = langs;
    langs.sort();
    assert_eq!(
        langs,
        [
            ("py-1".to_owned(), "python".to_owned()),
            ("quiet-1".to_owned(), String::new())
        ]
    );
    let o = dueq(&url, &["workers"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let cols = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut lines = text.lines();
    let head = cols(lines.next().unwrap());
    assert_eq!(&head[..4], ["id", "kind", "language", "pid"], "{text}");
    let rows: Vec<Vec<String>> = lines.map(cols).collect();
    let row = |id: &str| {
        rows.iter()
            .find(|r| r[0] == id)
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert_eq!(&row("py-1")[1..4], ["worker", "python", "4242"], "{text}");
    assert_eq!(&row("quiet-1")[1..4], ["worker", "-", "4343"], "{text}");
}

/// `--json` of `get`, `dead list`, `schedule get` and `schedule list` copies a payload nested
/// deeper than a JSON value can be parsed (128 levels) as stored, as the HTTP API does.
#[test]
fn json_output_copies_a_deeply_nested_payload() {
    let server = RedisServer::start();
    let url = server.url();
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let o = dueq(
        &url,
        &["enqueue", "deep", "--payload", &deep, "--key", "d1"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = dueq(
        &url,
        &[
            "schedule",
            "set",
            "deep",
            "s",
            "--every",
            "1h",
            "--payload",
            &deep,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for args in [
        vec!["--json", "get", "deep", "--key", "d1"],
        vec!["--json", "schedule", "get", "deep", "s"],
        vec!["--json", "schedule", "list", "deep"],
    ] {
        let o = dueq(&url, &args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains(&format!("\"payload\":{deep}")),
            "{args:?}: {text}"
        );
    }
}
