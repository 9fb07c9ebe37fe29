//! Task options over HTTP end to end (docs/OPTIONS.md): `priority`, `ttl_ms` /
//! `expires_at_ms` with the `on_expire` setting and the `expired` outcome in `/metrics`,
//! `on_conflict: debounce` with `debounce_max_ms`, and the 400s naming each field.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{Ctx, assert_error};

fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|lb| l.contains(lb))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn redis_now_ms(c: &Ctx) -> u64 {
    let mut conn = c.server.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    s * 1000 + us / 1000
}

async fn redis_past(c: &Ctx, at_ms: u64) {
    let start = Instant::now();
    while redis_now_ms(c) <= at_ms {
        assert!(start.elapsed() < Duration::from_secs(10), "clock stuck");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn priority_single_and_batch() {
    let c = Ctx::new().await;
    let r = c
        .post(
            "/v1/queues/p/tasks/batch",
            json!({"tasks": [
                {"payload": "nine", "priority": 9},
                {"payload": "five", "priority": 5},
                {"payload": "zero"},
            ]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let id = c
        .enqueue("p", json!({"payload": "one", "priority": 1, "key": "k"}))
        .await;
    let t = c.get(&format!("/v1/queues/p/tasks/{id}")).await;
    assert_eq!(t.body["priority"], 1, "{t:?}");
    let got: Vec<_> = c
        .claim("p", 10)
        .await
        .iter()
        .map(|t| t["payload"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, ["zero", "one", "five", "nine"]);
}

#[tokio::test]
async fn bad_options_name_the_field_and_write_nothing() {
    let c = Ctx::new().await;
    for (body, field) in [
        (json!({"priority": 10}), "priority"),
        (json!({"priority": -1}), "priority"),
        (json!({"ttl_ms": 1000, "expires_at_ms": 1}), "expires_at_ms"),
        (json!({"ttl_ms": 0}), "ttl_ms"),
        (
            json!({"key": "k", "on_conflict": "debounce"}),
            "debounce_max_ms",
        ),
        (
            json!({"key": "k", "debounce_max_ms": 10}),
            "debounce_max_ms",
        ),
        (
            json!({"on_conflict": "debounce", "debounce_max_ms": 10}),
            "key",
        ),
    ] {
        let r = c.post("/v1/queues/bad/tasks", body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {r:?}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(field), "{body}: {msg}");
        let r = c
            .post(
                "/v1/queues/bad/tasks/batch",
                json!({"tasks": [{"payload": 1}, body]}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    }
    assert!(c.queue_keys("bad").is_empty(), "{:?}", c.queue_keys("bad"));
    let r = c
        .patch("/v1/queues/bad/settings", json!({"on_expire": "keep"}))
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("on_expire")
    );
    assert!(c.queue_keys("bad").is_empty());
}

/// Case C28 over HTTP: a task with `ttl_ms` on a paused queue is never claimed, shows in
/// `expired_total` and `dueq_tasks_finished_total{outcome="expired"}`, frees its key, and with
/// `on_expire: dead` sits in the dead-letter queue with reason `expired`.
#[tokio::test]
async fn c28_expiry_over_http() {
    let c = Ctx::new().await;
    let r = c
        .patch("/v1/queues/e/settings", json!({"on_expire": "dead"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["on_expire"], "dead");
    c.post("/v1/queues/e/pause", json!({})).await;
    let id = c
        .enqueue("e", json!({"payload": 1, "key": "r", "ttl_ms": 200}))
        .await;
    let t = c.get(&format!("/v1/queues/e/tasks/{id}")).await;
    let exp = t.body["expires_at_ms"].as_u64().unwrap();
    c.enqueue("e", json!({"payload": 2, "expires_at_ms": exp + 3_600_000}))
        .await;
    redis_past(&c, exp).await;
    c.post("/v1/queues/e/resume", json!({})).await;
    let got = c.claim("e", 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["payload"], 2);
    let s = c.get("/v1/queues/e").await;
    assert_eq!(s.body["expired_total"], 1, "{s:?}");
    let d = c.get("/v1/queues/e/dead").await;
    assert_eq!(d.body["tasks"][0]["id"], id.as_str(), "{d:?}");
    assert_eq!(d.body["tasks"][0]["last_error"], "expired");
    let m = c.get("/metrics").await;
    assert_eq!(
        metric(
            &m.text,
            "dueq_tasks_finished_total",
            &[r#"queue="e""#, r#"outcome="expired""#]
        ),
        Some(1.0),
        "{}",
        m.text
    );
    let again = c.post("/v1/queues/e/tasks", json!({"key": "r"})).await;
    assert_eq!(
        again.status,
        StatusCode::CREATED,
        "key not freed: {again:?}"
    );
}

#[tokio::test]
async fn debounce_over_http() {
    let c = Ctx::new().await;
    let body = |n: u32, delay: u64| {
        json!({"payload": n, "key": "search-index:42", "delay_ms": delay,
               "on_conflict": "debounce", "debounce_max_ms": 3000})
    };
    let id = c.enqueue("d", body(1, 1_000)).await;
    let created = c.get(&format!("/v1/queues/d/tasks/{id}")).await.body["created_at_ms"]
        .as_u64()
        .unwrap();
    let r = c.post("/v1/queues/d/tasks", body(2, 60_000)).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["created"], false);
    assert_eq!(r.body["due_at_ms"], created + 3_000);
    let r = c.post("/v1/queues/d/tasks", body(3, 0)).await;
    assert_eq!(r.status, StatusCode::OK);
    let t = c.claim("d", 1).await;
    assert_eq!(t[0]["payload"], 3);
    let r = c.post("/v1/queues/d/tasks", body(4, 0)).await;
    assert_error(&r, StatusCode::CONFLICT, "in_progress");
}

/// `GET /v1/queues/{queue}/tasks`: scheduled tasks in one due order over
/// priorities and groups, active ones by lease deadline with their deadline, paged by the
/// `next` cursor; bad parameters are 400 naming them.
#[tokio::test]
async fn browse_tasks_over_http() {
    let c = Ctx::new().await;
    // absolute due times, so the order does not depend on how fast the enqueues go
    let base = redis_now_ms(&c) + 60_000;
    for (i, extra) in [
        json!({"priority": 9}),
        json!({"group": "g"}),
        json!({}),
        json!({"priority": 3}),
        json!({"group": "h"}),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = json!({"payload": i, "due_at_ms": base + (5 - i as u64) * 10});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c.enqueue("b", body).await;
    }
    let mut got = Vec::new();
    let mut uri = "/v1/queues/b/tasks?limit=2".to_owned();
    loop {
        let r = c.get(&uri).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        for t in r.body["tasks"].as_array().unwrap() {
            assert_eq!(t["state"], "scheduled");
            got.push(t["payload"].as_u64().unwrap());
        }
        match r.body["next"].as_str() {
            Some(n) => uri = format!("/v1/queues/b/tasks?limit=2&after={n}"),
            None => break,
        }
    }
    assert_eq!(got, [4, 3, 2, 1, 0], "not in due order");

    c.enqueue("a", json!({"payload": "run", "lease_ms": 20_000}))
        .await;
    assert_eq!(c.claim("a", 1).await.len(), 1);
    let r = c.get("/v1/queues/a/tasks?state=active").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["tasks"][0]["state"], "active");
    assert!(r.body["tasks"][0]["lease_expires_at_ms"].as_u64().is_some());
    assert_eq!(r.body["next"], serde_json::Value::Null);

    for (q, field) in [
        ("state=dead", "state"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("after=nonsense", "after"),
        ("sort=due", "sort"),
    ] {
        let r = c.get(&format!("/v1/queues/b/tasks?{q}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}: {r:?}");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(field), "{q}: {msg}");
    }
}

/// `unique_for_ms`: after the task finished its key stays taken; a re-send answers 200 with
/// the finished task's id and state, a replace is a 409 `unique_window`, a batch answers per
/// task alike; a window without a key and one over the cap are 400s naming the field, and
/// the queue's setting reads back.
#[tokio::test]
async fn unique_window_over_http() {
    let c = Ctx::new().await;
    let body = json!({"payload": "pay", "key": "order-42", "unique_for_ms": 60_000});
    let id = c.enqueue("u", body.clone()).await;
    let t = c.claim("u", 1).await;
    let r = c
        .post(
            "/v1/queues/u/acks",
            json!({"acks": [{"id": t[0]["id"], "lease_token": t[0]["lease_token"]}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let r = c.post("/v1/queues/u/tasks", body.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["created"], false, "{r:?}");
    assert_eq!(r.body["id"], id.as_str(), "{r:?}");
    assert_eq!(r.body["state"], "succeeded", "{r:?}");
    // a get by key names the task whose window holds it
    let r = c.get("/v1/queues/u/keys/order-42").await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "unique window of task {id}, which finished as succeeded"
        )),
        "{msg}"
    );
    let mut replace = body.clone();
    replace["on_conflict"] = json!("replace");
    let r = c.post("/v1/queues/u/tasks", replace.clone()).await;
    assert_error(&r, StatusCode::CONFLICT, "unique_window");
    let r = c
        .post(
            "/v1/queues/u/tasks/batch",
            json!({"tasks": [body, replace, {"payload": 1, "key": "other"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let res = r.body["results"].as_array().unwrap();
    assert_eq!(res[0]["state"], "succeeded", "{r:?}");
    assert_eq!(res[1]["error"]["code"], "unique_window", "{r:?}");
    assert_eq!(res[2]["created"], true, "{r:?}");
    assert!(res[2].get("state").is_none(), "{r:?}");

    for (bad, field) in [
        (
            json!({"payload": 1, "unique_for_ms": 1000}),
            "unique_for_ms",
        ),
        (
            json!({"payload": 1, "key": "k", "unique_for_ms": 31_622_400_001_u64}),
            "unique_for_ms",
        ),
    ] {
        let r = c.post("/v1/queues/u2/tasks", bad).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(
            r.body["error"]["message"].as_str().unwrap().contains(field),
            "{r:?}"
        );
    }
    assert!(c.queue_keys("u2").iter().all(|k| !k.ends_with(":tasks")));
    let r = c
        .patch("/v1/queues/u/settings", json!({"unique_for_ms": 3_600_000}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["unique_for_ms"], 3_600_000, "{r:?}");
}
