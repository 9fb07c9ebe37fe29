//! `GET /v1/queues/{queue}/tasks`: browse the live tasks of a queue page by page, scheduled
//! ones in due order or active ones in lease-deadline order (`Queue::browse`). Apart from
//! `tasks.rs` (one task by id or key), which is long enough already.

use axum::Json;
use axum::extract::State;
use dueq::TaskState;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::tasks::TaskResponse;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

/// Which tasks to browse.
#[derive(Debug, Clone, Copy, Default, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BrowseState {
    /// Waiting for their due time (retries included), in due-time order. The default.
    #[default]
    Scheduled,
    /// Held by workers, in lease-deadline order.
    Active,
}

/// Which page.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct BrowseQuery {
    /// `scheduled` (default) or `active`.
    #[param(inline)]
    pub state: Option<BrowseState>,
    /// The `next` of the previous page (absent: from the start).
    #[param(max_length = 100)]
    pub after: Option<String>,
    /// At most this many, 1 to 1000. Default 50.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A live task of a page.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct BrowsedTask {
    /// The task.
    #[serde(flatten)]
    pub task: TaskResponse,
    /// For an active task, when its lease runs out unless extended, Unix epoch ms.
    pub lease_expires_at_ms: Option<u64>,
}

/// One page of live tasks.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct TaskPageResponse {
    /// The tasks, in due order (scheduled) or lease-deadline order (active), ties in enqueue
    /// order.
    pub tasks: Vec<BrowsedTask>,
    /// Pass as `after` for the next page; `null` when this page reached the end.
    pub next: Option<String>,
}

/// Browse scheduled or active tasks, paged by cursor.
///
/// Scheduled tasks come in due-time order, active ones in lease-deadline order. Pass the answer's
/// `next` as `after` for the next page; pages stay consistent while tasks come and go.
#[utoipa::path(get, path = "/v1/queues/{queue}/tasks", tag = "tasks", operation_id = "browse_tasks",
    params(("queue" = String, Path, description = "Queue name"), BrowseQuery),
    responses(
        (status = 200, description = "One page", body = TaskPageResponse),
        (status = 400, description = "Bad input (state, limit, or a cursor not from `next`)", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn browse(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiQuery(query): ApiQuery<BrowseQuery>,
) -> ApiResult<Json<TaskPageResponse>> {
    let q = st.queue(&queue)?;
    let state = match query.state.unwrap_or_default() {
        BrowseState::Active => TaskState::Active,
        BrowseState::Scheduled => TaskState::Scheduled,
    };
    let page = q
        .browse(state, query.after.as_deref(), query.limit.unwrap_or(50))
        .await?;
    Ok(Json(TaskPageResponse {
        tasks: page
            .tasks
            .into_iter()
            .map(|t| BrowsedTask {
                lease_expires_at_ms: if state == TaskState::Active {
                    t.state_at_ms
                } else {
                    None
                },
                task: t.into(),
            })
            .collect(),
        next: page.next,
    }))
}
