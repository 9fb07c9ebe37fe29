//! Claim (with long-poll), ack, nack, extend.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use dueq::TaskSpec;
use serde_json::json;

use crate::support::{Ctx, DEADLINE, assert_error};

fn redis_now_ms(c: &Ctx) -> u64 {
    let mut conn = c.server.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    s * 1000 + us / 1000
}

#[tokio::test]
async fn claim_ack_nack_extend() {
    let c = Ctx::new().await;
    let id = c
        .enqueue(
            "q",
            json!({"payload": {"n": 1}, "key": "k1", "max_attempts": 2}),
        )
        .await;
    let tasks = c.claim("q", 10).await;
    assert_eq!(tasks.len(), 1);
    let t = &tasks[0];
    for f in [
        "id",
        "key",
        "payload",
        "attempt",
        "due_at_ms",
        "lease_token",
        "lease_expires_at_ms",
    ] {
        assert!(t.get(f).is_some(), "missing {f}: {t}");
    }
    assert_eq!(t["id"], id.as_str());
    assert_eq!(t["payload"], json!({"n": 1}));
    assert_eq!(t["attempt"], 1);
    let token = t["lease_token"].as_str().unwrap().to_owned();

    let r = c
        .post(
            &format!("/v1/queues/q/tasks/{id}/extend"),
            json!({"lease_token": token, "lease_ms": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(
        r.body["lease_expires_at_ms"].as_u64().unwrap()
            > t["lease_expires_at_ms"].as_u64().unwrap()
    );
    assert_error(
        &c.post(
            &format!("/v1/queues/q/tasks/{id}/extend"),
            json!({"lease_token": token, "lease_ms": 0}),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );

    // nack with a delay: back to scheduled
    let r = c
        .post(
            &format!("/v1/queues/q/tasks/{id}/nack"),
            json!({"lease_token": token, "error": "boom", "retry_in_ms": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["outcome"], "rescheduled");
    assert!(r.body["due_at_ms"].is_u64());
    // the old token is refused everywhere and changes nothing
    for (verb, body) in [
        ("ack", json!({"lease_token": token})),
        ("nack", json!({"lease_token": token})),
        ("extend", json!({"lease_token": token, "lease_ms": 1000})),
    ] {
        let r = c
            .post(&format!("/v1/queues/q/tasks/{id}/{verb}"), body)
            .await;
        assert_error(&r, StatusCode::CONFLICT, "lease_lost");
    }
    let t = c.get(&format!("/v1/queues/q/tasks/{id}")).await;
    assert_eq!(t.body["state"], "scheduled");
    assert_eq!(t.body["last_error"], "boom");

    // second attempt, acked
    let tasks = c.claim("q", 1).await;
    assert_eq!(tasks[0]["attempt"], 2);
    let token = tasks[0]["lease_token"].as_str().unwrap();
    let r = c
        .post(
            &format!("/v1/queues/q/tasks/{id}/ack"),
            json!({"lease_token": token}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, json!({"outcome": "acked"}));
    assert_error(
        &c.get(&format!("/v1/queues/q/tasks/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    // permanent nack: dead
    let id = c.enqueue("q", json!({"payload": 2})).await;
    let token = c.claim("q", 1).await[0]["lease_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = c
        .post(
            &format!("/v1/queues/q/tasks/{id}/nack"),
            json!({"lease_token": token, "permanent": true, "error": "bad"}),
        )
        .await;
    assert_eq!(r.body, json!({"outcome": "dead"}));
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{id}")).await.body["state"],
        "dead"
    );
}

#[tokio::test]
async fn claim_refuses_bad_input() {
    let c = Ctx::new().await;
    for b in [
        json!({"max": 0}),
        json!({"max": 1001}),
        json!({"wait_ms": 60001}),
        json!({"lease_ms": 0}),
        json!({"max": -1}),
        json!({"max": 1, "extra": 1}),
    ] {
        let r = c.post("/v1/queues/q/claim", b.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    }
    assert_error(
        &c.post("/v1/queues/q/tasks/000000000001/ack", json!({}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    assert_error(
        &c.post(
            "/v1/queues/q/tasks/000000000001/ack",
            json!({"lease_token": "nope"}),
        )
        .await,
        StatusCode::CONFLICT,
        "lease_lost",
    );
    assert!(c.claim("q", 5).await.is_empty());
}

#[tokio::test]
async fn long_poll_returns_when_the_task_is_due() {
    let c = Ctx::new().await;
    c.enqueue("q", json!({"payload": 1, "delay_ms": 400})).await;
    let start = Instant::now();
    let r = c
        .post("/v1/queues/q/claim", json!({"max": 5, "wait_ms": 10000}))
        .await;
    let after_ms = redis_now_ms(&c);
    assert_eq!(r.status, StatusCode::OK);
    let tasks = r.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{r:?}");
    let due = tasks[0]["due_at_ms"].as_u64().unwrap();
    // returned on the due time (by the Redis clock), not on a poll tick
    assert!(after_ms >= due);
    assert!(after_ms - due < 100, "{} ms late", after_ms - due);
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn long_poll_wakes_on_an_enqueue_by_another_producer() {
    let c = Ctx::new().await;
    let app = c.app.clone();
    let waiter = tokio::spawn(async move {
        let req = axum::http::Request::post("/v1/queues/q/claim")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(r#"{"wait_ms": 20000}"#))
            .unwrap();
        crate::support::send(&app, req).await
    });
    // the claim is listening once the wake channel has a subscriber
    let keys = dueq::QueueKeys::new("q").unwrap();
    dueq_testkit::wait_until_async(DEADLINE, "claim subscribed", || {
        let mut conn = c.server.conn();
        let v: (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&keys.wake)
            .query(&mut conn)
            .unwrap();
        async move { v.1 >= 1 }
    })
    .await;
    // an earlier task from another producer (the library, not this server)
    let enqueued_at = Instant::now();
    c.client
        .queue("q")
        .unwrap()
        .enqueue(TaskSpec::new(b"2".to_vec()))
        .await
        .unwrap();
    let r = waiter.await.unwrap();
    assert_eq!(r.body["tasks"].as_array().unwrap().len(), 1, "{r:?}");
    assert!(
        enqueued_at.elapsed() < Duration::from_millis(500),
        "woke after {:?}",
        enqueued_at.elapsed()
    );
}

#[tokio::test]
async fn long_poll_times_out_empty_and_ends_at_shutdown() {
    let c = Ctx::new().await;
    let start = Instant::now();
    let r = c.post("/v1/queues/q/claim", json!({"wait_ms": 200})).await;
    assert_eq!(r.body, json!({"tasks": []}));
    assert!(start.elapsed() >= Duration::from_millis(200));

    let app = c.app.clone();
    let waiter = tokio::spawn(async move {
        let req = axum::http::Request::post("/v1/queues/q/claim")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(r#"{"wait_ms": 60000}"#))
            .unwrap();
        crate::support::send(&app, req).await
    });
    let start = Instant::now();
    c.state.begin_shutdown();
    let r = waiter.await.unwrap();
    assert_eq!(r.body, json!({"tasks": []}));
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn expired_leases_are_recovered_by_the_claim() {
    let c = Ctx::new().await;
    let id = c.enqueue("q", json!({"payload": 1})).await;
    // the shortest lease allowed (DESIGN 2.17); a shorter one is refused
    let r = c.post("/v1/queues/q/claim", json!({"lease_ms": 999})).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    let r = c
        .post("/v1/queues/q/claim", json!({"lease_ms": 1000}))
        .await;
    assert_eq!(r.body["tasks"][0]["id"], id.as_str());
    let r = c.post("/v1/queues/q/claim", json!({"wait_ms": 5000})).await;
    let t = &r.body["tasks"][0];
    assert_eq!(t["id"], id.as_str(), "{r:?}");
    assert_eq!(t["attempt"], 2);
}
