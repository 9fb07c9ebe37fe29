//! Cleanup in bulk (DESIGN 4.2): `POST /v1/queues/{queue}/dead/retry` and `/dead/delete`
//! (every dead task a filter matches), `POST /v1/queues/{queue}/purge` (every task of one
//! state) and `DELETE /v1/queues/{queue}`. Each Redis call of them does bounded work; a
//! request goes on for at most [`BULK_BUDGET_MS`] and answers what is left (a `cursor` to
//! send again, or `left` tasks), so a million dead tasks never hold Redis or a request long.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use dueq::{DeadBulk, DeadBulkReport, DeadFilter, Purge};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

/// Longest a bulk request works before it answers with a cursor, ms.
pub const BULK_BUDGET_MS: u64 = 1_000;

/// Which dead tasks, and how: every filter given must match (none: every dead task).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DeadBulkRequest {
    /// The task's last error contains this text (case-sensitive), 1 to 4096 bytes.
    #[schema(min_length = 1, max_length = 4096)]
    pub error_contains: Option<String>,
    /// It died at or after this time, Unix epoch ms.
    pub died_after_ms: Option<u64>,
    /// It died before this time, Unix epoch ms. Default: when the run started (its first
    /// request), so a task that dies again during a run is not taken twice.
    pub died_before_ms: Option<u64>,
    /// Its business key starts with this, 1 to 4096 bytes.
    #[schema(min_length = 1, max_length = 4096)]
    pub key_prefix: Option<String>,
    /// It belongs to this group, 1 to 256 bytes.
    #[schema(min_length = 1, max_length = 256)]
    pub group: Option<String>,
    /// Most tasks to act on in this request, at least 1. Default: every match.
    #[schema(minimum = 1)]
    pub limit: Option<u64>,
    /// Only count the matches; change nothing. Default false.
    pub dry_run: Option<bool>,
    /// Retry only: due times spread over this many ms from now, so a retry of many
    /// tasks does not stampede the workers; at most 2592000000 (30 days). Default 0 (all due
    /// now).
    #[schema(maximum = 2592000000_u64)]
    pub spread_ms: Option<u64>,
    /// The `cursor` of the previous answer: go on where it stopped (send the same filters).
    pub cursor: Option<String>,
}

/// What a bulk request did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct DeadBulkResponse {
    /// Dead tasks looked at.
    pub looked_at: u64,
    /// Of those, the ones the filter matched (with `dry_run`: the count).
    pub matched: u64,
    /// Retried or deleted.
    pub done: u64,
    /// Retries refused: the task's business key is taken by another task (live, or in its unique
    /// window).
    pub conflicts: u64,
    /// Present when work is left: send the request again with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl From<DeadBulkReport> for DeadBulkResponse {
    fn from(r: DeadBulkReport) -> Self {
        Self {
            looked_at: r.looked_at,
            matched: r.matched,
            done: r.done,
            conflicts: r.conflicts,
            cursor: r.cursor,
        }
    }
}

fn bulk(body: &DeadBulkRequest) -> DeadBulk {
    let mut f = DeadFilter::new();
    f.error_contains.clone_from(&body.error_contains);
    f.died_after_ms = body.died_after_ms;
    f.died_before_ms = body.died_before_ms;
    f.key_prefix.clone_from(&body.key_prefix);
    f.group.clone_from(&body.group);
    let mut run = DeadBulk::new(f)
        .dry_run(body.dry_run.unwrap_or(false))
        .spread_ms(body.spread_ms.unwrap_or(0));
    run.limit = body.limit;
    run
}

fn budget() -> Duration {
    Duration::from_millis(BULK_BUDGET_MS)
}

/// Retry every dead task the filter matches.
///
/// Filters are AND-ed; none matches every dead task. Retried tasks are due now, or spread evenly
/// over `spread_ms` so a large retry does not stampede the workers. Each Redis call does bounded
/// work: while the answer has a `cursor`, send the same filters with it to go on. `dry_run` counts
/// without changing anything.
#[utoipa::path(post, path = "/v1/queues/{queue}/dead/retry", tag = "dead", operation_id = "retry_dead_matching",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = DeadBulkRequest,
    responses(
        (status = 200, description = "What it did; a `cursor` when work is left", body = DeadBulkResponse),
        (status = 400, description = "A bad filter or cursor; nothing done", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable (what was done stays done)", body = ErrorBody),
    ))]
pub async fn retry_matching(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<DeadBulkRequest>,
) -> ApiResult<Json<DeadBulkResponse>> {
    let q = st.queue(&queue)?;
    let r = q
        .dead_retry_where(&bulk(&body), body.cursor.as_deref(), budget())
        .await?;
    Ok(Json(r.into()))
}

/// Delete every dead task the filter matches, for good.
///
/// Filters are AND-ed; none matches every dead task. Each Redis call does bounded work: while the
/// answer has a `cursor`, send the same filters with it to go on. `dry_run` counts without
/// deleting.
#[utoipa::path(post, path = "/v1/queues/{queue}/dead/delete", tag = "dead", operation_id = "delete_dead_matching",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = DeadBulkRequest,
    responses(
        (status = 200, description = "What it did; a `cursor` when work is left", body = DeadBulkResponse),
        (status = 400, description = "A bad filter or cursor; nothing done", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable (what was done stays done)", body = ErrorBody),
    ))]
pub async fn delete_matching(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<DeadBulkRequest>,
) -> ApiResult<Json<DeadBulkResponse>> {
    if body.spread_ms.is_some() {
        return Err(ApiError::invalid("spread_ms: applies to a retry only"));
    }
    let q = st.queue(&queue)?;
    let r = q
        .dead_delete_where(&bulk(&body), body.cursor.as_deref(), budget())
        .await?;
    Ok(Json(r.into()))
}

/// Which tasks a purge drops.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PurgeStateJson {
    /// Every task waiting for its due time or a retry (each counted as cancelled).
    Scheduled,
    /// Every dead task.
    Dead,
    /// Every succeeded task kept by retention.
    Succeeded,
}

/// Drop every task of one state.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PurgeRequest {
    /// The state whose tasks go.
    pub state: PurgeStateJson,
}

/// What a purge did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct PurgeResponse {
    /// Tasks dropped by this request.
    pub dropped: u64,
    /// Tasks of that state still there: 0 when done, else send the request again.
    pub left: u64,
}

/// Drop every task of one state.
///
/// `scheduled` tasks are dropped as cancels (active ones keep running), `dead` tasks are deleted,
/// and kept `succeeded` tasks are forgotten. The answer counts what was dropped and what is left.
#[utoipa::path(post, path = "/v1/queues/{queue}/purge", tag = "queues", operation_id = "purge_queue",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = PurgeRequest,
    responses(
        (status = 200, description = "What it dropped and what is left (send again while `left` > 0)", body = PurgeResponse),
        (status = 400, description = "Bad input; nothing done", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such queue", body = ErrorBody),
        (status = 503, description = "Redis unavailable (what was dropped stays dropped)", body = ErrorBody),
    ))]
pub async fn purge(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<PurgeRequest>,
) -> ApiResult<Json<PurgeResponse>> {
    let q = st.queue(&queue)?;
    if !st.client().has_queue(&queue).await? {
        return Err(ApiError::not_found(format!("no queue {queue:?}")));
    }
    let state = match body.state {
        PurgeStateJson::Scheduled => Purge::Scheduled,
        PurgeStateJson::Dead => Purge::Dead,
        PurgeStateJson::Succeeded => Purge::Succeeded,
    };
    let r = q.purge(state, budget()).await?;
    Ok(Json(PurgeResponse {
        dropped: r.dropped,
        left: r.left,
    }))
}

/// `?force=true` deletes a queue that still has tasks.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct DeleteQuery {
    /// Delete even while tasks are scheduled or running. Default false.
    pub force: Option<bool>,
}

/// What a delete did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct DeleteQueueResponse {
    /// Always true (a refused delete answers 409).
    pub deleted: bool,
}

/// Delete a queue.
///
/// Removes its tasks in every state, its settings, counters, schedules and webhook. While any task
/// is scheduled or active the answer is 409 `not_empty`, unless `force=true`.
#[utoipa::path(delete, path = "/v1/queues/{queue}", tag = "queues", operation_id = "delete_queue",
    params(("queue" = String, Path, description = "Queue name"), DeleteQuery),
    responses(
        (status = 200, description = "Deleted", body = DeleteQueueResponse),
        (status = 400, description = "Bad queue name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such queue", body = ErrorBody),
        (status = 409, description = "`not_empty`: tasks are scheduled or running (send `?force=true` to delete them too)", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn delete_queue(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiQuery(query): ApiQuery<DeleteQuery>,
) -> ApiResult<(StatusCode, Json<DeleteQueueResponse>)> {
    let q = st.queue(&queue)?;
    if !st.client().has_queue(&queue).await? {
        return Err(ApiError::not_found(format!("no queue {queue:?}")));
    }
    if !q.delete_queue(query.force.unwrap_or(false)).await? {
        return Err(ApiError::conflict(
            "not_empty",
            format!(
                "queue {queue} has scheduled or running tasks: purge them first, or delete with \
                 ?force=true"
            ),
        ));
    }
    Ok((StatusCode::OK, Json(DeleteQueueResponse { deleted: true })))
}
