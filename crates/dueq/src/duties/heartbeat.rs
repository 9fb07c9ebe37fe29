//! The heartbeat is responsible for keeping one process's entry in the live workers list
//! (`dueq:workers`, [`Client::workers`]) while it runs, and for removing it when it stops.
//!
//! Every [`Worker`](crate::Worker) runs one and `dueq serve` one (the same component, so the
//! list means the same for both). It beats once at start (registration), then every interval
//! ([`DEFAULT_HEARTBEAT_MS`], 5 s): one script call (`worker_beat.lua`) that writes the
//! process's self-description and load, stamps the Redis time, and sets the entry to expire
//! [`HEARTBEAT_MISSES`] intervals later (15 s). A process that dies (SIGKILL, a lost machine)
//! simply stops beating and leaves the list at that expiry; a graceful stop removes the entry
//! at once (`worker_remove.lua`). The cost is one call per interval per process, whatever the
//! number of tasks: nothing on the task path writes to the registry, the load (tasks in hand)
//! is read from memory at beat time.
//!
//! A failed beat is logged and the next one comes at the next interval (two can fail before
//! the entry expires); a registry full of live workers ([`MAX_WORKERS`]) refuses the
//! newcomer, which logs it once and keeps trying.
//!
//! Rejected alternative: a per-worker key with `PEXPIRE` plus an index set. It expires by
//! itself, but the key and the index live in different slots on a cluster, so keeping them
//! consistent takes two calls per beat and leaves orphans either way; one hash whose readers
//! skip expired entries and whose writers trim them is one call and one slot.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::client::{
    Client, DEFAULT_HEARTBEAT_MS, HEARTBEAT_MISSES, MAX_HEARTBEAT_MS, MAX_LISTED_QUEUES,
    MAX_WORKERS, MIN_HEARTBEAT_MS, SelfInfo, WorkerKind,
};
use crate::error::{Error, Result};
use crate::protocol::workers;

/// What a process reports at each beat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerLoad {
    /// Queues it takes work from (at most [`MAX_LISTED_QUEUES`] are listed).
    pub queues: Vec<String>,
    /// Most handlers it runs at once.
    pub concurrency: u64,
    /// Handlers running now.
    pub in_hand: u64,
}

impl WorkerLoad {
    /// A load of `in_hand` running handlers out of `concurrency`, on `queues`.
    pub fn new(queues: Vec<String>, concurrency: u64, in_hand: u64) -> Self {
        Self {
            queues,
            concurrency,
            in_hand,
        }
    }
}

type Probe = Arc<dyn Fn() -> WorkerLoad + Send + Sync>;

/// The heartbeat duty of one process (module docs). Not `Clone`: two copies would beat
/// under one id.
pub struct Heartbeat {
    client: Client,
    id: String,
    kind: WorkerKind,
    interval_ms: u64,
    probe: Probe,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("interval_ms", &self.interval_ms)
            .finish_non_exhaustive()
    }
}

/// The machine's host name: `/proc/sys/kernel/hostname`, else `/etc/hostname`, else
/// `$HOSTNAME`, else `unknown` (no libc call; read once).
fn host_name() -> &'static str {
    static HOST: LazyLock<String> = LazyLock::new(|| {
        ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .chain(std::env::var("HOSTNAME").ok())
            .map(|s| s.trim().to_owned())
            .find(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_owned())
    });
    &HOST
}

/// Checks a heartbeat interval.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind) outside
/// [`MIN_HEARTBEAT_MS`]..=[`MAX_HEARTBEAT_MS`].
pub fn validate_heartbeat_ms(ms: u64) -> Result<()> {
    if !(MIN_HEARTBEAT_MS..=MAX_HEARTBEAT_MS).contains(&ms) {
        return Err(Error::invalid(format!(
            "heartbeat_ms {ms} is out of range: use {MIN_HEARTBEAT_MS} to {MAX_HEARTBEAT_MS}"
        )));
    }
    Ok(())
}

impl Heartbeat {
    /// The heartbeat of a new registration of this process, of kind `kind`, beating every
    /// [`DEFAULT_HEARTBEAT_MS`] and reporting an empty load until [`load`](Self::load) says
    /// how to read it. The id is `host:pid:` and 8 random hex digits, so two workers of one
    /// process are two entries.
    pub fn new(client: Client, kind: WorkerKind) -> Self {
        let id = format!(
            "{}:{}:{:08x}",
            host_name(),
            std::process::id(),
            rand::random::<u32>()
        );
        Self {
            client,
            id,
            kind,
            interval_ms: DEFAULT_HEARTBEAT_MS,
            probe: Arc::new(WorkerLoad::default),
        }
    }

    /// How the process's load is read at each beat (called on the heartbeat's task; keep it
    /// cheap: it reads memory, not Redis).
    pub fn load(mut self, probe: impl Fn() -> WorkerLoad + Send + Sync + 'static) -> Self {
        self.probe = Arc::new(probe);
        self
    }

    /// Time between beats, ms: [`MIN_HEARTBEAT_MS`] to [`MAX_HEARTBEAT_MS`], default
    /// [`DEFAULT_HEARTBEAT_MS`]. The entry expires [`HEARTBEAT_MISSES`] intervals after the
    /// last beat. Shorter intervals notice a dead process sooner and cost one Redis call each.
    ///
    /// # Errors
    /// As [`validate_heartbeat_ms`].
    pub fn interval_ms(mut self, ms: u64) -> Result<Self> {
        validate_heartbeat_ms(ms)?;
        self.interval_ms = ms;
        Ok(self)
    }

    /// The id of this registration in [`Client::workers`].
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How long after its last beat the entry counts as gone, ms.
    pub fn ttl_ms(&self) -> u64 {
        self.interval_ms * HEARTBEAT_MISSES
    }

    /// Beats until `stop` completes, then removes the entry. A beat in flight finishes first,
    /// so the removal is the last call and nothing registers the entry again.
    pub async fn run(self, stop: impl Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        let mut refused = false;
        let interval = Duration::from_millis(self.interval_ms);
        loop {
            let next = tokio::time::Instant::now() + interval;
            match self.beat().await {
                Ok(r) if !r.registered => {
                    if !refused {
                        tracing::warn!(id = %self.id, "the workers registry is full \
                            ({MAX_WORKERS} live entries): this process is not listed");
                    }
                    refused = true;
                }
                Ok(_) => refused = false,
                Err(e) => tracing::warn!(id = %self.id, error = %e,
                    "heartbeat failed; trying again at the next beat"),
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        if let Err(e) = workers::remove(&mut self.client.conn(), &self.id).await {
            tracing::warn!(id = %self.id, error = %e,
                "could not remove this process from the workers list; it expires by itself");
        }
    }

    async fn beat(&self) -> Result<workers::BeatReply> {
        let load = (self.probe)();
        let mut queues = load.queues;
        queues.truncate(MAX_LISTED_QUEUES);
        let info = SelfInfo {
            kind: self.kind,
            host: host_name().to_owned(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            queues,
            concurrency: load.concurrency,
            language: "rust".to_owned(),
        };
        let json =
            serde_json::to_string(&info).map_err(|e| Error::protocol(format!("heartbeat: {e}")))?;
        let r = workers::beat(
            &mut self.client.conn(),
            &self.id,
            self.ttl_ms(),
            load.in_hand,
            &json,
            MAX_WORKERS,
        )
        .await?;
        if r.removed > 0 {
            tracing::debug!(
                removed = r.removed,
                now_ms = r.now_ms,
                "expired worker entries trimmed"
            );
        }
        // on the test clock, a FLUSHALL between tests dropped its key: put it back at Redis
        // time, so processes that connect next follow the clock too
        if let Some(clock) = self.client.test_clock() {
            clock.now().await?;
        }
        Ok(r)
    }
}
