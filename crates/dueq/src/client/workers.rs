//! The live workers list: every [`Worker`](crate::Worker) and `dueq serve` process whose
//! heartbeat ([`Heartbeat`](crate::Heartbeat)) has not expired, read from `dueq:workers`.

use serde::{Deserialize, Serialize};

use super::Client;
use crate::error::{Error, Result};
use crate::protocol::workers;

/// Default time between two heartbeats of a worker process, ms.
pub const DEFAULT_HEARTBEAT_MS: u64 = 5_000;
/// Shortest heartbeat interval accepted, ms.
pub const MIN_HEARTBEAT_MS: u64 = 100;
/// Longest heartbeat interval accepted, ms.
pub const MAX_HEARTBEAT_MS: u64 = 60_000;
/// Missed beats after which an entry counts as gone: a process that dies leaves the list
/// `HEARTBEAT_MISSES ×` its interval after its last beat (15 s by default).
pub const HEARTBEAT_MISSES: u64 = 3;
/// Most entries the registry holds; a new process beyond it (all of them live) is not listed
/// and says so in its log, and tries again every beat.
pub const MAX_WORKERS: usize = 10_000;
/// Most queue names one entry lists (a server delivering to more lists the first ones).
pub const MAX_LISTED_QUEUES: usize = 1_000;

/// What kind of process an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WorkerKind {
    /// A [`Worker`](crate::Worker) (a Rust program or `dueq work`).
    Worker,
    /// `dueq serve` (its push delivery and the HTTP API).
    Server,
}

impl WorkerKind {
    /// `"worker"` or `"server"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Server => "server",
        }
    }
}

/// One live worker process or server, as its last heartbeat described it. Times are epoch ms
/// by the Redis clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// Unique id of the process's registration (`host:pid:random`).
    pub id: String,
    /// Worker or server.
    pub kind: WorkerKind,
    /// Host name of the machine it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The dueq version it runs.
    pub version: String,
    /// Queues it takes work from (a server: the queues it pushes to webhooks).
    pub queues: Vec<String>,
    /// Most handlers it runs at once (a server: the sum of its webhooks' concurrency).
    pub concurrency: u64,
    /// Tasks whose handlers were running at the last heartbeat.
    pub in_hand: u64,
    /// First heartbeat.
    pub started_at_ms: u64,
    /// Last heartbeat.
    pub last_seen_ms: u64,
    /// When the entry counts as gone unless another heartbeat comes.
    pub expires_at_ms: u64,
    /// The language of the worker's program (`rust` for a [`Worker`](crate::Worker) and
    /// `dueq serve`; what an HTTP worker says of itself, e.g. `python`, `typescript`).
    pub language: String,
}

/// The part of an entry the process describes itself (the scripts add the times).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SelfInfo {
    pub kind: WorkerKind,
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub queues: Vec<String>,
    pub concurrency: u64,
    /// Entries written before languages were listed are Rust processes.
    #[serde(default = "rust")]
    pub language: String,
}

fn rust() -> String {
    "rust".to_owned()
}

/// Longest worker id an HTTP worker may give itself, bytes.
pub const MAX_WORKER_ID_BYTES: usize = 200;
/// A worker id (the registry's, and the one a claim keeps in its leases): 1 to
/// [`MAX_WORKER_ID_BYTES`] bytes of printable ASCII without spaces. `field` names it in the
/// error.
pub(crate) fn check_worker_id(field: &str, id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_WORKER_ID_BYTES || !id.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::invalid(format!(
            "{field}: 1 to {MAX_WORKER_ID_BYTES} bytes of printable ASCII without spaces"
        )));
    }
    Ok(())
}

/// Longest host, version or language text of a [`WorkerBeat`], bytes.
pub const MAX_WORKER_TEXT_BYTES: usize = 256;

/// A heartbeat sent for a worker process that is not a Rust [`Worker`](crate::Worker): a
/// Python or TypeScript worker beating over HTTP (`PUT /v1/workers/{id}`), listed in the same
/// registry. The entry counts as gone `ttl_ms` after this beat unless another comes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerBeat {
    /// The worker's own id: printable ASCII without spaces, 1 to 200 bytes.
    pub id: String,
    /// Queues it takes work from.
    pub queues: Vec<String>,
    /// Most handlers it runs at once.
    pub concurrency: u64,
    /// Handlers running now.
    pub in_hand: u64,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its client's version.
    pub version: String,
    /// Its language (`python`, `typescript`, ...).
    pub language: String,
    /// How long the entry lives without another beat, ms ([`MIN_HEARTBEAT_MS`] to
    /// [`HEARTBEAT_MISSES`] × [`MAX_HEARTBEAT_MS`]).
    pub ttl_ms: u64,
}

impl WorkerBeat {
    /// A beat of worker `id` serving `queues`; the rest unknown, expiring after three
    /// default heartbeat intervals.
    pub fn new(id: impl Into<String>, queues: Vec<String>) -> Self {
        Self {
            id: id.into(),
            queues,
            concurrency: 0,
            in_hand: 0,
            host: String::new(),
            pid: 0,
            version: String::new(),
            language: String::new(),
            ttl_ms: DEFAULT_HEARTBEAT_MS * HEARTBEAT_MISSES,
        }
    }

    fn validate(&self) -> Result<()> {
        check_worker_id("id", &self.id)?;
        if self.queues.len() > MAX_LISTED_QUEUES {
            return Err(Error::invalid(format!(
                "queues: at most {MAX_LISTED_QUEUES}"
            )));
        }
        for q in &self.queues {
            crate::protocol::keys::validate_queue_name(q)
                .map_err(|e| Error::invalid(format!("queues: {e}")))?;
        }
        for (field, v) in [
            ("host", &self.host),
            ("version", &self.version),
            ("language", &self.language),
        ] {
            if v.len() > MAX_WORKER_TEXT_BYTES || v.chars().any(char::is_control) {
                return Err(Error::invalid(format!(
                    "{field}: at most {MAX_WORKER_TEXT_BYTES} bytes, no control characters"
                )));
            }
        }
        let max_ttl = MAX_HEARTBEAT_MS * HEARTBEAT_MISSES;
        if !(MIN_HEARTBEAT_MS..=max_ttl).contains(&self.ttl_ms) {
            return Err(Error::invalid(format!(
                "ttl_ms: {MIN_HEARTBEAT_MS} to {max_ttl}"
            )));
        }
        Ok(())
    }
}

impl Client {
    /// Every live worker process and server (heartbeat not expired by the Redis clock),
    /// sorted by start time, then id. At most [`MAX_WORKERS`]; one Redis call.
    ///
    /// An entry written by something else than dueq (unreadable) is left out and logged.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let (_, entries) = workers::list(&mut self.conn()).await?;
        let mut out: Vec<WorkerInfo> = entries
            .into_iter()
            .filter_map(|e| match serde_json::from_str::<SelfInfo>(&e.info_json) {
                Ok(i) => Some(WorkerInfo {
                    id: e.id,
                    kind: i.kind,
                    host: i.host,
                    pid: i.pid,
                    version: i.version,
                    queues: i.queues,
                    concurrency: i.concurrency,
                    in_hand: e.in_hand,
                    started_at_ms: e.started_at_ms,
                    last_seen_ms: e.last_seen_ms,
                    expires_at_ms: e.expires_at_ms,
                    language: i.language,
                }),
                Err(err) => {
                    tracing::warn!(id = %e.id, error = %err, "unreadable dueq:workers entry skipped");
                    None
                }
            })
            .collect();
        out.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        Ok(out)
    }

    /// Registers or refreshes a worker that beats from outside this library (`PUT
    /// /v1/workers/{id}`): listed like a Rust worker until `ttl_ms` after its last beat or
    /// its [`remove_worker`](Self::remove_worker). Whether it is listed (`false`: the registry
    /// holds [`MAX_WORKERS`] live entries).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) naming the bad field (nothing
    /// written); [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn beat_worker(&self, beat: &WorkerBeat) -> Result<bool> {
        beat.validate()?;
        let info = SelfInfo {
            kind: WorkerKind::Worker,
            host: beat.host.clone(),
            pid: beat.pid,
            version: beat.version.clone(),
            queues: beat.queues.clone(),
            concurrency: beat.concurrency,
            language: beat.language.clone(),
        };
        let json = serde_json::to_string(&info)
            .map_err(|e| crate::Error::protocol(format!("worker beat: {e}")))?;
        let r = workers::beat(
            &mut self.conn(),
            &beat.id,
            beat.ttl_ms,
            beat.in_hand,
            &json,
            MAX_WORKERS,
        )
        .await?;
        Ok(r.registered)
    }

    /// Takes worker `id` off the live workers list (a graceful stop); whether it was listed.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind).
    pub async fn remove_worker(&self, id: &str) -> Result<bool> {
        workers::remove(&mut self.conn(), id).await
    }

    /// The live workers that serve queue `queue` (as [`workers`](Self::workers)).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for an invalid queue name (nothing is
    /// read); otherwise as [`workers`](Self::workers).
    pub async fn workers_of(&self, queue: &str) -> Result<Vec<WorkerInfo>> {
        crate::protocol::keys::validate_queue_name(queue)?;
        let mut all = self.workers().await?;
        all.retain(|w| w.queues.iter().any(|q| q == queue));
        Ok(all)
    }
}
