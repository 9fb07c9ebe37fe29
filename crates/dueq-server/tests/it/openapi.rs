//! `/openapi.json` is generated from the handlers and kept in step with the router and with
//! DESIGN 4.2.

use axum::http::{Method, StatusCode};

use crate::support::Ctx;

/// Every route of DESIGN 4.2 (the dashboard `/` comes with the dashboard).
const DESIGN_ROUTES: &[(&str, &str)] = &[
    ("DELETE", "/v1/queues/{queue}"),
    ("DELETE", "/v1/queues/{queue}/dead/{id}"),
    ("DELETE", "/v1/queues/{queue}/keys/{key}"),
    ("DELETE", "/v1/queues/{queue}/schedules/{name}"),
    ("DELETE", "/v1/queues/{queue}/tasks/{id}"),
    ("DELETE", "/v1/queues/{queue}/webhook"),
    ("DELETE", "/v1/workers/{id}"),
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
    ("GET", "/v1/queues/{queue}/settings"),
    ("GET", "/v1/queues/{queue}/tasks"),
    ("GET", "/v1/queues/{queue}/tasks/{id}"),
    ("GET", "/v1/queues/{queue}/webhook"),
    ("GET", "/v1/test/clock"),
    ("GET", "/v1/workers"),
    ("PATCH", "/v1/queues/{queue}/keys/{key}"),
    ("PATCH", "/v1/queues/{queue}/settings"),
    ("PATCH", "/v1/queues/{queue}/tasks/{id}"),
    ("POST", "/v1/queues/{queue}/acks"),
    ("POST", "/v1/queues/{queue}/claim"),
    ("POST", "/v1/queues/{queue}/dead/delete"),
    ("POST", "/v1/queues/{queue}/dead/retry"),
    ("POST", "/v1/queues/{queue}/dead/{id}/retry"),
    ("POST", "/v1/queues/{queue}/nacks"),
    ("POST", "/v1/queues/{queue}/pause"),
    ("POST", "/v1/queues/{queue}/purge"),
    ("POST", "/v1/queues/{queue}/releases"),
    ("POST", "/v1/queues/{queue}/resume"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/backfill"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/pause"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/resume"),
    ("POST", "/v1/queues/{queue}/schedules/{name}/trigger"),
    ("POST", "/v1/queues/{queue}/tasks"),
    ("POST", "/v1/queues/{queue}/tasks/batch"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/ack"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/extend"),
    ("POST", "/v1/queues/{queue}/tasks/{id}/nack"),
    ("POST", "/v1/test/clock"),
    ("PUT", "/v1/queues/{queue}/schedules/{name}"),
    ("PUT", "/v1/queues/{queue}/webhook"),
    ("PUT", "/v1/workers/{id}"),
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

/// What other people's tools need: unique operation ids, `servers`, `security: []`
/// on the open routes, 403 and 405 on every operation, enums for the closed string sets.
#[test]
fn document_is_fit_for_generators_and_validators() {
    let doc = serde_json::to_value(dueq_server::openapi::openapi()).unwrap();
    assert_eq!(doc["servers"][0]["url"], "/");
    let mut ids = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let id = op["operationId"].as_str();
            assert!(id.is_some(), "{method} {path}: no operationId");
            ids.push(id.unwrap().to_owned());
            // a one-line summary and a description of its own (generated clients and
            // documentation tools show both)
            let summary = op["summary"].as_str().unwrap_or_default();
            let description = op["description"].as_str().unwrap_or_default();
            assert!(
                !summary.is_empty() && !summary.contains('\n') && summary.len() <= 80,
                "{method} {path}: summary {summary:?}"
            );
            assert!(
                !description.is_empty() && description != summary,
                "{method} {path}: no description"
            );
            for status in ["403", "405", "408", "500"] {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path}: no {status}"
                );
            }
            let security = &op["security"];
            if path.starts_with("/v1/") {
                assert_eq!(security, &serde_json::json!([{"bearer": []}]), "{path}");
            } else if path == "/metrics" {
                assert_eq!(security, &serde_json::json!([{}, {"bearer": []}]), "{path}");
            } else {
                assert_eq!(security, &serde_json::json!([]), "{path}");
            }
        }
    }
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate operation ids: {ids:?}");
    for id in [
        "list_queues",
        "list_dead",
        "get_queue",
        "get_webhook",
        "delete_dead",
        "delete_webhook",
        "list_schedules",
        "get_schedule",
        "set_schedule",
        "delete_schedule",
    ] {
        assert!(ids.iter().any(|i| i == id), "no {id}");
    }
    // every tag an operation uses is declared with a description; the document has a contact
    let declared: Vec<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .inspect(|t| assert!(t["description"].is_string(), "{t}"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for item in doc["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            for tag in op["tags"].as_array().into_iter().flatten() {
                assert!(
                    declared.contains(&tag.as_str().unwrap()),
                    "{tag} is not declared"
                );
            }
        }
    }
    assert!(doc["info"]["contact"]["name"].is_string());
    // a path's `id` is a task's (64 characters at most) or, under /v1/workers, a worker's
    let id_pattern = |path: &str, method: &str| {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "id")
            .map(|p| p["schema"]["pattern"].clone())
            .unwrap()
    };
    assert_eq!(
        id_pattern("/v1/workers/{id}", "put"),
        serde_json::json!(format!("^[!-~]{{1,{}}}$", dueq::MAX_WORKER_ID_BYTES))
    );
    assert_eq!(
        id_pattern("/v1/queues/{queue}/tasks/{id}", "get"),
        serde_json::json!("^[!-~]{1,64}$")
    );
    let schemas = &doc["components"]["schemas"];
    // a property's enum, inline or behind a `$ref`
    let values_of = |schema: &str, prop: &str| {
        let p = &schemas[schema]["properties"][prop];
        let p = p["oneOf"]
            .as_array()
            .and_then(|a| a.iter().find(|v| v["type"] != "null"))
            .unwrap_or(p);
        match p["$ref"].as_str() {
            Some(r) => schemas[r.trim_start_matches("#/components/schemas/")]["enum"].clone(),
            None => p["enum"].clone(),
        }
    };
    for (schema, prop, values) in dueq_server::openapi::ENUMS {
        assert_eq!(
            values_of(schema, prop),
            serde_json::json!(values),
            "{schema}.{prop}"
        );
    }
    assert_eq!(
        values_of("CancelResponse", "outcome"),
        serde_json::json!(["cancelled", "in_progress", "not_found"])
    );
    for (schema, prop, values) in [
        ("AckResponse", "outcome", &["acked"][..]),
        ("NackResponse", "outcome", &["rescheduled", "dead"]),
        ("DeadOutcomeResponse", "outcome", &["retried", "deleted"]),
        (
            "TaskResponse",
            "state",
            &["scheduled", "active", "succeeded", "dead"],
        ),
        ("WorkerResponse", "kind", &["worker", "server"]),
        (
            "ScheduleResponse",
            "outcome",
            &["created", "replaced", "unchanged"],
        ),
    ] {
        assert_eq!(
            values_of(schema, prop),
            serde_json::json!(values),
            "{schema}.{prop}"
        );
    }
    let claim = &doc["paths"]["/v1/queues/{queue}/claim"]["post"];
    assert_eq!(claim["requestBody"]["required"], false);
    // payloads are any JSON value, null included: no type of their own
    for schema in [
        "ScheduleRequest",
        "ScheduleResponse",
        "EnqueueRequest",
        "TaskResponse",
    ] {
        let payload = &schemas[schema]["properties"]["payload"];
        assert!(payload.is_object(), "{schema}.payload");
        assert!(payload.get("type").is_none(), "{schema}.payload: {payload}");
    }
}

/// Every pattern of the document compiles under RE2's rules (the `regex` crate, which has
/// no lookaround, as Go's OpenAPI tools), and the queue and key patterns accept and refuse
/// what the server does.
#[test]
fn every_pattern_compiles_without_lookaround_and_agrees_with_the_server() {
    fn patterns(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("pattern", serde_json::Value::String(p)) => out.push(p.clone()),
                        _ => patterns(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| patterns(v, out)),
            _ => {}
        }
    }
    let doc = serde_json::to_value(dueq_server::openapi::openapi()).unwrap();
    let mut all = Vec::new();
    patterns(&doc, &mut all);
    assert!(all.len() >= 3, "{all:?}");
    for p in &all {
        regex::Regex::new(p).unwrap_or_else(|e| panic!("{p} does not compile: {e}"));
    }
    let queue = regex::Regex::new(dueq_server::openapi::QUEUE_PATTERN).unwrap();
    let long = "q".repeat(128);
    let too_long = "q".repeat(129);
    let dots_long = format!("..{}", "a".repeat(126));
    for name in [
        ".", "..", "...", ".a", "a.", "..a", "a", "orders", "a-b_c.d", "", "a b", "a:b", "{a}",
        &long, &too_long, &dots_long,
    ] {
        assert_eq!(
            queue.is_match(name),
            dueq::validate_queue_name(name).is_ok(),
            "queue name {name:?}"
        );
    }
    let key = regex::Regex::new(dueq_server::openapi::KEY_PATTERN).unwrap();
    for (k, ok) in [
        (".", false),
        ("..", false),
        ("...", true),
        ("./a", true),
        (".a", true),
        ("a", true),
        ("order:42", true),
        ("..\n", true),
    ] {
        assert_eq!(key.is_match(k), ok, "key {k:?}");
    }
    assert_eq!(
        doc["components"]["schemas"]["EnqueueRequest"]["properties"]["key"]["maxLength"],
        512
    );
    // the request body's key field carries the same pattern
    assert_eq!(
        doc["components"]["schemas"]["EnqueueRequest"]["properties"]["key"]["pattern"],
        dueq_server::openapi::KEY_PATTERN
    );
}

/// The server refuses `.` and `..` as queue names and keys.
#[tokio::test]
async fn dot_segments_are_refused_as_queue_names_and_keys() {
    let c = Ctx::new().await;
    for q in ["%2E", "%2E%2E"] {
        let r = c
            .post(
                &format!("/v1/queues/{q}/tasks"),
                serde_json::json!({"payload": 1}),
            )
            .await;
        crate::support::assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
    }
    for key in [".", ".."] {
        let r = c
            .post(
                "/v1/queues/q/tasks",
                serde_json::json!({"payload": 1, "key": key}),
            )
            .await;
        crate::support::assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        let r = c
            .post(
                "/v1/queues/q/tasks/batch",
                serde_json::json!({"tasks": [{"payload": 1}, {"key": key}]}),
            )
            .await;
        crate::support::assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("task 1")
        );
    }
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());
    // keys that merely contain dots are fine
    c.enqueue("q", serde_json::json!({"key": "..."})).await;
    c.enqueue("q", serde_json::json!({"key": "./a"})).await;
}

/// Every field of a claim is optional, so is its body.
#[tokio::test]
async fn a_claim_without_a_body_is_a_claim_of_one() {
    let c = Ctx::new().await;
    c.enqueue("q", serde_json::json!({"payload": 1})).await;
    c.enqueue("q", serde_json::json!({"payload": 2})).await;
    let r = c.raw(Method::POST, "/v1/queues/q/claim", None, false).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(r.body["tasks"].as_array().unwrap().len(), 1);
    // a body still needs its content type
    let r = c
        .raw(
            Method::POST,
            "/v1/queues/q/claim",
            Some(b"{}".to_vec()),
            false,
        )
        .await;
    crate::support::assert_error(
        &r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
}
