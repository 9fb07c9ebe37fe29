//! The one claim path (`DueClaimer`): what it says about "no work", the long-poll, and the
//! metrics it records for every task it hands out, whoever the consumer is.

use std::sync::Arc;
use std::time::Duration;

use dueq::{Outcome, TaskSpec, Worker};
use dueq_testkit::wait_until_async;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::time::Instant;

use crate::support::{Ctx, DEADLINE};

/// The value of the series `name{queue="<queue>"}` in Prometheus text.
fn series(text: &str, name: &str, queue: &str) -> Option<f64> {
    let prefix = format!("{name}{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_records_lateness_and_hand_outs_through_the_metrics_facade() {
    let ctx = Ctx::new().await;
    let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
    let handle = recorder.handle();
    let client = ctx.client.with_metrics_recorder(recorder);
    let q = client.queue("m").unwrap();
    for i in 0..3u8 {
        q.enqueue(TaskSpec::new(vec![i])).await.unwrap();
    }
    let worker = Worker::builder(client.clone())
        .handle("m", |_| async { Outcome::Success })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "three tasks succeeded", || {
        let q = q.clone();
        async move { q.stats().await.unwrap().succeeded_total == 3 }
    })
    .await;
    worker.shutdown().await.unwrap();
    let text = handle.render();
    assert_eq!(
        series(&text, "dueq_tasks_claimed_total", "m"),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        series(&text, "dueq_task_lateness_seconds_count", "m"),
        Some(3.0),
        "{text}"
    );
    // another client of the same connection, without the recorder, records elsewhere
    let other = ctx.client.queue("m").unwrap();
    other.enqueue(TaskSpec::new(b"x".to_vec())).await.unwrap();
    let mut due = other.due_claimer();
    assert_eq!(due.claim(10).await.unwrap().len(), 1);
    assert_eq!(
        series(&handle.render(), "dueq_tasks_claimed_total", "m"),
        Some(3.0)
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
