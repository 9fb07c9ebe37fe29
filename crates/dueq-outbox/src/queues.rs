//! The relay's side of Redis: the queue handles it serves, with their succeeded retention set
//! on first use, the lookup of a row's task, and the client's metrics recorder.
//!
//! The relay loop, the reconciler, the tombstone sweep and the orphan sweep all take a
//! [`Queues`], so none of them needs the [`Relay`](crate::Relay) itself.

use std::collections::HashMap;
use std::sync::Mutex;

use dueq::{Queue, TaskId, TaskRef, TaskState};

use crate::error::Result;
use crate::rows::{Found, OutRow, lock};

/// Queue handles by name over one client; shared by every clone of a relay.
pub(crate) struct Queues {
    client: dueq::Client,
    succeeded_retention: u64,
    handles: Mutex<HashMap<String, Queue>>,
}

impl Queues {
    /// Handles over `client`; each queue keeps its newest `succeeded_retention` succeeded
    /// tasks (0: its setting is left alone).
    pub(crate) fn new(client: dueq::Client, succeeded_retention: u64) -> Self {
        Self {
            client,
            succeeded_retention,
            handles: Mutex::default(),
        }
    }

    /// The Redis client.
    pub(crate) fn client(&self) -> &dueq::Client {
        &self.client
    }

    /// The queue handle for a name, setting its succeeded retention on first use.
    pub(crate) async fn get(&self, name: &str) -> Result<Queue> {
        if let Some(q) = lock(&self.handles).get(name) {
            return Ok(q.clone());
        }
        let q = self.client.queue(name)?;
        if self.succeeded_retention > 0 {
            q.update_settings(
                &dueq::SettingsPatch::default().succeeded_max(Some(self.succeeded_retention)),
            )
            .await?;
        }
        lock(&self.handles).insert(name.to_owned(), q.clone());
        Ok(q)
    }

    /// Forgets one queue's handle, so its retention is set again on next use.
    pub(crate) fn forget(&self, name: &str) {
        lock(&self.handles).remove(name);
    }

    /// Forgets the queue handles, so each queue's retention is set again on next use (Redis
    /// may have lost its settings).
    pub(crate) fn forget_all(&self) {
        lock(&self.handles).clear();
    }

    /// Looks up a row's task in Redis: live by key, else finished by its id (a task found by
    /// id counts only if it carries the row's key: after a wipe Redis reuses ids). A lookup
    /// by key also finds the key's newest dead task, which may be another row's: only its
    /// live task counts there.
    pub(crate) async fn find(&self, row: &OutRow) -> Result<Found> {
        let q = self.get(&row.queue).await?;
        if let Some(t) = q.get(&row.key_ref()?).await?
            && is_live(&t)
        {
            return Ok(Found::Live(t.id.to_string()));
        }
        let Some(id) = &row.task_id else {
            return Ok(Found::Missing);
        };
        let Ok(id) = TaskId::new(id.clone()) else {
            return Ok(Found::Missing);
        };
        Ok(match q.get(&TaskRef::Id(id)).await? {
            Some(t) if t.key.as_deref() == Some(row.key.as_str()) => match t.state {
                TaskState::Succeeded => Found::Succeeded,
                TaskState::Dead => Found::Dead(t.last_error),
                _ => Found::Live(t.id.to_string()),
            },
            _ => Found::Missing,
        })
    }

    /// Runs `f` (which emits `dueq_outbox_*` metrics) against the client's metrics recorder
    /// when it has one ([`dueq::Client::with_metrics_recorder`], as in `dueq serve`, whose
    /// `/metrics` then shows them), else against the process-wide recorder.
    pub(crate) fn record<T>(&self, f: impl FnOnce() -> T) -> T {
        match self.client.metrics_recorder() {
            Some(r) => metrics::with_local_recorder(r, f),
            None => f(),
        }
    }
}

/// Whether `t` is scheduled or running (a lookup by key also answers a dead task).
pub(crate) fn is_live(t: &dueq::Task) -> bool {
    matches!(t.state, TaskState::Scheduled | TaskState::Active)
}
