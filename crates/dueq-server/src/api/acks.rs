//! The batch forms of the pull protocol's answers: `POST /v1/queues/{queue}/acks`, `/nacks`
//! and `/releases` (DESIGN 4.2). Each is one script call for up to 1 000 items (one per
//! partition on a queue of several) and answers one outcome per item, in order; a stale
//! lease token refuses only its own item (outcome `lease_lost`, nothing changed for it), and
//! a partition that failed fails only its own items (outcome `failed` with the error: send
//! those again). The whole batch is checked before anything is written: a bad item is a 400
//! naming it (`acks[3].id: ...`).
//!
//! They are separate from `claim.rs` (the single-task routes and the long-poll) because they
//! carry up to 1 000 items, so they sit behind the batch body limit, not the single-task one.
//!
//! `releases` hands leases back unfinished: the task is due again at once at its old due
//! time, and the attempt is not counted. It is what an HTTP worker sends for the tasks it
//! claimed but did not run when it stops (DESIGN 2.4), the counterpart of the Rust worker's
//! `release`; a nack would count an attempt and dead-letter a task on its last one.

use axum::Json;
use axum::extract::State;
use dueq::{AckOutcome, LeaseToken, NackOutcome, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::durable::durable;
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorDetail, per_item};
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;

/// Most items in one `acks`, `nacks` or `releases` request (one script call).
pub const MAX_BATCH_ITEMS: usize = 1000;
/// Longest lease token accepted, bytes (tokens handed out are far shorter).
const MAX_TOKEN_BYTES: usize = 256;

/// One claimed task to acknowledge or release.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct LeaseItem {
    /// Task id from the claim.
    #[schema(pattern = "^[!-~]{1,64}$")]
    pub id: String,
    /// The token from the claim.
    #[schema(min_length = 1, max_length = 256)]
    pub lease_token: String,
}

/// Acknowledge (complete) many claimed tasks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct AcksRequest {
    /// The tasks, 1 to 1000.
    #[schema(min_items = 1, max_items = 1000)]
    pub acks: Vec<LeaseItem>,
    /// Durable write: answer only once this many replicas confirm it, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// One failed attempt to report.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NackItem {
    /// Task id from the claim.
    #[schema(pattern = "^[!-~]{1,64}$")]
    pub id: String,
    /// The token from the claim.
    #[schema(min_length = 1, max_length = 256)]
    pub lease_token: String,
    /// Failure text, kept as `last_error` (cut to 4 KiB).
    pub error: Option<String>,
    /// Retry after this many ms (default: the queue's backoff).
    pub retry_in_ms: Option<u64>,
    /// Straight to the dead-letter queue. Default false.
    pub permanent: Option<bool>,
}

/// Fail the current attempt of many claimed tasks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NacksRequest {
    /// The tasks, 1 to 1000.
    #[schema(min_items = 1, max_items = 1000)]
    pub nacks: Vec<NackItem>,
    /// Durable write: answer only once this many replicas confirm it, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// Hand many leases back unfinished.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ReleasesRequest {
    /// The tasks, 1 to 1000.
    #[schema(min_items = 1, max_items = 1000)]
    pub releases: Vec<LeaseItem>,
}

/// What an ack did to one task.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AckItemOutcome {
    /// Completed.
    Acked,
    /// The token is no longer current (expired, taken over, or the task is gone); nothing
    /// changed.
    LeaseLost,
    /// Its partition could not be reached or did not confirm (`error` says why): send it
    /// again.
    Failed,
}

/// One ack result.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct AckResult {
    /// `acked`, `lease_lost` or `failed`.
    pub outcome: AckItemOutcome,
    /// Why it failed (outcome `failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// One result per item, in order.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct AcksResponse {
    /// Per item of `acks`, in order.
    pub results: Vec<AckResult>,
}

/// What a nack did to one task.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NackItemOutcome {
    /// Due again at `due_at_ms` for another attempt.
    Rescheduled,
    /// Out of attempts or permanent: in the dead-letter queue.
    Dead,
    /// The token is no longer current; nothing changed.
    LeaseLost,
    /// Its partition could not be reached or did not confirm (`error` says why): send it
    /// again.
    Failed,
}

/// One nack result.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct NackResult {
    /// `rescheduled`, `dead`, `lease_lost` or `failed`.
    pub outcome: NackItemOutcome,
    /// When rescheduled: the next attempt's due time, Unix epoch ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
    /// Why it failed (outcome `failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// One result per item, in order.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct NacksResponse {
    /// Per item of `nacks`, in order.
    pub results: Vec<NackResult>,
}

/// What a release did to one task.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReleaseItemOutcome {
    /// Due again at once; the attempt is not counted.
    Released,
    /// The token is no longer current; nothing changed.
    LeaseLost,
}

/// One release result.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ReleaseResult {
    /// `released` or `lease_lost`.
    pub outcome: ReleaseItemOutcome,
}

/// One result per item, in order.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ReleasesResponse {
    /// Per item of `releases`, in order.
    pub results: Vec<ReleaseResult>,
}

fn check_len(field: &str, n: usize) -> ApiResult<()> {
    if n == 0 || n > MAX_BATCH_ITEMS {
        return Err(ApiError::invalid(format!(
            "{field} must hold 1 to {MAX_BATCH_ITEMS} items (got {n})"
        )));
    }
    Ok(())
}

/// The id and token of item `i` of `field`, checked.
fn lease(field: &str, i: usize, id: &str, token: &str) -> ApiResult<(TaskId, LeaseToken)> {
    let id = TaskId::new(id).map_err(|e| ApiError::invalid(format!("{field}[{i}].id: {e}")))?;
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
        return Err(ApiError::invalid(format!(
            "{field}[{i}].lease_token: must be 1 to {MAX_TOKEN_BYTES} bytes"
        )));
    }
    Ok((id, LeaseToken::new(token)))
}

fn leases(field: &str, items: &[LeaseItem]) -> ApiResult<Vec<(TaskId, LeaseToken)>> {
    check_len(field, items.len())?;
    items
        .iter()
        .enumerate()
        .map(|(i, it)| lease(field, i, &it.id, &it.lease_token))
        .collect()
}

/// Acknowledge up to 1000 claimed tasks in one call.
///
/// Each item names a task and the lease token its claim returned. The answer has one outcome per
/// item, in order: `acked`, or `lease_lost` when the lease ran out and the task may run again
/// elsewhere. One bad item fails the whole call with a 400 and nothing is written.
#[utoipa::path(post, path = "/v1/queues/{queue}/acks", tag = "claim", operation_id = "ack_batch",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = AcksRequest,
    responses(
        (status = 200, description = "One outcome per item, in order (`lease_lost` refuses only its item)", body = AcksResponse),
        (status = 400, description = "A bad item (the message names it); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 413, description = "Body too large; nothing written", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn acks(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<AcksRequest>,
) -> ApiResult<Json<AcksResponse>> {
    let q = durable(st.queue(&queue)?, body.replicas)?;
    let items = leases("acks", &body.acks)?;
    let done = per_item(q.ack_each(&items).await)?;
    let results = items
        .iter()
        .zip(done)
        .map(|(_, o)| match o {
            Ok(AckOutcome::Acked) => AckResult {
                outcome: AckItemOutcome::Acked,
                error: None,
            },
            Ok(_) => AckResult {
                outcome: AckItemOutcome::LeaseLost,
                error: None,
            },
            Err(e) => AckResult {
                outcome: AckItemOutcome::Failed,
                error: Some(e.error),
            },
        })
        .collect();
    Ok(Json(AcksResponse { results }))
}

/// Fail the current attempt of up to 1000 claimed tasks.
///
/// The batch form of `nack`: each item is retried after its backoff (or `retry_in_ms`), or dead-
/// lettered when it is `permanent` or out of attempts. The answer has one outcome per item, in
/// order.
#[utoipa::path(post, path = "/v1/queues/{queue}/nacks", tag = "claim", operation_id = "nack_batch",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = NacksRequest,
    responses(
        (status = 200, description = "One outcome per item, in order (`lease_lost` refuses only its item)", body = NacksResponse),
        (status = 400, description = "A bad item (the message names it); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 413, description = "Body too large; nothing written", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn nacks(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<NacksRequest>,
) -> ApiResult<Json<NacksResponse>> {
    let q = durable(st.queue(&queue)?, body.replicas)?;
    check_len("nacks", body.nacks.len())?;
    let checked = body
        .nacks
        .iter()
        .enumerate()
        .map(|(i, it)| lease("nacks", i, &it.id, &it.lease_token))
        .collect::<ApiResult<Vec<_>>>()?;
    let items: Vec<_> = checked
        .iter()
        .zip(&body.nacks)
        .map(|((id, token), it)| {
            (
                id,
                token,
                it.error.as_deref().unwrap_or(""),
                it.retry_in_ms,
                it.permanent.unwrap_or(false),
            )
        })
        .collect();
    let done = per_item(q.nack_each(&items).await)?;
    let results = checked
        .iter()
        .zip(done)
        .map(|(_, o)| {
            let (outcome, due_at_ms) = match o {
                Ok(NackOutcome::Rescheduled { due_at_ms }) => {
                    (NackItemOutcome::Rescheduled, Some(due_at_ms))
                }
                Ok(NackOutcome::Dead) => (NackItemOutcome::Dead, None),
                Ok(_) => {
                    return NackResult {
                        outcome: NackItemOutcome::LeaseLost,
                        due_at_ms: None,
                        error: None,
                    };
                }
                Err(e) => {
                    return NackResult {
                        outcome: NackItemOutcome::Failed,
                        due_at_ms: None,
                        error: Some(e.error),
                    };
                }
            };
            NackResult {
                outcome,
                due_at_ms,
                error: None,
            }
        })
        .collect();
    Ok(Json(NacksResponse { results }))
}

/// Hand up to 1000 leases back unfinished.
///
/// Each task is due again at once, at its old due time, and the attempt is not counted. A worker
/// calls this when it stops before running what it claimed, so the tasks need not wait for their
/// leases to run out.
#[utoipa::path(post, path = "/v1/queues/{queue}/releases", tag = "claim", operation_id = "release_batch",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = ReleasesRequest,
    responses(
        (status = 200, description = "One outcome per item, in order (`lease_lost` refuses only its item)", body = ReleasesResponse),
        (status = 400, description = "A bad item (the message names it); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 413, description = "Body too large; nothing written", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn releases(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiJson(body): ApiJson<ReleasesRequest>,
) -> ApiResult<Json<ReleasesResponse>> {
    let q = st.queue(&queue)?;
    let items = leases("releases", &body.releases)?;
    let done = q.release(&items).await?;
    let results = items
        .iter()
        .zip(done)
        .map(|(_, released)| {
            let outcome = if released {
                ReleaseItemOutcome::Released
            } else {
                ReleaseItemOutcome::LeaseLost
            };
            ReleaseResult { outcome }
        })
        .collect();
    Ok(Json(ReleasesResponse { results }))
}
