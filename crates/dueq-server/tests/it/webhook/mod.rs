//! Push delivery (webhooks): the `/v1/queues/{queue}/webhook` routes, and `serve` POSTing
//! due tasks to a real HTTP receiver on 127.0.0.1 (signature, ack, retry and dead-letter,
//! timeout, no redirects, concurrency limit, reconfiguration, leases handed back at shutdown,
//! and the Python receiver of `examples/`).

mod harness;
mod python;
mod routes;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use dueq_testkit::wait_until_async;
use serde_json::{Value, json};

use crate::support::{DEADLINE, enc};
use harness::{Behave, Receiver, SECRET, Server, now_ms, verify};

#[tokio::test]
async fn delivery_is_signed_and_a_2xx_acknowledges() {
    let recv = Receiver::start(Behave::Status(204, "")).await;
    let mut s = Server::start().await;
    s.set_webhook("push_ok", json!({"url": recv.url, "secret": SECRET}))
        .await;
    let key = "order:42/cancel é";
    let id = s
        .ctx
        .enqueue(
            "push_ok",
            json!({"payload": {"order": 42, "note": "ü"}, "key": key}),
        )
        .await;
    wait_until_async(DEADLINE, "the task is acknowledged", || async {
        s.succeeded("push_ok").await == 1
    })
    .await;
    assert_eq!(
        s.task("push_ok", &id).await,
        Value::Null,
        "task left behind"
    );

    let hits = recv.hits();
    assert_eq!(hits.len(), 1);
    let h = &hits[0];
    let payload = serde_json::to_vec(&json!({"order": 42, "note": "ü"})).unwrap();
    assert_eq!(h.body, payload, "body is the payload bytes as stored");
    assert_eq!(h.header("content-type"), Some("application/json"));
    assert_eq!(h.header("dueq-task-id"), Some(id.as_str()));
    assert_eq!(h.header("dueq-task-key"), Some(enc(key).as_str()));
    assert_eq!(h.header("dueq-attempt"), Some("1"));
    assert_eq!(h.header("dueq-queue"), Some("push_ok"));
    assert_eq!(h.header("dueq-due-at-ms").map(|_| ()), Some(()));
    assert_eq!(
        h.header("webhook-id"),
        Some(format!("push_ok:{id}").as_str())
    );
    assert!(
        verify(SECRET, h, &h.body),
        "signature does not verify: {h:?}"
    );
    assert!(
        !verify(SECRET, h, b"{\"order\":43}"),
        "tampered body verifies"
    );
    // the id is signed: the same signature under another id does not verify
    let mut swapped = h.clone();
    swapped
        .headers
        .insert("webhook-id", "push_ok:000000000999".parse().unwrap());
    assert!(!verify(SECRET, &swapped, &h.body), "swapped id verifies");
    let other = "whsec_YW5vdGhlci1zZWNyZXQtdmFsdWUtMTIzNDU2";
    assert!(!verify(other, h, &h.body));
    let t: u64 = h.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!(
        t.abs_diff(now_ms() / 1000) < 60,
        "webhook-timestamp {t} is not recent Unix seconds"
    );

    // lateness of the delivery is observed; the outcome is counted from Redis
    let m = s.ctx.get("/metrics").await.text;
    assert!(
        m.contains(r#"dueq_task_lateness_seconds_count{queue="push_ok"} 1"#),
        "{m}"
    );
    assert!(
        m.lines().any(|l| l.starts_with("dueq_tasks_finished_total")
            && l.contains(r#"queue="push_ok""#)
            && l.contains(r#"outcome="succeeded""#)
            && l.ends_with(" 1")),
        "{m}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn non_2xx_retries_with_backoff_then_dead_letters() {
    let recv = Receiver::start(Behave::Status(500, "boom")).await;
    let mut s = Server::start().await;
    s.set_webhook("push_fail", json!({"url": recv.url, "secret": SECRET}))
        .await;
    let id = s
        .ctx
        .enqueue("push_fail", json!({"payload": "x", "max_attempts": 2}))
        .await;
    let t = s.wait_state("push_fail", &id, "dead").await;
    let err = t["last_error"].as_str().unwrap();
    assert!(err.contains("500") && err.contains("boom"), "{err}");
    // the webhook shows its last failed delivery
    let w = s.ctx.get("/v1/queues/push_fail/webhook").await.body;
    assert_eq!(w["last_error"].as_str(), Some(err), "{w}");
    assert!(w["last_error_at_ms"].as_u64().is_some(), "{w}");
    let attempts: Vec<_> = recv
        .hits()
        .iter()
        .map(|h| h.header("dueq-attempt").unwrap().to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2"]);
    assert_eq!(s.succeeded("push_fail").await, 0);
    s.shutdown().await;
}

#[tokio::test]
async fn a_password_in_the_url_stays_out_of_the_error_text() {
    // a port nobody listens on: the request fails, and reqwest's error (kept as the task's
    // last error) names the URL, from which reqwest has moved the credentials to the
    // Authorization header
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut s = Server::start().await;
    s.set_webhook(
        "push_pw",
        json!({"url": format!("http://alice:S3cretPass@127.0.0.1:{port}/hook"), "secret": SECRET}),
    )
    .await;
    let id = s
        .ctx
        .enqueue("push_pw", json!({"payload": 1, "max_attempts": 1}))
        .await;
    let t = s.wait_state("push_pw", &id, "dead").await;
    let err = t["last_error"].as_str().unwrap();
    assert!(err.starts_with("webhook request failed"), "{err}");
    assert!(!err.contains("S3cretPass"), "{err}");
    s.shutdown().await;
}

#[tokio::test]
async fn a_slow_receiver_times_out_and_the_attempt_fails() {
    let recv = Receiver::start(Behave::Hold(Duration::from_secs(60))).await;
    let mut s = Server::start().await;
    s.set_webhook(
        "push_slow",
        json!({"url": recv.url, "secret": SECRET, "timeout_ms": 200}),
    )
    .await;
    let id = s
        .ctx
        .enqueue("push_slow", json!({"payload": 1, "max_attempts": 1}))
        .await;
    let t = s.wait_state("push_slow", &id, "dead").await;
    let err = t["last_error"].as_str().unwrap();
    assert!(err.contains("did not answer within 200 ms"), "{err}");
    assert_eq!(recv.count(), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let target = Receiver::start(Behave::Status(200, "")).await;
    let recv = Receiver::start(Behave::Redirect(target.url.clone())).await;
    let mut s = Server::start().await;
    s.set_webhook("push_302", json!({"url": recv.url, "secret": SECRET}))
        .await;
    let id = s
        .ctx
        .enqueue("push_302", json!({"payload": 1, "max_attempts": 1}))
        .await;
    let t = s.wait_state("push_302", &id, "dead").await;
    let err = t["last_error"].as_str().unwrap();
    assert!(err.contains("302") && err.contains("not followed"), "{err}");
    assert_eq!(recv.count(), 1);
    assert_eq!(target.count(), 0, "the redirect was followed");
    s.shutdown().await;
}

#[tokio::test]
async fn the_concurrency_limit_is_respected() {
    let recv = Receiver::start(Behave::Hold(Duration::from_millis(150))).await;
    let mut s = Server::start().await;
    s.set_webhook(
        "push_conc",
        json!({"url": recv.url, "secret": SECRET, "concurrency": 3}),
    )
    .await;
    for i in 0..12 {
        s.ctx.enqueue("push_conc", json!({"payload": i})).await;
    }
    wait_until_async(DEADLINE, "all 12 tasks are acknowledged", || async {
        s.succeeded("push_conc").await == 12
    })
    .await;
    assert_eq!(recv.count(), 12);
    assert_eq!(recv.max_in_flight.load(Ordering::SeqCst), 3);
    s.shutdown().await;
}

/// A new secret signs beside the one it replaced for the rotation window, so a receiver
/// that still holds the old secret keeps accepting deliveries while it switches.
#[tokio::test]
async fn a_new_secret_signs_beside_the_replaced_one() {
    let recv = Receiver::start(Behave::Status(200, "")).await;
    let mut s = Server::start().await;
    s.set_webhook("push_rot", json!({"url": recv.url, "secret": SECRET}))
        .await;
    let new = "whsec_bmV3LXNlY3JldC0wMTIzNDU2Nzg5YWJjZGVm";
    s.set_webhook("push_rot", json!({"url": recv.url, "secret": new}))
        .await;
    s.ctx.enqueue("push_rot", json!({"payload": 1})).await;
    wait_until_async(DEADLINE, "the task is acknowledged", || async {
        s.succeeded("push_rot").await == 1
    })
    .await;
    let h = &recv.hits()[0];
    assert_eq!(
        h.header("webhook-signature").unwrap().split(' ').count(),
        2,
        "{h:?}"
    );
    assert!(verify(new, h, &h.body), "the new secret does not verify");
    assert!(
        verify(SECRET, h, &h.body),
        "the replaced secret does not verify"
    );
    let w = s
        .ctx
        .client
        .queue("push_rot")
        .unwrap()
        .webhook()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        w.previous_secrets,
        vec![(
            SECRET.to_owned(),
            w.updated_at_ms + dueq::WEBHOOK_ROTATION_MS
        )]
    );
    s.shutdown().await;
}

#[tokio::test]
async fn changes_and_removal_take_effect() {
    let a = Receiver::start(Behave::Status(200, "")).await;
    let b = Receiver::start(Behave::Status(200, "")).await;
    let mut s = Server::start().await;
    s.set_webhook("push_cfg", json!({"url": a.url, "secret": SECRET}))
        .await;
    let first = s.ctx.enqueue("push_cfg", json!({"payload": 1})).await;
    wait_until_async(DEADLINE, "A acknowledges the first task", || async {
        s.succeeded("push_cfg").await == 1
    })
    .await;
    assert_eq!(a.hits()[0].header("dueq-task-id"), Some(first.as_str()));

    // A now refuses; the new URL takes over and the retried task ends at B
    a.set(Behave::Status(503, "gone"));
    s.set_webhook("push_cfg", json!({"url": b.url})).await;
    let second = s.ctx.enqueue("push_cfg", json!({"payload": 2})).await;
    wait_until_async(DEADLINE, "B acknowledges the second task", || async {
        s.succeeded("push_cfg").await == 2
    })
    .await;
    let at_b = b.hits();
    assert_eq!(at_b.len(), 1);
    assert_eq!(at_b[0].header("dueq-task-id"), Some(second.as_str()));
    // the kept secret still signs
    assert!(verify(SECRET, &at_b[0], &at_b[0].body));

    // removed: the delivery worker stops (its wake-up subscription goes away) and new tasks
    // stay scheduled
    let channel = s.ctx.client.queue("push_cfg").unwrap().keys().wake.clone();
    let subscribers = || {
        let mut c = s.ctx.server.conn();
        let v: (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut c)
            .unwrap();
        v.1
    };
    wait_until_async(DEADLINE, "the delivery worker listens", || async {
        subscribers() == 1
    })
    .await;
    assert_eq!(
        s.ctx.delete("/v1/queues/push_cfg/webhook").await.status,
        StatusCode::OK
    );
    wait_until_async(DEADLINE, "the delivery worker stops", || async {
        subscribers() == 0
    })
    .await;
    let at_a = a.count();
    let third = s.ctx.enqueue("push_cfg", json!({"payload": 3})).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // only a negative check
    assert_eq!(s.task("push_cfg", &third).await["state"], "scheduled");
    assert_eq!((a.count(), b.count()), (at_a, 1));
    s.shutdown().await;
}

#[tokio::test]
async fn shutdown_hands_the_lease_back() {
    let recv = Receiver::start(Behave::Hold(Duration::from_secs(120))).await;
    let mut s = Server::start().await;
    s.set_webhook(
        "push_stop",
        json!({"url": recv.url, "secret": SECRET, "timeout_ms": 120000}),
    )
    .await;
    let id = s.ctx.enqueue("push_stop", json!({"payload": 1})).await;
    wait_until_async(DEADLINE, "the delivery is in flight", || async {
        recv.count() == 1
    })
    .await;
    assert_eq!(s.task("push_stop", &id).await["state"], "active");
    s.shutdown().await;
    // released at once: scheduled again, the attempt not counted (the lease was 30 s)
    let t = s.task("push_stop", &id).await;
    assert_eq!(t["state"], "scheduled", "{t}");
    assert_eq!(t["attempt"], 0, "{t}");
}

/// The server's entry in the live workers list covers its push delivery: the queues it
/// delivers to, their concurrency and the deliveries in flight; the delivery workers are not
/// entries of their own.
#[tokio::test]
async fn the_server_lists_its_push_delivery_as_its_load() {
    let recv = Receiver::start(Behave::Hold(Duration::from_secs(30))).await;
    let mut s = Server::start_with(|b| b.heartbeat_ms(100)).await;
    s.set_webhook(
        "push_listed",
        json!({"url": recv.url, "secret": SECRET, "concurrency": 2}),
    )
    .await;
    s.ctx.enqueue("push_listed", json!({"payload": 1})).await;
    wait_until_async(DEADLINE, "one delivery in hand", || async {
        let w = s.ctx.get("/v1/workers").await.body;
        w["workers"].as_array().unwrap().len() == 1
            && w["workers"][0]["in_hand"] == 1
            && w["workers"][0]["queues"] == json!(["push_listed"])
    })
    .await;
    let w = s.ctx.get("/v1/workers").await.body["workers"][0].clone();
    assert_eq!(w["kind"], "server");
    assert_eq!(w["concurrency"], 2);
    s.shutdown().await;
    assert_eq!(s.ctx.get("/v1/workers").await.body["workers"], json!([]));
}

/// On the test clock a delivery made due by a move of the clock goes out at once, and its
/// `webhook-timestamp` is real time, so a receiver that checks it against its own clock (the
/// Standard Webhooks libraries allow 5 minutes) accepts it.
#[tokio::test]
async fn on_the_test_clock_a_delivery_carries_real_time() {
    let rx = Receiver::start(Behave::Status(200, "ok")).await;
    let s = Server::start_on_test_clock().await;
    s.set_webhook("clocked", json!({"url": rx.url, "secret": SECRET}))
        .await;
    s.ctx
        .enqueue(
            "clocked",
            json!({"payload": {"order": 42}, "delay_ms": 1_800_000}),
        )
        .await;
    let r = s
        .ctx
        .post("/v1/test/clock", json!({"advance_ms": 1_800_000}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    wait_until_async(DEADLINE, "the delivery", || async { rx.count() == 1 }).await;
    let h = &rx.hits()[0];
    assert!(verify(SECRET, h, &h.body));
    let ts: u64 = h.header("webhook-timestamp").unwrap().parse().unwrap();
    assert!(
        (ts * 1000).abs_diff(now_ms()) < 60_000,
        "webhook-timestamp {ts} is not real time"
    );
}
