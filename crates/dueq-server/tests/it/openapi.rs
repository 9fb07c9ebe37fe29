//! `/openapi.json` is generated from the handlers and kept in step with the router and with
//! DESIGN 4.2.

use axum::http::{Method, StatusCode};

use crate::support::Ctx;

/// Every route of DESIGN 4.2 (the dashboard `/` comes with the dashboard).
const DESIGN_ROUTES: &[(&str, &str)] = &[
    ("DELETE", "/v1/queues/{queue}/dead/{id}"),
    ("DELETE", "/v1/queues/{queue}/keys/{key}"),
    ("DELETE", "/v1/queues/{queue}/schedules/{name}"),
    ("DELETE", "/v1/queues/{queue}/tasks/{id}"),
    ("DELETE", "/v1/queues/{queue}/webhook"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/readyz"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/queues/{queue}"),
    ("GET", "/v1/queues/{queue}/dead"),
    ("GET", "/v1/queues/{queue}/keys/{key}"),
    ("GET", "/v1/queues/{queue}/schedules"),
    ("GET", "/v1/queues/{queue}/schedules/{name}"),
    ("GET", "/v1/queues/{queue}/tasks/{id}"),
    ("GET", "/v1/queues/{queue}/webhook"),
    ("PATCH", "/v1/queues/{queue}/keys/{key}"),
    ("PATCH", "/v1/queues/{queue}/tasks/{id}"),
    ("POST", "/v1/queues/{queue}/acks"),
    ("POST", "/v1/queues/{queue}/claim"),
    ("POST", "/v1/queues/{queue}/dead/{id}/retry"),
    ("POST", "/v1/queues/{queue}/nacks"),
    ("POST", "/v1/queues/{queue}/pause"),
    ("POST", "/v1/queues/{queue}/releases"),
    ("POST", "/v1/queues/{queue}/resume"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/pause"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/resume"),
    ("POST", "/v1/queues/{queue}/tasks"),
    ("POST", "/v1/queues/{queue}/tasks/batch"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/ack"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/extend"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/nack"),
    ("PUT", "/v1/queues/{queue}/schedules/{name}"),
    ("PUT", "/v1/queues/{queue}/webhook"),
];

#[tokio::test]
async fn document_matches_design_and_router() {
    let doc = dueq_server::openapi::openapi();
    let ops = dueq_server::openapi::operations(&doc);
    let expected: Vec<(String, String)> = DESIGN_ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(ops, expected);

    // every documented operation is served (not the router's fallback 404 or 405) ...
    let c = Ctx::new().await;
    for (m, p) in &ops {
        let uri = p
            .replace("{queue}", "q")
            .replace("{id}", "000000000001")
            .replace("{key}", "k")
            .replace("{name}", "s");
        let r = c
            .call(
                Method::from_bytes(m.as_bytes()).unwrap(),
                &uri,
                Some(serde_json::json!({})),
            )
            .await;
        assert_ne!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{m} {p}: {r:?}");
        assert_ne!(r.body["error"]["message"], "no such route", "{m} {p}");
    }
    // ... and nothing undocumented is: other methods on documented paths get 405, and
    // routes are registered only together with their documentation (`utoipa-axum`).
    for (m, p) in &ops {
        let uri = p
            .replace("{queue}", "q")
            .replace("{id}", "000000000001")
            .replace("{key}", "k")
            .replace("{name}", "s");
        for other in ["GET", "POST", "PATCH", "DELETE", "PUT"] {
            if ops.iter().any(|(m2, p2)| m2 == other && p2 == p) || other == m {
                continue;
            }
            let r = c
                .call(Method::from_bytes(other.as_bytes()).unwrap(), &uri, None)
                .await;
            assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{other} {p}");
        }
    }

    let served = c.get("/openapi.json").await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.body, serde_json::to_value(&doc).unwrap());
    assert!(served.body["components"]["schemas"]["EnqueueRequest"].is_object());
}
