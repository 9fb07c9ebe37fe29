//! The task commands round-trip through a real server.

use dueq_testkit::RedisServer;

use crate::{dueq, dueq_json};

#[test]
fn enqueue_get_reschedule_cancel_by_key() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(
        &url,
        &[
            "enqueue",
            "orders",
            "--payload",
            r#"{"order":42}"#,
            "--key",
            "order:42:cancel",
            "--delay-ms",
            "60000",
        ],
    );
    assert!(ok, "{e}");
    assert_eq!(e["created"], true);
    let id = e["id"].as_str().unwrap().to_owned();

    let (ok, again) = dueq_json(&url, &["enqueue", "orders", "--key", "order:42:cancel"]);
    assert!(ok);
    assert_eq!(again["created"], false);
    assert_eq!(again["id"], id.as_str());

    let (ok, t) = dueq_json(&url, &["get", "orders", "--key", "order:42:cancel"]);
    assert!(ok);
    assert_eq!(t["id"], id.as_str());
    assert_eq!(t["state"], "scheduled");
    assert_eq!(t["payload"]["order"], 42);

    // the text view names the group
    let (ok, g) = dueq_json(
        &url,
        &[
            "enqueue",
            "orders",
            "--key",
            "order:43:cancel",
            "--group",
            "shop-7",
        ],
    );
    assert!(ok, "{g}");
    let out = dueq(&url, &["get", "orders", "--key", "order:43:cancel"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("group:") && l.ends_with("shop-7")),
        "{text}"
    );

    let (ok, r) = dueq_json(&url, &["reschedule", "orders", &id, "--delay-ms", "1000"]);
    assert!(ok, "{r}");
    assert_eq!(r["outcome"], "rescheduled");

    let (ok, s) = dueq_json(&url, &["stats", "orders"]);
    assert!(ok);
    assert_eq!(s["scheduled"], 2);

    let (ok, c) = dueq_json(&url, &["cancel", "orders", "--key", "order:42:cancel"]);
    assert!(ok);
    assert_eq!(c["outcome"], "cancelled");
    let (ok, c) = dueq_json(&url, &["cancel", "orders", "--key", "order:42:cancel"]);
    assert!(!ok, "a second cancel must not report success");
    assert_eq!(c["outcome"], "not_found");
}

/// `--priority`, `--ttl-ms` and `--debounce-max-ms` reach the task (docs/OPTIONS.md).
#[test]
fn enqueue_task_options() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, e) = dueq_json(
        &url,
        &["enqueue", "o", "--payload", "nine", "--priority", "9"],
    );
    assert!(ok, "{e}");
    let (ok, e) = dueq_json(
        &url,
        &[
            "enqueue",
            "o",
            "--payload",
            "two",
            "--priority",
            "2",
            "--key",
            "k",
            "--ttl-ms",
            "60000",
        ],
    );
    assert!(ok, "{e}");
    let (ok, t) = dueq_json(&url, &["get", "o", "--key", "k"]);
    assert!(ok);
    assert_eq!(t["priority"], 2);
    assert!(t["expires_at_ms"].as_u64().is_some(), "{t}");
    let (ok, d) = dueq_json(
        &url,
        &[
            "enqueue",
            "o",
            "--key",
            "k",
            "--delay-ms",
            "600000",
            "--debounce-max-ms",
            "60000",
        ],
    );
    assert!(ok, "{d}");
    assert_eq!(d["outcome"], "replaced");
    let created = t["created_at_ms"].as_u64().unwrap();
    assert_eq!(d["due_at_ms"].as_u64().unwrap(), created + 60_000);
    let (ok, e) = dueq_json(&url, &["enqueue", "o", "--payload", "zero"]);
    assert!(ok, "{e}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = dueq::Client::connect(&url).await.unwrap();
        let q = c.queue("o").unwrap();
        let got: Vec<_> = q.claim(10, None).await.unwrap().tasks;
        let payloads: Vec<_> = got.iter().map(|t| t.payload.clone()).collect();
        assert_eq!(payloads, [b"zero".to_vec(), b"nine".to_vec()]);
    });
    for (args, needle) in [
        (vec!["enqueue", "o", "--priority", "10"], "0..=9"),
        (vec!["enqueue", "o", "--priority", "256"], "0..=9"),
        (vec!["enqueue", "o", "--debounce-max-ms", "5"], "--key"),
    ] {
        let out = dueq(&url, &args);
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bad_input_is_refused_with_a_clear_error() {
    let server = RedisServer::start();
    let url = server.url();
    for (args, needle) in [
        (vec!["enqueue", "bad{name}"], "queue name"),
        (vec!["enqueue", "q", "--delay-ms", "-5"], "-5"),
        (
            vec!["enqueue", "q", "--due-at-ms", "253402300800000"],
            "year 9999",
        ),
        (vec!["get", "q", "--key", ""], "business key"),
        (vec!["work", "q", "--", "./no-such-program"], "cannot run"),
        (
            vec!["work", "q", "--", "no-such-program-in-path"],
            "cannot run",
        ),
        // values the runtime cannot honour (DESIGN 2.17)
        (vec!["enqueue", "q", "--lease-ms", "999"], "lease_ms"),
        (
            vec!["enqueue", "q", "--delay-ms", "5000", "--ttl-ms", "4000"],
            "ttl_ms",
        ),
        (
            vec!["work", "q", "--lease-ms", "500", "--", "true"],
            "lease_ms",
        ),
        (
            vec!["work", "q", "--concurrency", "0", "--", "true"],
            "concurrency",
        ),
        (
            vec!["schedule", "set", "q", "s", "--every-ms", "500"],
            "every_ms",
        ),
        (
            vec!["settings", "set", "q", r#"{"lease_ms": 10}"#],
            "lease_ms",
        ),
        // header names are compared case-insensitively: one name given twice
        (
            vec![
                "enqueue", "q", "--header", "Tenant=1", "--header", "tenant=2",
            ],
            "headers: name \"tenant\" is given twice",
        ),
        (
            vec![
                "schedule",
                "set",
                "q",
                "s",
                "--every-ms",
                "1000",
                "--header",
                "A=1",
                "--header",
                "a=2",
            ],
            "headers: name \"a\" is given twice",
        ),
    ] {
        let out = dueq(&url, &args);
        assert!(!out.status.success(), "{args:?} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // nothing was written
    let mut c = server.conn();
    let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

/// A connect error names the server without the password of its URL.
#[test]
fn a_connect_error_hides_the_password() {
    let server = RedisServer::builder().tcp().start();
    let mut raw = server.conn();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg(&["reset", "on", ">S3cret-pw", "+ping"])
        .query::<()>(&mut raw)
        .unwrap();
    let url = server.url().replace("redis://", "redis://app:S3cret-pw@");
    let out = dueq(&url, &["stats", "q"]);
    assert!(!out.status.success(), "a user without +fcall was let in");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connecting to redis://app:***@"), "{err}");
    assert!(!err.contains("S3cret-pw"), "{err}");
}

#[test]
fn schedule_set_get_list_pause_resume_delete() {
    let server = RedisServer::start();
    let url = server.url();
    let set = [
        "schedule",
        "set",
        "orders",
        "nightly",
        "--cron",
        "0 30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--payload",
        r#"{"job":"report"}"#,
        "--priority",
        "2",
        "--group",
        "reports",
    ];
    let (ok, r) = dueq_json(&url, &set);
    assert!(ok, "{r}");
    assert_eq!(r["outcome"], "created");
    let (ok, r) = dueq_json(&url, &set);
    assert!(ok);
    assert_eq!(r["outcome"], "unchanged");
    let (ok, g) = dueq_json(&url, &["schedule", "get", "orders", "nightly"]);
    assert!(ok, "{g}");
    assert_eq!(g["tz"], "Europe/Berlin");
    assert_eq!(g["payload"]["job"], "report");
    assert_eq!(
        (g["priority"].as_u64(), g["group"].as_str()),
        (Some(2), Some("reports"))
    );
    assert_eq!(g["upcoming_ms"].as_array().unwrap().len(), 5);
    let (ok, p) = dueq_json(&url, &["schedule", "pause", "orders", "nightly"]);
    assert!(ok);
    assert_eq!(p["paused"], true);
    let (ok, p) = dueq_json(&url, &["schedule", "resume", "orders", "nightly"]);
    assert!(ok);
    assert_eq!(p["paused"], false);
    let (ok, l) = dueq_json(&url, &["schedule", "list", "orders"]);
    assert_eq!(
        (l["total"].as_u64(), l["next"].is_null()),
        (Some(1), true),
        "{l}"
    );
    assert!(ok);
    assert_eq!(l["schedules"][0]["name"], "nightly");
    // C34 from the shell: refused, naming the field, nothing stored
    let out = dueq(
        &url,
        &["schedule", "set", "orders", "bad", "--every-ms", "0"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("every_ms"));
    let (ok, d) = dueq_json(&url, &["schedule", "delete", "orders", "nightly"]);
    assert!(ok);
    assert_eq!(d["deleted"], true);
    let (ok, l) = dueq_json(&url, &["schedule", "list", "orders"]);
    assert!(ok);
    assert_eq!(l["schedules"], serde_json::json!([]));
}

#[test]
fn settings_get_set_and_groups_from_the_shell() {
    let server = RedisServer::start();
    let url = server.url();
    // a queue nobody used has no settings to read (HTTP's 404); setting creates it
    let o = dueq(&url, &["settings", "get", "pay"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(r#"no queue "pay""#));
    let (ok, s) = dueq_json(
        &url,
        &[
            "settings",
            "set",
            "pay",
            r#"{"concurrency": 1, "rate_limit": {"max": 5, "per_ms": 1000}}"#,
        ],
    );
    assert!(ok, "{s}");
    assert_eq!(s["concurrency"], 1);
    assert_eq!(s["rate_limit"]["per_ms"], 1000);
    // nonsense names the field and changes nothing
    let o = dueq(
        &url,
        &[
            "settings",
            "set",
            "pay",
            r#"{"rate_limit": {"max": 5, "per_ms": 0}}"#,
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rate_limit.per_ms"), "{err}");
    let o = dueq(&url, &["settings", "set", "pay", r#"{"concurency": 2}"#]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("concurency"));
    let (_, s) = dueq_json(&url, &["settings", "get", "pay"]);
    assert_eq!(s["concurrency"], 1);
    assert_eq!(s["rate_limit"]["max"], 5);
    // a grouped task; at the concurrency limit the queue shows as throttled
    for _ in 0..2 {
        let (ok, e) = dueq_json(&url, &["enqueue", "pay", "--group", "merchant:9"]);
        assert!(ok, "{e}");
    }
    let (ok, e) = dueq_json(&url, &["enqueue", "pay", "--key", "k"]);
    assert!(ok, "{e}");
    let id = e["id"].as_str().unwrap().to_owned();
    let (_, t) = dueq_json(&url, &["get", "pay", &id]);
    assert_eq!(t["group"], serde_json::Value::Null);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = dueq::Client::connect(&url).await.unwrap();
        let q = c.queue("pay").unwrap();
        assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 1);
        assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    });
    let (_, st) = dueq_json(&url, &["stats", "pay"]);
    assert_eq!(st["throttled"], "concurrency", "{st}");
    let o = dueq(&url, &["stats", "pay"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("1/1") && text.contains("throttled (concurrency)"),
        "{text}"
    );
}

/// `dueq settings set` with a limit or backoff that is not an object names the field (as
/// `PATCH /v1/queues/{q}/settings` does) and writes nothing.
#[test]
fn settings_set_with_a_non_object_limit_names_the_field() {
    let server = RedisServer::start();
    let url = server.url();
    for (patch, field) in [
        (r#"{"rate_limit": "7/1000"}"#, "rate_limit"),
        (r#"{"group_rate_limit": 7}"#, "group_rate_limit"),
        (r#"{"backoff": true}"#, "backoff"),
        (r#"{"rate_limit": {}}"#, "rate_limit"),
        (
            r#"{"backoff": {"base_ms": null, "factor": 2, "max_ms": 10}}"#,
            "backoff.base_ms",
        ),
        (
            r#"{"concurrency": 1, "rate_limit": {"max": 1}}"#,
            "rate_limit",
        ),
    ] {
        let o = dueq(&url, &["settings", "set", "pay", patch]);
        assert!(!o.status.success(), "{patch}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(field), "{patch}: {err}");
    }
    // nothing written: not even the queue
    let o = dueq(&url, &["settings", "get", "pay"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains(r#"no queue "pay""#));
}

/// A task that `dueq work` failed until its attempts ran out is found by key (DESIGN 2.18),
/// and the DLQ shows the attempts it made against the queue's `max_attempts` (a task
/// enqueued without its own stores 0, "the queue's setting").
#[test]
fn a_task_dead_after_dueq_work_is_found_by_key_with_its_attempts() {
    let server = RedisServer::start();
    let url = server.url();
    let (ok, s) = dueq_json(
        &url,
        &[
            "settings",
            "set",
            "q",
            r#"{"max_attempts": 2, "backoff": {"base_ms": 10, "factor": 1.0, "max_ms": 10}}"#,
        ],
    );
    assert!(ok, "{s}");
    let (ok, e) = dueq_json(&url, &["enqueue", "q", "--key", "order:44:cancel"]);
    assert!(ok, "{e}");
    let mut w = std::process::Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", &url, "work", "q", "--", "sh", "-c"])
        .arg("echo card declined >&2; exit 3")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    dueq_testkit::wait_until(std::time::Duration::from_secs(20), "the task died", || {
        dueq_json(&url, &["stats", "q"]).1["dead"] == 1
    });
    w.kill().unwrap();
    w.wait().unwrap();
    let (ok, t) = dueq_json(&url, &["get", "q", "--key", "order:44:cancel"]);
    assert!(ok, "{t}");
    assert_eq!(t["state"], "dead", "{t}");
    assert_eq!(
        (&t["attempt"], &t["max_attempts"]),
        (&2.into(), &2.into()),
        "{t}"
    );
    assert!(
        t["last_error"].as_str().unwrap().contains("card declined"),
        "{t}"
    );
    let (ok, d) = dueq_json(&url, &["dead", "list", "q"]);
    assert!(ok, "{d}");
    let task = &d["tasks"][0];
    assert_eq!(
        (&task["attempt"], &task["max_attempts"]),
        (&2.into(), &2.into()),
        "{d}"
    );
}
