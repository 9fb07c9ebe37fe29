//! Cleanup in bulk over HTTP (DESIGN 4.2): dead tasks retried or deleted by filter, with a dry
//! run and a cursor; purge; queue delete (409 `not_empty` unless forced); schedule trigger
//! and backfill.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{Ctx, assert_error};

/// Enqueues `n` keyed tasks due now and fails them for good, errors alternating.
async fn kill(c: &Ctx, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| json!({"payload": i, "key": format!("order:{i}")}))
        .collect();
    let r = c
        .post("/v1/queues/q/tasks/batch", json!({ "tasks": tasks }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let claimed = c.claim("q", n as u32).await;
    let nacks: Vec<_> = claimed
        .iter()
        .map(|t| {
            let i = t["payload"].as_u64().unwrap();
            let error = if i % 2 == 0 { "card declined" } else { "timeout" };
            json!({"id": t["id"], "lease_token": t["lease_token"], "permanent": true, "error": error})
        })
        .collect();
    let r = c
        .post("/v1/queues/q/nacks", json!({ "nacks": nacks }))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn dead_tasks_are_counted_retried_and_deleted_by_filter() {
    let c = Ctx::new().await;
    kill(&c, 10).await;
    let r = c
        .post(
            "/v1/queues/q/dead/retry",
            json!({"error_contains": "declined", "dry_run": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        (r.body["matched"].as_u64(), r.body["done"].as_u64()),
        (Some(5), Some(0))
    );
    assert!(r.body.get("cursor").is_none(), "{r:?}");
    let r = c
        .post(
            "/v1/queues/q/dead/retry",
            json!({"error_contains": "declined", "spread_ms": 1000}),
        )
        .await;
    assert_eq!(r.body["done"], 5, "{r:?}");
    let r = c
        .post("/v1/queues/q/dead/delete", json!({"key_prefix": "order:1"}))
        .await;
    // order:1 (timeout, dead) only: order:10.. do not exist
    assert_eq!(r.body["done"], 1, "{r:?}");
    let r = c.get("/v1/queues/q/dead").await;
    assert_eq!(r.body["total"], 4);
    for (body, field) in [
        (json!({"error_contains": ""}), "error_contains"),
        (json!({"cursor": "nope"}), "cursor"),
        (json!({"bogus": 1}), "bogus"),
        (json!({"limit": 0}), "limit"),
    ] {
        let r = c.post("/v1/queues/q/dead/retry", body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(r.text.contains(field), "{r:?}");
    }
    let r = c
        .post("/v1/queues/q/dead/delete", json!({"spread_ms": 5}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
}

#[tokio::test]
async fn purge_and_delete_a_queue() {
    let c = Ctx::new().await;
    for i in 0..3 {
        c.enqueue("q", json!({"payload": i, "delay_ms": 60000}))
            .await;
    }
    let r = c
        .post("/v1/queues/q/purge", json!({"state": "scheduled"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        (r.body["dropped"].as_u64(), r.body["left"].as_u64()),
        (Some(3), Some(0))
    );
    let r = c
        .post("/v1/queues/q/purge", json!({"state": "running"}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    let r = c
        .post("/v1/queues/nosuch/purge", json!({"state": "dead"}))
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");

    c.enqueue("q", json!({"payload": 1, "delay_ms": 60000}))
        .await;
    let r = c.call(Method::DELETE, "/v1/queues/q", None).await;
    assert_error(&r, StatusCode::CONFLICT, "not_empty");
    assert_eq!(c.get("/v1/queues/q").await.body["scheduled"], 1);
    let r = c
        .call(Method::DELETE, "/v1/queues/q?force=true", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(c.queue_keys("q").is_empty(), "{:?}", c.queue_keys("q"));
    assert_error(
        &c.get("/v1/queues/q").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = c.call(Method::DELETE, "/v1/queues/q", None).await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn a_schedule_is_triggered_and_backfilled() {
    let c = Ctx::new().await;
    let r = c
        .call(
            Method::PUT,
            "/v1/queues/q/schedules/nightly",
            Some(json!({"every_ms": 60000, "payload": {"r": 1}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let r = c
        .post("/v1/queues/q/schedules/nightly/trigger", json!(null))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert!(
        r.body["key"]
            .as_str()
            .unwrap()
            .starts_with("schedule:nightly:manual:"),
        "{r:?}"
    );
    let r = c
        .post("/v1/queues/q/schedules/nope/trigger", json!(null))
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");

    let now = c.client.queue("q").unwrap().stats().await.unwrap().now_ms;
    let body = json!({"from_ms": now - 300_000, "to_ms": now});
    let r = c
        .post("/v1/queues/q/schedules/nightly/backfill", body.clone())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        (r.body["ticks"].as_u64(), r.body["created"].as_u64()),
        (Some(5), Some(5))
    );
    let r = c
        .post("/v1/queues/q/schedules/nightly/backfill", body)
        .await;
    assert_eq!(
        (r.body["created"].as_u64(), r.body["existing"].as_u64()),
        (Some(0), Some(5))
    );
    let r = c
        .post(
            "/v1/queues/q/schedules/nightly/backfill",
            json!({"from_ms": now, "to_ms": now + 600_000}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
}
