//! `/metrics`: DESIGN 4.4 names, queue numbers from Redis, lateness buckets 0.5 ms to 1 day;
//! `due` is its own gauge, so the states of `dueq_queue_tasks` add up.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::Ctx;

fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.split(['{', ' ']).next() == Some(name) && labels.iter().all(|lb| l.contains(lb))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn design_names_are_exported() {
    let c = Ctx::new().await;
    let id = c.enqueue("m", json!({"payload": 1})).await;
    c.enqueue("m", json!({"key": "c", "delay_ms": 60000})).await;
    c.enqueue("m", json!({"delay_ms": 60000})).await;
    c.delete("/v1/queues/m/keys/c").await;
    let t = c.claim("m", 1).await;
    let token = t[0]["lease_token"].as_str().unwrap();
    c.post(
        &format!("/v1/queues/m/tasks/{id}/ack"),
        json!({"lease_token": token}),
    )
    .await;

    let r = c.get("/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let m = &r.text;
    let q = r#"queue="m""#;
    assert_eq!(
        value(m, "dueq_tasks_enqueued_total", &[q]),
        Some(3.0),
        "{m}"
    );
    assert_eq!(
        value(
            m,
            "dueq_tasks_finished_total",
            &[q, r#"outcome="succeeded""#]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            m,
            "dueq_tasks_finished_total",
            &[q, r#"outcome="cancelled""#]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(m, "dueq_tasks_finished_total", &[q, r#"outcome="dead""#]),
        Some(0.0)
    );
    assert_eq!(value(m, "dueq_lease_expired_total", &[q]), Some(0.0));
    assert_eq!(
        value(m, "dueq_queue_tasks", &[q, r#"state="scheduled""#]),
        Some(1.0)
    );
    assert!(value(m, "dueq_queue_due_tasks", &[q]).is_some());
    assert!(
        !m.contains(r#"state="due""#),
        "due is not a state of dueq_queue_tasks: {m}"
    );
    assert!(value(m, "dueq_queue_oldest_due_age_seconds", &[q]).is_some());
    assert_eq!(
        value(m, "dueq_task_lateness_seconds_count", &[q]),
        Some(1.0)
    );
    assert_eq!(
        value(m, "dueq_task_duration_seconds_count", &[q]),
        Some(1.0)
    );
    for le in ["0.0005", "60", "3600", "86400"] {
        assert!(
            value(
                m,
                "dueq_task_lateness_seconds_bucket",
                &[q, &format!("le=\"{le}\"")]
            )
            .is_some(),
            "no bucket {le}: {m}"
        );
    }
}

/// Claims, lateness and run time come from Redis: work this server never saw (a worker on
/// its own connection, any language) shows on its `/metrics`, and an HTTP claim's
/// `worker_id` names the holder of the active task.
#[tokio::test]
async fn timings_count_work_claimed_elsewhere() {
    let c = Ctx::new().await;
    for i in 0..2 {
        c.enqueue("elsewhere", json!({"payload": i})).await;
    }
    // a worker that talks to Redis itself, not through this server
    let other = dueq::Client::connect(&c.server.url()).await.unwrap();
    let q = other.queue("elsewhere").unwrap();
    let mut due = q.due_claimer().worker_id("py-1");
    let tasks = due.claim(10).await.unwrap();
    assert_eq!(tasks.len(), 2);
    let t = c
        .get(&format!("/v1/queues/elsewhere/tasks/{}", tasks[0].id))
        .await;
    assert_eq!(t.body["state"], "active");
    assert_eq!(t.body["worker_id"], "py-1", "{}", t.body);
    assert!(t.body["claimed_at_ms"].as_u64().is_some(), "{}", t.body);
    for t in &tasks {
        q.ack(&t.id, &t.lease_token).await.unwrap();
    }

    let m = c.get("/metrics").await.text;
    let q = r#"queue="elsewhere""#;
    assert_eq!(
        value(&m, "dueq_tasks_claimed_total", &[q]),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "dueq_task_lateness_seconds_count", &[q]),
        Some(2.0)
    );
    assert_eq!(
        value(&m, "dueq_task_duration_seconds_count", &[q]),
        Some(2.0)
    );
    assert_eq!(
        value(
            &m,
            "dueq_task_lateness_seconds_bucket",
            &[q, r#"le="+Inf""#]
        ),
        Some(2.0)
    );

    // an HTTP claim names its worker the same way; a bad id names the field
    c.enqueue("elsewhere", json!({"payload": 3})).await;
    let r = c
        .post(
            "/v1/queues/elsewhere/claim",
            json!({"max": 1, "worker_id": "two words"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("worker_id"), "{}", r.text);
    let r = c
        .post(
            "/v1/queues/elsewhere/claim",
            json!({"max": 1, "worker_id": "ts-7"}),
        )
        .await;
    let id = r.body["tasks"][0]["id"].as_str().unwrap().to_owned();
    let t = c.get(&format!("/v1/queues/elsewhere/tasks/{id}")).await;
    assert_eq!(t.body["worker_id"], "ts-7", "{}", t.body);
}

/// `dueq_build_info{version}` and `http_server_request_duration_seconds` by method, route
/// template and status: a route with a queue in its path counts under its template, never
/// under the queue's name.
#[tokio::test]
async fn build_info_and_request_durations_by_route_template() {
    let c = Ctx::new().await;
    c.enqueue("reqs", json!({"payload": 1})).await;
    c.enqueue("reqs", json!({"payload": 2})).await;
    // a method outside the conventions' list is counted as _OTHER, not under its own name
    for m in ["ZZZ1", "ZZZ2"] {
        let r = c
            .call(
                axum::http::Method::from_bytes(m.as_bytes()).unwrap(),
                "/healthz",
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    }
    let missing = c.get("/v1/queues/reqs/tasks/ffffffffffff").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let m = c.get("/metrics").await.text;
    assert_eq!(
        value(
            &m,
            "dueq_build_info",
            &[&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0),
        "{m}"
    );
    let count = |method: &str, route: &str, status: &str| {
        value(
            &m,
            "http_server_request_duration_seconds_count",
            &[
                &format!("http_request_method=\"{method}\""),
                &format!("http_route=\"{route}\""),
                &format!("http_response_status_code=\"{status}\""),
            ],
        )
    };
    assert_eq!(
        count("POST", "/v1/queues/{queue}/tasks", "201"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        count("GET", "/v1/queues/{queue}/tasks/{id}", "404"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(count("_OTHER", "/healthz", "405"), Some(2.0), "{m}");
    assert!(!m.contains("ZZZ"), "a method name became a label: {m}");
    assert!(
        !m.lines()
            .any(|l| l.starts_with("http_server") && l.contains("reqs")),
        "a route label holds the queue's name: {m}"
    );
    assert!(
        m.contains("http_server_request_duration_seconds_bucket{") && m.contains("le=\"0.005\""),
        "{m}"
    );
}
