//! Finishing or keeping a claimed task: ack, nack, extend, release; each batch split by
//! partition, a failed partition failing its own items only.

use super::Queue;
use crate::error::{Error, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::leases::{self, NackItem};
use crate::task::{AckOutcome, LeaseToken, NackOutcome, TaskId, validate_lease_ms};

/// Longest `last_error` text kept, in bytes (longer texts are cut at a character boundary).
pub const MAX_ERROR_BYTES: usize = 4096;

pub(crate) fn cut_error(e: &str) -> &str {
    if e.len() <= MAX_ERROR_BYTES {
        return e;
    }
    let mut end = MAX_ERROR_BYTES;
    while !e.is_char_boundary(end) {
        end -= 1;
    }
    &e[..end]
}

impl Queue {
    /// Acknowledges (completes) a claimed task.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn ack(&self, id: &TaskId, token: &LeaseToken) -> Result<AckOutcome> {
        let v = self.ack_batch(&[(id.clone(), token.clone())]).await?;
        v.into_iter()
            .next()
            .ok_or_else(|| Error::protocol("ack: empty reply"))
    }

    /// Acknowledges many claimed tasks; one outcome per task, in order.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails (on a queue of several partitions, the tasks of
    /// the partitions that answered are acknowledged: [`Queue::ack_each`] tells which).
    pub async fn ack_batch(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<AckOutcome>> {
        self.ack_each(items).await.into_iter().collect()
    }

    /// Acknowledges many claimed tasks; one answer per task, in order. On a queue of several
    /// partitions each partition is one call of its own, and a partition that failed (its
    /// node unreachable, a durable write not confirmed) fails its own tasks only.
    pub async fn ack_each(&self, items: &[(TaskId, LeaseToken)]) -> Vec<Result<AckOutcome>> {
        let ack =
            |q: Queue, mine: Vec<(TaskId, LeaseToken)>| async move { q.ack_here(&mine).await };
        self.by_id_each(items, |i| i.0.as_str(), ack).await
    }

    /// Acknowledges tasks of this handle's partition, a script call per 1 000.
    async fn ack_here(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<AckOutcome>> {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::ack(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }

    /// Fails the current attempt: the task is due again after `retry_in_ms` (or the queue's
    /// backoff when `None`), or goes to the dead-letter queue when `permanent` or out of
    /// attempts. `error` is kept as `last_error` (cut to 4 KiB).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn nack(
        &self,
        id: &TaskId,
        token: &LeaseToken,
        error: &str,
        retry_in_ms: Option<u64>,
        permanent: bool,
    ) -> Result<NackOutcome> {
        let item = NackItem {
            id,
            token,
            retry_in_ms,
            permanent,
            error: cut_error(error),
        };
        let v = self.nack_items(&[item]).await?;
        v.into_iter()
            .next()
            .ok_or_else(|| Error::protocol("nack: empty reply"))
    }

    /// Fails the current attempt of many claimed tasks, one script call per 1 000; one
    /// outcome per task, in order (a stale token refuses only its own task). Each item is
    /// `(id, lease_token, error, retry_in_ms, permanent)` with the meaning of [`Queue::nack`]:
    /// `error` is kept as `last_error` (cut to 4 KiB), `retry_in_ms` `None` uses the queue's
    /// backoff, `permanent` sends the task straight to the dead-letter queue.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn nack_batch(
        &self,
        items: &[(&TaskId, &LeaseToken, &str, Option<u64>, bool)],
    ) -> Result<Vec<NackOutcome>> {
        self.nack_each(items).await.into_iter().collect()
    }

    /// [`Queue::nack_batch`] with one answer per task: on a queue of several partitions a
    /// partition that failed fails its own tasks only (as [`Queue::ack_each`]).
    pub async fn nack_each(
        &self,
        items: &[(&TaskId, &LeaseToken, &str, Option<u64>, bool)],
    ) -> Vec<Result<NackOutcome>> {
        let batch: Vec<NackItem<'_>> = items
            .iter()
            .map(|&(id, token, error, retry_in_ms, permanent)| NackItem {
                id,
                token,
                retry_in_ms,
                permanent,
                error: cut_error(error),
            })
            .collect();
        self.nack_items_each(&batch).await
    }

    pub(crate) async fn nack_items(&self, items: &[NackItem<'_>]) -> Result<Vec<NackOutcome>> {
        self.nack_items_each(items).await.into_iter().collect()
    }

    /// Fails attempts, one answer per item (a failed partition fails its own items only).
    pub(crate) async fn nack_items_each(&self, items: &[NackItem<'_>]) -> Vec<Result<NackOutcome>> {
        self.by_id_each(
            items,
            |i| i.id.as_str(),
            |q, mine| async move { q.nack_here(&mine).await },
        )
        .await
    }

    /// Fails attempts of tasks of this handle's partition, a script call per 1 000.
    async fn nack_here(&self, items: &[NackItem<'_>]) -> Result<Vec<NackOutcome>> {
        let backoff = self.backoff_table().await;
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::nack(&mut conn, &self.keys, chunk, &backoff).await?);
        }
        Ok(out)
    }

    /// Extends a lease to `lease_ms` from now; returns the new deadline (epoch ms), or `None`
    /// when the lease was lost.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad lease, [`ErrorKind::Redis`](crate::ErrorKind::Redis).
    pub async fn extend(
        &self,
        id: &TaskId,
        token: &LeaseToken,
        lease_ms: u64,
    ) -> Result<Option<u64>> {
        validate_lease_ms(lease_ms)?;
        let v = self.extend_items(&[(id, token, lease_ms)]).await?;
        Ok(v.into_iter().next().flatten())
    }

    pub(crate) async fn extend_items(
        &self,
        items: &[(&TaskId, &LeaseToken, u64)],
    ) -> Result<Vec<Option<u64>>> {
        self.extend_each(items).await.into_iter().collect()
    }

    /// Extends leases, one answer per item: a failed partition fails its own items only, so
    /// the leases of the other partitions are kept.
    pub(crate) async fn extend_each(
        &self,
        items: &[(&TaskId, &LeaseToken, u64)],
    ) -> Vec<Result<Option<u64>>> {
        self.by_id_each(
            items,
            |i| i.0.as_str(),
            |q, mine| async move { q.extend_here(&mine).await },
        )
        .await
    }

    /// Extends leases of tasks of this handle's partition, a script call per 1 000.
    async fn extend_here(&self, items: &[(&TaskId, &LeaseToken, u64)]) -> Result<Vec<Option<u64>>> {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::extend(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }

    /// Hands leases back unfinished: each task is due again at once (its old due time) and
    /// the attempt is not counted. `true` per task released.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind::Redis) when Redis fails.
    pub async fn release(&self, items: &[(TaskId, LeaseToken)]) -> Result<Vec<bool>> {
        let release =
            |q: Queue, mine: Vec<(TaskId, LeaseToken)>| async move { q.release(&mine).await };
        if let Some(out) = self.by_id(items, |i| i.0.as_str(), release).await? {
            return Ok(out);
        }
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH) {
            out.extend(leases::release(&mut conn, &self.keys, chunk).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::cut_error;

    #[test]
    fn errors_are_cut_on_char_boundaries() {
        let long = "é".repeat(5000);
        let cut = cut_error(&long);
        assert!(cut.len() <= super::MAX_ERROR_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(cut_error("short"), "short");
    }
}
