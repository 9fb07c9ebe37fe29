//! `/v1/workers`: the live worker processes and servers (heartbeats, [`dueq::Client::workers`]).

use axum::Json;
use axum::extract::State;
use dueq::WorkerInfo;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiResult, ErrorBody};
use crate::extract::ApiQuery;
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

/// One live worker process or server, as its last heartbeat described it.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct WorkerResponse {
    /// Id of its registration (`host:pid:random`).
    pub id: String,
    /// `worker` (a Rust `Worker`, `dueq work`) or `server` (`dueq serve`).
    pub kind: String,
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
}

impl From<WorkerInfo> for WorkerResponse {
    fn from(w: WorkerInfo) -> Self {
        Self {
            id: w.id,
            kind: w.kind.as_str().to_owned(),
            host: w.host,
            pid: w.pid,
            version: w.version,
            queues: w.queues,
            concurrency: w.concurrency,
            in_hand: w.in_hand,
            started_at_ms: w.started_at_ms,
            last_seen_ms: w.last_seen_ms,
            expires_at_ms: w.expires_at_ms,
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

/// Live worker processes and servers: each registers with a heartbeat (every 5 s by
/// default) and leaves the list at once when it stops, or 3 missed beats after its last one
/// when it dies.
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
