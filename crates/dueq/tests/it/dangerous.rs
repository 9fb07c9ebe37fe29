//! Dangerous settings are refused, not obeyed (DESIGN 2.17): a lease shorter than a worker can
//! renew, an expiry at or before the due time, an `every_ms` below 1 000, a grace a claim
//! cannot meet, a dead-letter cap of 0. Each error names the field and nothing is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dueq::{
    ClaimedTask, Due, ErrorKind, MIN_LEASE_MS, Outcome, ScheduleSpec, SettingsPatch, TaskSpec,
    Worker,
};

use crate::support::{Ctx, wait_stats};

fn refused<T: std::fmt::Debug>(r: dueq::Result<T>, field: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains(field), "{field} not named in: {e}");
}

#[tokio::test]
async fn a_lease_below_a_second_is_refused_everywhere_it_is_set() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("q");
    let short = MIN_LEASE_MS - 1;
    refused(
        q.enqueue(TaskSpec::new(b"x".to_vec()).lease_ms(short))
            .await,
        "lease_ms",
    );
    refused(
        q.enqueue(TaskSpec::new(b"x".to_vec()).lease_ms(1)).await,
        "lease_ms",
    );
    refused(
        q.update_settings(&SettingsPatch::default().lease_ms(Some(short)))
            .await,
        "lease_ms",
    );
    refused(
        q.set_schedule(
            &ScheduleSpec::new("s", b"x".to_vec())
                .every_ms(60_000)
                .lease_ms(short),
        )
        .await,
        "lease_ms",
    );
    refused(
        Worker::builder(ctx.client.clone())
            .lease_ms(short)
            .handle("q", |_t: ClaimedTask| async { Outcome::Success })
            .build()
            .map(|_| ()),
        "lease_ms",
    );
    // nothing was written by any of them
    let s = q.stats().await.unwrap();
    assert_eq!(s.enqueued_total, 0);
    assert_eq!(q.settings().await.unwrap().lease_ms, None);
    assert!(q.schedules().await.unwrap().is_empty());

    // a claim's override and an extend
    q.enqueue(TaskSpec::new(b"x".to_vec())).await.unwrap();
    refused(q.claim(1, Some(short)).await, "lease_ms");
    let c = q.claim(1, Some(MIN_LEASE_MS)).await.unwrap();
    let t = &c.tasks[0];
    assert_eq!(t.lease_expires_at_ms, c.now_ms + MIN_LEASE_MS);
    refused(q.extend(&t.id, &t.lease_token, short).await, "lease_ms");
}

/// The shortest lease that passes is renewed in time: two workers, a handler three times as
/// long as the lease, and each task runs once, never twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shortest_lease_allowed_is_renewed_under_a_live_worker() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("q");
    let specs: Vec<TaskSpec> = (0..4)
        .map(|i| TaskSpec::new(vec![i]).lease_ms(MIN_LEASE_MS))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let runs = runs.clone();
            Worker::builder(ctx.client.clone())
                .concurrency(2)
                .handle("q", move |_t: ClaimedTask| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(3 * MIN_LEASE_MS)).await;
                        Outcome::Success
                    }
                })
                .build()
                .unwrap()
                .start()
        })
        .collect();
    wait_stats(&q, |s| s.succeeded_total == 4).await;
    for w in workers {
        w.shutdown().await.unwrap();
    }
    let s = q.stats().await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 4, "a task ran twice");
    assert_eq!(s.lease_expired_total, 0);
}

#[tokio::test]
async fn an_expiry_at_or_before_the_due_time_is_refused() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("q");
    let now = ctx.redis_now_ms();
    // both relative, both absolute: refused before anything is sent
    refused(
        q.enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(5_000).ttl_ms(5_000))
            .await,
        "ttl_ms",
    );
    refused(
        q.enqueue(
            TaskSpec::new(b"x".to_vec())
                .due(Due::AtMs(now + 5_000))
                .expires_at_ms(now + 4_000),
        )
        .await,
        "expires_at_ms",
    );
    // one relative and one absolute: judged by the Redis clock in the enqueue script; a batch
    // with one such task writes nothing
    refused(
        q.enqueue_batch(&[
            TaskSpec::new(b"ok".to_vec()),
            TaskSpec::new(b"x".to_vec())
                .delay_ms(60_000)
                .expires_at_ms(now + 30_000),
        ])
        .await,
        "expires_at_ms",
    );
    refused(
        q.enqueue(
            TaskSpec::new(b"x".to_vec())
                .due(Due::AtMs(now + 60_000))
                .ttl_ms(30_000),
        )
        .await,
        "ttl_ms",
    );
    assert_eq!(q.stats().await.unwrap().enqueued_total, 0);
    // just after the due time is fine
    q.enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(5_000).ttl_ms(5_001))
        .await
        .unwrap();
}

#[tokio::test]
async fn schedules_and_settings_the_runtime_cannot_honour_are_refused() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("q");
    refused(
        q.set_schedule(&ScheduleSpec::new("s", b"x".to_vec()).every_ms(999))
            .await,
        "every_ms",
    );
    refused(
        q.set_schedule(
            &ScheduleSpec::new("s", b"x".to_vec())
                .every_ms(1_000)
                .misfire_grace_ms(10),
        )
        .await,
        "misfire_grace_ms",
    );
    assert!(q.schedules().await.unwrap().is_empty());
    refused(
        q.update_settings(&SettingsPatch::default().dead_max(Some(0)))
            .await,
        "dead_max",
    );
    assert_eq!(q.settings().await.unwrap().dead_max, None);
    // the smallest values that pass
    q.set_schedule(
        &ScheduleSpec::new("s", b"x".to_vec())
            .every_ms(1_000)
            .misfire_grace_ms(100),
    )
    .await
    .unwrap();
    q.update_settings(&SettingsPatch::default().dead_max(Some(1)))
        .await
        .unwrap();
}
