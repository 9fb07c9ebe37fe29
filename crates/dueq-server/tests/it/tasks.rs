//! Enqueue (one and batch), get, cancel and reschedule by id and by key.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{Ctx, assert_error, enc};

#[tokio::test]
async fn enqueue_get_by_id_and_key() {
    let c = Ctx::new().await;
    let r = c
        .post(
            "/v1/queues/orders/tasks",
            json!({"payload": {"order": 42, "z": [1, "a"]}, "key": "order:42:cancel",
                   "delay_ms": 60000, "max_attempts": 3, "lease_ms": 5000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["created"], true);
    let id = r.body["id"].as_str().unwrap().to_owned();
    let due = r.body["due_at_ms"].as_u64().unwrap();
    assert!(due > 1_600_000_000_000);

    let t = c.get(&format!("/v1/queues/orders/tasks/{id}")).await;
    assert_eq!(t.status, StatusCode::OK, "{t:?}");
    for f in [
        "id",
        "key",
        "state",
        "due_at_ms",
        "attempt",
        "max_attempts",
        "payload",
        "last_error",
        "created_at_ms",
    ] {
        assert!(t.body.get(f).is_some(), "missing {f}: {t:?}");
    }
    assert_eq!(t.body["state"], "scheduled");
    assert_eq!(t.body["payload"], json!({"order": 42, "z": [1, "a"]}));
    assert_eq!(t.body["max_attempts"], 3);
    assert_eq!(t.body["due_at_ms"], due);
    assert_eq!(t.body["attempt"], 0);

    let k = c
        .get(&format!(
            "/v1/queues/orders/keys/{}",
            enc("order:42:cancel")
        ))
        .await;
    assert_eq!(k.status, StatusCode::OK);
    assert_eq!(k.body["id"], id.as_str());
    assert_eq!(k.body["key"], "order:42:cancel");
}

#[tokio::test]
async fn enqueue_by_key_is_idempotent_and_replace_works() {
    let c = Ctx::new().await;
    let id = c
        .enqueue("q", json!({"payload": 1, "key": "k", "delay_ms": 60000}))
        .await;
    let again = c
        .post("/v1/queues/q/tasks", json!({"payload": 2, "key": "k"}))
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["created"], false);
    assert_eq!(again.body["id"], id.as_str());
    let t = c.get("/v1/queues/q/keys/k").await;
    assert_eq!(t.body["payload"], 1);

    let rep = c
        .post(
            "/v1/queues/q/tasks",
            json!({"payload": 3, "key": "k", "on_conflict": "replace", "delay_ms": 0}),
        )
        .await;
    assert_eq!(rep.status, StatusCode::OK, "{rep:?}");
    assert_eq!(rep.body["created"], false);
    assert_eq!(c.get("/v1/queues/q/keys/k").await.body["payload"], 3);

    // replace refused while the task runs
    assert_eq!(c.claim("q", 1).await.len(), 1);
    let busy = c
        .post(
            "/v1/queues/q/tasks",
            json!({"payload": 4, "key": "k", "on_conflict": "replace"}),
        )
        .await;
    assert_error(&busy, StatusCode::CONFLICT, "in_progress");
}

#[tokio::test]
async fn enqueue_refuses_bad_input_and_writes_nothing() {
    let c = Ctx::new().await;
    let bad = [
        json!({"payload": 1, "delay_ms": 1, "due_at_ms": 1}),
        json!({"payload": 1, "delay_ms": -5}),
        json!({"payload": 1, "due_at_ms": 253_402_300_800_000u64}),
        json!({"payload": 1, "unknown": true}),
        json!({"payload": 1, "key": ""}),
        json!({"payload": 1, "key": "x".repeat(513)}),
        json!({"payload": 1, "max_attempts": 0}),
        json!({"payload": 1, "lease_ms": 0}),
        json!({"payload": 1, "on_conflict": "merge"}),
        json!([1, 2]),
    ];
    for b in bad {
        let r = c.post("/v1/queues/q/tasks", b.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    }
    for q in ["a%7Bb%7Dc", "billing:v2", &"x".repeat(129)] {
        let r = c.post(&format!("/v1/queues/{q}/tasks"), json!({})).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    }
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/q/tasks",
            Some(b"{\"payload\":".to_vec()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json");
    // bytes after the object: applying the first value would act on half of what was sent
    for body in [
        &b"{\"payload\":1} garbage"[..],
        b"{\"payload\":1} {\"payload\":2}",
        b"{\"payload\":1}x",
    ] {
        let r = c
            .raw(
                Method::POST,
                "/v1/queues/q/tasks",
                Some(body.to_vec()),
                true,
            )
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("after the JSON"),
            "{r:?}"
        );
    }
    let r = c
        .raw(
            Method::PATCH,
            "/v1/queues/q/settings",
            Some(b"{\"concurrency\":5} {\"bogus\":1}".to_vec()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    // a lease below a second, an expiry at or before the due time (DESIGN 2.17)
    for (b, field) in [
        (json!({"payload": 1, "lease_ms": 999}), "lease_ms"),
        (
            json!({"payload": 1, "delay_ms": 5000, "ttl_ms": 4000}),
            "ttl_ms",
        ),
    ] {
        let r = c.post("/v1/queues/q/tasks", b).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains(field),
            "{r:?}"
        );
    }
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/q/tasks",
            Some(b"{}".to_vec()),
            false,
        )
        .await;
    assert_error(
        &r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());
    // an expiry given as a time with a relative due time is judged by the Redis clock, in
    // the enqueue script: the queue is named in the registry, but no task is written
    let r = c
        .post(
            "/v1/queues/q/tasks",
            json!({"payload": 1, "delay_ms": 60000, "expires_at_ms": 1}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expires_at_ms"),
        "{r:?}"
    );
    assert!(c.queue_keys("q").is_empty(), "{:?}", c.queue_keys("q"));
}

#[tokio::test]
async fn payload_defaults_to_null_and_keeps_its_text() {
    let c = Ctx::new().await;
    let id = c.enqueue("q", json!({})).await;
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{id}")).await.body["payload"],
        json!(null)
    );
    // object key order and spacing are kept byte for byte
    let body = br#"{"payload": {"b": 1, "a": [2, 3]}}"#.to_vec();
    let r = c
        .raw(Method::POST, "/v1/queues/q/tasks", Some(body), true)
        .await;
    let id = r.body["id"].as_str().unwrap();
    let t = c.get(&format!("/v1/queues/q/tasks/{id}")).await;
    assert!(
        t.text.contains(r#""payload":{"b": 1, "a": [2, 3]}"#),
        "{}",
        t.text
    );
}

#[tokio::test]
async fn get_errors() {
    let c = Ctx::new().await;
    assert_error(
        &c.get("/v1/queues/q/tasks/000000000001").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.get("/v1/queues/q/keys/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.get(&format!("/v1/queues/q/tasks/{}", enc("é"))).await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.get("/v1/queues/a:b/tasks/1").await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.get("/v1/nothing").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &c.call(Method::PUT, "/v1/queues/q/tasks", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    );
}

#[tokio::test]
async fn cancel_by_id_and_key() {
    let c = Ctx::new().await;
    let id = c
        .enqueue("q", json!({"payload": 1, "delay_ms": 60000}))
        .await;
    let r = c.delete(&format!("/v1/queues/q/tasks/{id}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"outcome": "cancelled"}));
    let r = c.delete(&format!("/v1/queues/q/tasks/{id}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body, json!({"outcome": "not_found"}));

    c.enqueue("q", json!({"payload": 1, "key": "a b/c"})).await;
    assert_eq!(c.claim("q", 1).await.len(), 1);
    let r = c
        .delete(&format!("/v1/queues/q/keys/{}", enc("a b/c")))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.body, json!({"outcome": "in_progress"}));

    c.enqueue("q", json!({"key": "later", "delay_ms": 60000}))
        .await;
    let r = c.delete("/v1/queues/q/keys/later").await;
    assert_eq!(r.body, json!({"outcome": "cancelled"}));
    assert_error(
        &c.delete(&format!("/v1/queues/q/tasks/{}", enc("bad id")))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
}

#[tokio::test]
async fn reschedule_by_id_and_key() {
    let c = Ctx::new().await;
    let id = c.enqueue("q", json!({"key": "k", "delay_ms": 60000})).await;
    let r = c
        .patch(
            &format!("/v1/queues/q/tasks/{id}"),
            json!({"due_at_ms": 4_000_000_000_000u64}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["due_at_ms"], 4_000_000_000_000u64);
    let r = c.patch("/v1/queues/q/keys/k", json!({"delay_ms": 0})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_error(
        &c.patch("/v1/queues/q/keys/k", json!({})).await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.patch(
            "/v1/queues/q/keys/k",
            json!({"delay_ms": 1, "due_at_ms": 1}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.patch("/v1/queues/q/keys/k", json!({"delay_ms": 1, "x": 1}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_eq!(c.claim("q", 1).await.len(), 1);
    assert_error(
        &c.patch(&format!("/v1/queues/q/tasks/{id}"), json!({"delay_ms": 5}))
            .await,
        StatusCode::CONFLICT,
        "in_progress",
    );
    assert_error(
        &c.patch("/v1/queues/q/keys/none", json!({"delay_ms": 5}))
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn batch_enqueue() {
    let c = Ctx::new().await;
    let r = c
        .post(
            "/v1/queues/q/tasks/batch",
            json!({"tasks": [{"payload": 1, "key": "a"}, {"payload": 2}, {"payload": 3, "key": "a"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let res = r.body["results"].as_array().unwrap();
    assert_eq!(res.len(), 3);
    assert_eq!(res[0]["created"], true);
    assert_eq!(res[1]["created"], true);
    assert_eq!(res[2]["created"], false);
    assert_eq!(res[2]["id"], res[0]["id"]);

    // one bad task refuses the whole batch; nothing written
    let before = c.queue_keys("q2");
    let r = c
        .post(
            "/v1/queues/q2/tasks/batch",
            json!({"tasks": [{"payload": 1}, {"payload": 2, "delay_ms": 1, "due_at_ms": 2}]}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("task 1")
    );
    assert_error(
        &c.post("/v1/queues/q2/tasks/batch", json!({"tasks": []}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    let many: Vec<_> = (0..1001).map(|_| json!({})).collect();
    assert_error(
        &c.post("/v1/queues/q2/tasks/batch", json!({"tasks": many}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_eq!(c.queue_keys("q2"), before);

    // a replace of a running task is refused per item
    assert_eq!(c.claim("q", 1).await.len(), 1);
    let r = c
        .post(
            "/v1/queues/q/tasks/batch",
            json!({"tasks": [{"key": "a", "on_conflict": "replace"}, {"payload": 9}]}),
        )
        .await;
    let res = r.body["results"].as_array().unwrap();
    assert_eq!(res[0]["error"]["code"], "in_progress");
    assert_eq!(res[1]["created"], true);
}

#[tokio::test]
async fn a_stalled_request_times_out_and_writes_nothing() {
    let c = Ctx::with(|b| b.request_timeout_ms(200), None).await;
    let stalled = futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
    let req = axum::http::Request::post("/v1/queues/q/tasks")
        .header("content-type", "application/json")
        .body(axum::body::Body::from_stream(stalled))
        .unwrap();
    let r = crate::support::send(&c.app, req).await;
    assert_error(&r, StatusCode::REQUEST_TIMEOUT, "request_timeout");
    assert!(c.all_keys().is_empty());
    // a claim's limit includes its wait
    let r = c.post("/v1/queues/q/claim", json!({"wait_ms": 400})).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}
