//! The PostgreSQL outbox from the command line: `dueq relay --postgres URL` and `dueq serve
//! --postgres URL`, against the machine's PostgreSQL (a database of its own per test, made
//! and dropped here) and a testkit redis-server. Rows are written with plain SQL through
//! `psql`, as an application in another language would.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq_testkit::{RedisServer, wait_until};

use crate::{dueq, dueq_json};

pub(crate) fn base() -> String {
    std::env::var("DUEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

pub(crate) fn psql(db: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .arg(format!("{}/{db}", base()))
        .args(["-v", "ON_ERROR_STOP=1", "-Atc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs an SQL file of `crates/dueq-outbox/examples/sql` with psql, `order` set.
fn psql_example(db: &str, file: &str, order: i64) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../dueq-outbox/examples/sql/");
    let out = Command::new("psql")
        .arg(format!("{}/{db}", base()))
        .args([
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            &format!("order={order}"),
            "-f",
        ])
        .arg(format!("{path}{file}"))
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) struct Db(pub(crate) String);

impl Db {
    /// A fresh database named after `tag` and the process (dropped with the value).
    pub(crate) fn create(tag: &str) -> Self {
        let name = format!("dueq_cli_{tag}_{}", std::process::id());
        psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
        psql("postgres", &format!("CREATE DATABASE {name}"));
        Self(name)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("{}/{}", base(), self.0)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .arg(format!("{}/postgres", base()))
            .args([
                "-Atc",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0),
            ])
            .output();
    }
}

/// A `dueq relay` process, killed when dropped (whatever path the test takes), its stderr
/// collected by a thread (so the pipe never fills).
struct RelayProc {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl RelayProc {
    fn start(redis: &str, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dueq"))
            .env_remove("DUEQ_LOG")
            .args(["--redis", redis, "relay"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log2.lock().unwrap().push(line);
            }
        });
        Self { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM, then its exit status (panics if it does not exit within 15 s).
    fn sigterm(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "dueq relay ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl RelayProc {
    /// `dueq relay --postgres` on `db` (fallback poll 100 ms), once it has migrated the table.
    fn migrated(redis: &str, db: &Db) -> Self {
        let relay = Self::start(redis, &["--postgres", &db.url(), "--poll-ms", "100"]);
        wait_until(
            Duration::from_secs(20),
            "the relay migrated the table",
            || {
                psql(
                    &db.0,
                    "SELECT count(*) FROM pg_tables WHERE tablename = 'dueq_outbox'",
                ) == "1"
            },
        );
        relay
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn relay_carries_a_plain_sql_row_and_reconcile_once_restores_it_after_flushall() {
    let server = RedisServer::start();
    let url = server.url();
    let db = Db::create("relay");
    let pg = db.url();

    let mut relay = RelayProc::migrated(&url, &db);
    psql(
        &db.0,
        "BEGIN; INSERT INTO dueq_outbox (queue, key, payload, due_at_ms) VALUES ('orders', \
         'order:7:cancel', convert_to('{\"order\":7}', 'UTF8'), dueq_outbox_now_ms() + 600000); \
         COMMIT;",
    );
    wait_until(Duration::from_secs(10), "the row is in Redis", || {
        dueq(&url, &["get", "orders", "--key", "order:7:cancel"])
            .status
            .success()
    });
    let (_, t) = dueq_json(&url, &["get", "orders", "--key", "order:7:cancel"]);
    assert_eq!(t["payload"]["order"], 7);
    let due = psql(&db.0, "SELECT due_at_ms FROM dueq_outbox");
    assert_eq!(t["due_at_ms"].to_string(), due);
    assert_eq!(psql(&db.0, "SELECT state FROM dueq_outbox"), "relayed");

    let mut raw = server.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut raw).unwrap();
    let (ok, r) = dueq_json(&url, &["relay", "--postgres", &pg, "--reconcile-once"]);
    assert!(ok, "{r}");
    assert_eq!(r["restored"], 1, "{r}");
    let (_, t) = dueq_json(&url, &["get", "orders", "--key", "order:7:cancel"]);
    assert_eq!(
        t["due_at_ms"].to_string(),
        due,
        "restored with its original due time"
    );

    // a task enqueued behind the outbox's back is removed only where the queue is owned
    let out = dueq(
        &url,
        &[
            "enqueue",
            "orders",
            "--key",
            "stray",
            "--delay-ms",
            "600000",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let (ok, r) = dueq_json(&url, &["relay", "--postgres", &pg, "--reconcile-once"]);
    assert!(ok, "{r}");
    assert_eq!(r["orphans_removed"], 0, "{r}");
    let (ok, r) = dueq_json(
        &url,
        &[
            "relay",
            "--postgres",
            &pg,
            "--reconcile-once",
            "--owned-queue",
            "orders",
        ],
    );
    assert!(ok, "{r}");
    assert_eq!(
        (&r["swept"], &r["orphans_removed"]),
        (&2.into(), &1.into()),
        "{r}"
    );
    assert!(
        !dueq(&url, &["get", "orders", "--key", "stray"])
            .status
            .success()
    );
    assert!(
        dueq(&url, &["get", "orders", "--key", "order:7:cancel"])
            .status
            .success()
    );

    let status = relay.sigterm();
    assert!(
        status.success(),
        "SIGTERM stops the relay cleanly: {status:?}\n{}",
        relay.log()
    );
}

/// The plain-SQL order flow of `crates/dueq-outbox/examples/sql`, as another language would
/// send it: the committed order's timer reaches Redis, the rolled-back one never exists, and
/// the payment's transaction cancels the timer in Redis through the relay.
#[test]
fn the_plain_sql_order_flow_example_works() {
    let server = RedisServer::start();
    let url = server.url();
    let db = Db::create("sqlflow");
    let mut relay = RelayProc::migrated(&url, &db);
    psql_example(&db.0, "order_created.sql", 43);
    let key = "order:43:cancel";
    wait_until(Duration::from_secs(10), "the timer is in Redis", || {
        dueq(&url, &["get", "orders", "--key", key])
            .status
            .success()
    });
    let (_, t) = dueq_json(&url, &["get", "orders", "--key", key]);
    assert_eq!(t["payload"]["order"], 43);
    assert_eq!(
        psql(&db.0, "SELECT count(*) FROM orders WHERE id = 44"),
        "0"
    );
    assert_eq!(psql(&db.0, "SELECT count(*) FROM dueq_outbox"), "1");
    assert!(
        !dueq(&url, &["get", "orders", "--key", "order:44:cancel"])
            .status
            .success()
    );

    psql_example(&db.0, "order_paid.sql", 43);
    wait_until(
        Duration::from_secs(10),
        "the relay cancelled the timer",
        || psql(&db.0, "SELECT state FROM dueq_outbox") == "cancelled",
    );
    assert!(
        !dueq(&url, &["get", "orders", "--key", key])
            .status
            .success()
    );
    assert_eq!(psql(&db.0, "SELECT paid FROM orders WHERE id = 43"), "t");
    assert!(relay.sigterm().success(), "{}", relay.log());
}

/// `dueq relay` started while its database is unusable keeps running, logging its retries
/// (no crash loop), and relays once the database exists; SIGTERM still stops it cleanly.
#[test]
fn relay_waits_for_a_database_that_is_not_there_yet() {
    let server = RedisServer::start();
    let url = server.url();
    let name = format!("dueq_cli_late_{}", std::process::id());
    psql(
        "postgres",
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    );
    let pg = format!("{}/{name}", base());
    let mut relay = RelayProc::start(&url, &["--postgres", &pg, "--poll-ms", "100"]);
    wait_until(Duration::from_secs(20), "the relay logs its retry", || {
        relay.log().contains("migrating the table failed")
    });
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay exited: {}",
        relay.log()
    );
    psql("postgres", &format!("CREATE DATABASE {name}"));
    let db = Db(name);
    wait_until(
        Duration::from_secs(30),
        "the relay migrated the table",
        || {
            psql(
                &db.0,
                "SELECT count(*) FROM pg_tables WHERE tablename = 'dueq_outbox'",
            ) == "1"
        },
    );
    psql(
        &db.0,
        "INSERT INTO dueq_outbox (queue, key, payload, due_at_ms) \
         VALUES ('orders', 'late', '\\x', dueq_outbox_now_ms() + 600000)",
    );
    wait_until(Duration::from_secs(10), "the row is in Redis", || {
        dueq(&url, &["get", "orders", "--key", "late"])
            .status
            .success()
    });
    let status = relay.sigterm();
    assert!(status.success(), "{status:?}\n{}", relay.log());
}

/// `dueq serve --postgres URL`: the relay runs inside the server. A plain-SQL row reaches
/// Redis (seen over HTTP by key), the outbox metrics are on the server's `/metrics`, and
/// `/readyz` checks the database: 200 with `checks.postgres` true for a good URL, 503 naming
/// postgres for a database that does not exist and for a closed port (Redis still ready), while
/// those servers keep running and log their retries. SIGTERM stops the good one cleanly.
#[test]
fn serve_with_postgres_relays_rows_and_reports_the_database_in_readiness() {
    use crate::serve::{http, serve, sigterm_and_wait};

    let redis = RedisServer::start();
    let url = redis.url();
    let db = Db::create("serve");
    let mut good = serve(
        &["--redis", &url, "--postgres", &db.url(), "--poll-ms", "100"],
        &[],
    );
    wait_until(Duration::from_secs(20), "/readyz is 200", || {
        http(&good.addr, "GET", "/readyz", None, None).0 == 200
    });
    let (_, body) = http(&good.addr, "GET", "/readyz", None, None);
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["checks"]["postgres"], true, "{ready}");
    wait_until(
        Duration::from_secs(20),
        "the server's relay migrated the table",
        || {
            psql(
                &db.0,
                "SELECT count(*) FROM pg_tables WHERE tablename = 'dueq_outbox'",
            ) == "1"
        },
    );
    psql(
        &db.0,
        "BEGIN; INSERT INTO dueq_outbox (queue, key, payload, due_at_ms) VALUES ('orders', \
         'order:9:cancel', convert_to('{\"order\":9}', 'UTF8'), dueq_outbox_now_ms() + 600000); \
         COMMIT;",
    );
    let path = "/v1/queues/orders/keys/order%3A9%3Acancel";
    wait_until(Duration::from_secs(10), "the row is in Redis", || {
        http(&good.addr, "GET", path, None, None).0 == 200
    });
    let (_, body) = http(&good.addr, "GET", path, None, None);
    let task: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(task["payload"]["order"], 9, "{task}");
    assert_eq!(
        task["due_at_ms"].to_string(),
        psql(&db.0, "SELECT due_at_ms FROM dueq_outbox")
    );
    assert_eq!(psql(&db.0, "SELECT state FROM dueq_outbox"), "relayed");
    let (status, metrics) = http(&good.addr, "GET", "/metrics", None, None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("dueq_outbox_relayed_total{queue=\"orders\",op=\"enqueue\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("dueq_outbox_pending_rows"), "{metrics}");

    // a database that does not exist, and a port nobody listens on
    let missing = format!("{}/dueq_cli_no_such_db_{}", base(), std::process::id());
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    };
    for pg in [missing, closed] {
        let bad = serve(&["--redis", &url, "--postgres", &pg], &[]);
        let (status, body) = http(&bad.addr, "GET", "/readyz", None, None);
        assert_eq!(status, 503, "{pg}: {body}");
        let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(ready["ready"], false, "{ready}");
        assert_eq!(ready["redis"], true, "{ready}");
        assert_eq!(ready["checks"]["postgres"], false, "{ready}");
        assert!(
            ready["error"].as_str().unwrap().starts_with("postgres: "),
            "{ready}"
        );
        // the API works without the database
        assert_eq!(http(&bad.addr, "GET", path, None, None).0, 200);
        wait_until(Duration::from_secs(20), "the relay logs its retry", || {
            bad.log().contains("migrating the table failed")
        });
        // dropping `bad` stops it (SIGTERM, then SIGKILL)
    }
    // the good one is still ready, and stops cleanly
    assert_eq!(http(&good.addr, "GET", "/readyz", None, None).0, 200);
    sigterm_and_wait(&mut good);
}

/// Bad outbox flags are refused before anything starts, naming the flag.
#[test]
fn serve_refuses_bad_outbox_flags() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
            .env_remove("DUEQ_POSTGRES_URL")
            .args([
                "--redis",
                "redis://127.0.0.1:1",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--reconcile-interval-ms", "5000"]);
    assert!(err.contains("--postgres"), "{err}");
    let err = run(&["--postgres", "not a url"]);
    assert!(err.contains("--postgres"), "{err}");
    let pg = format!("{}/postgres", base());
    let err = run(&["--postgres", &pg, "--reconcile-interval-ms", "10"]);
    assert!(err.contains("--reconcile-interval-ms"), "{err}");
    let err = run(&["--postgres", &pg, "--batch", "0"]);
    assert!(err.contains("--batch"), "{err}");
    let err = run(&["--postgres", &pg, "--owned-queue", "no spaces"]);
    assert!(err.contains("--owned-queue"), "{err}");
    let err = run(&["--owned-queue", "orders"]);
    assert!(err.contains("--postgres"), "{err}");
}

/// `dueq replay --postgres URL --flush-midway` on a slice of the trace (65 orders, as
/// `replay_window_matches_the_csv_exactly`): every enqueue and cancel goes through the outbox
/// in a transaction, Redis is wiped halfway, and the reconciler restores what it lost: still
/// 0 early runs, 0 lost tasks, 0 unexplained mismatches, every expected task run, and the
/// replay's rows deleted at the end.
#[test]
fn replay_through_the_outbox_survives_a_flushall_midway() {
    let _alone = crate::replay_alone();
    let db = Db::create("replay");
    let stdout = crate::dueq_embedded(&[
        "replay",
        "--json",
        "--trace",
        crate::TRACE,
        "--from",
        "2018-07-10",
        "--to",
        "2018-07-12",
        "--speedup",
        "1800",
        "--max-gap-ms",
        "100",
        "--postgres",
        &db.url(),
        "--flush-midway",
    ]);
    let r: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(r["orders"], 65, "{r}");
    for zero in ["early_runs", "lost_tasks", "unexplained_mismatches"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    // what must run ran (a cancel that lost a race with the relay is an explained mismatch)
    let explained = r["explained_mismatches"].as_u64().unwrap();
    for kind in ["auto-confirm", "review-reminder"] {
        assert_eq!(
            r["expected_runs"][kind], r["actual_runs"][kind],
            "{kind}: {r}"
        );
    }
    let cu = |f: &str| r[f]["cancel-unpaid"].as_u64().unwrap();
    assert!(
        cu("expected_runs").abs_diff(cu("actual_runs")) <= explained,
        "{r}"
    );
    let o = &r["outbox"];
    assert_eq!(o["rows"], 186, "{r}");
    assert!(o["flushall_at_ms"].as_u64().is_some(), "{r}");
    // the pass started right after the wipe restores most; the relay's own passes (every
    // second) take the rows it found locked, so only the total is bound to be positive
    assert!(
        o["restored_total"].as_u64().unwrap() > 0,
        "the wipe lost scheduled tasks that the reconciler restored: {r}"
    );
    assert!(
        o["restored_total"].as_u64().unwrap() >= o["restored_first_pass"].as_u64().unwrap(),
        "{r}"
    );
    assert_eq!(psql(&db.0, "SELECT count(*) FROM dueq_outbox"), "0");
    assert_eq!(
        psql(&db.0, "SELECT count(*) FROM dueq_outbox_tombstones"),
        "0"
    );
}

#[test]
fn replay_refuses_flush_midway_without_postgres() {
    let out = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["replay", "--trace", crate::TRACE, "--flush-midway"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--postgres"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
