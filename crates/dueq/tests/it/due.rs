//! The one claim path (`DueClaimer`): what it says about "no work", the long-poll, and the
//! timings Redis counts for every task handed out, whoever the consumer is.

use std::sync::Arc;
use std::time::Duration;

use dueq::{Outcome, TaskSpec, Worker};
use dueq_testkit::wait_until_async;
use tokio::time::Instant;

use crate::support::{Ctx, DEADLINE};

/// The bucket index (0-based) of the first bound at or above `ms`.
fn first_bucket_from(bounds: &[f64], ms: f64) -> usize {
    bounds.iter().position(|&b| b >= ms).unwrap_or(bounds.len())
}

/// Lateness and run time are counted in Redis by the scripts that hand work out and finish
/// it, whoever claims (here a Rust worker); an active task names the worker holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_lateness_and_run_time_are_counted_in_redis() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("m");
    // due now; the worker starts 300 ms later, so each is at least 300 ms late
    let mut ids = Vec::new();
    for i in 0..3u8 {
        ids.push(q.enqueue(TaskSpec::new(vec![i])).await.unwrap().id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (held_tx, mut held_rx) = tokio::sync::mpsc::unbounded_channel();
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let release = go.clone();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(3)
        .handle("m", move |t| {
            let (held, go) = (held_tx.clone(), go.clone());
            async move {
                let _ = held.send(t.id.clone());
                let _ = go.acquire().await.map(|p| p.forget());
                // at least 60 ms of run time each
                tokio::time::sleep(Duration::from_millis(60)).await;
                if t.payload == [2] {
                    Outcome::Fail { error: "no".into() }
                } else {
                    Outcome::Success
                }
            }
        })
        .build()
        .unwrap()
        .start();
    let first = tokio::time::timeout(DEADLINE, held_rx.recv())
        .await
        .unwrap()
        .unwrap();
    let t = q.get(&dueq::TaskRef::Id(first)).await.unwrap().unwrap();
    assert_eq!(
        t.worker.as_deref(),
        worker.id(),
        "the active task names its worker"
    );
    assert!(t.claimed_at_ms.is_some_and(|c| c >= t.due_at_ms + 300));
    let active = q.browse(dueq::TaskState::Active, None, 10).await.unwrap();
    assert!(!active.tasks.is_empty());
    assert!(
        active
            .tasks
            .iter()
            .all(|t| t.worker.as_deref() == worker.id() && t.claimed_at_ms.is_some())
    );
    release.add_permits(3);
    wait_until_async(DEADLINE, "three attempts ended", || {
        let q = q.clone();
        async move {
            let s = q.stats().await.unwrap();
            s.succeeded_total == 2 && s.dead_total == 1
        }
    })
    .await;
    worker.shutdown().await.unwrap();

    let s = q.stats().await.unwrap();
    assert_eq!(s.claimed_total, 3);
    assert_eq!(s.lateness.count(), 3);
    assert!(s.lateness.sum_ms >= 900, "{:?}", s.lateness);
    let late_from = first_bucket_from(dueq::LATENESS_BOUNDS_MS, 300.0);
    assert_eq!(
        s.lateness.counts[..late_from].iter().sum::<u64>(),
        0,
        "no task under 300 ms late: {:?}",
        s.lateness
    );
    // two acks and one nack (the Fail), each with its run time
    assert_eq!(s.run_time.count(), 3, "{:?}", s.run_time);
    assert!(s.run_time.sum_ms >= 180, "{:?}", s.run_time);
    let run_from = first_bucket_from(dueq::RUN_TIME_BOUNDS_MS, 60.0);
    assert_eq!(
        s.run_time.counts[..run_from].iter().sum::<u64>(),
        0,
        "no attempt under 60 ms: {:?}",
        s.run_time
    );
}

#[tokio::test]
async fn no_work_says_until_when() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("next");
    q.enqueue(TaskSpec::new(b"later".to_vec()).delay_ms(400))
        .await
        .unwrap();
    let mut due = q.due_claimer();
    let sent = Instant::now();
    assert!(due.claim(10).await.unwrap().is_empty());
    let back = Instant::now();
    // the next look is the due time by the Redis clock, not the fallback poll
    let at = due.next_look_at();
    assert!(at >= sent + Duration::from_millis(300), "{:?}", at - sent);
    assert!(at <= back + Duration::from_millis(400), "{:?}", at - back);
    // nothing due at all: the fallback poll, at most a second
    let empty = ctx.queue("empty");
    let mut due = empty.due_claimer();
    assert!(due.claim(10).await.unwrap().is_empty());
    let at = due.next_look_at();
    assert!(at <= Instant::now() + Duration::from_millis(1000));
    assert!(at >= Instant::now() + Duration::from_millis(500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_gets_a_task_enqueued_while_it_waits_never_early() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("lp");
    let mut due = q.due_claimer();
    let producer = q.clone();
    let enqueue = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        producer
            .enqueue(TaskSpec::new(b"soon".to_vec()).delay_ms(300))
            .await
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let tasks = due
        .claim_within(10, deadline, std::future::pending())
        .await
        .unwrap();
    let e = enqueue.await.unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].id, e.id);
    assert!(tasks[0].claimed_at_ms >= e.due_at_ms, "handed out early");
    assert!(tasks[0].started_at_ms >= tasks[0].claimed_at_ms);
    // a long-poll that finds nothing returns empty at its deadline, or at once when stopped
    let deadline = Instant::now() + Duration::from_millis(200);
    assert!(
        due.claim_within(10, deadline, std::future::pending())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(Instant::now() >= deadline);
    let far = Instant::now() + Duration::from_secs(30);
    let stopped =
        tokio::time::timeout(Duration::from_secs(5), due.claim_within(10, far, async {})).await;
    assert!(stopped.unwrap().unwrap().is_empty());
}
