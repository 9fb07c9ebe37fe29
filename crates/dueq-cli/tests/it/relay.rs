//! `dueq relay --postgres URL` against the machine's PostgreSQL (a database of its own, made
//! and dropped here) and a testkit redis-server. The row is written with plain SQL through
//! `psql`, as an application in another language would.

use std::process::{Command, Stdio};
use std::time::Duration;

use dueq_testkit::{RedisServer, wait_until};

use crate::{dueq, dueq_json};

fn base() -> String {
    std::env::var("DUEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

fn psql(db: &str, sql: &str) -> String {
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

struct Db(String);

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

#[test]
fn relay_carries_a_plain_sql_row_and_reconcile_once_restores_it_after_flushall() {
    let server = RedisServer::start();
    let url = server.url();
    let name = format!("dueq_cli_relay_{}", std::process::id());
    psql(
        "postgres",
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    );
    psql("postgres", &format!("CREATE DATABASE {name}"));
    let db = Db(name);
    let pg = format!("{}/{}", base(), db.0);

    let mut relay = Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args([
            "--redis",
            &url,
            "relay",
            "--postgres",
            &pg,
            "--poll-ms",
            "100",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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

    let _ = Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status();
    let status = relay.wait().unwrap();
    assert!(
        status.success(),
        "SIGTERM stops the relay cleanly: {status:?}"
    );
}
