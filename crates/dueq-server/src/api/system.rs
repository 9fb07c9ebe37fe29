//! Operational routes outside `/v1`: `/healthz`, `/readyz`, `/metrics`, `/openapi.json`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dueq::EvictionCheck;
use serde::Serialize;
use utoipa::ToSchema;

use super::test_clock::ClockResponse;
use crate::error::{ApiResult, ErrorBody};
use crate::state::{AppState, READINESS_CHECK_TIMEOUT_MS};

/// Liveness.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct Health {
    /// Always `ok`.
    pub status: String,
}

/// Readiness: Redis reachable, scripts loaded, eviction policy safe, and the extra checks
/// the server was built with (for example `postgres` under `dueq serve --postgres`).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[non_exhaustive]
pub struct Ready {
    /// All checks pass.
    pub ready: bool,
    /// Redis answered `PING`.
    pub redis: bool,
    /// Every script loads.
    pub scripts: bool,
    /// Redis `maxmemory-policy`, when it could be read.
    pub eviction_policy: Option<String>,
    /// `false` when the policy may evict queue keys (anything but `noeviction`).
    pub eviction_safe: bool,
    /// The extra checks by name (`postgres` under `dueq serve --postgres`), `true` when it
    /// passed; empty without any. A failed one makes `ready` false and, when Redis is fine,
    /// `error` names it (`"postgres: ..."`).
    pub checks: BTreeMap<String, bool>,
    /// The first problem, if any.
    pub error: Option<String>,
    /// The test clock, when the server runs it (`dueq serve --test-clock`): every queue is on
    /// a virtual clock that tests move forward. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_clock: Option<ClockResponse>,
}

/// Liveness: the process answers.
///
/// Makes no Redis call, so it stays 200 while Redis is down; use `/readyz` for that.
#[utoipa::path(get, path = "/healthz", tag = "system",
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: whether this server can serve.
///
/// 200 when Redis answers, the scripts load, eviction is off and every extra check passes; else 503
/// with the reasons. Reads no queue, so its cost does not grow with the number of queues: a queue
/// behind its alert threshold does not make the server unready, and shows as `behind` in the
/// queue's stats and `dueq_queue_behind` on `/metrics`.
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "Not ready", body = Ready),
    ))]
pub async fn readyz(State(st): State<AppState>) -> (StatusCode, Json<Ready>) {
    let (r, extra) = tokio::join!(st.client().readiness(), run_checks(&st));
    let mut checks = BTreeMap::new();
    let mut failed = None;
    for (name, res) in extra {
        if let Err(e) = &res
            && failed.is_none()
        {
            failed = Some(format!("{name}: {e}"));
        }
        checks.insert(name, res.is_ok());
    }
    let ready = r.ready() && failed.is_none();
    let (policy, safe, warn) = match &r.eviction {
        EvictionCheck::Safe => (Some("noeviction".to_owned()), true, None),
        EvictionCheck::Unsafe(p) => (
            Some(p.clone()),
            false,
            Some(format!(
                "maxmemory-policy is {p}: Redis may delete queue keys; set noeviction"
            )),
        ),
        EvictionCheck::Unknown(why) => {
            (None, true, Some(format!("eviction policy unknown: {why}")))
        }
        _ => (None, true, None),
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Ready {
            ready,
            redis: r.redis,
            scripts: r.scripts,
            eviction_policy: policy,
            eviction_safe: safe,
            checks,
            error: r.error.or(failed).or(warn),
            test_clock: r.test_clock.map(Into::into),
        }),
    )
}

/// Runs the state's extra readiness checks at once, each bounded by
/// [`READINESS_CHECK_TIMEOUT_MS`].
async fn run_checks(st: &AppState) -> Vec<(String, Result<(), String>)> {
    let limit = Duration::from_millis(READINESS_CHECK_TIMEOUT_MS);
    futures_util::future::join_all(
        st.readiness_checks()
            .iter()
            .map(|(name, check)| async move {
                let res = match tokio::time::timeout(limit, check()).await {
                    Ok(r) => r,
                    Err(_) => Err(format!("no answer within {READINESS_CHECK_TIMEOUT_MS} ms")),
                };
                (name.clone(), res)
            }),
    )
    .await
}

/// Prometheus metrics.
///
/// Text format 0.0.4: task counts by state, throughput, lateness, leases, limits, schedules,
/// workers, Redis and HTTP. Open unless the server is started with `--metrics-auth`.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses(
        (status = 200, description = "Prometheus text", body = String, content_type = "text/plain"),
        (status = 401, description = "Protected and no or bad token", body = ErrorBody),
    ))]
pub async fn metrics(State(st): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    if st.metrics_protected() {
        st.tokens()
            .check_header(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))?;
    }
    let text = st.metrics().render(st.client()).await;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// This API's OpenAPI 3.1 document.
///
/// The document this page comes from. It is always open, so clients can be generated from a running
/// server.
#[utoipa::path(get, path = "/openapi.json", tag = "system",
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn openapi_json() -> Response {
    match crate::openapi::openapi().to_json() {
        Ok(s) => ([(header::CONTENT_TYPE, "application/json")], s).into_response(),
        Err(e) => crate::error::ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("openapi: {e}"),
        )
        .into_response(),
    }
}
