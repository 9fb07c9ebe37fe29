//! Writing tasks: one, a batch, or a batch answered task by task, routed over the partitions.

use futures_util::future::BoxFuture;

use super::Queue;
use crate::client::partitions::each;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::call::MAX_BATCH;
use crate::protocol::queues;
use crate::protocol::tasks::{self, EnqueueItem, EnqueueReply};
use crate::task::{Enqueued, TaskSpec};

impl Queue {
    /// Enqueues one task.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] or [`ErrorKind::PayloadTooLarge`] (nothing written),
    /// [`ErrorKind::Redis`] when Redis fails. Repeating an enqueue with a key creates no
    /// duplicate while the first task is scheduled or running; once it has finished, the
    /// key is free and a repeat creates a second task.
    pub async fn enqueue(&self, spec: TaskSpec) -> Result<Enqueued> {
        let mut v = self.enqueue_batch(std::slice::from_ref(&spec)).await?;
        v.pop()
            .ok_or_else(|| Error::protocol("enqueue: empty reply"))
    }

    /// Enqueues many tasks; one result per task, in order. Every task is checked before
    /// anything is written, so one bad task refuses the whole batch. Each slice of 1 000
    /// tasks of a partition is one atomic script call; a larger batch, or one over several
    /// partitions, is several calls.
    ///
    /// # Errors
    /// As [`Queue::enqueue`]; the message names the index of the first bad task. When one of
    /// several calls fails, the others' tasks are written all the same: [`Queue::enqueue_each`]
    /// tells which.
    pub async fn enqueue_batch(&self, specs: &[TaskSpec]) -> Result<Vec<Enqueued>> {
        self.enqueue_each(specs).await?.into_iter().collect()
    }

    /// Enqueues many tasks and answers each on its own, in order: written, or the error that
    /// kept it out. A batch over several partitions, or of more than 1 000 tasks, is several
    /// calls; when some fail (a node unreachable, a durable write not confirmed), the tasks
    /// of the others are written and answered, so a caller re-sends only what failed.
    ///
    /// # Errors
    /// Only when nothing was written: a bad task ([`ErrorKind::InvalidInput`],
    /// [`ErrorKind::PayloadTooLarge`], the message names its index), or the queue registry
    /// could not be written.
    pub async fn enqueue_each(&self, specs: &[TaskSpec]) -> Result<Vec<Result<Enqueued>>> {
        for (i, s) in specs.iter().enumerate() {
            s.check(self.client.payload_limit_bytes()).map_err(|e| {
                if specs.len() == 1 {
                    e
                } else {
                    Error::new(e.kind(), format!("task {i} of the batch (from 0): {e}"))
                }
            })?;
        }
        self.client.register(self.name()).await?;
        Ok(self.enqueue_routed(specs, 3).await)
    }

    /// Enqueues checked tasks, split over the partitions this client knows of. A partition
    /// above 0 refuses its share when its count is not the one it was routed by (after a
    /// FLUSHALL, or a change of the count, within the layout's cache time): the client then
    /// reads the layout again and routes that share anew, up to `tries` more times. When the
    /// count read again is the one the partition refused, the partition itself lost its
    /// settings (one node of a cluster wiped, partition 0's kept): the share goes there
    /// unchecked, as before the check existed.
    fn enqueue_routed<'a>(
        &'a self,
        specs: &'a [TaskSpec],
        tries: u8,
    ) -> BoxFuture<'a, Vec<Result<Enqueued>>> {
        Box::pin(async move {
            if !self.part {
                let layout = match self.layout().await {
                    Ok(l) => l,
                    Err(e) => return each(specs.len(), Err(e)),
                };
                if layout.n() > 1 {
                    let part_of = |s: &TaskSpec| match &s.key {
                        Some(k) => layout.of_key(k),
                        None => layout.next_keyless(),
                    };
                    return self
                        .scatter_each(&layout, specs, part_of, |q, mine| async move {
                            let (mut done, refused) = q.enqueue_here(&mine, true).await;
                            if refused {
                                let rest = &mine[done.len()..];
                                // (read afresh and cached for the routing below)
                                match self.layout_now().await {
                                    Ok(now) if now.n() == usize::from(q.keys().partitions) => {
                                        done.extend(q.enqueue_here(rest, false).await.0);
                                    }
                                    Ok(_) if tries > 0 => {
                                        done.extend(self.enqueue_routed(rest, tries - 1).await);
                                    }
                                    Ok(_) => done.extend(each(rest.len(), Err(layout_changed(&q)))),
                                    Err(e) => done.extend(each(rest.len(), Err(e))),
                                }
                            }
                            done
                        })
                        .await;
                }
            }
            let (mut done, refused) = self.enqueue_here(specs, true).await;
            if refused {
                let rest = specs.len() - done.len();
                done.extend(each(rest, Err(layout_changed(self))));
            }
            done
        })
    }

    /// Enqueues checked tasks into this handle's partition, a slice at a time; one answer per
    /// task, and whether the partition refused a slice because its count changed (then the
    /// answers stop there: the rest are not written). A slice that failed fails its tasks and
    /// the later ones (not sent). `checked`: a partition above 0 compares its count with the
    /// one it was routed by.
    async fn enqueue_here(
        &self,
        specs: &[TaskSpec],
        checked: bool,
    ) -> (Vec<Result<Enqueued>>, bool) {
        let mut conn = self.client.conn();
        let mut out = Vec::with_capacity(specs.len());
        for chunk in specs.chunks(MAX_BATCH) {
            let items: Vec<_> = chunk
                .iter()
                .map(|s| EnqueueItem {
                    key: s.key.as_deref(),
                    on_conflict: s.on_conflict,
                    due: s.due,
                    options: &s.options,
                    expiry: s.expiry,
                    debounce_max_ms: s.debounce_max_ms,
                    payload: &s.payload,
                    from_schedule: s.from_schedule,
                })
                .collect();
            let failed = match tasks::enqueue(&mut conn, &self.keys, &items, checked).await {
                Ok(EnqueueReply::Done(done, next_expiry)) => {
                    out.extend(done.into_iter().map(Ok));
                    match next_expiry {
                        Some(at) => queues::recovery_note(&mut conn, self.name(), at)
                            .await
                            .err(),
                        None => None,
                    }
                }
                Ok(EnqueueReply::LayoutChanged) => return (out, true),
                Err(e) => {
                    out.extend(each(chunk.len(), Err(e.again())));
                    Some(e)
                }
            };
            if let Some(e) = failed {
                // a task whose expiry was not noted is still expired by the recoverer's
                // sweep; later slices are not sent while Redis fails
                let sent = out.len();
                out.extend(each(specs.len() - sent, Err(e)));
                return (out, false);
            }
        }
        (out, false)
    }
}

/// A partition kept refusing an enqueue: the count changed again and again while this
/// client read the layout. Nothing of the refused share was written; the other partitions'
/// shares of the batch may have been.
fn layout_changed(q: &Queue) -> Error {
    Error::new(
        ErrorKind::Redis,
        format!(
            "queue {}: partition {} refused its share of the enqueue, the queue's partition \
             count kept changing; that share was not written (other partitions' shares may \
             have been: keyless tasks sent again are created again)",
            q.name(),
            q.keys().partition
        ),
    )
}
