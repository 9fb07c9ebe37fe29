//! `/v1/queues` and `/v1/queues/{queue}`: statistics, pause and resume.

use axum::Json;
use axum::extract::State;
use dueq::QueueStats;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiPath;
use crate::state::AppState;

/// Counts and timings of one queue.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct StatsResponse {
    /// Queue name.
    pub queue: String,
    /// Tasks waiting (due ones and retries included).
    pub scheduled: u64,
    /// Of those, due now (overdue).
    pub due: u64,
    /// Tasks held by workers.
    pub active: u64,
    /// Tasks in the dead-letter queue.
    pub dead: u64,
    /// Tasks acknowledged, ever.
    pub succeeded_total: u64,
    /// Failed attempts (nack or expired lease), ever.
    pub failed_total: u64,
    /// Tasks that expired before they started (`ttl_ms` / `expires_at_ms`), ever.
    pub expired_total: u64,
    /// Earliest due time of a scheduled task, Unix epoch ms.
    pub next_due_at_ms: Option<u64>,
    /// How long the earliest due task has waited, ms (0 when none is overdue).
    pub oldest_due_age_ms: u64,
    /// Whether claims are paused.
    pub paused: bool,
    /// Groups with scheduled tasks (ready, or waiting at their concurrency limit).
    pub groups_waiting: u64,
    /// The queue limit holding due work back now: `rate` or `concurrency` (null: none).
    pub throttled: Option<String>,
    /// The queue's concurrency limit (compare with `active`), if set.
    pub concurrency_limit: Option<u64>,
    /// Whether the queue is over its alert threshold (`alert_due_age_ms` or
    /// `alert_due_count` in its settings).
    pub behind: bool,
}

impl From<QueueStats> for StatsResponse {
    fn from(s: QueueStats) -> Self {
        Self {
            queue: s.queue,
            scheduled: s.scheduled,
            due: s.due,
            active: s.active,
            dead: s.dead,
            succeeded_total: s.succeeded_total,
            failed_total: s.failed_total,
            expired_total: s.expired_total,
            next_due_at_ms: s.next_due_at_ms,
            oldest_due_age_ms: s.oldest_due_age_ms,
            paused: s.paused,
            groups_waiting: s.groups_waiting,
            throttled: s.throttled.map(str::to_owned),
            concurrency_limit: s.concurrency_limit,
            behind: s.behind,
        }
    }
}

/// Every known queue.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct QueuesResponse {
    /// Sorted by name.
    pub queues: Vec<StatsResponse>,
}

/// Paused state after pause or resume.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct PauseResponse {
    /// Queue name.
    pub queue: String,
    /// Whether claims are paused now.
    pub paused: bool,
}

/// Statistics of every queue that has had a task.
#[utoipa::path(get, path = "/v1/queues", tag = "queues", operation_id = "list_queues",
    responses(
        (status = 200, description = "All queues", body = QueuesResponse),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn list(State(st): State<AppState>) -> ApiResult<Json<QueuesResponse>> {
    let mut queues = Vec::new();
    for name in st.client().queues().await? {
        let q = st.queue(&name)?;
        queues.push(q.stats().await?.into());
    }
    Ok(Json(QueuesResponse { queues }))
}

/// Statistics of one queue.
#[utoipa::path(get, path = "/v1/queues/{queue}", tag = "queues", operation_id = "get_queue",
    params(("queue" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The queue", body = StatsResponse),
        (status = 400, description = "Bad queue name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such queue (never had a task)", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
) -> ApiResult<Json<StatsResponse>> {
    let q = st.queue(&queue)?;
    let s = q.stats().await?;
    let empty = s.scheduled == 0
        && s.active == 0
        && s.dead == 0
        && s.enqueued_total == 0
        && s.succeeded_total == 0
        && !s.paused;
    // Only an empty-looking queue costs the membership check.
    if empty && !st.client().queues().await?.iter().any(|n| n == &queue) {
        return Err(ApiError::not_found(format!("no queue {queue:?}")));
    }
    Ok(Json(s.into()))
}

/// Stop handing out tasks of this queue (enqueue, cancel and the rest still work).
#[utoipa::path(post, path = "/v1/queues/{queue}/pause", tag = "queues", operation_id = "pause_queue",
    params(("queue" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "Paused", body = PauseResponse),
        (status = 400, description = "Bad queue name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn pause(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
) -> ApiResult<Json<PauseResponse>> {
    let q = st.queue(&queue)?;
    q.pause().await?;
    Ok(Json(PauseResponse {
        queue,
        paused: true,
    }))
}

/// Hand out tasks again after a pause.
#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "queues", operation_id = "resume_queue",
    params(("queue" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "Resumed", body = PauseResponse),
        (status = 400, description = "Bad queue name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn resume(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
) -> ApiResult<Json<PauseResponse>> {
    let q = st.queue(&queue)?;
    q.resume().await?;
    Ok(Json(PauseResponse {
        queue,
        paused: false,
    }))
}
