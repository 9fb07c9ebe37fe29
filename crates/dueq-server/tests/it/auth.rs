//! Bearer tokens: every `/v1` route refuses a missing or wrong token with 401 and writes
//! nothing; health, readiness and (by default) metrics stay open.

use axum::http::{Method, StatusCode};
use dueq_server::Tokens;
use serde_json::json;

use crate::support::{Ctx, assert_error};

#[tokio::test]
async fn v1_needs_a_token() {
    let mut c = Ctx::with(|b| b.tokens(Tokens::new(["s3cret", "other"])), None).await;
    let routes = [
        (
            Method::POST,
            "/v1/queues/q/tasks",
            Some(json!({"payload": 1})),
        ),
        (
            Method::POST,
            "/v1/queues/q/tasks/batch",
            Some(json!({"tasks": [{}]})),
        ),
        (Method::GET, "/v1/queues/q/tasks/000000000001", None),
        (Method::DELETE, "/v1/queues/q/keys/k", None),
        (
            Method::PATCH,
            "/v1/queues/q/keys/k",
            Some(json!({"delay_ms": 1})),
        ),
        (Method::POST, "/v1/queues/q/claim", Some(json!({}))),
        (
            Method::POST,
            "/v1/queues/q/tasks/1/ack",
            Some(json!({"lease_token": "t"})),
        ),
        (Method::GET, "/v1/queues", None),
        (Method::POST, "/v1/queues/q/pause", None),
        (Method::GET, "/v1/queues/q/dead", None),
        (Method::DELETE, "/v1/queues/q/dead/1", None),
    ];
    for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
        c.token = token.map(str::to_owned);
        for (m, path, body) in &routes {
            let r = c.call(m.clone(), path, body.clone()).await;
            assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
            assert_eq!(r.headers["www-authenticate"], "Bearer");
        }
    }
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());

    c.token = None;
    assert_eq!(c.get("/healthz").await.status, StatusCode::OK);
    assert_eq!(c.get("/readyz").await.status, StatusCode::OK);
    assert_eq!(c.get("/metrics").await.status, StatusCode::OK);
    assert_eq!(c.get("/openapi.json").await.status, StatusCode::OK);

    for t in ["s3cret", "other"] {
        c.token = Some(t.into());
        c.enqueue("q", json!({"payload": 1})).await;
    }
}

#[tokio::test]
async fn metrics_can_be_protected() {
    let mut c = Ctx::with(
        |b| b.tokens(Tokens::new(["tok"])).protect_metrics(true),
        None,
    )
    .await;
    assert_error(
        &c.get("/metrics").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    assert_eq!(c.get("/healthz").await.status, StatusCode::OK);
    c.token = Some("tok".into());
    assert_eq!(c.get("/metrics").await.status, StatusCode::OK);
}
