//! `/v1/queues/{queue}/webhook`: set, read, remove; bad input refused with nothing written.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::harness::SECRET;
use crate::support::{Ctx, assert_error};

#[tokio::test]
async fn routes_set_get_delete_and_refuse_bad_input() {
    let c = Ctx::new().await;
    let put = |q: &'static str, body: Value| {
        let c = &c;
        async move {
            c.call(
                axum::http::Method::PUT,
                &format!("/v1/queues/{q}/webhook"),
                Some(body),
            )
            .await
        }
    };
    // no webhook yet
    assert_error(
        &c.get("/v1/queues/wh/webhook").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // bad input: 400 and nothing written
    for bad in [
        json!({"url": "ftp://example.com/"}),
        json!({"url": "not a url"}),
        json!({"url": "http://h/", "concurrency": 0}),
        json!({"url": "http://h/", "concurrency": 1001}),
        json!({"url": "http://h/", "timeout_ms": 0}),
        json!({"url": "http://h/", "timeout_ms": 300001}),
        json!({"url": "http://h/", "secret": "short"}),
        json!({"url": "http://h/", "secret": "0123456789abcdef0123456789abcdef"}),
        json!({"url": "http://h/", "extra": 1}),
        json!({"concurrency": 2}),
    ] {
        let r = put("wh", bad.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {r:?}");
        assert!(r.body["error"]["code"].is_string(), "{r:?}");
    }
    assert!(c.queue_keys("wh").is_empty(), "{:?}", c.queue_keys("wh"));
    let r = put("bad{name}", json!({"url": "http://h/"})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");

    // set without a secret: one is generated and returned once
    let r = put("wh", json!({"url": "HTTP://Example.com:8080/in?x=1"})).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let secret = r.body["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(dueq::signing_key(&secret).len(), 32, "{secret}");
    assert_eq!(r.body["secret_generated"], true);
    assert_eq!(r.body["url"], "http://example.com:8080/in?x=1");
    assert_eq!(r.body["concurrency"], 10);
    assert_eq!(r.body["timeout_ms"], 10000);

    // GET shows the settings but never the secret
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(g.status, StatusCode::OK, "{g:?}");
    assert_eq!(g.body["url"], "http://example.com:8080/in?x=1");
    assert!(g.body.get("secret").is_none(), "{g:?}");
    assert!(!g.text.contains(&secret));

    // set again without a secret: the secret is kept
    let r = put(
        "wh",
        json!({"url": "https://example.com/2", "concurrency": 3, "timeout_ms": 500}),
    )
    .await;
    assert_eq!(r.body["secret"], secret.as_str(), "{r:?}");
    assert_eq!(r.body["secret_generated"], false);
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(g.body["concurrency"], 3);
    assert_eq!(g.body["timeout_ms"], 500);

    // a bad update leaves the stored webhook as it was
    let r = put(
        "wh",
        json!({"url": "https://example.com/3", "timeout_ms": 0}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(g.body["url"], "https://example.com/2");

    // a given secret rotates it
    let r = put(
        "wh",
        json!({"url": "https://example.com/2", "secret": SECRET}),
    )
    .await;
    assert_eq!(r.body["secret"], SECRET);
    let q = c.client.queue("wh").unwrap();
    assert_eq!(q.webhook().await.unwrap().unwrap().secret, SECRET);

    // a password in the URL: PUT (which returns the secret too) shows it, GET does not;
    // the query string is left as it is
    let url = "https://alice:S3cretPass@example.com/in?sig=abc";
    let r = put("wh", json!({"url": url})).await;
    assert_eq!(r.body["url"], url, "{r:?}");
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(
        g.body["url"], "https://alice:***@example.com/in?sig=abc",
        "{g:?}"
    );
    assert!(!g.text.contains("S3cretPass"), "{g:?}");
    put("wh", json!({"url": "https://:S3cretPass@example.com/"})).await;
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(g.body["url"], "https://:***@example.com/", "{g:?}");
    put("wh", json!({"url": "https://alice@example.com/"})).await;
    let g = c.get("/v1/queues/wh/webhook").await;
    assert_eq!(g.body["url"], "https://alice@example.com/", "{g:?}");

    // delete: 200, then 404
    let d = c.delete("/v1/queues/wh/webhook").await;
    assert_eq!(d.status, StatusCode::OK, "{d:?}");
    assert_eq!(d.body, json!({"queue": "wh", "deleted": true}));
    assert_error(
        &c.delete("/v1/queues/wh/webhook").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.get("/v1/queues/wh/webhook").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}
