//! `/v1/queues/{queue}/settings`, groups over HTTP, and what limits and alert thresholds show
//! in stats, `/metrics` and `/readyz`.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{Ctx, assert_error};

#[tokio::test]
async fn settings_get_patch_clear_and_refuse_nonsense() {
    let c = Ctx::new().await;
    let r = c.get("/v1/queues/q/settings").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["rate_limit"], serde_json::Value::Null);
    let r = c
        .patch(
            "/v1/queues/q/settings",
            json!({"rate_limit": {"max": 100, "per_ms": 1000}, "concurrency": 7,
                   "backoff": {"base_ms": 100, "factor": 2.0, "max_ms": 10000}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["rate_limit"], json!({"max": 100, "per_ms": 1000}));
    assert_eq!(r.body["concurrency"], 7);
    // a PATCH changes only what it names; null clears
    let r = c
        .patch(
            "/v1/queues/q/settings",
            json!({"concurrency": null, "alert_due_count": 5}),
        )
        .await;
    assert_eq!(r.body["concurrency"], serde_json::Value::Null);
    assert_eq!(r.body["rate_limit"], json!({"max": 100, "per_ms": 1000}));
    assert_eq!(r.body["alert_due_count"], 5);
    for (body, field) in [
        (
            json!({"rate_limit": {"max": 100, "per_ms": 0}}),
            "rate_limit.per_ms",
        ),
        (json!({"concurrency": 0}), "concurrency"),
        (json!({"concurrency": -3}), "concurrency"),
        (json!({"lease_ms": 999}), "lease_ms"),
        (json!({"dead_max": 0}), "dead_max"),
        (json!({"group_concurrency": 99999999}), "group_concurrency"),
        (json!({"concurency": 3}), "concurency"),
        (json!({"rate_limit": {"max": 1}}), "per_ms"),
        (json!([3, 5000]), "JSON object"),
        (json!({"rate_limit": [7, 1000]}), "rate_limit"),
        (json!({"backoff": [10, 2.0, 100]}), "backoff"),
    ] {
        let r = c.patch("/v1/queues/q/settings", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let msg = r.body["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(field), "{body}: {msg}");
    }
    // nothing of the refused patches was written
    let r = c.get("/v1/queues/q/settings").await;
    assert_eq!(r.body["concurrency"], serde_json::Value::Null);
    assert_eq!(r.body["group_concurrency"], serde_json::Value::Null);
}

#[tokio::test]
async fn groups_limits_and_behind_show_in_stats_metrics_and_readiness() {
    let c = Ctx::new().await;
    c.patch(
        "/v1/queues/g/settings",
        json!({"concurrency": 2, "alert_due_count": 3}),
    )
    .await;
    for i in 0..5 {
        c.enqueue("g", json!({"payload": i, "group": "tenant-1"}))
            .await;
    }
    let claimed = c.claim("g", 10).await;
    assert_eq!(claimed.len(), 2, "the concurrency limit");
    assert_eq!(claimed[0]["group"], "tenant-1");
    let id = claimed[0]["id"].as_str().unwrap();
    let t = c.get(&format!("/v1/queues/g/tasks/{id}")).await;
    assert_eq!(t.body["group"], "tenant-1");
    assert_eq!(c.claim("g", 10).await.len(), 0);
    let s = c.get("/v1/queues/g").await;
    assert_eq!(s.body["throttled"], "concurrency", "{s:?}");
    assert_eq!(s.body["concurrency_limit"], 2);
    assert_eq!(s.body["active"], 2);
    assert_eq!(s.body["behind"], true, "3 due >= alert_due_count 3: {s:?}");
    let ready = c.get("/readyz").await;
    assert_eq!(
        ready.status,
        StatusCode::OK,
        "a queue behind keeps the server ready"
    );
    assert!(ready.body.get("queues_behind").is_none(), "{ready:?}");
    let m = c.get("/metrics").await;
    let text = &m.text;
    assert!(text.contains("dueq_queue_behind{queue=\"g\"} 1"), "{text}");
    assert!(text.contains("dueq_redis_up 1"), "{text}");
    assert!(
        text.contains("dueq_queue_throttled_seconds_total{queue=\"g\",limit=\"concurrency\"}"),
        "{text}"
    );
    assert!(
        text.contains("dueq_queue_concurrency_limit{queue=\"g\"} 2"),
        "{text}"
    );
    // back under the threshold: cleared
    c.patch("/v1/queues/g/settings", json!({"alert_due_count": 10}))
        .await;
    let s = c.get("/v1/queues/g").await;
    assert_eq!(s.body["behind"], false);
    let all = c.get("/v1/queues").await;
    assert_eq!(all.body["queues"][0]["behind"], false, "{all:?}");
    let r = c
        .post("/v1/queues/g/tasks", json!({"payload": 1, "group": ""}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
}

/// Odd limit and backoff values over `PATCH`: each is a 400 whose message names the field
/// (for an unknown field inside a limit: the limit too, not only the unknown name), and
/// nothing is written.
#[tokio::test]
async fn odd_limit_values_name_their_field_and_write_nothing() {
    let c = Ctx::new().await;
    for (body, field) in [
        (json!({"rate_limit": "7/1000"}), "rate_limit"),
        (json!({"group_rate_limit": 7}), "group_rate_limit"),
        (json!({"backoff": true}), "backoff"),
        (json!({"rate_limit": {}}), "rate_limit"),
        (
            json!({"rate_limit": {"max": null, "per_ms": 10}}),
            "rate_limit.max",
        ),
        (
            json!({"concurrency": 2, "rate_limit": {"max": 1, "per_ms": 1, "burst": 2}}),
            "rate_limit",
        ),
        (
            json!({"backoff": {"base_ms": 1, "factor": 2, "max_ms": 10, "jitter": 0.1}}),
            "backoff",
        ),
    ] {
        let r = c.patch("/v1/queues/q/settings", body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let msg = r.body["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(field), "{body}: {msg}");
    }
    let r = c.get("/v1/queues/q/settings").await;
    assert_eq!(r.body["concurrency"], serde_json::Value::Null);
    assert_eq!(r.body["rate_limit"], serde_json::Value::Null);
    assert_eq!(r.body["backoff"], serde_json::Value::Null);
}

/// A partitioned queue over HTTP: `partitions` is set on an empty queue (refused once it holds
/// a task, and out of range, naming the field); tasks enqueued by key land in their
/// partitions, are found and cancelled by key, claimed and acknowledged through the one
/// queue; the dashboard's queue page shows each partition's counts.
#[tokio::test]
async fn partitions_over_http_and_on_the_dashboard() {
    let c = Ctx::new().await;
    for bad in [
        json!({"partitions": 0}),
        json!({"partitions": 1025}),
        json!({"partitions": "6"}),
    ] {
        let r = c.patch("/v1/queues/p/settings", bad.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let msg = r.body["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("partitions"), "{bad}: {msg}");
    }
    let r = c
        .patch("/v1/queues/p/settings", json!({"partitions": 4}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["partitions"], 4);
    for i in 0..40 {
        c.enqueue("p", json!({"payload": i, "key": format!("order:{i}")}))
            .await;
    }
    let r = c
        .patch("/v1/queues/p/settings", json!({"partitions": 2}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("partitions")
    );
    assert_eq!(c.get("/v1/queues/p/settings").await.body["partitions"], 4);

    let parts = c
        .client
        .queue("p")
        .unwrap()
        .partition_stats()
        .await
        .unwrap();
    assert_eq!(parts.len(), 4);
    assert!(parts.iter().all(|s| s.scheduled > 0), "{parts:?}");
    assert_eq!(c.get("/v1/queues/p").await.body["scheduled"], 40);

    let r = c.get("/v1/queues/p/keys/order:7").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["payload"], 7);
    let r = c.delete("/v1/queues/p/keys/order:8").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");

    let r = c.get("/ui/queues/p").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let page = r.text;
    assert_eq!(page.matches("data-partition=").count(), 4, "{page}");
    assert!(page.contains("<th>partitions</th><td>4</td>"), "{page}");

    let tasks = c.claim("p", 100).await;
    assert_eq!(tasks.len(), 39);
    for t in &tasks {
        let r = c
            .post(
                &format!("/v1/queues/p/tasks/{}/ack", t["id"].as_str().unwrap()),
                json!({"lease_token": t["lease_token"]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    let s = c.get("/v1/queues/p").await.body;
    assert_eq!(
        (s["scheduled"].clone(), s["active"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(s["succeeded_total"], 39);
}
