//! A throwaway `redis-server` process.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::Error;
use crate::helpers::parse_info_field;

/// Name of the server binary looked up on `PATH`.
const REDIS_SERVER: &str = "redis-server";
/// How long a freshly spawned server may take to answer `PING`.
const START_DEADLINE: Duration = Duration::from_secs(10);
/// Interval between readiness probes.
const START_POLL: Duration = Duration::from_millis(10);
/// How long [`RedisServer::stop`] waits for a graceful `SHUTDOWN`.
const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// How many fresh ports a TCP server tries before giving up.
const PORT_ATTEMPTS: usize = 5;
/// `sun_path` is 108 bytes on Linux, including the trailing NUL.
const MAX_UNIX_SOCKET_PATH: usize = 107;
/// Redis Cluster's bus listens on the client port plus this offset.
const CLUSTER_BUS_OFFSET: u16 = 10000;
/// Lines of the log files shown when a server fails.
const LOG_TAIL_LINES: usize = 40;

/// Options for starting a [`RedisServer`]; create one with
/// [`RedisServer::builder`].
///
/// Defaults: unix socket only (`--port 0`), no persistence (`--save ""`,
/// `--appendonly no`), `--repl-diskless-sync-delay 0` (so replicas sync at
/// once instead of after 5 s), data in the server's own temporary directory.
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until .start() is called"]
pub struct RedisServerBuilder {
    tcp: bool,
    appendonly: bool,
    extra_args: Vec<OsString>,
    replica_of: Option<u16>,
    dir: Option<PathBuf>,
    cluster_bus: bool,
}

impl RedisServerBuilder {
    /// Listen on a free `127.0.0.1` TCP port instead of a unix socket.
    ///
    /// The port is chosen by binding a listener to port 0 and releasing it; if
    /// `redis-server` then fails to bind it (a race with another process), a
    /// new port is tried, up to 5 times.
    pub fn tcp(mut self) -> Self {
        self.tcp = true;
        self
    }

    /// Enable AOF persistence with `appendfsync always` (every write is
    /// fsynced before the reply, so it survives [`RedisServer::kill9`]).
    pub fn appendonly(mut self, on: bool) -> Self {
        self.appendonly = on;
        self
    }

    /// Append one extra command-line argument, e.g.
    /// `.arg("--maxmemory-policy").arg("allkeys-lru")`.
    ///
    /// Extra arguments come after the built-in ones, so they override them.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.extra_args.push(arg.as_ref().to_owned());
        self
    }

    /// Append several extra command-line arguments (see [`Self::arg`]).
    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        self.extra_args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Start as a replica of `master` (`--replicaof 127.0.0.1 <port>`).
    ///
    /// [`Self::start`] then also waits until `master_link_status:up`.
    ///
    /// # Panics
    ///
    /// If `master` is not in TCP mode: Redis replication needs a TCP address.
    pub fn replica_of(mut self, master: &RedisServer) -> Self {
        let port = master
            .port()
            .expect("replica_of: the master must be started with .tcp()");
        self.replica_of = Some(port);
        self
    }

    /// Use `path` as the data directory (`--dir`) instead of the server's own
    /// temporary directory, e.g. to start a new server on the data left by a
    /// previous one. The directory is created if missing and is never deleted
    /// by this crate. The socket and log file stay in the server's own
    /// temporary directory.
    pub fn dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.dir = Some(path.into());
        self
    }

    /// Configure as a Redis Cluster node (TCP, bus port free as well).
    pub(crate) fn cluster_node(mut self) -> Self {
        self.tcp = true;
        self.cluster_bus = true;
        let mut args: Vec<OsString> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.append(&mut self.extra_args);
        self.extra_args = args;
        self
    }

    /// Spawn `redis-server` and wait (up to 10 s) until it answers `PING`;
    /// for a replica, also until its link to the master is up.
    ///
    /// # Panics
    ///
    /// If the server cannot be spawned or does not become ready; the panic
    /// message contains the tail of its log.
    pub fn start(self) -> RedisServer {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start`] for callers that report failures themselves (the lab's
    /// `dueq bench` and `dueq chaos`).
    ///
    /// # Errors
    ///
    /// When [`Self::start`] would panic, with the same message.
    pub fn try_start(self) -> Result<RedisServer, Error> {
        let tmp = tempfile::Builder::new()
            .prefix("dueq-redis-")
            .tempdir()
            .map_err(|e| {
                Error::new(format!(
                    "create a temporary directory for redis-server: {e}"
                ))
            })?;
        let data_dir = self.dir.clone().unwrap_or_else(|| tmp.path().to_owned());
        std::fs::create_dir_all(&data_dir).map_err(|e| {
            Error::new(format!("create redis data dir {}: {e}", data_dir.display()))
        })?;
        let socket = if self.tcp {
            None
        } else {
            let socket = tmp.path().join("redis.sock");
            if socket.as_os_str().len() > MAX_UNIX_SOCKET_PATH {
                return Err(Error::new(format!(
                    "unix socket path {} is too long (set TMPDIR to a shorter directory)",
                    socket.display()
                )));
            }
            Some(socket)
        };
        let mut server = RedisServer {
            opts: self,
            data_dir,
            socket,
            port: None,
            child: None,
            pid: 0,
            tmp,
        };
        if server.opts.tcp {
            let mut attempt = 1;
            loop {
                server.port = Some(free_port(server.opts.cluster_bus));
                match server.launch() {
                    Ok(()) => break,
                    // A timeout or a missing binary is not a port clash: don't retry.
                    Err(e @ (LaunchError::Timeout(_) | LaunchError::Spawn(_))) => {
                        return Err(server.launch_error(e));
                    }
                    Err(e) if attempt >= PORT_ATTEMPTS => return Err(server.launch_error(e)),
                    Err(_) => attempt += 1,
                }
            }
        } else if let Err(e) = server.launch() {
            return Err(server.launch_error(e));
        }
        if server.opts.replica_of.is_some() {
            let mut conn = server
                .client()
                .get_connection()
                .map_err(|e| Error::new(format!("connect to {}: {e}", server.url())))?;
            let what = "the replica's master link is up";
            if !crate::wait::poll_until(START_DEADLINE, || {
                crate::info_field(&mut conn, "replication", "master_link_status").as_deref()
                    == Some("up")
            }) {
                return Err(Error::timeout(START_DEADLINE, what));
            }
        }
        Ok(server)
    }
}

/// One `redis-server` child process with its own temporary directory.
///
/// Dropping it kills the process (SIGKILL) and deletes the temporary
/// directory (but not a data directory given with
/// [`RedisServerBuilder::dir`]).
#[derive(Debug)]
pub struct RedisServer {
    opts: RedisServerBuilder,
    data_dir: PathBuf,
    socket: Option<PathBuf>,
    port: Option<u16>,
    child: Option<Child>,
    pid: u32,
    // Declared last; it is removed after `Drop::drop` has killed the process.
    tmp: TempDir,
}

impl RedisServer {
    /// Start a server on a unix socket with default options
    /// (`RedisServer::builder().start()`).
    ///
    /// # Panics
    ///
    /// See [`RedisServerBuilder::start`].
    pub fn start() -> RedisServer {
        RedisServer::builder().start()
    }

    /// A server (AOF on) holding `keys` filler keys and started with `--key-load-delay
    /// delay_us`, so that after a [`restart`](Self::restart) it spends about `keys ×
    /// delay_us` loading its data set, answering `LOADING` meanwhile (only every 1 024 keys:
    /// Redis serves clients between batches). For tests of what clients do during a load.
    ///
    /// # Panics
    ///
    /// See [`RedisServerBuilder::start`], or when the filler cannot be written.
    pub fn slow_loading(keys: u32, delay_us: u32) -> RedisServer {
        let server = RedisServer::builder()
            .appendonly(true)
            .args(["--key-load-delay", &delay_us.to_string()])
            .start();
        let mut c = server.conn();
        redis::cmd("EVAL")
            .arg("for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'k' .. i, 'v') end")
            .arg(0)
            .arg(keys)
            .query::<()>(&mut c)
            .unwrap_or_else(|e| panic!("filling the slow-loading server: {e}"));
        server
    }

    /// Options for starting a server.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// Whether a `redis-server` executable is on `PATH` (tests may use this to
    /// skip themselves).
    pub fn available() -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| {
                std::fs::metadata(dir.join(REDIS_SERVER))
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
        })
    }

    /// Connection URL: `redis+unix:///…/redis.sock` in unix-socket mode
    /// (path percent-encoded), `redis://127.0.0.1:<port>` in TCP mode.
    pub fn url(&self) -> String {
        match (&self.socket, self.port) {
            (Some(socket), _) => format!("redis+unix://{}", percent_encode_path(socket)),
            (None, Some(port)) => format!("redis://127.0.0.1:{port}"),
            (None, None) => unreachable!("a TCP server always has a port once started"),
        }
    }

    /// A client for [`Self::url`].
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url())
            .unwrap_or_else(|e| panic!("redis::Client::open({}): {e}", self.url()))
    }

    /// A new synchronous connection.
    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url()))
    }

    /// The data directory (`--dir`): AOF/RDB files and `nodes.conf` live here.
    pub fn dir(&self) -> &Path {
        &self.data_dir
    }

    /// The TCP port, or `None` in unix-socket mode.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The unix socket path, or `None` in TCP mode.
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// Path of the server log file (`--logfile`).
    pub fn log_path(&self) -> PathBuf {
        self.tmp.path().join("redis.log")
    }

    /// Pid of the current process (of the last one, once killed or stopped).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(Ok(Some(_))) => {
                self.child = None;
                false
            }
            Some(Err(e)) => panic!("try_wait on redis-server {}: {e}", self.pid),
            None => false,
        }
    }

    /// Kill the process with SIGKILL and reap it. No-op if not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // An error here means the process already exited; wait() below
            // reaps it either way.
            let _ = child.kill();
            child
                .wait()
                .unwrap_or_else(|e| panic!("wait for killed redis-server {}: {e}", self.pid));
        }
    }

    /// Graceful stop: `SHUTDOWN` (which writes an RDB only if save points are
    /// configured, and flushes the AOF), waiting up to 10 s, then SIGKILL as a
    /// fallback. No-op if not running.
    pub fn stop(&mut self) {
        if !self.is_running() {
            return;
        }
        if let Ok(mut conn) = self.client().get_connection() {
            // The reply is an I/O error (connection closed) on success.
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut conn);
        }
        let start = Instant::now();
        while start.elapsed() < STOP_DEADLINE {
            if !self.is_running() {
                return;
            }
            std::thread::sleep(START_POLL);
        }
        self.kill9();
    }

    /// Start the server again with the same arguments, data directory and
    /// socket/port, and wait until it answers `PING` (after loading its data).
    ///
    /// If it is still running it is first killed with SIGKILL; call
    /// [`Self::stop`] first for a graceful restart.
    ///
    /// # Panics
    ///
    /// If the server does not come back within 10 s (e.g. its TCP port was
    /// taken meanwhile).
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`Self::restart`] for callers that report failures themselves.
    ///
    /// # Errors
    ///
    /// When [`Self::restart`] would panic, with the same message.
    pub fn try_restart(&mut self) -> Result<(), Error> {
        self.kill9();
        self.launch().map_err(|e| self.launch_error(e))
    }

    /// The full `redis-server` command line for the current configuration.
    fn command_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |a: &dyn AsRef<OsStr>| args.push(a.as_ref().to_owned());
        push(&"--daemonize");
        push(&"no");
        match (&self.socket, self.port) {
            (Some(socket), _) => {
                push(&"--port");
                push(&"0");
                push(&"--unixsocket");
                push(socket);
                push(&"--unixsocketperm");
                push(&"700");
            }
            (None, Some(port)) => {
                push(&"--port");
                push(&port.to_string());
                push(&"--bind");
                push(&"127.0.0.1");
            }
            (None, None) => unreachable!("a TCP server is given a port before launch"),
        }
        push(&"--dir");
        push(&self.data_dir);
        push(&"--logfile");
        push(&self.log_path());
        push(&"--save");
        push(&"");
        push(&"--appendonly");
        push(&if self.opts.appendonly { "yes" } else { "no" });
        if self.opts.appendonly {
            push(&"--appendfsync");
            push(&"always");
        }
        // Don't make replicas wait 5 s for a diskless full sync to start.
        push(&"--repl-diskless-sync-delay");
        push(&"0");
        if let Some(master_port) = self.opts.replica_of {
            push(&"--replicaof");
            push(&"127.0.0.1");
            push(&master_port.to_string());
        }
        for a in &self.opts.extra_args {
            push(a);
        }
        args
    }

    fn stdio_path(&self) -> PathBuf {
        self.tmp.path().join("redis.stdio")
    }

    /// Spawn the process and wait until it is ready.
    fn launch(&mut self) -> Result<(), LaunchError> {
        let stdio: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stdio_path())
            .expect("create redis-server stdout/stderr file");
        let stderr = stdio
            .try_clone()
            .expect("duplicate the redis-server stdout file handle");
        let child = Command::new(REDIS_SERVER)
            .args(self.command_args())
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr)
            .spawn()
            .map_err(LaunchError::Spawn)?;
        self.pid = child.id();
        self.child = Some(child);

        let start = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        self.child = None;
                        return Err(LaunchError::Exited(status));
                    }
                    Ok(None) => {}
                    Err(e) => panic!("try_wait on redis-server {}: {e}", self.pid),
                }
            }
            let last_err = match self.probe() {
                Ok(pid) if pid == self.pid => return Ok(()),
                Ok(pid) => {
                    // Someone else's server answered on "our" port.
                    self.kill9();
                    return Err(LaunchError::OtherServer(pid));
                }
                Err(e) => e,
            };
            if start.elapsed() >= START_DEADLINE {
                self.kill9();
                return Err(LaunchError::Timeout(last_err));
            }
            std::thread::sleep(START_POLL);
        }
    }

    /// `PING`, then the `process_id` of whoever answered.
    fn probe(&self) -> Result<u32, String> {
        let client = redis::Client::open(self.url()).map_err(|e| e.to_string())?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_millis(250))
            .map_err(|e| e.to_string())?;
        conn.set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
        conn.set_write_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
        // PING fails with LOADING while the dataset is being loaded.
        redis::cmd("PING")
            .query::<String>(&mut conn)
            .map_err(|e| e.to_string())?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn)
            .map_err(|e| e.to_string())?;
        parse_info_field(&info, "process_id")
            .and_then(|pid| pid.parse().ok())
            .ok_or_else(|| "INFO server has no process_id".to_owned())
    }

    /// What a failed launch reports: the error, the command line and the tails of the logs.
    fn launch_error(&self, err: LaunchError) -> Error {
        Error::new(format!(
            "redis-server failed to start ({err})\ncommand: {REDIS_SERVER} {}\n\
             --- tail of {} ---\n{}\n--- tail of {} ---\n{}",
            self.command_args()
                .iter()
                .map(|a| format!("{a:?}"))
                .collect::<Vec<_>>()
                .join(" "),
            self.log_path().display(),
            tail(&self.log_path(), LOG_TAIL_LINES),
            self.stdio_path().display(),
            tail(&self.stdio_path(), LOG_TAIL_LINES),
        ))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Best effort: never panic in drop (we may already be unwinding).
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Why a launch attempt failed.
#[derive(Debug)]
enum LaunchError {
    Spawn(std::io::Error),
    Exited(ExitStatus),
    OtherServer(u32),
    Timeout(String),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Spawn(e) => {
                write!(f, "could not spawn {REDIS_SERVER} (is it on PATH?): {e}")
            }
            LaunchError::Exited(status) => write!(f, "exited early with {status}"),
            LaunchError::OtherServer(pid) => {
                write!(f, "another redis-server (pid {pid}) answered on its port")
            }
            LaunchError::Timeout(last) => write!(
                f,
                "not ready within {START_DEADLINE:?}; last probe error: {last}"
            ),
        }
    }
}

/// A `127.0.0.1` port that was free a moment ago; with `cluster_bus`, the
/// port + 10000 (the cluster bus port) was free too.
pub(crate) fn free_port(cluster_bus: bool) -> u16 {
    for _ in 0..100 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("local_addr of a bound listener")
            .port();
        if !cluster_bus {
            return port;
        }
        if let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET)
            && TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return port;
        }
    }
    panic!("found no free 127.0.0.1 port (with a free cluster bus port) in 100 tries");
}

/// Percent-encode a path for use in a `redis+unix://` URL (redis-rs decodes
/// it with `Url::to_file_path`).
fn percent_encode_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The last `n` lines of a text file (lossily decoded), or a note that it
/// could not be read.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let mut bytes = Vec::new();
    if let Err(e) = File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)) {
        return format!("<cannot read: {e}>");
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_url_round_trips_through_redis_rs() {
        for path in ["/tmp/dueq-redis-abc/redis.sock", "/tmp/a b%c/ü.sock"] {
            let url = format!("redis+unix://{}", percent_encode_path(Path::new(path)));
            let client = redis::Client::open(url.as_str()).expect("parse unix url");
            match client.get_connection_info().addr() {
                redis::ConnectionAddr::Unix(p) => assert_eq!(p, Path::new(path), "{url}"),
                other => panic!("unexpected addr {other:?} for {url}"),
            }
        }
    }

    #[test]
    fn cluster_ports_leave_room_for_the_bus() {
        for _ in 0..20 {
            let port = free_port(true);
            assert!(port.checked_add(CLUSTER_BUS_OFFSET).is_some());
        }
    }
}
