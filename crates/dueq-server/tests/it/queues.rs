//! Queue statistics, pause and resume.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{Ctx, assert_error};

#[tokio::test]
async fn stats_list_pause_resume() {
    let c = Ctx::new().await;
    c.enqueue("a", json!({"payload": 1})).await;
    c.enqueue("a", json!({"payload": 2, "delay_ms": 60000}))
        .await;
    c.enqueue("b", json!({"payload": 3})).await;
    assert_eq!(c.claim("b", 1).await.len(), 1);

    let r = c.get("/v1/queues/a").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    for f in [
        "scheduled",
        "due",
        "active",
        "dead",
        "succeeded_total",
        "failed_total",
        "next_due_at_ms",
        "oldest_due_age_ms",
        "paused",
    ] {
        assert!(r.body.get(f).is_some(), "missing {f}: {r:?}");
    }
    assert_eq!(r.body["scheduled"], 2);
    assert_eq!(r.body["due"], 1);
    assert_eq!(r.body["paused"], false);

    let all = c.get("/v1/queues").await;
    let names: Vec<_> = all.body["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(all.body["queues"][1]["active"], 1);
    assert_eq!(all.body["total"], 2);
    assert_eq!(all.body["next"], json!(null));

    let r = c.post("/v1/queues/a/pause", json!(null)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"queue": "a", "paused": true}));
    assert_eq!(c.get("/v1/queues/a").await.body["paused"], true);
    assert!(c.claim("a", 10).await.is_empty());
    let r = c.post("/v1/queues/a/resume", json!(null)).await;
    assert_eq!(r.body, json!({"queue": "a", "paused": false}));
    assert_eq!(c.claim("a", 10).await.len(), 1);
}

#[tokio::test]
async fn stats_errors() {
    let c = Ctx::new().await;
    assert_error(
        &c.get("/v1/queues/never").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.get("/v1/queues/a%7Bb").await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.post("/v1/queues/a%20b/pause", json!(null)).await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_eq!(
        c.get("/v1/queues").await.body,
        json!({"queues": [], "total": 0, "next": null})
    );
}

#[tokio::test]
async fn redis_down_is_503() {
    let mut c = Ctx::new().await;
    c.server.stop();
    let r = c.get("/v1/queues").await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable");
    let r = c.get("/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body["ready"], false);
    assert_eq!(c.get("/healthz").await.status, StatusCode::OK);
}

/// Extra readiness checks (the hook `dueq serve --postgres` uses for its database): each is
/// reported by name, a failing or hanging one makes `/readyz` 503 naming it, Redis readiness
/// is reported as before.
#[tokio::test]
async fn readiness_checks_are_reported_by_name() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let up = Arc::new(AtomicBool::new(false));
    let up2 = up.clone();
    let c = Ctx::with(
        |b| {
            b.readiness_check("postgres", move || {
                let up = up2.load(Ordering::SeqCst);
                async move {
                    if up {
                        Ok(())
                    } else {
                        Err("connection refused".to_owned())
                    }
                }
            })
        },
        None,
    )
    .await;
    let r = c.get("/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    assert_eq!(r.body["ready"], false);
    assert_eq!(r.body["redis"], true);
    assert_eq!(r.body["checks"], json!({"postgres": false}));
    assert_eq!(r.body["error"], "postgres: connection refused");
    up.store(true, Ordering::SeqCst);
    let r = c.get("/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["checks"], json!({"postgres": true}));
    assert_eq!(r.body["error"], json!(null));

    // a check that never answers counts as failed after the time limit
    let c = Ctx::with(
        |b| b.readiness_check("slow", std::future::pending::<Result<(), String>>),
        None,
    )
    .await;
    let r = c.get("/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    assert_eq!(r.body["checks"], json!({"slow": false}));
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .starts_with("slow: no answer within"),
        "{r:?}"
    );
    // without checks the field is there and empty
    let r = Ctx::new().await.get("/readyz").await;
    assert_eq!(r.body["checks"], json!({}));
}
