//! The wake channels of long-poll claims: the server subscribes to the queues claims wait on,
//! drops the channels no claim waits on when its table is full (and unsubscribes them), and
//! never drops one a claim is waiting on.

use axum::http::StatusCode;
use dueq::{QueueKeys, TaskSpec};
use dueq_testkit::wait_until_async;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::support::{Ctx, DEADLINE, Res, send};

const MAX: usize = 4;

/// Subscribers of `queue`'s wake channel on the test's Redis.
fn subscribers(c: &Ctx, queue: &str) -> u64 {
    let keys = QueueKeys::new(queue).unwrap();
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&keys.wake)
        .query(&mut c.server.conn())
        .unwrap();
    n
}

/// Every channel with a subscriber.
fn channels(c: &Ctx) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query(&mut c.server.conn())
        .unwrap()
}

/// A long-poll claim on `queue` in the background.
fn waiting_claim(c: &Ctx, queue: &str, wait_ms: u64) -> JoinHandle<Res> {
    let app = c.app.clone();
    let req = axum::http::Request::post(format!("/v1/queues/{queue}/claim"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            json!({ "wait_ms": wait_ms }).to_string(),
        ))
        .unwrap();
    tokio::spawn(async move { send(&app, req).await })
}

/// Enqueues a due task from another producer (the library, not this server: only the wake
/// channel tells the server) and expects the waiting claim to get it.
async fn wakes(c: &Ctx, queue: &str, waiter: JoinHandle<Res>) {
    c.client
        .queue(queue)
        .unwrap()
        .enqueue(TaskSpec::new(b"1".to_vec()))
        .await
        .unwrap();
    let r = waiter.await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["tasks"].as_array().unwrap().len(), 1, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_nobody_waits_on_make_room_for_new_queues() {
    let c = Ctx::build(|b| b.wake_channels_max(MAX), |b| b).await;
    // a claim waiting all along on "busy"
    let busy = waiting_claim(&c, "busy", 20_000);
    wait_until_async(DEADLINE, "busy is subscribed", || {
        let n = subscribers(&c, "busy");
        async move { n == 1 }
    })
    .await;
    // short waits on many more queues than the table holds
    for i in 0..3 * MAX {
        let r = c
            .post(&format!("/v1/queues/q{i}/claim"), json!({"wait_ms": 20}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert!(r.body["tasks"].as_array().unwrap().is_empty());
        let subscribed = channels(&c);
        assert!(subscribed.len() <= MAX, "{subscribed:?}");
        assert_eq!(
            subscribers(&c, "busy"),
            1,
            "the waited-on channel was dropped"
        );
    }
    // a queue never seen before still gets its wake-ups
    let fresh = waiting_claim(&c, "fresh", 20_000);
    wait_until_async(DEADLINE, "fresh is subscribed", || {
        let n = subscribers(&c, "fresh");
        async move { n == 1 }
    })
    .await;
    assert!(channels(&c).len() <= MAX, "{:?}", channels(&c));
    wakes(&c, "fresh", fresh).await;
    wakes(&c, "busy", busy).await;
}
