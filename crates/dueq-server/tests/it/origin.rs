//! Cross-origin writes to `/v1` are refused with 403 `forbidden_origin` and write nothing, with
//! or without tokens; same-origin and header-less (curl, SDK) requests pass, and reads are
//! never refused.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use dueq_server::Tokens;
use serde_json::json;

use crate::support::{Ctx, Res, assert_error, send};

const HOST: &str = "127.0.0.1:7878";

/// Sends `method uri` with `Host: 127.0.0.1:7878`, these extra headers, the context's token
/// and, when `body` is given, a JSON body.
async fn call(
    c: &Ctx,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Res {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(t) = &c.token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(b) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&b).unwrap())
        }
        None => Body::empty(),
    };
    send(&c.app, req.body(body).unwrap()).await
}

async fn paused(c: &Ctx, queue: &str) -> bool {
    c.client.queue(queue).unwrap().stats().await.unwrap().paused
}

#[tokio::test]
async fn cross_origin_writes_are_refused_and_write_nothing() {
    let c = Ctx::new().await;
    let evil = [("origin", "http://evil.example")];
    let other_port = [("origin", "http://127.0.0.1:3000")];
    let null = [("origin", "null")];
    let cross_site = [("sec-fetch-site", "cross-site")];
    for headers in [&evil[..], &other_port, &null, &cross_site] {
        // the body-less "simple" request a page can send without a preflight
        let r = call(&c, Method::POST, "/v1/queues/q/pause", headers, None).await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(
            &c,
            Method::POST,
            "/v1/queues/q/tasks",
            headers,
            Some(json!({"payload": 1, "key": "k"})),
        )
        .await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(&c, Method::DELETE, "/v1/queues/q/keys/k", headers, None).await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(
            &c,
            Method::PATCH,
            "/v1/queues/q/keys/k",
            headers,
            Some(json!({"delay_ms": 1})),
        )
        .await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        // reads are not refused
        let r = call(&c, Method::GET, "/v1/queues", headers, None).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    assert!(!paused(&c, "q").await);
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());

    // same origin (the dashboard, a page served by this host) and no Origin at all (curl)
    let same = [
        ("origin", "http://127.0.0.1:7878"),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = call(&c, Method::POST, "/v1/queues/q/pause", &same, None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(paused(&c, "q").await);
    let r = call(&c, Method::POST, "/v1/queues/q/resume", &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(!paused(&c, "q").await);
    let r = call(
        &c,
        Method::POST,
        "/v1/queues/q/tasks",
        &[],
        Some(json!({"payload": 1})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

#[tokio::test]
async fn the_check_applies_with_tokens_too() {
    let mut c = Ctx::with(|b| b.tokens(Tokens::new(["tok"])), None).await;
    c.token = Some("tok".into());
    let r = call(
        &c,
        Method::POST,
        "/v1/queues/q/pause",
        &[("origin", "https://evil.example")],
        None,
    )
    .await;
    assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());
    let r = call(&c, Method::POST, "/v1/queues/q/pause", &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(paused(&c, "q").await);
}
