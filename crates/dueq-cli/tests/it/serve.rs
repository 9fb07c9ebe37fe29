//! `dueq serve`: the HTTP API on a real port, with `--redis` and with the embedded default;
//! tokens from the environment; SIGTERM stops it gracefully; one `dueq` per data directory,
//! and a redis-server left behind by a killed one is stopped by the next.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq_testkit::RedisServer;

pub(crate) struct Served {
    child: Child,
    pub(crate) addr: String,
    /// Every stderr line so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: the process gets no chance to hand anything back.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    /// SIGTERM first, so that an embedded redis-server is stopped too; SIGKILL if it hangs.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = wait_exit(&mut self.child, Duration::from_secs(15));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` to exit, at most `timeout`.
fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    cmd.env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_DATA_DIR")
        .env_remove("DUEQ_TOKENS")
        .env_remove("DUEQ_LISTEN")
        .env_remove("DUEQ_LOG")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Starts `dueq serve --listen 127.0.0.1:0 ARGS` and waits for its "listening on" line.
pub(crate) fn serve(args: &[&str], env: &[(&str, &str)]) -> Served {
    serve_until(args, env, "listening on http://")
}

/// Starts `dueq serve` and returns once its stderr has a line with `marker` followed by the
/// address (`"bound http://"`: the socket answers probes, the API not yet).
pub(crate) fn serve_until(args: &[&str], env: &[(&str, &str)], marker: &'static str) -> Served {
    watch(serve_command(args, env).spawn().unwrap(), marker)
}

/// `dueq serve --listen 127.0.0.1:0 ARGS` started in directory `dir` (its default data
/// directory is then `dir/dueq-data`).
pub(crate) fn serve_in(dir: &Path, args: &[&str]) -> Served {
    let mut cmd = serve_command(args, &[]);
    cmd.current_dir(dir);
    watch(cmd.spawn().unwrap(), "listening on http://")
}

/// Collects the stderr of `child` (a `dueq serve`) and waits for its line with `marker`.
fn watch(mut child: Child, marker: &'static str) -> Served {
    let stderr = child.stderr.take().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let log2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let addr = line
                .split(marker)
                .nth(1)
                .and_then(|a| a.split(';').next())
                .map(|a| a.trim().to_owned());
            log2.lock().unwrap().push(line);
            if let Some(a) = addr {
                let _ = tx.send(a);
            }
        }
    });
    let mut served = Served {
        child,
        addr: String::new(),
        log,
    };
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(a) => served.addr = a,
        Err(_) => panic!(
            "dueq serve did not report its address; stderr:\n{}",
            served.log()
        ),
    }
    served
}

/// One HTTP/1.1 request; returns (status, body).
pub(crate) fn http(
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

pub(crate) fn sigterm_and_wait(s: &mut Served) {
    let ok = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = wait_exit(&mut s.child, Duration::from_secs(15))
        .expect("dueq serve did not stop on SIGTERM");
    assert!(status.success(), "exit {status}");
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

/// `process_id` of the redis-server answering on `socket`.
fn redis_pid(socket: &Path) -> u32 {
    let client = redis::Client::open(format!("redis+unix://{}", socket.display())).unwrap();
    let mut conn = client.get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `/proc/PID/stat` fields after the command name: state first, start time 20th.
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// A redis-server this test left orphaned (its `dueq` got SIGKILL): SIGKILLed on drop if the
/// very same process (pid and start time) still runs.
struct Orphan {
    pid: u32,
    started: String,
}

impl Orphan {
    fn new(pid: u32) -> Self {
        let started = proc_stat(pid).expect("redis-server in /proc")[19].clone();
        Self { pid, started }
    }

    fn running(&self) -> bool {
        proc_stat(self.pid).is_some_and(|f| f[19] == self.started && f[0] != "Z" && f[0] != "X")
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        if self.running() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}

#[test]
fn serve_refuses_a_data_dir_another_dueq_serve_uses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let mut first = serve(&["--data-dir", d], &[]);
    assert_eq!(http(&first.addr, "GET", "/readyz", None, None).0, 200);
    let body = r#"{"payload": {"order": 8}, "key": "order:8:cancel", "delay_ms": 3600000}"#;
    let (status, out) = http(
        &first.addr,
        "POST",
        "/v1/queues/orders/tasks",
        Some(body),
        None,
    );
    assert_eq!(status, 201, "{out}");

    let started = Instant::now();
    let mut second = Served {
        child: serve_command(&["--data-dir", d], &[]).spawn().unwrap(),
        addr: String::new(),
        log: Arc::default(),
    };
    let status = wait_exit(&mut second.child, Duration::from_secs(10))
        .expect("a second dueq serve on the same data directory kept running");
    let took = started.elapsed();
    let mut err = String::new();
    second
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "{err}");
    let canonical = std::fs::canonicalize(&data).unwrap();
    assert!(err.contains(canonical.to_str().unwrap()), "{err}");
    assert!(err.contains("another dueq process"), "{err}");
    assert!(err.contains(&format!("pid {}", first.child.id())), "{err}");
    eprintln!("second dueq serve refused in {took:?}");

    // the first one never noticed
    let (status, out) = http(&first.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 200, "{out}");
    let (status, out) = http(
        &first.addr,
        "GET",
        "/v1/queues/orders/keys/order%3A8%3Acancel",
        None,
        None,
    );
    assert_eq!(status, 200, "{out}");
    sigterm_and_wait(&mut first);

    // a clean stop frees the directory, and the task is still there
    let mut third = serve(&["--data-dir", d], &[]);
    assert_eq!(http(&third.addr, "GET", "/readyz", None, None).0, 200);
    let (status, out) = http(
        &third.addr,
        "GET",
        "/v1/queues/orders/keys/order%3A8%3Acancel",
        None,
        None,
    );
    assert_eq!(status, 200, "{out}");
    assert!(!third.log().contains("left running"), "{}", third.log());
    sigterm_and_wait(&mut third);
}

#[test]
fn serve_stops_the_redis_server_a_killed_dueq_serve_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let mut first = serve(&["--data-dir", d], &[]);
    let body = r#"{"payload": {"order": 9}, "key": "order:9:cancel", "delay_ms": 3600000}"#;
    let (status, out) = http(
        &first.addr,
        "POST",
        "/v1/queues/orders/tasks",
        Some(body),
        None,
    );
    assert_eq!(status, 201, "{out}");
    let socket = std::fs::canonicalize(&data).unwrap().join("redis.sock");
    let orphan = Orphan::new(redis_pid(&socket));

    first.child.kill().unwrap();
    first.child.wait().unwrap();
    // its redis-server outlives it, still holding the socket and the AOF
    assert!(orphan.running());
    assert_eq!(redis_pid(&socket), orphan.pid);
    // a command without --redis does not follow the URL file the killed one left
    let out = cli_in(dir.path(), &[("DUEQ_DATA_DIR", d)], &["stats", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no longer running"), "{err}");
    assert!(!err.contains("redis+unix"), "{err}");

    let started = Instant::now();
    let mut second = serve(&["--data-dir", d], &[]);
    let took = started.elapsed();
    let log = second.log();
    assert!(!orphan.running(), "the orphan still runs; stderr:\n{log}");
    assert!(log.contains("left running"), "{log}");
    assert!(log.contains(&orphan.pid.to_string()), "{log}");
    assert_ne!(redis_pid(&socket), orphan.pid);
    eprintln!("orphan stopped and new dueq serve up in {took:?}");

    let (status, out) = http(&second.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 200, "{out}");
    let (status, out) = http(
        &second.addr,
        "GET",
        "/v1/queues/orders/keys/order%3A9%3Acancel",
        None,
        None,
    );
    assert_eq!(status, 200, "{out}");
    assert!(out.contains(r#""payload":{"order": 9}"#), "{out}");
    sigterm_and_wait(&mut second);
}

#[test]
fn serve_refuses_a_tokens_variable_with_no_token() {
    let redis = RedisServer::start();
    for value in ["", ",", " , "] {
        let mut child = serve_command(&["--redis", &redis.url()], &[("DUEQ_TOKENS", value)])
            .spawn()
            .unwrap();
        let status = wait_exit(&mut child, Duration::from_secs(30));
        let Some(status) = status else {
            let _ = child.kill();
            panic!("DUEQ_TOKENS={value:?}: serve kept running with an open API");
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "DUEQ_TOKENS={value:?}: {err}");
        assert!(
            err.contains("holds no token"),
            "DUEQ_TOKENS={value:?}: {err}"
        );
    }
}

/// `dueq serve` is a live worker of its own (kind `server`) in `GET /v1/workers` and `dueq
/// workers` while it runs, gone the moment SIGTERM has stopped it; a bad `--heartbeat-ms` is
/// refused before anything starts.
#[test]
fn serve_lists_itself_among_the_live_workers() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut s = serve(&["--redis", &url, "--heartbeat-ms", "200"], &[]);
    let pid = s.child.id();
    dueq_testkit::wait_until(Duration::from_secs(10), "serve is listed", || {
        let (status, body) = http(&s.addr, "GET", "/v1/workers", None, None);
        status == 200 && body.contains(&format!(r#""pid":{pid}"#))
    });
    let (_, body) = http(&s.addr, "GET", "/v1/workers", None, None);
    assert!(body.contains(r#""kind":"server""#), "{body}");
    let (ok, v) = crate::dueq_json(&url, &["workers"]);
    assert!(ok);
    assert_eq!(v["workers"][0]["pid"], pid, "{v}");
    sigterm_and_wait(&mut s);
    let (ok, v) = crate::dueq_json(&url, &["workers"]);
    assert!(ok);
    assert_eq!(v, serde_json::json!({"workers": []}));

    let mut child = serve_command(&["--redis", &url, "--heartbeat-ms", "0"], &[])
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30)).expect("serve kept running");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(
        err.contains("--heartbeat-ms") && err.contains("out of range"),
        "{err}"
    );
}

/// The embedded supervisor: `kill -9` of the embedded redis-server under a running
/// `dueq serve`. The supervisor starts a new one on the same socket and data (AOF), `/readyz`
/// is 200 again and the task written before the crash is still there, without a restart of
/// `dueq serve`.
#[test]
fn serve_restarts_its_embedded_redis_after_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut s = serve(&["--data-dir", data.to_str().unwrap()], &[]);
    let body = r#"{"payload": 1, "key": "kept", "delay_ms": 3600000}"#;
    let (status, out) = http(&s.addr, "POST", "/v1/queues/q/tasks", Some(body), None);
    assert_eq!(status, 201, "{out}");
    let socket = std::fs::canonicalize(&data).unwrap().join("redis.sock");
    let first = redis_pid(&socket);
    // The embedded server writes its AOF with `appendfsync everysec`: a write can be lost to a
    // kill -9 within about a second (two when an fsync is slow, after which Redis stalls
    // writes). The test is about the restart, so let the write reach the disk first.
    std::thread::sleep(Duration::from_millis(2_500));
    let killed = Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    dueq_testkit::wait_until(
        Duration::from_secs(20),
        "a new embedded redis-server answers",
        || {
            let client = redis::Client::open(format!("redis+unix://{}", socket.display())).unwrap();
            let Ok(mut conn) = client.get_connection() else {
                return false;
            };
            let info: redis::RedisResult<String> =
                redis::cmd("INFO").arg("server").query(&mut conn);
            info.is_ok_and(|i| !i.contains(&format!("process_id:{first}\r")))
        },
    );
    dueq_testkit::wait_until(Duration::from_secs(10), "/readyz is 200 again", || {
        http(&s.addr, "GET", "/readyz", None, None).0 == 200
    });
    let (status, out) = http(&s.addr, "GET", "/v1/queues/q/keys/kept", None, None);
    assert_eq!(status, 200, "{out}");
    assert!(s.log().contains("restarting it"), "{}", s.log());
    sigterm_and_wait(&mut s);
}

/// Sentinel in the CLI and the server: `dueq serve --redis redis+sentinel://...`
/// answers, and after `SENTINEL FAILOVER` its enqueues land on the new primary without a
/// restart (the first tries may answer 503 while the primary changes, or land on the old
/// primary and be lost with it); a task written before with `replicas: 1` survives.
#[test]
fn serve_follows_a_sentinel_failover() {
    let cluster = dueq_testkit::RedisSentinels::start(1, 1);
    let url = cluster.url();
    let mut s = serve(&["--redis", &url], &[]);
    let (status, out) = http(&s.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 200, "{out}");
    let (status, out) = http(
        &s.addr,
        "POST",
        "/v1/queues/q/tasks",
        Some(r#"{"key": "a", "replicas": 1}"#),
        None,
    );
    assert_eq!(status, 201, "{out}");
    let new = cluster.failover();
    let switched = Instant::now();
    let mut raw = cluster.servers[new].conn();
    let keys = dueq::QueueKeys::new("q").unwrap().keys;
    // writes the old primary takes before the server has switched are lost with it (see
    // docs/RELIABILITY.md); the server must switch by itself, soon
    let mut n = 0;
    dueq_testkit::wait_until(
        Duration::from_secs(10),
        "an enqueue lands on the new primary",
        || {
            n += 1;
            let body = format!(r#"{{"key": "b{n}"}}"#);
            let (status, _) = http(&s.addr, "POST", "/v1/queues/q/tasks", Some(&body), None);
            status == 201
                && redis::cmd("HEXISTS")
                    .arg(&keys)
                    .arg(format!("b{n}"))
                    .query::<bool>(&mut raw)
                    .unwrap()
        },
    );
    eprintln!(
        "serve wrote to the new primary {:?} after the switch ({n} tries)",
        switched.elapsed()
    );
    let a: bool = redis::cmd("HEXISTS")
        .arg(&keys)
        .arg("a")
        .query(&mut raw)
        .unwrap();
    assert!(
        a,
        "the task written with replicas: 1 before the failover is on the new primary"
    );
    sigterm_and_wait(&mut s);
}

/// `dueq serve` started beside a Redis that is still loading its data set (a long AOF after a
/// restart) listens at once and answers `/readyz` with 503 until loading ends, so probes see
/// "not ready" (and `/healthz` "alive") instead of a refused connection for the whole load.
/// Loading is slowed to about 7.5 s (3 000 keys, 2.5 ms each).
#[test]
fn serve_listens_and_is_not_ready_while_redis_loads_its_data_set() {
    let mut server = RedisServer::slow_loading(3_000, 2_500);
    server.stop();
    let url = server.url();
    let restart = std::thread::spawn(move || {
        server.restart();
        server
    });
    let loading = || {
        redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_err_and(|e| e.to_string().to_lowercase().contains("loading"))
    };
    dueq_testkit::wait_until(Duration::from_secs(10), "Redis answers LOADING", loading);
    let s = serve_until(&["--redis", &url], &[], "bound http://");
    // The restart thread ends once Redis answers PING, that is once loading is over. (A PING
    // itself is no probe here: while loading, Redis answers only every 1 024 keys, 2.5 s.)
    assert!(
        !restart.is_finished(),
        "dueq serve listened only once Redis had loaded its data set; log:\n{}",
        s.log()
    );
    let (status, body) = http(&s.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 503, "{body}");
    let (status, _) = http(&s.addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200);
    let _server = restart.join().unwrap();
    dueq_testkit::wait_until(Duration::from_secs(20), "ready after loading", || {
        http(&s.addr, "GET", "/readyz", None, None).0 == 200
    });
}

/// `dueq ARGS` without `--redis` or `DUEQ_REDIS_URL`, run in `dir` with `env`.
fn cli_in(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dueq"));
    cmd.current_dir(dir)
        .env_remove("DUEQ_REDIS_URL")
        .env_remove("DUEQ_DATA_DIR")
        .env_remove("DUEQ_LOG")
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// One Redis without flags: in the directory of a `dueq serve` using its
/// embedded Redis, `dueq enqueue` and `dueq stats` reach that Redis with no flag (and from
/// elsewhere with `DUEQ_DATA_DIR`); once it stopped they fall back to the default, and its URL
/// file, put back as if left behind, does not send them to the dead socket.
#[test]
fn the_cli_finds_the_embedded_redis_of_a_dueq_serve_in_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = serve_in(dir.path(), &[]);
    let url_file = dir.path().join("dueq-data").join("redis.url");
    let saved = std::fs::read_to_string(&url_file).unwrap();
    assert!(saved.starts_with("redis+unix://"), "{saved}");
    assert!(s.log().contains("from this directory"), "{}", s.log());

    let out = cli_in(
        dir.path(),
        &[],
        &[
            "--json", "enqueue", "orders", "--key", "order:1", "--delay", "30m",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli_in(dir.path(), &[], &["--json", "stats", "orders"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["scheduled"], 1, "{stats}");
    // the server sees the task: one Redis
    let (status, body) = http(
        &s.addr,
        "GET",
        "/v1/queues/orders/keys/order%3A1",
        None,
        None,
    );
    assert_eq!(status, 200, "{body}");
    // from another directory, through the variable
    let elsewhere = tempfile::tempdir().unwrap();
    let data = dir.path().join("dueq-data");
    let out = cli_in(
        elsewhere.path(),
        &[("DUEQ_DATA_DIR", data.to_str().unwrap())],
        &["--json", "stats", "orders"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // and with neither, the default
    let out = cli_in(elsewhere.path(), &[], &["--json", "stats", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("redis+unix"), "{err}");

    sigterm_and_wait(&mut s);
    assert!(!url_file.exists(), "the URL file outlived the server");
    // stopped: the default, never the old socket (only read: a Redis may listen on 6379,
    // without a queue "orders" or with one)
    let out = cli_in(dir.path(), &[], &["--json", "stats", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("redis+unix"), "{err}");
    if !out.status.success() {
        assert!(
            err.contains("connecting to redis://127.0.0.1:6379") || err.contains("no queue"),
            "{err}"
        );
    }
    // a URL file left behind: its dueq is gone and nothing answers on its socket
    std::fs::write(&url_file, &saved).unwrap();
    let out = cli_in(dir.path(), &[], &["--json", "stats", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ignoring") && err.contains("redis.url"),
        "{err}"
    );
    assert!(err.contains("using redis://127.0.0.1:6379"), "{err}");
    assert!(!err.contains("connecting to redis+unix"), "{err}");
    // a live process's pid in it: still not followed, as nothing answers on the socket
    let live = saved.lines().next().unwrap().to_owned() + &format!("\n{}\n", std::process::id());
    std::fs::write(&url_file, live).unwrap();
    let out = cli_in(dir.path(), &[], &["--json", "stats", "orders"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing answers"), "{err}");
    assert!(!err.contains("connecting to redis+unix"), "{err}");
}

#[test]
fn serve_test_clock_runs_on_an_empty_redis_and_refuses_real_queues() {
    let busy = RedisServer::start();
    let out = crate::dueq(&busy.url(), &["enqueue", "real", "--payload", "x"]);
    assert!(out.status.success(), "{out:?}");
    let refused = serve_command(&["--redis", &busy.url(), "--test-clock"], &[])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("made without the test clock"), "{err}");
    let out = crate::dueq(&busy.url(), &["test-clock", "get"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--test-clock"));

    let redis = RedisServer::start();
    let url = redis.url();
    let mut s = serve(&["--redis", &url, "--test-clock"], &[]);
    assert!(s.log().contains("TEST CLOCK"), "{}", s.log());
    let out = crate::dueq(
        &url,
        &[
            "enqueue",
            "orders",
            "--key",
            "order:42:cancel",
            "--delay",
            "30m",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let out = crate::dueq(&url, &["test-clock", "advance", "29m"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("29m ahead of Redis time"), "{text}");
    let (ok, stats) = crate::dueq_json(&url, &["stats", "orders"]);
    assert!(ok && stats.to_string().contains("\"due\":0"), "{stats}");
    let (ok, moved) = crate::dueq_json(&url, &["test-clock", "advance", "1m"]);
    assert!(ok);
    assert_eq!(
        moved["offset_ms"].as_u64().map(|o| o >= 1_800_000),
        Some(true)
    );
    let (ok, stats) = crate::dueq_json(&url, &["stats", "orders"]);
    assert!(ok && stats.to_string().contains("\"due\":1"), "{stats}");
    let (status, body) = http(&s.addr, "GET", "/readyz", None, None);
    assert_eq!(status, 200);
    assert!(body.contains("\"test_clock\""), "{body}");
    sigterm_and_wait(&mut s);
}
