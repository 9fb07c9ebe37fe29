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
