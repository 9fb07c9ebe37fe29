//! The worker runtime end to end: runs, retries, wakes on time.

use std::sync::{Arc, Mutex};

use dueq::{Backoff, Outcome, TaskSpec, Worker};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE};

#[tokio::test]
async fn runs_every_task_once_and_retries_failures() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("jobs");
    let specs: Vec<_> = (0..200u32)
        .map(|i| TaskSpec::new(i.to_be_bytes().to_vec()))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(16)
        .backoff(Backoff::new(1, 1.0, 1))
        .handle("jobs", move |t| {
            let s2 = s2.clone();
            async move {
                s2.lock().unwrap().push((t.payload.clone(), t.attempt));
                // every 10th task fails its first attempt
                if t.payload[3] % 10 == 0 && t.attempt == 1 {
                    Outcome::retry("first try fails")
                } else {
                    Outcome::Success
                }
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "all tasks succeeded", || {
        let q = q.clone();
        async move { q.stats().await.unwrap().succeeded_total == 200 }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    assert_eq!(stats.succeeded, 200);
    assert_eq!(stats.retried, 20);
    assert_eq!(seen.lock().unwrap().len(), 220);
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.active, s.dead), (0, 0, 0));
}

#[tokio::test]
async fn idle_worker_wakes_for_the_due_millisecond() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("timers");
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s2 = starts.clone();
    let worker = Worker::builder(ctx.client.clone())
        .handle("timers", move |t| {
            let s2 = s2.clone();
            async move {
                s2.lock().unwrap().push((t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    // let the worker go idle first
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for d in [300u64, 150, 450] {
        q.enqueue(TaskSpec::new(b"t".to_vec()).delay_ms(d))
            .await
            .unwrap();
    }
    wait_until_async(DEADLINE, "3 tasks ran", || {
        let s = starts.clone();
        async move { s.lock().unwrap().len() == 3 }
    })
    .await;
    worker.shutdown().await.unwrap();
    for (due, started) in starts.lock().unwrap().iter() {
        assert!(started >= due, "ran early: due {due}, started {started}");
        assert!(started - due < 50, "ran {} ms late", started - due);
    }
}

/// A handler whose lease is lost (here: another claim's token took its place, as after the
/// lease expired and was recovered) is stopped at the next extension instead of running on
/// beside whoever owns the task now.
#[tokio::test]
async fn a_handler_whose_lease_is_lost_is_stopped() {
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let ctx = Ctx::new().await;
    let q = ctx.queue("long");
    let t = q.enqueue(TaskSpec::new(b"x".to_vec())).await.unwrap();
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, d2) = (started.clone(), dropped.clone());
    let worker = Worker::builder(ctx.client.clone())
        .lease_ms(1_000)
        .handle("long", move |_t| {
            let guard = Dropped(d2.clone());
            s2.store(true, std::sync::atomic::Ordering::SeqCst);
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the handler starts", || async {
        started.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    // another owner's lease in its place: the next extension is refused
    let _: () = redis::cmd("HSET")
        .arg(&q.keys().leases)
        .arg(t.id.as_str())
        .arg("someone-else 99999999999999 0")
        .query(&mut ctx.raw())
        .unwrap();
    wait_until_async(
        DEADLINE,
        "the handler is stopped after its lease is lost",
        || async { dropped.load(std::sync::atomic::Ordering::SeqCst) },
    )
    .await;
    assert!(worker.stats().lease_lost >= 1);
    worker.shutdown().await.unwrap();
}
