//! `dueq serve`: the HTTP API on a real port, with `--redis` and with the embedded default;
//! tokens from the environment; SIGTERM stops it gracefully.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dueq_testkit::RedisServer;

struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `dueq serve --listen 127.0.0.1:0 ARGS` and waits for its "listening on" line.
fn serve(args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    cmd.env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_TOKENS")
        .env_remove("DUEQ_LISTEN")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(a) = line.split("listening on http://").nth(1) {
                let _ = tx.send(a.trim().to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("dueq serve did not report its address");
    Served { child, addr }
}

/// One HTTP/1.1 request; returns (status, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or("");
    req.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

fn sigterm_and_wait(s: &mut Served) {
    let ok = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            assert!(status.success(), "exit {status}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "dueq serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_with_redis_and_tokens_from_env() {
    let redis = RedisServer::start();
    let mut s = serve(&["--redis", &redis.url()], &[("DUEQ_TOKENS", "t1, t2")]);
    assert_eq!(http(&s.addr, "GET", "/healthz", None, None).0, 200);
    let body = r#"{"payload": {"order": 7}, "key": "order:7:cancel", "delay_ms": 60000}"#;
    assert_eq!(
        http(&s.addr, "POST", "/v1/queues/orders/tasks", Some(body), None).0,
        401
    );
    let (status, out) = http(
        &s.addr,
        "POST",
        "/v1/queues/orders/tasks",
        Some(body),
        Some("t2"),
    );
    assert_eq!(status, 201, "{out}");
    let (status, out) = http(
        &s.addr,
        "GET",
        "/v1/queues/orders/keys/order%3A7%3Acancel",
        None,
        Some("t1"),
    );
    assert_eq!(status, 200, "{out}");
    assert!(out.contains(r#""payload":{"order": 7}"#), "{out}");
    sigterm_and_wait(&mut s);
}

#[test]
fn serve_starts_an_embedded_redis_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut s = serve(&["--data-dir", data.to_str().unwrap()], &[]);
    let (status, out) = http(&s.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 200, "{out}");
    let (status, _) = http(&s.addr, "POST", "/v1/queues/q/tasks", Some("{}"), None);
    assert_eq!(status, 201);
    sigterm_and_wait(&mut s);
    // AOF on, in the data directory
    assert!(
        std::fs::read_dir(&data).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("append")),
        "no AOF in {}",
        data.display()
    );
}
