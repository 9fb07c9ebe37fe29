//! Cases of `shared/cases/CASES.md` over HTTP: C12 (cancel vs running), C13 (names that
//! fight the key layout, URL-encoded keys), C14 (payload limits, 413 with nothing written).

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{Ctx, assert_error, enc};

/// Keys of a queue that hold task data (not counters or settings).
fn task_data(c: &Ctx, queue: &str) -> Vec<String> {
    let k = dueq::QueueKeys::new(queue).unwrap();
    let live = [k.sched, k.active, k.leases, k.tasks, k.keys, k.dead, k.done];
    c.queue_keys(queue)
        .into_iter()
        .filter(|x| live.contains(x))
        .collect()
}

/// C12 (a)-(c): cancel before the due time leaves no trace; cancel of a running task says
/// `in_progress` and the ack still succeeds; cancel after the ack is `not_found`.
/// <https://../shared/cases/CASES.md#c12>
#[tokio::test]
async fn c12_cancel_vs_running() {
    let c = Ctx::new().await;
    // (a)
    c.enqueue("c12", json!({"key": "order-42", "delay_ms": 10000}))
        .await;
    let r = c.delete("/v1/queues/c12/keys/order-42").await;
    assert_eq!(r.body, json!({"outcome": "cancelled"}));
    assert!(
        task_data(&c, "c12").is_empty(),
        "{:?}",
        task_data(&c, "c12")
    );
    assert!(c.claim("c12", 10).await.is_empty());

    // (b) claimed, then cancelled: in_progress; the ack succeeds; it does not come back
    let id = c.enqueue("c12", json!({"key": "order-42"})).await;
    let t = c.claim("c12", 1).await;
    let token = t[0]["lease_token"].as_str().unwrap().to_owned();
    let r = c.delete("/v1/queues/c12/keys/order-42").await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(r.body, json!({"outcome": "in_progress"}));
    let r = c
        .post(
            &format!("/v1/queues/c12/tasks/{id}/ack"),
            json!({"lease_token": token}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = c
        .post("/v1/queues/c12/claim", json!({"wait_ms": 100}))
        .await;
    assert_eq!(r.body, json!({"tasks": []}));

    // (c)
    let r = c.delete("/v1/queues/c12/keys/order-42").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.body, json!({"outcome": "not_found"}));
    let r = c.delete(&format!("/v1/queues/c12/tasks/{id}")).await;
    assert_eq!(r.body, json!({"outcome": "not_found"}));
    assert!(task_data(&c, "c12").is_empty());
}

/// C12 (d): cancel racing the claim (100 times over HTTP): each task is either cancelled and
/// never handed out, or handed out and the cancel says `in_progress`; never both.
#[tokio::test]
async fn c12_cancel_races_claim() {
    let c = Ctx::new().await;
    for i in 0..100 {
        let key = format!("race-{i}");
        c.enqueue("race", json!({"key": key})).await;
        let path = format!("/v1/queues/race/keys/{key}");
        let (cancel, claim) = tokio::join!(
            c.delete(&path),
            c.post("/v1/queues/race/claim", json!({"max": 1}))
        );
        let claimed = claim.body["tasks"].as_array().unwrap();
        match cancel.body["outcome"].as_str().unwrap() {
            "cancelled" => assert!(claimed.is_empty(), "cancelled and claimed: {i}"),
            "in_progress" => {
                assert_eq!(claimed.len(), 1);
                let id = claimed[0]["id"].as_str().unwrap();
                let token = claimed[0]["lease_token"].as_str().unwrap();
                let r = c
                    .post(
                        &format!("/v1/queues/race/tasks/{id}/ack"),
                        json!({"lease_token": token}),
                    )
                    .await;
                assert_eq!(r.status, StatusCode::OK);
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(
        task_data(&c, "race").is_empty(),
        "{:?}",
        task_data(&c, "race")
    );
}

/// C13: bad queue names are refused; every accepted key round-trips byte for byte through
/// enqueue, get, claim and cancel, URL-encoded in paths.
#[tokio::test]
async fn c13_names_and_keys() {
    let c = Ctx::new().await;
    for q in [
        "billing:v2",
        "a{b}c",
        "x}y{",
        &"q".repeat(129),
        "a b",
        "日本",
    ] {
        let r = c
            .post(&format!("/v1/queues/{}/tasks", enc(q)), json!({}))
            .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    }
    let r = c.post("/v1/queues//tasks", json!({})).await;
    assert!(
        matches!(r.status, StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND),
        "{r:?}"
    );
    let long = "é".repeat(256); // 512 bytes
    let keys = [
        "日本語-✓",
        "a b",
        "%3A",
        "v2:1",
        "a/b/../c",
        "100%",
        "+plus+",
        "?x=1&y#z",
        "nul\0byte",
        long.as_str(),
    ];
    for (i, key) in keys.iter().enumerate() {
        let id = c
            .enqueue(
                "billing",
                json!({"payload": i, "key": key, "delay_ms": 60000}),
            )
            .await;
        let g = c
            .get(&format!("/v1/queues/billing/keys/{}", enc(key)))
            .await;
        assert_eq!(g.status, StatusCode::OK, "{key:?}: {g:?}");
        assert_eq!(g.body["key"], *key);
        assert_eq!(g.body["id"], id.as_str());
        let r = c
            .patch(
                &format!("/v1/queues/billing/keys/{}", enc(key)),
                json!({"delay_ms": 0}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{key:?}");
        let t = c.claim("billing", 1).await;
        assert_eq!(t[0]["key"], *key);
        let r = c
            .delete(&format!("/v1/queues/billing/keys/{}", enc(key)))
            .await;
        assert_eq!(r.body, json!({"outcome": "in_progress"}), "{key:?}");
        let token = t[0]["lease_token"].as_str().unwrap();
        c.post(
            &format!("/v1/queues/billing/tasks/{id}/ack"),
            json!({"lease_token": token}),
        )
        .await;
        // and a fresh one cancelled by key
        c.enqueue("billing", json!({"key": key, "delay_ms": 60000}))
            .await;
        let r = c
            .delete(&format!("/v1/queues/billing/keys/{}", enc(key)))
            .await;
        assert_eq!(r.body, json!({"outcome": "cancelled"}), "{key:?}");
    }
    let r = c
        .post(
            "/v1/queues/billing/tasks",
            json!({"key": "é".repeat(256) + "x"}),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    // the two queues never share a key
    c.enqueue("billing", json!({"delay_ms": 60000})).await;
    c.enqueue("billing.v2", json!({"delay_ms": 60000})).await;
    let a = c.queue_keys("billing");
    let b = c.queue_keys("billing.v2");
    assert!(!a.is_empty() && !b.is_empty());
    assert!(a.iter().all(|k| !b.contains(k)));
}

/// C14: payload limit 256 KiB: exactly 262 144 bytes accepted and returned byte-identical on
/// claim; 262 145 refused with 413 and nothing written; a 10 MB body refused with 413 before
/// it is parsed; deeply nested JSON neither crashes nor half-writes.
#[tokio::test]
async fn c14_payload_limits() {
    const LIMIT: usize = 256 * 1024;
    let c = Ctx::with(|b| b.batch_body_limit_bytes(1 << 20), Some(LIMIT)).await;
    // a JSON string payload of exactly LIMIT bytes (quotes included)
    let at = format!("\"{}\"", "a".repeat(LIMIT - 2));
    let body = format!(r#"{{"payload":{at}}}"#).into_bytes();
    let r = c
        .raw(Method::POST, "/v1/queues/c14/tasks", Some(body), true)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let claimed = c
        .raw(
            Method::POST,
            "/v1/queues/c14/claim",
            Some(br#"{"max":1}"#.to_vec()),
            true,
        )
        .await;
    assert!(claimed.text.contains(&format!(r#""payload":{at}"#)));
    let id = claimed.body["tasks"][0]["id"].as_str().unwrap();
    let token = claimed.body["tasks"][0]["lease_token"].as_str().unwrap();
    c.post(
        &format!("/v1/queues/c14/tasks/{id}/ack"),
        json!({"lease_token": token}),
    )
    .await;
    let before = c.all_keys();

    // one byte over
    let over = format!("\"{}\"", "a".repeat(LIMIT - 1));
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/c14/tasks",
            Some(format!(r#"{{"payload":{over},"key":"k"}}"#).into_bytes()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/c14/tasks/batch",
            Some(format!(r#"{{"tasks":[{{"payload":1}},{{"payload":{over}}}]}}"#).into_bytes()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");

    // a 10 MB body, on every body-taking route
    let big = format!(r#"{{"payload":"{}"}}"#, "x".repeat(10_000_000)).into_bytes();
    for path in [
        "/v1/queues/c14/tasks",
        "/v1/queues/c14/tasks/batch",
        "/v1/queues/c14/claim",
        "/v1/queues/c14/keys/k",
    ] {
        let m = if path.ends_with("/k") {
            Method::PATCH
        } else {
            Method::POST
        };
        let r = c.raw(m, path, Some(big.clone()), true).await;
        assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }

    // deeply nested JSON: within the size limit, refused or stored verbatim, never a crash
    let depth = 100_000;
    let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/c14/tasks",
            Some(format!(r#"{{"payload":{deep},"key":"deep"}}"#).into_bytes()),
            true,
        )
        .await;
    // refused (a decoder with a depth limit could never read it back: a poison task)
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    let ok_depth = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/c14/tasks",
            Some(format!(r#"{{"payload":{ok_depth}}}"#).into_bytes()),
            true,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let t = c.claim("c14", 1).await;
    let token = t[0]["lease_token"].as_str().unwrap();
    let id = t[0]["id"].as_str().unwrap();
    c.post(
        &format!("/v1/queues/c14/tasks/{id}/ack"),
        json!({"lease_token": token}),
    )
    .await;
    let deep_key = format!(r#"{{"payload":1,"key":{deep}}}"#);
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/c14/tasks",
            Some(deep_key.into_bytes()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    assert_eq!(c.all_keys(), before);
}

/// C14 with the library: a 0-byte payload (only possible outside HTTP) is shown as `""`.
#[tokio::test]
async fn c14_empty_payload_is_an_empty_string() {
    let c = Ctx::new().await;
    c.client
        .queue("e")
        .unwrap()
        .enqueue(dueq::TaskSpec::new(Vec::new()))
        .await
        .unwrap();
    let t = c.claim("e", 1).await;
    assert_eq!(t[0]["payload"], json!(""));
}
