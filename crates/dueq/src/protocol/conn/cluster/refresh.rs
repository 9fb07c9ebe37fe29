//! Reading the slot map again: in the background every second, and soon after a call found
//! it stale, at most once per gap and never while calls wait for it.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, RedisResult, Value};
use tokio::time::Instant;

use super::ClusterLink;
use super::call::no_master;
use super::slots::Topology;

/// Least time between two reads of the slot map.
pub(super) const REFRESH_GAP: Duration = Duration::from_millis(100);
/// How often the slot map is read again when nothing asked for it: calls to a master that
/// takes them and answers none (stopped, cut off) fail only by their timeout, so its
/// replica's promotion is seen this soon at the latest.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Longest wait for one node's `CLUSTER SLOTS` (then the next node is asked).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether a read of the slot map is running, and when the last one ended.
#[derive(Default)]
pub(super) struct RefreshState {
    pub(super) running: bool,
    pub(super) last: Option<Instant>,
}

impl ClusterLink {
    /// Reads the slot map again in the background, unless that is being done or was done
    /// less than [`REFRESH_GAP`] ago.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
        {
            let mut st = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
            if st.running || st.last.is_some_and(|t| t.elapsed() < REFRESH_GAP) {
                return;
            }
            st.running = true;
        }
        let link = self.clone();
        tokio::spawn(async move {
            if let Err(e) = link.read_topology(None).await {
                tracing::debug!(error = %e, "Redis Cluster: no node told the slot map");
            }
            link.refresh_done();
        });
    }

    pub(super) fn refresh_done(&self) {
        let mut st = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        st.running = false;
        st.last = Some(Instant::now());
    }

    /// Asks the known nodes (masters first), then the seeds, but never `skip`, for `CLUSTER
    /// SLOTS`, and keeps the first answer.
    pub(super) async fn read_topology(self: &Arc<Self>, skip: Option<&str>) -> RedisResult<()> {
        let known = self.topology();
        let mut asked: Vec<String> = skip.map(str::to_owned).into_iter().collect();
        let mut last_err = None;
        for addr in known.nodes.iter().chain(self.seeds.iter()) {
            if asked.contains(addr) {
                continue;
            }
            asked.push(addr.clone());
            let node = match self.node(addr) {
                Ok(n) => n,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let answer = tokio::time::timeout(REFRESH_TIMEOUT, async {
                let (made, mut conn) = node.connection(self.response_timeout).await?;
                let r = conn
                    .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
                    .await
                    .and_then(Value::extract_error);
                if r.as_ref().is_err_and(|e| e.is_io_error() || e.is_timeout()) {
                    node.forget(made);
                }
                r
            })
            .await;
            let parsed = match answer {
                Ok(Ok(v)) => Topology::parse(&v, addr),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(RedisError::from((
                    ErrorKind::Io,
                    "CLUSTER SLOTS timed out",
                    addr.clone(),
                ))),
            };
            match parsed {
                Ok(t) => {
                    if t != *known {
                        tracing::debug!(masters = ?t.masters, "Redis Cluster: new slot map");
                    }
                    *self.topology.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(t);
                    return Ok(());
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(no_master))
    }
}

/// Reads the slot map every [`WATCH_EVERY`] (with jitter) until the link is dropped.
pub(super) async fn watch(link: std::sync::Weak<ClusterLink>) {
    loop {
        tokio::time::sleep(crate::backoff::jittered(WATCH_EVERY)).await;
        let Some(l) = link.upgrade() else { return };
        l.refresh_soon();
    }
}
