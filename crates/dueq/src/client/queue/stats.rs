//! A queue's counts, timings and per-minute history, summed over its partitions.

use super::Queue;
use crate::client::partitions::{merge_history, merge_stats};
use crate::error::{Error, Result};
use crate::protocol::queues;
use crate::stats::{MinuteStats, QueueStats};

impl Queue {
    /// Counts and timings, in O(log n) (the sum over the partitions of a partitioned
    /// queue: see [`Queue::partition_stats`]).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn stats(&self) -> Result<QueueStats> {
        if !self.part {
            let parts = self.partition_stats().await?;
            return merge_stats(parts).ok_or_else(|| Error::protocol("stats: no partitions"));
        }
        queues::stats(&mut self.client.conn(), &self.keys).await
    }

    /// Per-minute activity of the last hour by the Redis clock: 60 entries, oldest first, the
    /// last one the current (partial) minute; minutes without activity are zero. Counted by
    /// the scripts for every client and worker of the queue (claimed, succeeded, retried,
    /// dead, claim lateness). The counters cost a few hash increments per claim or ack call
    /// and are kept for 61 minutes.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn history(&self) -> Result<Vec<MinuteStats>> {
        let layout = self.layout().await?;
        let parts = self
            .each_part(&layout, |q| async move {
                queues::history(&mut q.client.conn(), &q.keys).await
            })
            .await?;
        Ok(merge_history(parts))
    }
}
