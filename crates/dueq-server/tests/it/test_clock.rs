//! The test clock over HTTP (`dueq serve --test-clock`): two servers on one Redis agree, a
//! long-poll claim on the second gets the task the moment the first moves the clock past its
//! due time, readiness and the dashboard say the clock runs, and moves are checked.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use dueq::Client;
use dueq_server::{AppState, router};
use serde_json::{Value, json};

use crate::support::{Ctx, DEADLINE, Res, send};

const MINUTE: u64 = 60_000;

async fn call(app: &Router, method: Method, uri: &str, body: Option<Value>) -> Res {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(serde_json::to_vec(&b).unwrap()));
    send(app, req.body(body).unwrap()).await
}

fn subscribers(ctx: &Ctx, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut ctx.server.conn())
        .unwrap();
    n
}

#[tokio::test]
async fn two_servers_on_one_redis_agree() {
    let first = Ctx::build(|b| b.test_clock(), |s| s).await;
    // the second server was not asked for the clock: it follows the Redis
    let client = Client::connect(&first.server.url()).await.unwrap();
    let second = router(AppState::builder(client).build());

    let r = first
        .post(
            "/v1/queues/orders/tasks",
            json!({"payload": {"order": 42}, "key": "order:42:cancel", "delay_ms": 30 * MINUTE}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let due = r.body["due_at_ms"].as_u64().unwrap();

    // a long-poll claim on the second server waits (up to 20 s) ...
    let waiting = {
        let second = second.clone();
        tokio::spawn(async move {
            let r = call(
                &second,
                Method::POST,
                "/v1/queues/orders/claim",
                Some(json!({"max": 10, "wait_ms": 20_000})),
            )
            .await;
            (Instant::now(), r)
        })
    };
    let wake = first.client.queue("orders").unwrap().keys().wake.clone();
    dueq_testkit::wait_until_async(DEADLINE, "the claim waits", || async {
        subscribers(&first, &wake) >= 1 && subscribers(&first, "dueq:test_clock") >= 1
    })
    .await;
    // ... and gets the task as soon as the first server moves the clock past its due time
    let moved = first
        .post("/v1/test/clock", json!({"advance_ms": 30 * MINUTE}))
        .await;
    let at = Instant::now();
    assert_eq!(moved.status, StatusCode::OK, "{moved:?}");
    assert!(moved.body["now_ms"].as_u64().unwrap() >= due);
    let (got_at, r) = waiting.await.unwrap();
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let tasks = r.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{r:?}");
    assert_eq!(tasks[0]["key"], "order:42:cancel");
    assert!(
        got_at.duration_since(at) < Duration::from_secs(5),
        "the claim waited {:?} after the move",
        got_at.duration_since(at)
    );

    // both read the same clock, and say so
    let offset = moved.body["offset_ms"].as_u64().unwrap();
    for app in [&first.app, &second] {
        let c = call(app, Method::GET, "/v1/test/clock", None).await;
        assert_eq!(c.body["offset_ms"].as_u64(), Some(offset), "{c:?}");
        let ready = call(app, Method::GET, "/readyz", None).await;
        assert_eq!(ready.body["test_clock"]["offset_ms"].as_u64(), Some(offset));
        let page = call(app, Method::GET, "/", None).await;
        assert!(page.text.contains("id=\"test-clock\""), "no banner");
    }
}

#[tokio::test]
async fn moves_are_checked_and_nothing_moves_on_a_refusal() {
    let ctx = Ctx::build(|b| b.test_clock(), |s| s).await;
    let start = ctx.get("/v1/test/clock").await.body["now_ms"]
        .as_u64()
        .unwrap();
    for (body, field) in [
        (json!({}), "advance_ms"),
        (
            json!({"advance_ms": 1000, "set_ms": start + 1000}),
            "advance_ms",
        ),
        (json!({"advance_ms": 0}), "advance_ms"),
        (
            json!({"advance_ms": 200u64 * 365 * 24 * 3_600_000}),
            "advance_ms",
        ),
        (json!({"set_ms": start - 60_000}), "set_ms"),
        (json!({"set_ms": 40_000_000_000_000u64}), "set_ms"),
        (json!({"advance_ms": -5}), "advance_ms"),
        (json!({"advance_by": 5}), "advance_by"),
    ] {
        let r = ctx.post("/v1/test/clock", body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {r:?}");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    assert_eq!(ctx.get("/v1/test/clock").await.body["offset_ms"], 0);
}

#[tokio::test]
async fn a_server_without_the_clock_answers_404_and_shows_no_banner() {
    let ctx = Ctx::new().await;
    for r in [
        ctx.get("/v1/test/clock").await,
        ctx.post("/v1/test/clock", json!({"advance_ms": 1000}))
            .await,
    ] {
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--test-clock")
        );
    }
    assert!(ctx.get("/readyz").await.body.get("test_clock").is_none());
    assert!(!ctx.get("/").await.text.contains("id=\"test-clock\""));
}

/// The dashboard's "in 2.0 h" counts from the test clock, as the queues do.
#[tokio::test]
async fn the_dashboard_counts_from_the_test_clock() {
    let ctx = Ctx::build(|b| b.test_clock(), |s| s).await;
    ctx.enqueue(
        "orders",
        json!({"payload": 1, "key": "k", "delay_ms": 3 * 60 * MINUTE}),
    )
    .await;
    let r = ctx
        .post("/v1/test/clock", json!({"advance_ms": 60 * MINUTE}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let page = ctx.get("/ui/task?queue=orders&by=key&value=k").await;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
    assert!(page.text.contains("in 2.0 h"), "{}", page.text);
}
