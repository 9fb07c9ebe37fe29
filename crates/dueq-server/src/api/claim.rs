//! The pull protocol over HTTP: `POST /v1/queues/{queue}/claim` (with long-poll) and
//! `POST /v1/queues/{queue}/tasks/{id}/ack|nack|extend`.
//!
//! # How a long-poll claim waits
//!
//! Through the library's [`DueClaimer`](dueq::DueClaimer), the one claim path of workers,
//! long-polls and push delivery: it sleeps until the earliest due time by the Redis clock, is
//! woken earlier by the queue's wake channel, looks at least every second as the fallback for
//! a lost notification (DESIGN 2.6), and recovers expired leases before claiming, so
//! HTTP-only deployments need no Rust worker for crash recovery (a queue nobody claims from
//! is covered by the library's [`LeaseRecoverer`](dueq::LeaseRecoverer), which `serve` runs).
//! The claim returns at `wait_ms` with an empty list.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use dueq::{AckOutcome, LeaseToken, NackOutcome, TaskId};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::time::Instant;
use utoipa::ToSchema;

use super::durable::durable;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use dueq::json::payload_raw;

/// Longest `wait_ms` of a claim.
pub const MAX_WAIT_MS: u64 = 60_000;
/// Most tasks one claim hands out.
pub const MAX_CLAIM: u32 = 1000;

/// Pull due tasks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// Most tasks to hand out, 1 to 1000. Default 1.
    #[schema(minimum = 1, maximum = 1000)]
    pub max: Option<u32>,
    /// Wait up to this long for the first due task, 0 to 60000 ms. Default 0.
    #[schema(maximum = 60000)]
    pub wait_ms: Option<u64>,
    /// Lease for these tasks, 1000 to 4294967295 ms (default: each task's own).
    #[schema(minimum = 1000, maximum = 4294967295_u64)]
    pub lease_ms: Option<u64>,
    /// The claiming worker's id (as in `PUT /v1/workers/{id}`), kept with each lease so that
    /// an active task shows who holds it; 1 to 200 bytes of printable ASCII without spaces.
    #[schema(min_length = 1, max_length = 200)]
    pub worker_id: Option<String>,
}

/// A claimed task: run it, then ack, nack or extend with its `lease_token`.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ClaimedTaskResponse {
    /// Task id.
    pub id: String,
    /// Business key.
    pub key: Option<String>,
    /// The payload (JSON value).
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// This attempt, 1-based.
    pub attempt: u32,
    /// Due time, Unix epoch ms.
    pub due_at_ms: u64,
    /// Proof of ownership for ack, nack and extend.
    pub lease_token: String,
    /// When the lease runs out unless extended, Unix epoch ms (Redis clock).
    pub lease_expires_at_ms: u64,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its priority, 0 (first) to 9.
    #[schema(maximum = 9)]
    pub priority: u8,
    /// Attempts allowed: a failure of attempt `max_attempts` sends the task to the
    /// dead-letter queue.
    pub max_attempts: u32,
    /// Redis time of this claim, Unix epoch ms: minus `due_at_ms`, the task's lateness.
    pub claimed_at_ms: u64,
    /// Its headers (`{}` when none).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub headers: dueq::Headers,
    /// Whether the run continues the producer's trace: `true` makes the run's consumer span a
    /// child of the span in `headers.traceparent` (the first attempt of a task enqueued due at
    /// once, not by a schedule); `false` starts a new trace with a link to it, so a long
    /// timer does not make a long trace.
    pub continues_trace: bool,
}

/// The claimed tasks (possibly none).
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ClaimResponse {
    /// Claim order: ungrouped tasks by priority (0 first), then due time, FIFO among equal
    /// due times; each group with due work is one contender beside them, served round-robin
    /// (its own tasks by priority, then due time), so priority orders tasks within the
    /// ungrouped ones and within each group, not across groups.
    pub tasks: Vec<ClaimedTaskResponse>,
}

/// Complete a claimed task.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AckRequest {
    /// The token from the claim.
    pub lease_token: String,
    /// Durable write: answer only once this many replicas confirm it, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// Fail the current attempt.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NackRequest {
    /// The token from the claim.
    pub lease_token: String,
    /// Failure text, kept as `last_error` (cut to 4 KiB).
    pub error: Option<String>,
    /// Retry after this many ms (default: the queue's backoff).
    pub retry_in_ms: Option<u64>,
    /// Straight to the dead-letter queue. Default false.
    pub permanent: Option<bool>,
    /// Durable write: answer only once this many replicas confirm it, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// Extend a lease.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ExtendRequest {
    /// The token from the claim.
    pub lease_token: String,
    /// New lease from now, ms (1000 to 4294967295).
    #[schema(minimum = 1000, maximum = 4294967295_u64)]
    pub lease_ms: u64,
}

/// The answer to an ack.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct AckResponse {
    /// Always `acked` (a lost lease is 409 `lease_lost`).
    pub outcome: AckOutcomeJson,
}

/// What an ack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = AckOutcome)]
#[non_exhaustive]
pub enum AckOutcomeJson {
    /// Completed.
    Acked,
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = NackOutcome)]
#[non_exhaustive]
pub enum NackOutcomeJson {
    /// Back to scheduled for another attempt at `due_at_ms`.
    Rescheduled,
    /// Out of attempts or failed permanently: in the dead-letter queue.
    Dead,
}

/// The answer to a nack.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct NackResponse {
    /// What the nack did.
    pub outcome: NackOutcomeJson,
    /// When rescheduled: the next attempt's due time, Unix epoch ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
}

/// The answer to an extend.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ExtendResponse {
    /// The new lease deadline, Unix epoch ms.
    pub lease_expires_at_ms: u64,
}

/// Claim due tasks, waiting up to `wait_ms` for the first one.
///
/// Returns up to `max` due tasks, highest priority first, then by due time, each with a lease token
/// and a lease deadline. A task never comes out before its due time. Finish each with `ack` or
/// `nack` before the lease runs out, or `extend` it; a lease that runs out makes the task due again
/// (at-least-once delivery).
#[utoipa::path(post, path = "/v1/queues/{queue}/claim", tag = "claim",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The tasks (an empty list when none became due in time)", body = ClaimResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn claim(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<ClaimRequest>,
) -> ApiResult<Json<ClaimResponse>> {
    let q = st.queue(&queue)?;
    let max = body.max.unwrap_or(1);
    if !(1..=MAX_CLAIM).contains(&max) {
        return Err(ApiError::invalid(format!("max must be 1 to {MAX_CLAIM}")));
    }
    let wait_ms = body.wait_ms.unwrap_or(0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(format!(
            "wait_ms must be 0 to {MAX_WAIT_MS}"
        )));
    }
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mut due = q
        .due_claimer()
        .lease_ms(body.lease_ms)
        .replay_lost_replies(false);
    if let Some(w) = body.worker_id {
        due = due.worker_id(w);
    }
    let mut shutdown = st.shutdown_rx();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let tasks = due.claim_within(max as usize, deadline, stop).await?;
    let tasks = tasks
        .into_iter()
        .map(|t| ClaimedTaskResponse {
            id: t.id.as_str().to_owned(),
            key: t.key,
            payload: payload_raw(&t.payload),
            attempt: t.attempt,
            due_at_ms: t.due_at_ms,
            lease_token: t.lease_token.as_str().to_owned(),
            lease_expires_at_ms: t.lease_expires_at_ms,
            group: t.group,
            priority: t.priority,
            max_attempts: t.max_attempts,
            claimed_at_ms: t.claimed_at_ms,
            headers: t.headers,
            continues_trace: t.continues_trace,
        })
        .collect();
    Ok(Json(ClaimResponse { tasks }))
}

fn lease_lost() -> ApiError {
    ApiError::conflict(
        "lease_lost",
        "the lease token is no longer current (expired, taken over, or the task is gone); nothing changed",
    )
}

/// Acknowledge (complete) a claimed task.
///
/// The task succeeded and will not run again. `lease_lost` (409) means the lease ran out or was
/// taken over, so the task may already run elsewhere: handlers must be idempotent.
#[utoipa::path(post, path = "/v1/queues/{queue}/tasks/{id}/ack", tag = "claim",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    request_body = AckRequest,
    responses(
        (status = 200, description = "Completed", body = AckResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 409, description = "`lease_lost`: nothing changed", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn ack(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<AckRequest>,
) -> ApiResult<Json<AckResponse>> {
    let q = durable(st.queue(&queue)?, body.replicas)?;
    let id = TaskId::new(id)?;
    match q
        .ack(&id, &LeaseToken::new(body.lease_token.clone()))
        .await?
    {
        AckOutcome::Acked => Ok(Json(AckResponse {
            outcome: AckOutcomeJson::Acked,
        })),
        _ => Err(lease_lost()),
    }
}

/// Fail the current attempt of a claimed task.
///
/// The task is retried after the queue's backoff with jitter, or after `retry_in_ms`. It goes to
/// the dead-letter queue when `permanent` is set or its attempts are used up. The `error` text is
/// kept on the task.
#[utoipa::path(post, path = "/v1/queues/{queue}/tasks/{id}/nack", tag = "claim",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    request_body = NackRequest,
    responses(
        (status = 200, description = "`rescheduled` (with `due_at_ms`) or `dead`", body = NackResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 409, description = "`lease_lost`: nothing changed", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn nack(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<NackRequest>,
) -> ApiResult<Json<NackResponse>> {
    let q = durable(st.queue(&queue)?, body.replicas)?;
    let id = TaskId::new(id)?;
    let token = LeaseToken::new(body.lease_token.clone());
    let outcome = q
        .nack(
            &id,
            &token,
            body.error.as_deref().unwrap_or(""),
            body.retry_in_ms,
            body.permanent.unwrap_or(false),
        )
        .await?;
    let r = match outcome {
        NackOutcome::Rescheduled { due_at_ms } => NackResponse {
            outcome: NackOutcomeJson::Rescheduled,
            due_at_ms: Some(due_at_ms),
        },
        NackOutcome::Dead => NackResponse {
            outcome: NackOutcomeJson::Dead,
            due_at_ms: None,
        },
        _ => return Err(lease_lost()),
    };
    Ok(Json(r))
}

/// Extend a lease to `lease_ms` from now.
///
/// A long-running handler calls this before its lease runs out. The answer gives the new deadline;
/// `lease_lost` (409) means the lease already ran out and the task may run elsewhere.
#[utoipa::path(post, path = "/v1/queues/{queue}/tasks/{id}/extend", tag = "claim",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    request_body = ExtendRequest,
    responses(
        (status = 200, description = "The new deadline", body = ExtendResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 409, description = "`lease_lost`: nothing changed", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn extend(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ExtendRequest>,
) -> ApiResult<Json<ExtendResponse>> {
    let q = st.queue(&queue)?;
    let id = TaskId::new(id)?;
    match q
        .extend(&id, &LeaseToken::new(body.lease_token), body.lease_ms)
        .await?
    {
        Some(lease_expires_at_ms) => Ok(Json(ExtendResponse {
            lease_expires_at_ms,
        })),
        None => Err(lease_lost()),
    }
}
