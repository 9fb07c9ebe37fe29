//! The embedded default: a local `redis-server` that `dueq` starts, supervises (restarts it if
//! it dies) and stops, for `replay` (and later `serve`) when no `--redis` is given.
//!
//! It listens on a unix socket only (no TCP port to collide with), keeps its data in a data
//! directory with AOF on (`appendfsync everysec`), and runs with `maxmemory-policy noeviction`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A supervised `redis-server` child.
pub struct EmbeddedRedis {
    url: String,
    stop: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
    _temp: Option<tempfile::TempDir>,
}

fn args(dir: &Path, socket: &Path, persist: bool) -> Vec<String> {
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
        if persist { "yes" } else { "no" }.into(),
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

async fn wait_ready(url: &str, child: &mut Child) -> Result<()> {
    let client = redis::Client::open(url)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("redis-server exited at start-up ({status}); see its redis.log");
        }
        if let Ok(mut c) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING").query_async::<()>(&mut c).await.is_ok()
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("redis-server did not answer within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl EmbeddedRedis {
    /// Starts `redis-server` with its data in `data_dir` (created if missing), or in a fresh
    /// temporary directory removed at the end when `None`.
    pub async fn start(data_dir: Option<&Path>) -> Result<Self> {
        Self::start_with(data_dir, true).await
    }

    /// A server in a fresh temporary directory with persistence off (for benchmarks).
    pub async fn start_ephemeral() -> Result<Self> {
        Self::start_with(None, false).await
    }

    async fn start_with(data_dir: Option<&Path>, persist: bool) -> Result<Self> {
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
        // unix socket paths are limited to about 107 bytes
        let socket: PathBuf = if dir.join("redis.sock").as_os_str().len() < 100 {
            dir.join("redis.sock")
        } else {
            std::env::temp_dir().join(format!("dueq-{}.sock", std::process::id()))
        };
        let url = format!("redis+unix://{}", socket.display());
        let args = args(&dir, &socket, persist);
        let mut child = spawn(&args)?;
        wait_ready(&url, &mut child).await?;
        let (stop, mut stop_rx) = watch::channel(false);
        let url2 = url.clone();
        let supervisor = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop_rx.changed() => {
                        // SHUTDOWN lets Redis flush its append-only file; kill only if it hangs
                        if let Ok(c) = redis::Client::open(url2.as_str())
                            && let Ok(mut conn) = c.get_multiplexed_async_connection().await
                        {
                            let _ = redis::cmd("SHUTDOWN").query_async::<()>(&mut conn).await;
                        }
                        if tokio::time::timeout(Duration::from_secs(10), child.wait()).await.is_err() {
                            let _ = child.start_kill();
                            let _ = child.wait().await;
                        }
                        return;
                    }
                    status = child.wait() => {
                        tracing::error!(?status, "embedded redis-server exited; restarting it");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        match spawn(&args) {
                            Ok(mut c) => {
                                if let Err(e) = wait_ready(&url2, &mut c).await {
                                    tracing::error!(error = %e, "embedded redis-server restart failed");
                                }
                                child = c;
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "cannot restart redis-server");
                                return;
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

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.supervisor.await;
    }
}
