//! The OpenAPI document of the API, generated from the handlers' annotations (utoipa) and
//! served at `/openapi.json`. A test checks it against the router and DESIGN 4.2, and CI runs
//! schemathesis against it (`.ci/schemathesis`).
//!
//! What the layers around the handlers do is added here, once for every `/v1` operation
//! rather than in each annotation: the bearer security requirement and its 401 (the token
//! middleware), 400/413/415 for an operation with a JSON body (the [`ApiJson`] extractor), and
//! the formats of the path parameters `queue`, `id` and `key` (what the library accepts).
//! On every operation: 403 (the Host and Origin checks) and 405 (the router's answer to another
//! method); the open routes say `security: []` (`/metrics`: optional bearer). Outcomes, states
//! and kinds are Rust enums in the response types, so their schemas list their values; the
//! error codes, which handlers pick as strings, are listed in [`ERROR_CODES`] and added as an
//! enum here ([`ENUMS`]).
//!
//! [`ApiJson`]: crate::ApiJson

use std::sync::OnceLock;

use utoipa::openapi::Required;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, OpenApi as Doc, Ref, RefOr, ResponseBuilder, Schema, SecurityRequirement,
};
use utoipa::{Modify, OpenApi};

use crate::api;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "dueq",
        description = "Delay queue and task scheduler on Redis sorted sets. Times are integer \
            milliseconds; errors are {\"error\": {\"code\", \"message\"}}. When tokens are \
            configured, every /v1 call needs Authorization: Bearer <token>.",
        contact(name = "dueq maintainers")
    ),
    tags(
        (name = "tasks", description = "Enqueue tasks (one or a batch); look up, cancel and \
            reschedule a task by id or by business key; browse scheduled and active tasks."),
        (name = "claim", description = "Pull work over HTTP: claim due tasks under a lease, \
            then ack, nack (retry or dead-letter), extend or release them, one or in batches."),
        (name = "dead", description = "The dead-letter queue: list, retry and delete dead \
            tasks, by id or in bulk by filter."),
        (name = "queues", description = "Queues: list, statistics, settings, pause and resume, \
            purge and delete."),
        (name = "schedules", description = "Recurring schedules (cron in a time zone, or a \
            fixed interval): set, read, pause, resume, trigger, backfill and delete."),
        (name = "webhooks", description = "Push delivery: a queue's tasks POSTed to a URL, \
            signed as Standard Webhooks."),
        (name = "workers", description = "Live worker processes and servers, and heartbeats of \
            workers in other languages."),
        (name = "test", description = "The test clock of a server started with dueq serve \
            --test-clock, for integration tests: read it and move it forward."),
        (name = "system", description = "Health, readiness, metrics and this document.")
    ),
    servers((url = "/", description = "The server that serves this document")),
    modifiers(&Bearer)
)]
struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut Doc) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI document (built once).
pub fn openapi() -> Doc {
    static DOC: OnceLock<Doc> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, mut v1) = api::v1_routes()
            .merge(api::batch_routes())
            .merge(api::claim_routes())
            .split_for_parts();
        for (path, item) in v1.paths.paths.iter_mut() {
            let worker = path.starts_with("/v1/workers/");
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    Vec::<String>::new(),
                )]);
                add_layer_responses(op);
                add_common_responses(op);
                describe_path_params(op, worker);
            }
        }
        // every field of a claim is optional, so is its body (lib.rs reads none as `{}`)
        if let Some(body) = v1
            .paths
            .paths
            .get_mut("/v1/queues/{queue}/claim")
            .and_then(|item| item.post.as_mut())
            .and_then(|op| op.request_body.as_mut())
        {
            body.required = Some(Required::False);
        }
        let (_, mut system) = api::system_routes().split_for_parts();
        for (path, item) in system.paths.paths.iter_mut() {
            if let Some(op) = item.get.as_mut() {
                // open routes; /metrics takes the bearer token when the server protects it
                let mut open = vec![SecurityRequirement::default()];
                if path == "/metrics" {
                    open.push(SecurityRequirement::new("bearer", Vec::<String>::new()));
                }
                op.security = Some(if path == "/metrics" { open } else { Vec::new() });
                add_common_responses(op);
            }
        }
        let mut doc = ApiDoc::openapi();
        doc.merge(v1);
        doc.merge(system);
        add_enums(&mut doc);
        doc
    })
    .clone()
}

/// The closed sets of strings the response types hold as strings: (schema, property, values).
pub const ENUMS: &[(&str, &str, &[&str])] = &[("ErrorDetail", "code", ERROR_CODES)];

/// Every `code` of an error body (see [`crate::ApiError`]).
pub const ERROR_CODES: &[&str] = &[
    "invalid_input",
    "invalid_json",
    "unauthorized",
    "forbidden_host",
    "forbidden_origin",
    "not_found",
    "method_not_allowed",
    "request_timeout",
    "conflict",
    "not_empty",
    "in_progress",
    "unique_window",
    "lease_lost",
    "payload_too_large",
    "unsupported_media_type",
    "internal",
    "redis_unavailable",
    "not_replicated",
];

fn add_enums(doc: &mut Doc) {
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    for (schema, prop, values) in ENUMS {
        let Some(RefOr::T(Schema::Object(obj))) = components.schemas.get_mut(*schema) else {
            continue;
        };
        if let Some(RefOr::T(Schema::Object(p))) = obj.properties.get_mut(*prop) {
            p.enum_values = Some(values.iter().map(|v| (*v).into()).collect());
        }
    }
}

/// 403, 405, 408 and 500, which any operation may answer (the Host / Origin checks, another
/// method, the request time limit, an unexpected error).
fn add_common_responses(op: &mut Operation) {
    for (status, description) in [
        (
            "403",
            "`forbidden_host`: a loopback listener and a Host that is not a loopback name \
             (DNS rebinding guard); `forbidden_origin`: a cross-origin write",
        ),
        (
            "405",
            "`method_not_allowed`: this path does not take this method",
        ),
        (
            "408",
            "`request_timeout`: the request did not complete within the server's time limit; \
             a write may or may not have been applied (resend by key, or look it up)",
        ),
        (
            "500",
            "`internal`: an unexpected error in the server (a bug; the log has it)",
        ),
    ] {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| RefOr::T(error_response(description)));
    }
}

/// Adds the error answers of the layers around a `/v1` handler, unless it documents them.
fn add_layer_responses(op: &mut Operation) {
    let mut add = |status: &str, description: &str| {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert_with(|| RefOr::T(error_response(description)));
    };
    add("401", "No or bad token");
    if op.request_body.is_some() {
        add(
            "400",
            "Bad input: malformed JSON, a wrong or unknown field; nothing written",
        );
        add("413", "Request body larger than the limit; nothing written");
        add(
            "415",
            "The body was not sent as `Content-Type: application/json`; nothing written",
        );
    }
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// Queue names, except `.` and `..` (URL dot segments). Written without
/// lookaround, so RE2-based tools (Go's, `regex`) compile it: a name starts with a character
/// other than `.`, or with `.` and another character, or with `..` and at least one more.
pub const QUEUE_PATTERN: &str = r"^(?:[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9_.-]{0,126}|\.\.[A-Za-z0-9_.-]{1,126})$";

/// Business keys that are not `.` or `..` (any other text, any length: the byte limit is
/// checked by the server). Without lookaround, as [`QUEUE_PATTERN`].
pub const KEY_PATTERN: &str = r"^(?:[^.]|\.[^.]|\.\.[\s\S])";

/// The accepted forms of the path parameters (anything else is answered 400); `worker`: the
/// `id` is a worker's, not a task's.
fn describe_path_params(op: &mut Operation, worker: bool) {
    for p in op.parameters.iter_mut().flatten() {
        if !matches!(p.parameter_in, ParameterIn::Path) {
            continue;
        }
        let schema = ObjectBuilder::new().schema_type(Type::String);
        let schema = match p.name.as_str() {
            "queue" => schema.pattern(Some(QUEUE_PATTERN)),
            // up to `dueq::MAX_WORKER_ID_BYTES` printable ASCII characters, no spaces
            "id" if worker => {
                schema.pattern(Some(format!("^[!-~]{{1,{}}}$", dueq::MAX_WORKER_ID_BYTES)))
            }
            // `dueq::TaskId::new`: 1 to 64 printable ASCII characters, no spaces
            "id" => schema.pattern(Some("^[!-~]{1,64}$")),
            // business keys: 1 to 512 bytes of UTF-8, any characters (URL-encoded); 512
            // characters bounds them (a character is at least a byte), the server checks bytes
            "key" => schema
                .min_length(Some(1))
                .max_length(Some(512))
                .pattern(Some(KEY_PATTERN)),
            _ => continue,
        };
        p.schema = Some(RefOr::T(Schema::Object(schema.build())));
    }
}

/// Every (method, path) of the document, sorted, methods upper-case.
pub fn operations(doc: &Doc) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for (path, item) in &doc.paths.paths {
        for (m, op) in [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("PATCH", &item.patch),
            ("DELETE", &item.delete),
        ] {
            if op.is_some() {
                v.push((m.to_owned(), path.clone()));
            }
        }
    }
    v.sort();
    v
}
