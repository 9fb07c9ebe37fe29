//! `/v1/queues/{queue}/settings`: the queue's stored settings (DESIGN 1 and 4.2). `PATCH`
//! changes only the fields given (`null` clears one); every worker and server applies the
//! change at its next claim. The bodies are [`dueq::QueueSettings`] and
//! [`dueq::SettingsPatch`]; the structs here only describe them for OpenAPI.

use axum::Json;
use axum::extract::State;
use dueq::{QueueSettings, SettingsPatch};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;

/// At most `max` tasks handed out in any window of `per_ms` (sliding, Redis clock, over every
/// worker and server).
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct RateLimitBody {
    /// Tasks per window, 1 to 1000000.
    #[schema(minimum = 1, maximum = 1000000)]
    pub max: u64,
    /// Window, 1 to 86400000 ms.
    #[schema(minimum = 1, maximum = 86400000)]
    pub per_ms: u64,
}

/// Retry delays: `min(max_ms, base_ms * factor^(attempt-1))`, 20 % jitter.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct BackoffBody {
    /// Delay after the first failed attempt, 1 to 2592000000 ms.
    #[schema(minimum = 1, maximum = 2592000000_u64)]
    pub base_ms: u64,
    /// Growth per attempt, 1.0 to 100.0.
    #[schema(minimum = 1.0, maximum = 100.0)]
    pub factor: f64,
    /// Longest delay, `base_ms` to 2592000000 ms.
    #[schema(minimum = 1, maximum = 2592000000_u64)]
    pub max_ms: u64,
}

/// A queue's settings; `null` is the built-in default. In a `PATCH`, a field left out stays
/// as it is and `null` clears it. Unknown fields are refused.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct SettingsBody {
    /// Attempts of tasks enqueued without their own, 1 to 65535 (default 5).
    #[schema(minimum = 1, maximum = 65535)]
    pub max_attempts: Option<u32>,
    /// Lease of tasks enqueued without their own, 1000 to 4294967295 ms (default 30000).
    #[schema(minimum = 1000, maximum = 4294967295_u64)]
    pub lease_ms: Option<u64>,
    /// Retry delays (default: 1 s doubling to 1 h).
    pub backoff: Option<BackoffBody>,
    /// Dead-letter cap, 1 to 100000000 (default 10000).
    #[schema(minimum = 1, maximum = 100000000)]
    pub dead_max: Option<u64>,
    /// Succeeded tasks kept for lookup, 0 to 100000000 (default 0).
    #[schema(minimum = 0, maximum = 100000000)]
    pub succeeded_max: Option<u64>,
    /// Rate limit over the whole queue (default none).
    pub rate_limit: Option<RateLimitBody>,
    /// Rate limit of each group on its own (default none).
    pub group_rate_limit: Option<RateLimitBody>,
    /// Most tasks active at once over the whole queue, 1 to 1000000 (default none).
    #[schema(minimum = 1, maximum = 1000000)]
    pub concurrency: Option<u32>,
    /// Most tasks of one group active at once, 1 to 1000000 (default none).
    #[schema(minimum = 1, maximum = 1000000)]
    pub group_concurrency: Option<u32>,
    /// The queue is behind when its oldest due task waited this long, ms (default none).
    #[schema(minimum = 1, maximum = 2592000000_u64)]
    pub alert_due_age_ms: Option<u64>,
    /// The queue is behind when this many tasks are due (default none).
    #[schema(minimum = 1)]
    pub alert_due_count: Option<u64>,
    /// What happens to a task whose `ttl_ms` / `expires_at_ms` passed before it started:
    /// `drop` (the default: gone, key freed) or `dead` (kept in the dead-letter queue with
    /// the error `expired`). Either way it counts as `expired`.
    pub on_expire: Option<OnExpireBody>,
    /// Partitions the queue is split into, 1 to 1024 (default 1), each under its own hash tag
    /// so a large queue spreads over the masters of a Redis Cluster. Changed only while the
    /// queue holds no task (else a 400); every limit is then split over the partitions and
    /// must be at least their number.
    #[schema(minimum = 1, maximum = 1024)]
    pub partitions: Option<u16>,
    /// Unique window of keyed tasks enqueued (or fired by a schedule) without their own
    /// `unique_for_ms`, 0 to 31622400000 ms (default none): their key stays taken this long
    /// after they finished.
    #[schema(minimum = 0, maximum = 31622400000_u64)]
    pub unique_for_ms: Option<u64>,
}

/// What happens to an expired task.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnExpireBody {
    /// Dropped.
    Drop,
    /// Kept in the dead-letter queue.
    Dead,
}

/// The queue's settings.
///
/// Retry policy, dead-letter cap, rate and concurrency limits, expiry policy, alert thresholds and
/// partitions. A field that was never set shows its default.
#[utoipa::path(get, path = "/v1/queues/{queue}/settings", tag = "queues",
    operation_id = "get_settings",
    params(("queue" = String, Path, description = "Queue name")),
    responses(
        (status = 200, description = "The settings", body = SettingsBody),
        (status = 400, description = "Bad queue name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
) -> ApiResult<Json<QueueSettings>> {
    Ok(Json(st.queue(&queue)?.settings().await?))
}

/// Change some of the queue's settings.
///
/// Only the fields given change; `null` resets one to its default. The answer is the settings after
/// the change. Nonsense (a zero window, a negative or absurd number, an unknown field) is a 400
/// naming the field, and writes nothing.
#[utoipa::path(patch, path = "/v1/queues/{queue}/settings", tag = "queues",
    operation_id = "update_settings",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = SettingsBody,
    responses(
        (status = 200, description = "The settings after the change", body = SettingsBody),
        (status = 400, description = "Bad value or unknown field (nothing written)", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn update(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(patch): ApiJson<SettingsPatch>,
) -> ApiResult<Json<QueueSettings>> {
    Ok(Json(st.queue(&queue)?.update_settings(&patch).await?))
}
