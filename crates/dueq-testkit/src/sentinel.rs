//! A Sentinel-managed Redis: one primary, replicas, and sentinels, all on loopback TCP.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use crate::server::{RedisServer, free_port};

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "dueq-primary";
/// How long the setup and each failover may take.
const DEADLINE: Duration = Duration::from_secs(20);

/// A primary, `replicas` replicas of it, and sentinels (quorum 1) watching it, each a
/// child process on a free `127.0.0.1` port. The primary and replicas are
/// [`RedisServer`]s with AOF (`appendfsync always`); `down-after-milliseconds` is 1 000,
/// so a killed primary is failed over within a few seconds.
///
/// Dropping it kills every process.
#[derive(Debug)]
pub struct RedisSentinels {
    /// Index 0 is the first primary; a failover changes which one is primary
    /// (see [`Self::primary_port`]).
    pub servers: Vec<RedisServer>,
    sentinels: Vec<Child>,
    ports: Vec<u16>,
    tmp: TempDir,
}

impl RedisSentinels {
    /// Starts a primary, `replicas` replicas and `sentinels` sentinels, and waits until every
    /// sentinel knows every replica (so a failover can pick one).
    ///
    /// # Panics
    /// If a process cannot be started or the setup is not ready within 20 s.
    pub fn start(replicas: usize, sentinels: usize) -> RedisSentinels {
        let primary = RedisServer::builder().tcp().appendonly(true).start();
        let mut servers = vec![primary];
        for _ in 0..replicas {
            let r = RedisServer::builder()
                .tcp()
                .appendonly(true)
                .replica_of(&servers[0])
                .start();
            servers.push(r);
        }
        let tmp = tempfile::Builder::new()
            .prefix("dueq-sentinel-")
            .tempdir()
            .expect("create a temporary directory for the sentinels");
        let primary_port = servers[0].port().expect("tcp server");
        let mut me = RedisSentinels {
            servers,
            sentinels: Vec::new(),
            ports: Vec::new(),
            tmp,
        };
        for i in 0..sentinels {
            let port = free_port(false);
            let conf = me.tmp.path().join(format!("sentinel-{i}.conf"));
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 1\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = me.tmp.path().display(),
                log = me.log_path(i).display(),
            );
            std::fs::write(&conf, text).expect("write sentinel.conf");
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server --sentinel");
            me.sentinels.push(child);
            me.ports.push(port);
        }
        for i in 0..sentinels {
            crate::wait_until(DEADLINE, "every sentinel knows every replica", || {
                me.sentinel_query(i, "replicas")
                    .is_some_and(|rs| rs.matches("slave").count() >= replicas)
            });
        }
        me
    }

    /// `redis+sentinel://127.0.0.1:p1,127.0.0.1:p2/dueq-primary`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// Ports of the sentinels.
    pub fn sentinel_ports(&self) -> &[u16] {
        &self.ports
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("sentinel-{i}.log"))
    }

    fn sentinel_conn(&self, i: usize) -> Option<redis::Connection> {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}", self.ports[i])).ok()?;
        c.get_connection_with_timeout(Duration::from_millis(500))
            .ok()
    }

    /// The flags of the replicas as one string, or `None` while the sentinel is not up.
    fn sentinel_query(&self, i: usize, what: &str) -> Option<String> {
        let mut c = self.sentinel_conn(i)?;
        let v: redis::Value = redis::cmd("SENTINEL")
            .arg(what)
            .arg(MASTER_NAME)
            .query(&mut c)
            .ok()?;
        Some(format!("{v:?}"))
    }

    /// The port the first sentinel names as primary now.
    pub fn primary_port(&self) -> Option<u16> {
        let mut c = self.sentinel_conn(0)?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut c)
            .ok()?;
        Some(port)
    }

    /// Index in [`Self::servers`] of the primary the first sentinel names.
    pub fn primary_index(&self) -> Option<usize> {
        let port = self.primary_port()?;
        self.servers.iter().position(|s| s.port() == Some(port))
    }

    /// `SENTINEL FAILOVER` on the first sentinel, then waits until it names another primary
    /// and that server says `ROLE master`. Returns the new primary's index.
    ///
    /// Sentinel accepts the command and may then abort the failover on its own
    /// (`-failover-abort-no-good-slave`: the replica, the primary demoted by the failover
    /// before, has not yet shown a healthy link to the new primary), and does not retry a
    /// requested failover. So the command is sent again whenever no new primary shows within
    /// 5 s of it, while the sentinel still names the old primary and its flags show no
    /// failover running (a second failover would move the primary back).
    ///
    /// # Panics
    /// If the failover does not happen within 60 s.
    pub fn failover(&self) -> usize {
        let before = self.primary_port();
        let mut c = self.sentinel_conn(0).expect("connect to the sentinel");
        let deadline = std::time::Instant::now() + 3 * DEADLINE;
        loop {
            // never a second failover: not while one runs, nor once the sentinel names
            // another primary (whether or not that one answers `ROLE master` yet)
            if let Some(i) = self.new_primary(before) {
                return i;
            }
            if self.primary_port() == before && !self.failover_in_progress() {
                // refused at once while no replica qualifies (`-NOGOODSLAVE`): ask again
                // until it is accepted
                crate::wait_until(DEADLINE, "SENTINEL FAILOVER is accepted", || {
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(MASTER_NAME)
                        .query::<()>(&mut c)
                        .is_ok()
                });
            }
            let tried = std::time::Instant::now();
            while tried.elapsed() < Duration::from_secs(5) {
                if let Some(i) = self.new_primary(before) {
                    return i;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "SENTINEL FAILOVER named no new primary within {:?}",
                3 * DEADLINE
            );
        }
    }

    /// Waits until the first sentinel names a primary other than `before` that answers
    /// `ROLE master`; its index.
    ///
    /// # Panics
    /// If that does not happen within 20 s.
    pub fn wait_for_new_primary(&self, before: Option<u16>) -> usize {
        let mut found = None;
        crate::wait_until(DEADLINE, "the sentinels name a new primary", || {
            found = self.new_primary(before);
            found.is_some()
        });
        found.expect("set when the wait succeeded")
    }

    /// Whether the first sentinel's flags for the primary say a failover is running (an
    /// unreadable answer counts as running, so no failover is sent on a guess).
    fn failover_in_progress(&self) -> bool {
        let Some(mut c) = self.sentinel_conn(0) else {
            return true;
        };
        let fields: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(MASTER_NAME)
            .query(&mut c);
        match fields {
            Ok(f) => f
                .chunks(2)
                .any(|kv| kv[0] == "flags" && kv.get(1).is_some_and(|v| v.contains("failover"))),
            Err(_) => true,
        }
    }

    /// The index of the primary the first sentinel names, if it is not `before` and that
    /// server answers `ROLE master`.
    fn new_primary(&self, before: Option<u16>) -> Option<usize> {
        let port = self.primary_port().filter(|p| Some(*p) != before)?;
        let i = self.servers.iter().position(|s| s.port() == Some(port))?;
        let mut conn = self.servers[i].client().get_connection().ok()?;
        let role: redis::RedisResult<Vec<redis::Value>> = redis::cmd("ROLE").query(&mut conn);
        matches!(role.as_deref(), Ok([redis::Value::BulkString(b), ..]) if b == b"master")
            .then_some(i)
    }
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        for c in &mut self.sentinels {
            // best effort: never panic in drop
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
