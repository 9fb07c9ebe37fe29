//! `/v1/queues/{queue}/dead...`: the dead-letter queue: list (paged), retry, delete.

use axum::Json;
use axum::extract::State;
use dueq::{DeadPage, DeadRetryOutcome, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::tasks::TaskResponse;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

/// Paging of the dead-letter list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct DeadQuery {
    /// Skip this many (newest first), 0 to 4294967295. Default 0.
    #[param(maximum = 4294967295_u64)]
    pub offset: Option<u64>,
    /// At most this many, 1 to 1000. Default 20.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
}

/// A dead task.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct DeadTaskResponse {
    /// The task (state `dead`).
    #[serde(flatten)]
    pub task: TaskResponse,
    /// When it died, Unix epoch ms.
    pub died_at_ms: u64,
}

/// One page of the dead-letter queue.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct DeadListResponse {
    /// Dead tasks in the queue in all.
    pub total: u64,
    /// This page, newest first.
    pub tasks: Vec<DeadTaskResponse>,
}

/// What a retry or delete did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct DeadOutcomeResponse {
    /// What was done.
    pub outcome: DeadOutcomeJson,
}

/// What a retry or delete of a dead task did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = DeadOutcome)]
#[non_exhaustive]
pub enum DeadOutcomeJson {
    /// Scheduled again, due now, attempts counted afresh.
    Retried,
    /// Removed from the dead-letter queue.
    Deleted,
}

impl From<DeadPage> for DeadListResponse {
    fn from(p: DeadPage) -> Self {
        Self {
            total: p.total,
            tasks: p
                .tasks
                .into_iter()
                .map(|d| DeadTaskResponse {
                    died_at_ms: d.died_at_ms,
                    task: d.task.into(),
                })
                .collect(),
        }
    }
}

/// List dead tasks, newest first.
///
/// One page at a time, by `offset` and `limit`. Each dead task shows its key, attempts, last error
/// and when it died.
#[utoipa::path(get, path = "/v1/queues/{queue}/dead", tag = "dead", operation_id = "list_dead",
    params(("queue" = String, Path, description = "Queue name"), DeadQuery),
    responses(
        (status = 200, description = "One page", body = DeadListResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn list(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiQuery(page): ApiQuery<DeadQuery>,
) -> ApiResult<Json<DeadListResponse>> {
    let q = st.queue(&queue)?;
    let p = q
        .dead_list(page.offset.unwrap_or(0), page.limit.unwrap_or(20))
        .await?;
    Ok(Json(p.into()))
}

/// Schedule a dead task again, due now.
///
/// Its attempts are counted afresh. `conflict` (409) means its key belongs to a live task again, so
/// the retry would make a second one.
#[utoipa::path(post, path = "/v1/queues/{queue}/dead/{id}/retry", tag = "dead", operation_id = "retry_dead",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "`retried`", body = DeadOutcomeResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "Not in the dead-letter queue", body = ErrorBody),
        (status = 409, description = "`conflict`: its business key is taken by another task (live, or in its unique window)", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn retry(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
) -> ApiResult<Json<DeadOutcomeResponse>> {
    let q = st.queue(&queue)?;
    let id = TaskId::new(id)?;
    let outcome = q.dead_retry(std::slice::from_ref(&id)).await?;
    match outcome.first() {
        Some(DeadRetryOutcome::Retried) => Ok(Json(DeadOutcomeResponse {
            outcome: DeadOutcomeJson::Retried,
        })),
        Some(DeadRetryOutcome::Conflict) => Err(ApiError::conflict(
            "conflict",
            "its business key is taken by another task (live, or in its unique window); left dead",
        )),
        _ => Err(ApiError::not_found(format!("no dead task {id}"))),
    }
}

/// Delete a dead task for good.
///
/// Answers `deleted`, or `not_found` (404) when no dead task has that id.
#[utoipa::path(delete, path = "/v1/queues/{queue}/dead/{id}", tag = "dead", operation_id = "delete_dead",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "`deleted`", body = DeadOutcomeResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "Not in the dead-letter queue", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn delete(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
) -> ApiResult<Json<DeadOutcomeResponse>> {
    let q = st.queue(&queue)?;
    let id = TaskId::new(id)?;
    if q.dead_delete(std::slice::from_ref(&id)).await?.first() == Some(&true) {
        Ok(Json(DeadOutcomeResponse {
            outcome: DeadOutcomeJson::Deleted,
        }))
    } else {
        Err(ApiError::not_found(format!("no dead task {id}")))
    }
}
