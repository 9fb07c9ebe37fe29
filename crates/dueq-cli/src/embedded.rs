//! The embedded default: a local `redis-server` that `dueq` starts, supervises (restarts it if
//! it dies) and stops, for `serve` and `replay` when no `--redis` is given.
//!
//! It listens on a unix socket only (no TCP port to collide with), keeps its data in a data
//! directory with AOF on (`appendfsync everysec`), and runs with `maxmemory-policy
//! noeviction`.
//!
//! One data directory, one supervisor: `dueq` holds an exclusive lock on `dueq.lock` in the
//! directory for as long as its redis-server may run, so a second `dueq` on the same directory
//! fails at once instead of starting a second redis-server on the same socket and AOF. A
//! redis-server still answering on the socket when the lock is taken was left behind by a `dueq`
//! killed with SIGKILL (its child outlives it): it belongs to nobody, so it is shut down
//! (`SHUTDOWN` flushes its AOF; the AOF is kept) before a fresh one starts. The supervisor
//! only ever sends `SHUTDOWN` to the redis-server it started (checked by `process_id`).
//!
//! Found by the other commands: while its redis-server runs, a supervisor on a named data
//! directory (`dueq serve`) keeps the server's URL and its own pid in [`URL_FILE`] there
//! (removed at stop), and every command run without `--redis` looks for
//! `$DUEQ_DATA_DIR/redis.url` or `./dueq-data/redis.url` ([`redis_url`]). A file left by a
//! killed `dueq`, or naming a socket where nothing (or another Redis) answers, is ignored with
//! a warning: the command uses `redis://127.0.0.1:6379` as it would without the file.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::aio::MultiplexedConnection;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Name of the lock file in the data directory.
const LOCK_FILE: &str = "dueq.lock";
/// Name of the file in the data directory with the URL of its running redis-server (first
/// line) and the pid of the `dueq` supervising it (second line).
pub const URL_FILE: &str = "redis.url";
/// The data directory [`redis_url`] looks in: `$DUEQ_DATA_DIR`, else this one.
pub const DEFAULT_DATA_DIR: &str = "./dueq-data";
/// Environment variable naming the data directory of `dueq serve` (its `--data-dir`).
pub const DATA_DIR_ENV: &str = "DUEQ_DATA_DIR";
/// How long [`redis_url`] waits for the embedded redis-server to answer.
const FIND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a redis-server left behind may take to flush its AOF and exit.
const ORPHAN_EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A supervised `redis-server` child.
pub struct EmbeddedRedis {
    url: String,
    stop: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
    _temp: Option<tempfile::TempDir>,
}

/// First pause before restarting a redis-server that exited.
const RESTART_PAUSE: Duration = Duration::from_millis(200);
/// Longest pause between restart attempts.
const MAX_RESTART_PAUSE: Duration = Duration::from_secs(5);

fn args(dir: &Path, socket: &Path) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    vec![
        "--port".into(),
        "0".into(),
        "--unixsocket".into(),
        s(socket),
        "--unixsocketperm".into(),
        "700".into(),
        "--dir".into(),
        s(dir),
        "--appendonly".into(),
        "yes".into(),
        "--appendfsync".into(),
        "everysec".into(),
        "--save".into(),
        String::new(),
        "--maxmemory-policy".into(),
        "noeviction".into(),
        "--logfile".into(),
        s(&dir.join("redis.log")),
        "--daemonize".into(),
        "no".into(),
    ]
}

/// The socket of the redis-server of `dir` (canonical): `dir/redis.sock`, or, when that path is
/// too long for a unix socket (about 107 bytes), a name in the temporary directory derived from
/// `dir` alone, so that a server left behind in `dir` is found again.
fn socket_path(dir: &Path) -> PathBuf {
    let inside = dir.join("redis.sock");
    if inside.as_os_str().len() < 100 {
        return inside;
    }
    // FNV-1a, 64 bits: stable across builds, unlike std's hasher
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    std::env::temp_dir().join(format!("dueq-{h:016x}.sock"))
}

/// Takes the exclusive lock on `dir` (held until the returned file is closed; the descriptor
/// is close-on-exec, so redis-server does not inherit it) and writes this process's id in it.
///
/// # Errors
/// When another process holds it (the message names `dir`), or the file cannot be opened.
fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let pid = holder
                .trim()
                .parse::<u32>()
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            bail!(
                "data directory {} is in use by another dueq process{pid}: stop it first, or \
                 use another --data-dir",
                dir.display()
            );
        }
        Err(TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
    }
    // for the message of a second dueq; the lock itself is what counts
    file.set_len(0)
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(file)
}

/// A connection to whatever redis-server answers on `url`, with its `process_id` (from
/// `INFO server`). Both come from the same connection, so a command sent on it reaches that
/// process and no other.
async fn connect_with_pid(url: &str) -> redis::RedisResult<(MultiplexedConnection, u32)> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    let pid = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "no process_id in INFO server"))
        })?;
    Ok((conn, pid))
}

/// Whether process `pid` is alive (not a zombie), by `/proc`; `None` without `/proc`.
fn process_alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self/stat").exists() {
        return None;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Some(false);
    };
    // "pid (comm) S ...": the state follows the last ')' (comm may contain one)
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    Some(!matches!(state, Some('Z' | 'X')))
}

/// Makes sure no redis-server is left on `socket` before a fresh one starts: one that answers
/// there (left behind by a `dueq` killed with SIGKILL; the caller holds the data directory's
/// lock, so no live `dueq` owns it) is shut down with `SHUTDOWN`, which flushes its AOF, and
/// waited for; a socket file nobody answers on is removed.
///
/// # Errors
/// When something holds the socket but does not answer, refuses `SHUTDOWN`, or does not exit
/// within [`ORPHAN_EXIT_TIMEOUT`]: starting a second server on the same AOF would be worse.
async fn stop_orphan(url: &str, socket: &Path) -> Result<()> {
    if std::fs::symlink_metadata(socket).is_err() {
        return Ok(());
    }
    let (mut conn, pid) = match connect_with_pid(url).await {
        Ok(c) => c,
        Err(e) if e.is_connection_refusal() => {
            // nobody listens: a stale socket file of a server that died with its dueq
            std::fs::remove_file(socket)
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                })
                .with_context(|| format!("removing the stale socket {}", socket.display()))?;
            return Ok(());
        }
        Err(e) => bail!(
            "{} exists and something holds it but does not answer as a redis-server ({e}); \
             stop that process first",
            socket.display()
        ),
    };
    tracing::warn!(
        pid,
        socket = %socket.display(),
        "a redis-server left running by a dueq that did not stop (killed?) holds this data \
         directory; shutting it down (SHUTDOWN flushes its AOF, which is kept)"
    );
    if let Err(e) = redis::cmd("SHUTDOWN").query_async::<()>(&mut conn).await
        && e.code().is_some()
    {
        bail!(
            "the redis-server (pid {pid}) left running on {} refused SHUTDOWN ({e}); stop it \
             first",
            socket.display()
        );
    }
    // otherwise the connection dropped: it is exiting. It removes its socket after flushing
    // the AOF; wait for the process as well where /proc tells
    drop(conn);
    let deadline = Instant::now() + ORPHAN_EXIT_TIMEOUT;
    while std::fs::symlink_metadata(socket).is_ok() || process_alive(pid) == Some(true) {
        if Instant::now() > deadline {
            bail!(
                "the redis-server (pid {pid}) left running on {} did not exit within {} s of \
                 SHUTDOWN; stop it first",
                socket.display(),
                ORPHAN_EXIT_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tracing::warn!(
        pid,
        "stopped the redis-server left behind; starting a fresh one"
    );
    Ok(())
}

fn spawn(args: &[String]) -> Result<Child> {
    Command::new("redis-server")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context(
            "could not start redis-server: install it (apt-get install redis-server) or pass \
             --redis URL",
        )
}

/// Waits until `child` itself answers on `url` (a server answering with another `process_id`
/// does not count).
async fn wait_ready(url: &str, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("redis-server exited at start-up ({status}); see its redis.log");
        }
        // INFO answers while the AOF loads, PING only once it is loaded
        if let Ok((mut c, pid)) = connect_with_pid(url).await
            && Some(pid) == child.id()
            && redis::cmd("PING").query_async::<()>(&mut c).await.is_ok()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("redis-server did not answer within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops `child`: `SHUTDOWN` (lets Redis flush its AOF) sent only if the server answering on
/// `url` is `child` itself; SIGKILL if it does not exit within 10 s.
async fn stop_child(url: &str, child: &mut Child) {
    if let Ok(None) = child.try_wait()
        && let Some(own) = child.id()
    {
        match connect_with_pid(url).await {
            Ok((mut conn, pid)) if pid == own => {
                let _ = redis::cmd("SHUTDOWN").query_async::<()>(&mut conn).await;
            }
            Ok((_, pid)) => {
                tracing::error!(
                    pid,
                    own,
                    "another redis-server answers on the embedded socket"
                );
            }
            Err(_) => {}
        }
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
}

/// [`URL_FILE`] of a running supervisor: written (whole, by a rename) once its redis-server
/// is ready, removed when dropped.
struct UrlFile(PathBuf);

impl UrlFile {
    fn write(dir: &Path, url: &str) -> Result<Self> {
        let path = dir.join(URL_FILE);
        let tmp = dir.join(format!("{URL_FILE}.tmp"));
        std::fs::write(&tmp, format!("{url}\n{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for UrlFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What [`find_running`] found in a data directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// No [`URL_FILE`]: no `dueq serve` runs on this directory.
    Nothing,
    /// The URL of the redis-server a running `dueq` supervises there.
    Running(String),
    /// A [`URL_FILE`] that must not be used, and why.
    Stale(String),
}

/// The redis-server that a running `dueq serve` (or `replay --data-dir`) supervises in `dir`:
/// its [`URL_FILE`] is there, the `dueq` that wrote it is alive (by `/proc`, where there is
/// one), and the Redis answering on the URL keeps its data in `dir` (`CONFIG GET dir`), so a
/// stale file never sends a command to a dead socket or to another server.
pub async fn find_running(dir: &Path) -> Found {
    let path = dir.join(URL_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Found::Nothing,
        Err(e) => return Found::Stale(format!("cannot read it ({e})")),
    };
    let mut lines = text.lines();
    let url = lines.next().unwrap_or("").trim();
    let pid = lines.next().and_then(|p| p.trim().parse::<u32>().ok());
    let Some(socket) = url.strip_prefix("redis+unix://") else {
        return Found::Stale("it holds no redis+unix:// URL".to_owned());
    };
    if let Some(pid) = pid
        && process_alive(pid) == Some(false)
    {
        return Found::Stale(format!(
            "it was left by a dueq (pid {pid}) that is no longer running"
        ));
    }
    let answer = tokio::time::timeout(FIND_TIMEOUT, async {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("dir")
            .query_async::<Vec<String>>(&mut conn)
            .await
    })
    .await;
    let data_dir = match answer {
        Ok(Ok(pair)) => pair.into_iter().nth(1).unwrap_or_default(),
        Ok(Err(e)) => return Found::Stale(format!("nothing answers on {socket} ({e})")),
        Err(_) => {
            return Found::Stale(format!(
                "nothing answers on {socket} within {} s",
                FIND_TIMEOUT.as_secs()
            ));
        }
    };
    let ours = std::fs::canonicalize(dir).ok();
    if ours.is_none() || ours != std::fs::canonicalize(&data_dir).ok() {
        return Found::Stale(format!(
            "the Redis answering on {socket} keeps its data in {data_dir}, not here"
        ));
    }
    Found::Running(url.to_owned())
}

/// The Redis a command without `--redis` (and without `DUEQ_REDIS_URL`) uses: the embedded
/// redis-server of a `dueq serve` running on `$DUEQ_DATA_DIR`, else on `./dueq-data`
/// ([`find_running`]); otherwise (a stale file is named in a warning) `default`.
pub async fn redis_url(default: &str) -> String {
    let dir = std::env::var_os(DATA_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_DATA_DIR), PathBuf::from);
    match find_running(&dir).await {
        Found::Running(url) => {
            tracing::info!(%url, dir = %dir.display(), "using the embedded Redis of the dueq serve on this data directory");
            url
        }
        Found::Nothing => default.to_owned(),
        Found::Stale(why) => {
            tracing::warn!(
                "ignoring {}: {why}; using {default}",
                dir.join(URL_FILE).display()
            );
            default.to_owned()
        }
    }
}

impl EmbeddedRedis {
    /// Starts `redis-server` with its data in `data_dir` (created if missing), or in a fresh
    /// temporary directory removed at the end when `None`.
    ///
    /// # Errors
    /// When another `dueq` uses `data_dir`, a redis-server left behind there cannot be
    /// stopped, or redis-server does not start.
    pub async fn start(data_dir: Option<&Path>) -> Result<Self> {
        let (dir, temp) = match data_dir {
            Some(d) => {
                std::fs::create_dir_all(d)
                    .with_context(|| format!("creating data directory {}", d.display()))?;
                (std::fs::canonicalize(d)?, None)
            }
            None => {
                let t = tempfile::Builder::new().prefix("dueq-data-").tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        // held by the supervisor task until its redis-server has exited
        let lock = lock_dir(&dir)?;
        let socket = socket_path(&dir);
        let url = format!("redis+unix://{}", socket.display());
        stop_orphan(&url, &socket).await?;
        let args = args(&dir, &socket);
        let mut child = spawn(&args)?;
        if let Err(e) = wait_ready(&url, &mut child).await {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(e);
        }
        // only a named directory is looked for by the other commands (a temporary one is not)
        let url_file = match data_dir {
            Some(_) => match UrlFile::write(&dir, &url) {
                Ok(f) => Some(f),
                Err(e) => {
                    stop_child(&url, &mut child).await;
                    return Err(e);
                }
            },
            None => None,
        };
        let (stop, mut stop_rx) = watch::channel(false);
        let url2 = url.clone();
        let supervisor = tokio::spawn(async move {
            let _lock = lock;
            // removed (first) when this task ends: no command finds a server that is stopping
            let url_file = url_file;
            // after each failed restart the pause doubles (with jitter) up to 5 s: a server
            // that cannot start (disk full, port taken) is retried, not respawned in a loop
            let mut pause = RESTART_PAUSE;
            loop {
                tokio::select! {
                    _ = stop_rx.changed() => {
                        drop(url_file);
                        stop_child(&url2, &mut child).await;
                        return;
                    }
                    status = child.wait() => {
                        tracing::error!(?status, "embedded redis-server exited; restarting it");
                        tokio::select! {
                            _ = stop_rx.changed() => return,
                            () = tokio::time::sleep(dueq::backoff::jittered(pause)) => {}
                        }
                        pause = (pause * 2).min(MAX_RESTART_PAUSE);
                        match spawn(&args) {
                            Ok(mut c) => {
                                match wait_ready(&url2, &mut c).await {
                                    Ok(()) => {
                                        tracing::info!("embedded redis-server restarted");
                                        pause = RESTART_PAUSE;
                                    }
                                    Err(e) => tracing::error!(error = %e,
                                        "embedded redis-server restart failed; trying again"),
                                }
                                child = c;
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "cannot restart redis-server; trying again");
                                // `child` has exited: its wait() answers at once, so the
                                // loop comes back here after the next pause
                            }
                        }
                    }
                }
            }
        });
        tracing::info!(%url, dir = %dir.display(), "started embedded redis-server");
        Ok(Self {
            url,
            stop,
            supervisor,
            _temp: temp,
        })
    }

    /// Its URL (`redis+unix://...`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server and waits for it (then releases the data directory).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.supervisor.await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn socket_path_is_stable_and_short() {
        let short = Path::new("/tmp/d");
        assert_eq!(socket_path(short), Path::new("/tmp/d/redis.sock"));
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
        let s = socket_path(&long);
        assert_eq!(s, socket_path(&long));
        assert!(s.as_os_str().len() < 100, "{}", s.display());
        assert_ne!(
            s,
            socket_path(&PathBuf::from(format!("/tmp/{}", "y".repeat(120))))
        );
    }

    /// A URL file that must not be used: the others are covered by tests/it/serve.rs with a
    /// real `dueq serve`.
    #[tokio::test]
    async fn a_stale_url_file_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(find_running(d.path()).await, Found::Nothing);
        let file = d.path().join(URL_FILE);
        let socket = d.path().join("redis.sock");
        // a dueq that has exited
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = gone.id();
        gone.wait().unwrap();
        std::fs::write(
            &file,
            format!("redis+unix://{}\n{gone_pid}\n", socket.display()),
        )
        .unwrap();
        match find_running(d.path()).await {
            Found::Stale(why) => assert!(why.contains("no longer running"), "{why}"),
            f => panic!("{f:?}"),
        }
        // a live dueq (this process), but nothing on the socket
        let me = std::process::id();
        std::fs::write(&file, format!("redis+unix://{}\n{me}\n", socket.display())).unwrap();
        match find_running(d.path()).await {
            Found::Stale(why) => assert!(why.contains("nothing answers"), "{why}"),
            f => panic!("{f:?}"),
        }
        std::fs::write(&file, "redis://127.0.0.1:1\n").unwrap();
        assert!(matches!(find_running(d.path()).await, Found::Stale(_)));
    }

    #[test]
    fn second_lock_on_a_directory_fails_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let held = lock_dir(d.path()).unwrap();
        let e = format!("{:#}", lock_dir(d.path()).unwrap_err());
        assert!(e.contains(&d.path().display().to_string()), "{e}");
        assert!(e.contains("another dueq process"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(held);
        // A child that another test thread is spawning holds a copy of every descriptor
        // until its exec closes them, so the lock may outlive `held` for a moment.
        dueq_testkit::wait_until(Duration::from_secs(10), "the lock is free again", || {
            lock_dir(d.path()).is_ok()
        });
    }
}
