//! The dead-letter queue over HTTP: list, retry, delete.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{Ctx, assert_error};

async fn kill(c: &Ctx, body: serde_json::Value) -> String {
    let id = c.enqueue("q", body).await;
    let t = c.claim("q", 1).await;
    let token = t[0]["lease_token"].as_str().unwrap();
    let r = c
        .post(
            &format!("/v1/queues/q/tasks/{id}/nack"),
            json!({"lease_token": token, "permanent": true, "error": "nope"}),
        )
        .await;
    assert_eq!(r.body["outcome"], "dead");
    id
}

#[tokio::test]
async fn list_retry_delete() {
    let c = Ctx::new().await;
    let a = kill(&c, json!({"payload": {"a": 1}, "key": "ka"})).await;
    let b = kill(&c, json!({"payload": 2})).await;

    let r = c.get("/v1/queues/q/dead").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["total"], 2);
    let tasks = r.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0]["id"], b.as_str()); // newest first
    assert_eq!(tasks[1]["payload"], json!({"a": 1}));
    assert_eq!(tasks[1]["state"], "dead");
    assert_eq!(tasks[1]["last_error"], "nope");
    assert!(tasks[1]["died_at_ms"].is_u64());

    let r = c.get("/v1/queues/q/dead?offset=1&limit=1").await;
    assert_eq!(r.body["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["tasks"][0]["id"], a.as_str());
    for q in ["limit=0", "limit=1001", "offset=-1", "bogus=1"] {
        assert_error(
            &c.get(&format!("/v1/queues/q/dead?{q}")).await,
            StatusCode::BAD_REQUEST,
            "invalid_input",
        );
    }

    // retry: a new live task with the same key blocks it
    c.enqueue("q", json!({"key": "ka", "delay_ms": 60000}))
        .await;
    assert_error(
        &c.post(&format!("/v1/queues/q/dead/{a}/retry"), json!(null))
            .await,
        StatusCode::CONFLICT,
        "conflict",
    );
    c.delete("/v1/queues/q/keys/ka").await;
    let r = c
        .post(&format!("/v1/queues/q/dead/{a}/retry"), json!(null))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body, json!({"outcome": "retried"}));
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{a}")).await.body["state"],
        "scheduled"
    );
    assert_error(
        &c.post(&format!("/v1/queues/q/dead/{a}/retry"), json!(null))
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    let r = c.delete(&format!("/v1/queues/q/dead/{b}")).await;
    assert_eq!(r.body, json!({"outcome": "deleted"}));
    assert_error(
        &c.delete(&format!("/v1/queues/q/dead/{b}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.delete("/v1/queues/q/dead/%C3%A9").await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_eq!(c.get("/v1/queues/q/dead").await.body["total"], 0);
}

/// A dead task is found by its business key (DESIGN 2.18) over HTTP, and the DLQ shows the
/// attempts it had: the queue's default resolved, for a single nack and a batch of nacks.
#[tokio::test]
async fn a_dead_task_is_found_by_key_and_shows_its_attempts() {
    let c = Ctx::new().await;
    let id = kill(&c, json!({"payload": 1, "key": "order:44:cancel"})).await;
    let r = c.get("/v1/queues/q/keys/order%3A44%3Acancel").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["id"], id.as_str());
    assert_eq!(r.body["state"], "dead");
    assert_eq!(r.body["attempt"], 1);
    assert_eq!(r.body["max_attempts"], 5);
    // cancel by key acts on live tasks only
    let r = c.delete("/v1/queues/q/keys/order%3A44%3Acancel").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    assert_eq!(r.body["outcome"], "not_found");

    // a batch of nacks
    c.enqueue("q", json!({"payload": 2, "key": "b"})).await;
    let t = c.claim("q", 1).await;
    let r = c
        .post(
            "/v1/queues/q/nacks",
            json!({"nacks": [{"id": t[0]["id"], "lease_token": t[0]["lease_token"],
                "permanent": true, "error": "batch"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = c.get("/v1/queues/q/dead").await;
    for t in r.body["tasks"].as_array().unwrap() {
        assert_eq!(
            (&t["attempt"], &t["max_attempts"]),
            (&json!(1), &json!(5)),
            "{t}"
        );
    }
}
