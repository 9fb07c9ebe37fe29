//! `/v1/workers`: the live worker processes and servers (heartbeats, [`dueq::Client::workers`]);
//! `PUT` and `DELETE /v1/workers/{id}` let a worker in any language beat into the same list.

use axum::Json;
use axum::extract::State;
use dueq::{WorkerBeat, WorkerInfo, WorkerKind};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

/// Filter of the workers list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct WorkersQuery {
    /// Only workers that serve this queue (a queue name, `[A-Za-z0-9_.-]{1,128}`).
    pub queue: Option<String>,
}

/// What a live process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = WorkerKind)]
#[non_exhaustive]
pub enum WorkerKindJson {
    /// A Rust `Worker`, `dueq work`, or a client's worker over HTTP.
    Worker,
    /// `dueq serve`.
    Server,
}

/// One live worker process or server, as its last heartbeat described it.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct WorkerResponse {
    /// Id of its registration (`host:pid:random`).
    pub id: String,
    /// What it is.
    pub kind: WorkerKindJson,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// dueq version.
    pub version: String,
    /// Queues it takes work from (a server: the queues it pushes to webhooks).
    pub queues: Vec<String>,
    /// Most handlers it runs at once (a server: its webhooks' concurrency summed).
    pub concurrency: u64,
    /// Handlers running at its last heartbeat.
    pub in_hand: u64,
    /// First heartbeat, Unix epoch ms (Redis clock).
    pub started_at_ms: u64,
    /// Last heartbeat, Unix epoch ms (Redis clock).
    pub last_seen_ms: u64,
    /// When it leaves the list unless it beats again, Unix epoch ms (Redis clock).
    pub expires_at_ms: u64,
    /// The language of its program (`rust` for dueq's own; what an HTTP worker says).
    pub language: String,
}

impl From<WorkerInfo> for WorkerResponse {
    fn from(w: WorkerInfo) -> Self {
        Self {
            id: w.id,
            kind: match w.kind {
                WorkerKind::Server => WorkerKindJson::Server,
                _ => WorkerKindJson::Worker,
            },
            host: w.host,
            pid: w.pid,
            version: w.version,
            queues: w.queues,
            concurrency: w.concurrency,
            in_hand: w.in_hand,
            started_at_ms: w.started_at_ms,
            last_seen_ms: w.last_seen_ms,
            expires_at_ms: w.expires_at_ms,
            language: w.language,
        }
    }
}

/// The live workers.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct WorkersResponse {
    /// Sorted by start time, then id.
    pub workers: Vec<WorkerResponse>,
}

/// Live worker processes and servers.
///
/// Each registers with a heartbeat (every 5 s by default) and leaves the list at once when it
/// stops, or 3 missed beats after its last one when it dies.
#[utoipa::path(get, path = "/v1/workers", tag = "workers", operation_id = "list_workers",
    params(WorkersQuery),
    responses(
        (status = 200, description = "The live workers", body = WorkersResponse),
        (status = 400, description = "Bad input: an invalid queue name or unknown parameter", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn list(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<WorkersQuery>,
) -> ApiResult<Json<WorkersResponse>> {
    let workers = match &q.queue {
        Some(queue) => st.client().workers_of(queue).await?,
        None => st.client().workers().await?,
    };
    Ok(Json(WorkersResponse {
        workers: workers.into_iter().map(WorkerResponse::from).collect(),
    }))
}

/// A heartbeat of a worker that takes its tasks over HTTP.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BeatRequest {
    /// Queues it takes work from (at most 1000).
    pub queues: Vec<String>,
    /// Most handlers it runs at once.
    pub concurrency: u64,
    /// Handlers running now.
    pub in_hand: u64,
    /// Its host name (at most 256 bytes).
    pub host: Option<String>,
    /// Its process id.
    pub pid: Option<u32>,
    /// Its client's version (at most 256 bytes).
    pub version: Option<String>,
    /// Its language, e.g. `python`, `typescript` (at most 256 bytes).
    pub language: Option<String>,
    /// How long it stays listed without another beat, ms, 100 to 180000. Default 15000
    /// (beat every 5 s).
    #[schema(minimum = 100, maximum = 180000)]
    pub ttl_ms: Option<u64>,
}

/// What a beat did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct BeatResponse {
    /// Whether it is listed (`false`: the registry holds 10 000 live entries).
    pub registered: bool,
}

/// Register a worker, or refresh its entry.
///
/// A worker in any language calls this every few seconds while it runs; the entry leaves the list
/// `ttl_ms` after the last beat.
#[utoipa::path(put, path = "/v1/workers/{id}", tag = "workers", operation_id = "beat_worker",
    params(("id" = String, Path, description = "The worker's id: printable ASCII, no spaces, 1 to 200 bytes")),
    request_body = BeatRequest,
    responses(
        (status = 200, description = "Beat taken", body = BeatResponse),
        (status = 400, description = "Bad input (the message names the field); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn beat(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<BeatRequest>,
) -> ApiResult<Json<BeatResponse>> {
    let mut b = WorkerBeat::new(id, body.queues);
    b.concurrency = body.concurrency;
    b.in_hand = body.in_hand;
    b.host = body.host.unwrap_or_default();
    b.pid = body.pid.unwrap_or(0);
    b.version = body.version.unwrap_or_default();
    b.language = body.language.unwrap_or_default();
    if let Some(t) = body.ttl_ms {
        b.ttl_ms = t;
    }
    let registered = st.client().beat_worker(&b).await?;
    Ok(Json(BeatResponse { registered }))
}

/// What a deregistration did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct RemovedResponse {
    /// Always true (an unknown id answers 404).
    pub removed: bool,
}

/// Take a worker off the list at once.
///
/// A worker calls this when it stops gracefully.
#[utoipa::path(delete, path = "/v1/workers/{id}", tag = "workers", operation_id = "remove_worker",
    params(("id" = String, Path, description = "The worker's id")),
    responses(
        (status = 200, description = "Removed", body = RemovedResponse),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "Not listed", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn remove(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RemovedResponse>> {
    if !st.client().remove_worker(&id).await? {
        return Err(ApiError::not_found(format!("no live worker {id}")));
    }
    Ok(Json(RemovedResponse { removed: true }))
}
