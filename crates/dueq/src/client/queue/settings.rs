//! A queue's stored settings: pause and resume, read and change them (over every partition),
//! and the backoff table a failed attempt uses.

use std::sync::Arc;

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::keys::QueueKeys;
use crate::protocol::queues;
use crate::settings::{QueueSettings, RateLimit, SettingsPatch};

impl Queue {
    /// Stops handing out tasks of this queue (enqueue, cancel and the rest still work).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn pause(&self) -> Result<()> {
        self.set_meta(&[("paused", "1".into())]).await
    }

    /// Hands out tasks again after [`Queue::pause`].
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn resume(&self) -> Result<()> {
        self.set_meta(&[("paused", "0".into())]).await
    }

    /// The queue's stored settings (see [`QueueSettings`]; `None` fields are defaults).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn settings(&self) -> Result<QueueSettings> {
        let first = queues::settings_get(&mut self.client.conn(), &self.keys)
            .await?
            .0;
        if first.partition_count() == 1 {
            return Ok(first);
        }
        // each partition holds its share of every limit: the queue's limit is their sum (the
        // partitions' keys from the layout, read now: the count may have just changed)
        let layout = self.layout_now().await?;
        let parts = self
            .each_part(&layout, |q| async move {
                Ok(queues::settings_get(&mut q.client.conn(), &q.keys).await?.0)
            })
            .await?;
        let mut total = first;
        for s in parts.iter().skip(1) {
            let add = |a: Option<u32>, b: Option<u32>| a.map(|a| a + b.unwrap_or(0));
            total.concurrency = add(total.concurrency, s.concurrency);
            total.group_concurrency = add(total.group_concurrency, s.group_concurrency);
            let add_rate = |a: Option<RateLimit>, b: Option<RateLimit>| {
                a.map(|a| RateLimit::new(a.max + b.map_or(0, |b| b.max), a.per_ms))
            };
            total.rate_limit = add_rate(total.rate_limit, s.rate_limit);
            total.group_rate_limit = add_rate(total.group_rate_limit, s.group_rate_limit);
        }
        Ok(total)
    }

    /// Changes the queue's settings: fields the patch leaves `None` stay as they are. Every
    /// process applies the change at its next claim. Returns the settings after the change.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the field, before anything is written;
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn update_settings(&self, patch: &SettingsPatch) -> Result<QueueSettings> {
        patch.validate()?;
        if patch.is_empty() {
            return self.settings().await;
        }
        let current = self.settings().await?;
        let target = current.patched(patch);
        let (old_n, new_n) = (current.partition_count(), target.partition_count());
        target.check_split(new_n)?;
        self.client.register(self.name()).await?;
        if old_n == 1 && new_n == 1 {
            let (set, clear) = patch.fields();
            queues::settings_set(&mut self.client.conn(), &self.keys, &set, &clear).await?;
            return self.settings().await;
        }
        let mut paused = false;
        if old_n != new_n {
            // keys are found by their hash over the partition count: refused while any
            // task (or dead or kept one) would be lost to lookups
            let (mut held, mut windows) = (0, 0);
            for p in 0..old_n {
                let k = Arc::new(QueueKeys::partition(self.name(), p, old_n)?);
                let mut conn = self.client.conn();
                let s = queues::stats(&mut conn, &k).await?;
                held += s.scheduled + s.active + s.dead + s.succeeded_kept;
                paused |= s.paused;
                windows += queues::window_count(&mut conn, &k).await?;
            }
            if held > 0 {
                let tasks = if held == 1 { "task" } else { "tasks" };
                return Err(Error::invalid(format!(
                    "partitions: the queue holds {held} {tasks} (scheduled, active, dead or \
                     kept); change its partitions only while it is empty"
                )));
            }
            // a key in a unique window would be looked for in another partition
            if windows > 0 {
                return Err(Error::invalid(format!(
                    "partitions: {windows} business keys of the queue are in a unique window; \
                     change its partitions once their windows ended"
                )));
            }
        }
        // the partitions above 0 of the old count (their keys depend on the count) forget it
        // first, so an enqueue routed by it is refused there (enqueue.lua) instead of
        // landing where no one looks
        if old_n != new_n {
            for p in 1..old_n {
                let k = QueueKeys::partition(self.name(), p, old_n)?;
                queues::settings_set(&mut self.client.conn(), &k, &[], &["partitions"]).await?;
            }
        }
        // partition 0 last: it holds the count, so no process routes to a partition whose
        // settings are not written yet
        for p in (0..new_n).rev() {
            let k = QueueKeys::partition(self.name(), p, new_n)?;
            let (mut set, clear) = target.share_for(p, new_n).as_patch().fields();
            if p > 0 {
                set.push((
                    "seq_floor",
                    (u64::from(p) << crate::protocol::keys::ID_PARTITION_SHIFT).to_string(),
                ));
            }
            if old_n != new_n {
                // (a partition's meta may be left from an earlier count, paused or not)
                set.push(("paused", if paused { "1" } else { "0" }.to_owned()));
            }
            queues::settings_set(&mut self.client.conn(), &k, &set, &clear).await?;
        }
        self.client.forget_layout(self.name());
        self.settings().await
    }

    /// Writes `meta` fields (of every partition); the queue is listed by [`Client::queues`]
    /// from then on, even before its first task (a queue paused ahead of time must show up).
    async fn set_meta(&self, fields: &[(&str, String)]) -> Result<()> {
        self.client.register(self.name()).await?;
        // read now, not from the cache: a count changed in the last seconds must be paused
        // whole
        let layout = self.layout_now().await?;
        self.each_part(&layout, |q| async move {
            queues::settings_set(&mut q.client.conn(), &q.keys, fields, &[]).await
        })
        .await?;
        Ok(())
    }

    /// The backoff table for a failed attempt: the queue's `backoff` setting when it has one
    /// (cached per client, read again when a claim shows a new settings version or after
    /// 10 s), else this handle's ([`Queue::with_backoff`]).
    pub(super) async fn backoff_table(&self) -> Vec<u64> {
        let policy = match self.client.cached_backoff(&self.keys.meta) {
            Some(b) => b,
            None => match queues::settings_get(&mut self.client.conn(), &self.keys).await {
                Ok((s, version)) => {
                    let b = s.backoff.map(|b| b.policy());
                    self.client.store_backoff(&self.keys.meta, version, b);
                    b
                }
                // the failure itself will surface in the call that follows
                Err(_) => None,
            },
        };
        policy.unwrap_or(self.backoff).table_ms()
    }
}
