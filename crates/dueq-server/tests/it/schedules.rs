//! `/v1/queues/{queue}/schedules`: set (201 / 200), get with next fire times, list, pause,
//! resume, delete; case C34 (bad specs: 400 naming the field, nothing stored); and `serve()`
//! firing ticks by itself.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Ctx, DEADLINE, Live, assert_error};

async fn put(c: &Ctx, q: &str, name: &str, body: Value) -> crate::support::Res {
    c.call(
        Method::PUT,
        &format!("/v1/queues/{q}/schedules/{name}"),
        Some(body),
    )
    .await
}

/// [C34](../../../../shared/cases/CASES.md): `61 * * * *`, `every_ms: 0`, `tz: Mars/Olympus`,
/// both `cron` and `every_ms`, a name with a space: 400 naming the field, nothing stored.
#[tokio::test]
async fn c34_bad_schedules_get_400_naming_the_field() {
    let c = Ctx::new().await;
    for (name, body, field) in [
        ("s", json!({"cron": "61 * * * *"}), "cron"),
        ("s", json!({"every_ms": 0}), "every_ms"),
        (
            "s",
            json!({"cron": "* * * * *", "tz": "Mars/Olympus"}),
            "tz",
        ),
        (
            "s",
            json!({"cron": "* * * * *", "every_ms": 1000}),
            "every_ms",
        ),
        ("a%20b", json!({"every_ms": 1000}), "name"),
        ("s", json!({}), "cron"),
        ("s", json!({"every_ms": 1000, "priority": 10}), "priority"),
        ("s", json!({"every_ms": 1000, "group": ""}), "group"),
        // values the runtime cannot honour (DESIGN 2.17)
        ("s", json!({"every_ms": 999}), "every_ms"),
        ("s", json!({"every_ms": 1000, "lease_ms": 500}), "lease_ms"),
        (
            "s",
            json!({"every_ms": 1000, "misfire_grace_ms": 0}),
            "misfire_grace_ms",
        ),
        (
            "s",
            json!({"every_ms": 1000, "queue_weight": 3}),
            "queue_weight",
        ),
    ] {
        let r = put(&c, "orders", name, body.clone()).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(msg.contains(field), "{body}: {msg:?} does not name {field}");
    }
    assert!(c.all_keys().is_empty(), "written: {:?}", c.all_keys());
}

#[tokio::test]
async fn routes_set_get_list_pause_resume_delete() {
    let c = Ctx::new().await;
    let body = json!({"every_ms": 60000, "payload": {"report": "daily"}, "overlap": "skip"});
    let r = put(&c, "orders", "report", body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(r.body["outcome"], "created");
    let next = r.body["next_fire_at_ms"].as_u64().unwrap();
    assert_eq!(next % 60000, 0);
    let upcoming: Vec<u64> = r.body["upcoming_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        upcoming,
        (0..5).map(|i| next + i * 60000).collect::<Vec<_>>()
    );
    assert_eq!(r.body["payload"], json!({"report": "daily"}));
    assert_eq!(r.body["overlap"], "skip");
    assert_eq!(r.body["misfire"], "skip");
    assert_eq!(r.body["last_fire_at_ms"], Value::Null);
    assert_eq!(r.body["skipped_total"], 0);
    assert_eq!(r.body["paused"], false);
    // the same PUT again: 200 unchanged; a new payload: 200 replaced, same next fire time
    let r = put(&c, "orders", "report", body).await;
    assert_eq!(
        (r.status, r.body["outcome"].clone()),
        (StatusCode::OK, json!("unchanged"))
    );
    assert_eq!(
        (r.body["priority"].clone(), r.body["group"].clone()),
        (json!(0), Value::Null)
    );
    let r = put(
        &c,
        "orders",
        "report",
        json!({"every_ms": 60000, "payload": 2, "priority": 7, "group": "shop-1"}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["outcome"].clone()),
        (StatusCode::OK, json!("replaced"))
    );
    assert_eq!(r.body["next_fire_at_ms"], next);
    let g = c.get("/v1/queues/orders/schedules/report").await;
    assert_eq!(g.status, StatusCode::OK);
    assert_eq!(g.body["payload"], 2);
    assert_eq!(
        (g.body["priority"].clone(), g.body["group"].clone()),
        (json!(7), json!("shop-1"))
    );
    assert!(g.body.get("outcome").is_none());
    // pause / resume
    let p = c
        .post("/v1/queues/orders/schedules/report/pause", json!({}))
        .await;
    assert_eq!(p.status, StatusCode::OK, "{p:?}");
    assert_eq!(
        (p.body["paused"].clone(), p.body["next_fire_at_ms"].clone()),
        (json!(true), Value::Null)
    );
    let p = c
        .post("/v1/queues/orders/schedules/report/resume", json!({}))
        .await;
    assert_eq!(p.body["paused"], false);
    assert_eq!(p.body["next_fire_at_ms"].as_u64().unwrap() % 60000, 0);
    // list
    put(
        &c,
        "orders",
        "a-first",
        json!({"cron": "0 9 * * 1-5", "tz": "Europe/Berlin"}),
    )
    .await;
    let l = c.get("/v1/queues/orders/schedules").await;
    let names: Vec<&str> = l.body["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a-first", "report"]);
    assert_eq!(l.body["schedules"][0]["tz"], "Europe/Berlin");
    // delete, then 404 everywhere
    let d = c.delete("/v1/queues/orders/schedules/report").await;
    assert_eq!(
        (d.status, d.body["deleted"].clone()),
        (StatusCode::OK, json!(true))
    );
    for r in [
        c.get("/v1/queues/orders/schedules/report").await,
        c.delete("/v1/queues/orders/schedules/report").await,
        c.post("/v1/queues/orders/schedules/report/pause", json!({}))
            .await,
        c.post("/v1/queues/orders/schedules/report/resume", json!({}))
            .await,
    ] {
        assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    }
}

/// `serve()` fires the schedules of every queue that has some, with nobody else running:
/// tasks keyed `schedule:{name}:{fire_at_ms}`, due at their fire time, counted on `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_fires_schedules_and_reports_metrics() {
    let c = Ctx::with(|b| b.schedule_poll_ms(100), None).await;
    let mut live = Live::start(&c.state).await;
    let r = put(
        &c,
        "ticks",
        "often",
        json!({"every_ms": 1000, "payload": "t"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // ticks fire ahead of their time: wait until three fired and one has come
    dueq_testkit::wait_until_async(DEADLINE, "a tick came", || async {
        let s = c.get("/v1/queues/ticks/schedules/often").await.body;
        s["last_fire_at_ms"].is_u64() && s["fired_total"].as_u64().unwrap() >= 3
    })
    .await;
    live.shutdown().await;
    let s = c.get("/v1/queues/ticks/schedules/often").await.body;
    let last = s["last_fire_at_ms"].as_u64().unwrap();
    assert_eq!(last % 1000, 0);
    let t = c
        .get(&format!("/v1/queues/ticks/keys/schedule%3Aoften%3A{last}"))
        .await;
    assert_eq!(t.status, StatusCode::OK, "{t:?}");
    assert_eq!(t.body["due_at_ms"], last);
    assert_eq!(t.body["payload"], "t");
    let m = c.get("/metrics").await.text;
    assert!(
        m.lines()
            .any(|l| l.starts_with("dueq_schedule_ticks_total{")
                && l.contains("schedule=\"often\"")
                && l.contains("outcome=\"fired\"")),
        "{m}"
    );
    assert!(
        m.lines().any(
            |l| l.starts_with("dueq_schedule_next_fire_timestamp_seconds{")
                && l.contains("schedule=\"often\"")
        ),
        "{m}"
    );
}
