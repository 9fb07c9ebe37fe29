//! [`Queue`]: a handle on one queue and all its partitions. Its operations live in one file
//! per concern: `enqueue.rs` (writing tasks), `tasks.rs` (one task by id or key: get,
//! cancel, reschedule), `claim.rs` (claims without waiting), `leases.rs` (ack, nack, extend,
//! release), `recover.rs` (expired leases), `settings.rs` (pause, resume, settings) and
//! `stats.rs` (counts and history). Waiting for due work is [`DueClaimer`](crate::DueClaimer).

mod claim;
mod enqueue;
mod leases;
mod recover;
mod settings;
mod stats;
mod tasks;

use std::sync::Arc;

use super::{Client, Layout};
use crate::backoff::Backoff;
use crate::error::Result;
use crate::protocol::keys::QueueKeys;

pub use crate::protocol::leases::Throttle;
pub use claim::Claim;
pub use leases::MAX_ERROR_BYTES;
pub(crate) use leases::cut_error;
pub use recover::RecoverReport;
pub use tasks::CancelReport;

/// A handle on one queue (all its partitions). Cheap to clone; no Redis call until an
/// operation runs.
#[derive(Clone, Debug)]
pub struct Queue {
    client: Client,
    keys: Arc<QueueKeys>,
    backoff: Backoff,
    /// A handle on one partition (`keys`), made by the routing of `client/partitions.rs`:
    /// its operations never route again.
    part: bool,
}

impl Queue {
    pub(crate) fn new(client: Client, name: &str) -> Result<Self> {
        Ok(Self {
            client,
            keys: Arc::new(QueueKeys::new(name)?),
            backoff: Backoff::default(),
            part: false,
        })
    }

    /// This handle bound to one partition's keys.
    pub(crate) fn on_keys(&self, keys: Arc<QueueKeys>) -> Self {
        Self {
            client: self.client.clone(),
            keys,
            backoff: self.backoff,
            part: true,
        }
    }

    pub(crate) fn is_part(&self) -> bool {
        self.part
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis keys of this queue (of its partition 0 when it has several; for operators
    /// and tests).
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// This handle with durable writes: its enqueues, acks, nacks, cancels,
    /// reschedules and dead-letter retries and deletes are followed by `WAIT replicas
    /// timeout_ms` and fail with [`ErrorKind::NotReplicated`](crate::ErrorKind::NotReplicated) when fewer replicas confirm in
    /// time. 0 replicas turns it off (also when the client has it on). See
    /// [`ClientBuilder::replicas`](crate::ClientBuilder::replicas) for what it promises.
    pub fn with_replicas(mut self, replicas: u8, timeout_ms: u64) -> Self {
        self.client = self.client.with_replicas(replicas, timeout_ms);
        self
    }

    /// The backoff used when a nack gives no delay and when an expired lease is recovered.
    /// Default [`Backoff::default`].
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The partitions, when this is a handle on a queue of several (else `None`: work on
    /// this handle's keys).
    pub(crate) async fn split_layout(&self) -> Result<Option<Arc<Layout>>> {
        if self.part {
            return Ok(None);
        }
        let layout = self.layout().await?;
        Ok((layout.n() > 1).then_some(layout))
    }
}
