//! `/v1/queues` and `/v1/queues/{queue}`: statistics, pause and resume.

use axum::Json;
use axum::extract::State;
use dueq::QueueStats;
use serde::Serialize;
use utoipa::ToSchema;

use super::paging::{self, PageQuery};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
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

/// One page of the known queues.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct QueuesResponse {
    /// This page's queues, sorted by name.
    pub queues: Vec<StatsResponse>,
    /// Queues known in all (every page).
    pub total: u64,
    /// Pass as `after` for the next page; `null` when this page reached the end.
    pub next: Option<String>,
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

/// Statistics of the queues, one page at a time, sorted by name.
///
/// Lists every queue that has had a task or a setting. Only the page's queues are read, so a page
/// costs the same with ten queues or ten thousand. Pass the answer's `next` as `after` for the next
/// page.
#[utoipa::path(get, path = "/v1/queues", tag = "queues", operation_id = "list_queues",
    params(PageQuery),
    responses(
        (status = 200, description = "One page of queues", body = QueuesResponse),
        (status = 400, description = "Bad `limit` or `after`", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn list(
    State(st): State<AppState>,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> ApiResult<Json<QueuesResponse>> {
    let limit = page.limit()?;
    let after = page.after(dueq::validate_queue_name)?;
    let (queues, total, next) = stats_page(&st, after, limit).await?;
    Ok(Json(QueuesResponse {
        queues: queues.into_iter().map(Into::into).collect(),
        total,
        next,
    }))
}

/// The stats of one page of queues (sorted by name, after `after`), the number of queues and
/// the next cursor. One registry read, then the page's stats calls at once (pipelined on the
/// shared connection).
pub(crate) async fn stats_page(
    st: &AppState,
    after: Option<&str>,
    limit: usize,
) -> ApiResult<(Vec<QueueStats>, u64, Option<String>)> {
    let names = st.client().queues().await?;
    let (shown, next) = paging::page(&names, after, limit);
    let queues = shown
        .iter()
        .map(|n| st.queue(n))
        .collect::<Result<Vec<_>, _>>()?;
    let stats = futures_util::future::try_join_all(queues.iter().map(|q| q.stats())).await?;
    Ok((stats, names.len() as u64, next))
}

/// Statistics of one queue.
///
/// Counts by state, the next due time, the age of the oldest due task, whether the queue is paused
/// and whether it is behind its alert thresholds. 404 for a queue that has never had a task, a
/// setting, a schedule or a webhook.
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
    if empty && !st.client().has_queue(&queue).await? {
        return Err(ApiError::not_found(format!("no queue {queue:?}")));
    }
    Ok(Json(s.into()))
}

/// Pause a queue.
///
/// Claims and push deliveries hand out nothing until it is resumed. Enqueue, cancel, reschedule and
/// the rest still work, and tasks in flight finish.
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

/// Resume a paused queue.
///
/// Claims and push deliveries hand out its due tasks again, overdue ones first.
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
