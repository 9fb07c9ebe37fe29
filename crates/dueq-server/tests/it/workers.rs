//! `GET /v1/workers` (live worker processes and servers), the `dueq_workers{queue}` gauge,
//! and `serve()` listing itself while it runs.

use axum::http::{Method, StatusCode};
use dueq::{Outcome, Worker};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, Live, assert_error};

fn gauge(text: &str, queue: &str) -> Option<f64> {
    let prefix = format!("dueq_workers{{queue=\"{queue}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn workers_are_listed_filtered_and_counted_per_queue() {
    let c = Ctx::new().await;
    let r = c.get("/v1/workers").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, serde_json::json!({"workers": []}));

    let worker = Worker::builder(c.client.clone())
        .concurrency(5)
        .heartbeat_ms(100)
        .handle("wa", |_t| async { Outcome::Success })
        .handle("wb", |_t| async { Outcome::Success })
        .build()
        .unwrap();
    let id = worker.id().unwrap().to_owned();
    let handle = worker.start();
    wait_until_async(DEADLINE, "the worker is listed", || async {
        c.get("/v1/workers").await.body["workers"][0]["id"] == id.as_str()
    })
    .await;
    let w = c.get("/v1/workers").await.body["workers"][0].clone();
    assert_eq!(w["kind"], "worker");
    assert_eq!(w["pid"], std::process::id());
    assert_eq!(w["queues"], serde_json::json!(["wa", "wb"]));
    assert_eq!(
        (w["concurrency"].as_u64(), w["in_hand"].as_u64()),
        (Some(5), Some(0))
    );
    assert_eq!(w["version"], env!("CARGO_PKG_VERSION"));
    for field in ["host", "started_at_ms", "last_seen_ms", "expires_at_ms"] {
        assert!(!w[field].is_null(), "{field}: {w}");
    }
    let only = c.get("/v1/workers?queue=wb").await;
    assert_eq!(only.body["workers"].as_array().unwrap().len(), 1);
    let none = c.get("/v1/workers?queue=other").await;
    assert_eq!(none.body["workers"], serde_json::json!([]));
    let bad = c.get("/v1/workers?queue=a%7Bb%7D").await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "invalid_input");
    assert!(bad.text.contains("queue name"), "{}", bad.text);
    let unknown = c.get("/v1/workers?host=x").await;
    assert_error(&unknown, StatusCode::BAD_REQUEST, "invalid_input");

    let m = c.get("/metrics").await.text;
    assert_eq!(gauge(&m, "wa"), Some(1.0), "{m}");
    assert_eq!(gauge(&m, "wb"), Some(1.0), "{m}");
    // every series has its help text (promtool check metrics refuses one without)
    for name in m.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = name.split(' ').next().unwrap();
        assert!(
            m.contains(&format!("# HELP {name} ")),
            "{name} has no HELP line: {m}"
        );
    }
    handle.shutdown().await.unwrap();
    assert_eq!(
        c.get("/v1/workers").await.body["workers"],
        serde_json::json!([])
    );
    let m = c.get("/metrics").await.text;
    assert_eq!(
        gauge(&m, "wa"),
        Some(0.0),
        "a queue whose worker left reads 0: {m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_lists_itself_while_it_runs() {
    let c = Ctx::with(|b| b.heartbeat_ms(100), None).await;
    let mut live = Live::start(&c.state).await;
    wait_until_async(DEADLINE, "the server is listed", || async {
        c.get("/v1/workers").await.body["workers"][0]["kind"] == "server"
    })
    .await;
    let w = c.get("/v1/workers").await.body["workers"][0].clone();
    assert_eq!(w["pid"], std::process::id());
    assert_eq!(
        w["queues"],
        serde_json::json!([]),
        "no webhook: no queue pushed to"
    );
    live.shutdown().await;
    assert_eq!(
        c.get("/v1/workers").await.body["workers"],
        serde_json::json!([]),
        "a stopped server removes itself at once"
    );
}

/// A worker in any language beats over HTTP into the same list (DESIGN 4.2), and leaves it
/// when it stops.
#[tokio::test]
async fn a_worker_beats_over_http_and_deregisters() {
    let c = Ctx::new().await;
    let beat = serde_json::json!({"queues": ["orders"], "concurrency": 8, "in_hand": 3,
        "host": "box-1", "pid": 4242, "version": "0.1.0", "language": "python"});
    let r = c
        .call(Method::PUT, "/v1/workers/py-box-1-4242", Some(beat.clone()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["registered"], true);
    let r = c.get("/v1/workers?queue=orders").await;
    let w = &r.body["workers"][0];
    assert_eq!(w["id"], "py-box-1-4242", "{r:?}");
    assert_eq!(
        (&w["language"], &w["in_hand"], &w["pid"]),
        (&"python".into(), &3.into(), &4242.into())
    );
    for (body, field) in [
        (
            serde_json::json!({"queues": ["bad name"], "concurrency": 1, "in_hand": 0}),
            "queues",
        ),
        (
            serde_json::json!({"queues": [], "concurrency": 1, "in_hand": 0, "ttl_ms": 5}),
            "ttl_ms",
        ),
    ] {
        let r = c.call(Method::PUT, "/v1/workers/x", Some(body)).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(r.text.contains(field), "{r:?}");
    }
    let r = c.call(Method::PUT, "/v1/workers/a%20b", Some(beat)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    let r = c
        .call(Method::DELETE, "/v1/workers/py-box-1-4242", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        c.get("/v1/workers").await.body["workers"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let r = c
        .call(Method::DELETE, "/v1/workers/py-box-1-4242", None)
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
}
