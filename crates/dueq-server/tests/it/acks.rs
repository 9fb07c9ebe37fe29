//! Batch answers: `POST /v1/queues/{queue}/acks`, `/nacks` and `/releases` (DESIGN 4.2): one
//! script call per batch, one outcome per item in order, a stale token refusing only its own
//! item, and bad input refused whole (400 naming the item) before anything is written.

use axum::http::{Method, StatusCode};
use dueq_server::Tokens;
use serde_json::{Value, json};

use crate::support::{Ctx, assert_error};

/// Enqueues `n` due tasks on `q` and claims them all; returns the claimed tasks.
async fn claimed(c: &Ctx, q: &str, n: usize) -> Vec<Value> {
    let tasks: Vec<Value> = (0..n).map(|i| json!({"payload": i})).collect();
    let r = c
        .post(
            &format!("/v1/queues/{q}/tasks/batch"),
            json!({"tasks": tasks}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let got = c.claim(q, 1000).await;
    assert_eq!(got.len(), n);
    got
}

fn item(t: &Value) -> Value {
    json!({"id": t["id"], "lease_token": t["lease_token"]})
}

/// `FCALL` calls (dueq operations) Redis has run so far.
fn script_calls(c: &Ctx) -> u64 {
    let mut conn = c.server.conn();
    dueq_testkit::info_field(&mut conn, "commandstats", "cmdstat_fcall")
        .unwrap_or_default()
        .split(',')
        .find_map(|f| f.strip_prefix("calls="))
        .map_or(0, |n| n.parse().unwrap())
}

fn outcomes(r: &crate::support::Res) -> Vec<String> {
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    r.body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn acks_answer_per_item_and_a_stale_token_refuses_only_its_item() {
    let c = Ctx::new().await;
    let t = claimed(&c, "q", 3).await;
    let mut items: Vec<Value> = t.iter().map(item).collect();
    items[1]["lease_token"] = json!("stale-token");
    let r = c.post("/v1/queues/q/acks", json!({"acks": items})).await;
    assert_eq!(outcomes(&r), ["acked", "lease_lost", "acked"]);
    for (i, gone) in [(0, true), (1, false), (2, true)] {
        let g = c
            .get(&format!(
                "/v1/queues/q/tasks/{}",
                t[i]["id"].as_str().unwrap()
            ))
            .await;
        if gone {
            assert_error(&g, StatusCode::NOT_FOUND, "not_found");
        } else {
            assert_eq!(g.body["state"], "active", "{g:?}");
        }
    }
    // acking twice: the second is stale
    let r = c
        .post("/v1/queues/q/acks", json!({"acks": [item(&t[0])]}))
        .await;
    assert_eq!(outcomes(&r), ["lease_lost"]);
    let s = c.get("/v1/queues/q").await;
    assert_eq!(s.body["succeeded_total"], 2, "{s:?}");
    assert_eq!(s.body["active"], 1, "{s:?}");
}

#[tokio::test]
async fn a_full_batch_is_one_script_call() {
    let c = Ctx::new().await;
    let t = claimed(&c, "q", 1000).await;
    let items: Vec<Value> = t.iter().map(item).collect();
    let before = script_calls(&c);
    let r = c.post("/v1/queues/q/acks", json!({"acks": items})).await;
    assert_eq!(script_calls(&c) - before, 1);
    let o = outcomes(&r);
    assert_eq!(o.len(), 1000);
    assert!(o.iter().all(|x| x == "acked"), "{o:?}");
    assert_eq!(c.get("/v1/queues/q").await.body["active"], 0);
}

#[tokio::test]
async fn nacks_reschedule_dead_letter_and_refuse_stale_items() {
    let c = Ctx::new().await;
    let t = claimed(&c, "q", 3).await;
    let id = |i: usize| t[i]["id"].as_str().unwrap().to_owned();
    let r = c
        .post(
            "/v1/queues/q/nacks",
            json!({"nacks": [
                {"id": id(0), "lease_token": t[0]["lease_token"], "error": "boom", "retry_in_ms": 60000},
                {"id": id(1), "lease_token": "stale", "error": "ignored"},
                {"id": id(2), "lease_token": t[2]["lease_token"], "error": "bad", "permanent": true},
            ]}),
        )
        .await;
    assert_eq!(outcomes(&r), ["rescheduled", "lease_lost", "dead"]);
    let res = r.body["results"].as_array().unwrap();
    assert!(res[0]["due_at_ms"].as_u64().unwrap() > t[0]["due_at_ms"].as_u64().unwrap());
    assert!(res[1].get("due_at_ms").is_none() && res[2].get("due_at_ms").is_none());

    let g = c.get(&format!("/v1/queues/q/tasks/{}", id(0))).await;
    assert_eq!(g.body["state"], "scheduled");
    assert_eq!(g.body["last_error"], "boom");
    let g = c.get(&format!("/v1/queues/q/tasks/{}", id(1))).await;
    assert_eq!(g.body["state"], "active");
    assert_eq!(g.body["last_error"], Value::Null);
    let d = c.get("/v1/queues/q/dead").await;
    assert_eq!(d.body["total"], 1);
    assert_eq!(d.body["tasks"][0]["id"], id(2).as_str());
    assert_eq!(d.body["tasks"][0]["last_error"], "bad");
}

#[tokio::test]
async fn releases_hand_leases_back_without_counting_the_attempt() {
    let c = Ctx::new().await;
    let t = claimed(&c, "q", 2).await;
    let r = c
        .post(
            "/v1/queues/q/releases",
            json!({"releases": [item(&t[0]), {"id": t[1]["id"], "lease_token": "stale"}]}),
        )
        .await;
    assert_eq!(outcomes(&r), ["released", "lease_lost"]);
    let again = c.claim("q", 10).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0]["id"], t[0]["id"]);
    assert_eq!(again[0]["attempt"], 1);
    // the released task's old token is stale now
    let r = c
        .post("/v1/queues/q/acks", json!({"acks": [item(&t[0])]}))
        .await;
    assert_eq!(outcomes(&r), ["lease_lost"]);
}

#[tokio::test]
async fn bad_input_names_the_item_and_writes_nothing() {
    let c = Ctx::new().await;
    let t = claimed(&c, "q", 2).await;
    let good = item(&t[0]);
    let too_many: Vec<Value> = (0..1001).map(|_| good.clone()).collect();
    let cases = [
        ("acks", json!({"acks": []}), "acks must hold 1 to 1000"),
        (
            "acks",
            json!({"acks": too_many}),
            "acks must hold 1 to 1000",
        ),
        (
            "acks",
            json!({"acks": [good, {"id": "a b", "lease_token": "x"}]}),
            "acks[1].id",
        ),
        (
            "nacks",
            json!({"nacks": [{"id": t[0]["id"], "lease_token": t[0]["lease_token"]}, {"id": t[1]["id"], "lease_token": ""}]}),
            "nacks[1].lease_token",
        ),
        (
            "releases",
            json!({"releases": [good, {"id": "", "lease_token": "x"}]}),
            "releases[1].id",
        ),
        ("acks", json!({"acks": [{"id": "1"}]}), "lease_token"),
        (
            "nacks",
            json!({"nacks": [{"id": "1", "lease_token": "x", "retry": 1}]}),
            "retry",
        ),
        ("nacks", json!({"acks": [good]}), "acks"),
    ];
    for (route, body, names) in cases {
        let r = c.post(&format!("/v1/queues/q/{route}"), body).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(names), "{route}: {msg:?} should name {names}");
    }
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/q/acks",
            Some(b"{\"acks\": [".to_vec()),
            true,
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_json");
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/q/acks",
            Some(serde_json::to_vec(&json!({"acks": [good]})).unwrap()),
            false,
        )
        .await;
    assert_error(
        &r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_error(
        &c.post("/v1/queues/a%20b/acks", json!({"acks": [good]}))
            .await,
        StatusCode::BAD_REQUEST,
        "invalid_input",
    );
    // nothing was written: both tasks are still held under their first lease
    let s = c.get("/v1/queues/q").await;
    assert_eq!(
        (
            s.body["active"].as_u64(),
            s.body["succeeded_total"].as_u64()
        ),
        (Some(2), Some(0))
    );
    let r = c
        .post(
            "/v1/queues/q/acks",
            json!({"acks": [item(&t[0]), item(&t[1])]}),
        )
        .await;
    assert_eq!(outcomes(&r), ["acked", "acked"]);
}

#[tokio::test]
async fn a_body_over_the_batch_limit_is_413_and_the_token_is_required() {
    let mut c = Ctx::with(
        |b| {
            b.batch_body_limit_bytes(4096)
                .tokens(Tokens::new(["s3cret"]))
        },
        None,
    )
    .await;
    let big = "x".repeat(8192);
    let body = json!({"nacks": [{"id": "1", "lease_token": "t", "error": big}]});
    for route in ["acks", "nacks", "releases"] {
        let r = c
            .post(&format!("/v1/queues/q/{route}"), json!({route: []}))
            .await;
        assert_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    c.token = Some("s3cret".into());
    let r = c.post("/v1/queues/q/nacks", body).await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());
}
