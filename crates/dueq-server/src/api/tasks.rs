//! `/v1/queues/{queue}/tasks...` and `/v1/queues/{queue}/keys/{key}`: enqueue (one or a
//! batch), look up, cancel and reschedule a task by id or by business key.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use dueq::{
    CancelOutcome, Due, EnqueueOutcome, Enqueued, OnConflict, RescheduleOutcome, Task, TaskRef,
    TaskSpec, TaskState,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::durable::durable;
use super::options::with_task_options;
use crate::error::{ApiError, ApiResult, ErrorBody, per_item};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use dueq::json::{MAX_PAYLOAD_DEPTH, json_depth, payload_bytes, payload_raw};

/// Most tasks in one batch request (each batch is one atomic script call).
pub const MAX_BATCH_TASKS: usize = 1000;

/// What enqueueing a live business key does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnConflictBody {
    /// Return the existing task unchanged (`created: false`). The default.
    Keep,
    /// Replace its payload, due time and settings (409 `in_progress` if it is running).
    Replace,
    /// As `replace`, but the due time never moves past the task's first enqueue +
    /// `debounce_max_ms` (required with it), so a key changed constantly still runs.
    Debounce,
}

with_task_options! {
/// One task to enqueue. Unknown fields are refused. Give at most one of `delay_ms` and
/// `due_at_ms` (neither: due now).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EnqueueRequest {
    /// Any JSON value; stored as the JSON text sent and returned as that value. Default `null`.
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    /// Due this many ms after the write lands, by the Redis clock (at most 3153600000000,
    /// 100 years: `dueq::MAX_DELAY_MS`).
    #[schema(maximum = 3153600000000_u64)]
    pub delay_ms: Option<u64>,
    /// Due at this Unix epoch ms (at most 253402300799999, end of year 9999:
    /// `dueq::MAX_DUE_AT_MS`).
    #[schema(maximum = 253402300799999_u64)]
    pub due_at_ms: Option<u64>,
    /// Business key, 1 to 512 bytes of UTF-8, unique among the queue's live tasks; not `.`
    /// or `..` (HTTP clients drop those from URLs as dot segments).
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = r"^(?:[^.]|\.[^.]|\.\.[\s\S])"
    )]
    pub key: Option<String>,
    /// What to do when `key` is live. Default `keep`.
    pub on_conflict: Option<OnConflictBody>,
    /// Expire the task if it has not started this many ms after the write lands (Redis
    /// clock), 1 to 3153600000000: it ends as `expired` (dropped, or in the dead-letter queue
    /// with reason `expired` when the queue's `on_expire` is `dead`). Not with
    /// `expires_at_ms`.
    #[schema(minimum = 1, maximum = 3153600000000_u64)]
    pub ttl_ms: Option<u64>,
    /// As `ttl_ms`, at this Unix epoch ms (at most 253402300799999). Not with `ttl_ms`.
    #[schema(maximum = 253402300799999_u64)]
    pub expires_at_ms: Option<u64>,
    /// With `on_conflict: debounce` (and only then, where it is required): the due time
    /// never moves past the task's first enqueue + this many ms, 1 to 3153600000000.
    #[schema(minimum = 1, maximum = 3153600000000_u64)]
    pub debounce_max_ms: Option<u64>,
    /// Durable write: answer only once this many replicas confirm the write
    /// (`WAIT`, up to 1 000 ms), else 503 `not_replicated` (the task was written on the
    /// primary: a re-send with its `key` returns it while it is scheduled or running, and
    /// creates a second task once it has finished). 0 to 16; default the server's setting
    /// (none unless configured). In a batch the largest value of its tasks applies to all.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}
}

/// The answer to one enqueue.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct EnqueueResponse {
    /// Task id (new, or the existing task's; in a unique window, the finished task's).
    pub id: String,
    /// Due time, Unix epoch ms (Redis clock); in a unique window, the finished task's last
    /// due time.
    pub due_at_ms: u64,
    /// Whether a new task was created (`false`: the key was live, kept or replaced; or in
    /// the unique window of the finished task this answer names).
    pub created: bool,
    /// Only when the key is in a unique window: the state the named task finished in
    /// (`succeeded`, `dead`, `cancelled` or `expired`); nothing was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<FinishedStateJson>,
}

/// A batch of tasks to enqueue, 1 to 1000; checked in full before anything is written.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BatchRequest {
    /// The tasks, 1 to 1000.
    #[schema(min_items = 1, max_items = 1000)]
    pub tasks: Vec<EnqueueRequest>,
}

/// One result per task, in order.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct BatchResponse {
    /// Per task: the enqueue result, or `{"error": ...}` (`in_progress` for a replace of a
    /// running task).
    pub results: Vec<BatchItem>,
}

/// One batch result.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
#[non_exhaustive]
pub enum BatchItem {
    /// Enqueued (or existing).
    Ok(EnqueueResponse),
    /// Refused.
    Err(ErrorBody),
}

/// A task as stored.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct TaskResponse {
    /// Task id.
    pub id: String,
    /// Business key.
    pub key: Option<String>,
    /// Its state.
    pub state: TaskStateJson,
    /// Due time, Unix epoch ms.
    pub due_at_ms: u64,
    /// Attempts made so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The payload (JSON value; a non-JSON payload is shown as a string).
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// Text of the last failure.
    pub last_error: Option<String>,
    /// When it was enqueued, Unix epoch ms.
    pub created_at_ms: u64,
    /// Its group, if any.
    pub group: Option<String>,
    /// Its priority, 0 (first) to 9.
    pub priority: u8,
    /// When it expires unless started, Unix epoch ms (only while scheduled, if it has one).
    pub expires_at_ms: Option<u64>,
    /// When the running attempt was claimed, Unix epoch ms (only while active).
    pub claimed_at_ms: Option<u64>,
    /// The worker holding it, when its claim named one (only while active).
    pub worker_id: Option<String>,
    /// Its headers (`{}` when none).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub headers: dueq::Headers,
}

impl From<Task> for TaskResponse {
    fn from(t: Task) -> Self {
        Self {
            id: t.id.as_str().to_owned(),
            key: t.key,
            state: t.state.into(),
            due_at_ms: t.due_at_ms,
            attempt: t.attempt,
            max_attempts: t.max_attempts,
            payload: payload_raw(&t.payload),
            last_error: t.last_error,
            created_at_ms: t.created_at_ms,
            group: t.group,
            priority: t.priority,
            expires_at_ms: t.expires_at_ms,
            claimed_at_ms: t.claimed_at_ms,
            worker_id: t.worker,
            headers: t.headers,
        }
    }
}

/// The answer to a cancel: 200 `cancelled`, 409 `in_progress`, 404 `not_found`.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct CancelResponse {
    /// What the cancel did.
    pub outcome: CancelOutcomeJson,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = CancelOutcome)]
#[non_exhaustive]
pub enum CancelOutcomeJson {
    /// Removed before any worker got it; it will never run.
    Cancelled,
    /// A worker is running it; it was not touched.
    InProgress,
    /// No live task by that id or key.
    NotFound,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = TaskState)]
#[non_exhaustive]
pub enum TaskStateJson {
    /// Waiting for its due time (also between retries).
    Scheduled,
    /// Claimed by a worker under a lease.
    Active,
    /// Acknowledged (kept while the queue retains succeeded tasks).
    Succeeded,
    /// In the dead-letter queue.
    Dead,
}

impl From<TaskState> for TaskStateJson {
    fn from(s: TaskState) -> Self {
        match s {
            TaskState::Active => Self::Active,
            TaskState::Succeeded => Self::Succeeded,
            TaskState::Dead => Self::Dead,
            // a stored task is in one of these four; cancelled and expired tasks leave no
            // record to read
            _ => Self::Scheduled,
        }
    }
}

/// How a task ended, as an enqueue in its key's unique window answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = FinishedState)]
#[non_exhaustive]
pub enum FinishedStateJson {
    /// Acknowledged.
    Succeeded,
    /// In the dead-letter queue (or deleted from it since).
    Dead,
    /// Cancelled before it ran.
    Cancelled,
    /// Not started before its expiry.
    Expired,
}

impl FinishedStateJson {
    fn of(s: TaskState) -> Option<Self> {
        match s {
            TaskState::Succeeded => Some(Self::Succeeded),
            TaskState::Dead => Some(Self::Dead),
            TaskState::Cancelled => Some(Self::Cancelled),
            TaskState::Expired => Some(Self::Expired),
            _ => None,
        }
    }
}

/// A new due time: exactly one of the two fields.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RescheduleRequest {
    /// Due this many ms from now (Redis clock), at most 3153600000000 (100 years).
    #[schema(maximum = 3153600000000_u64)]
    pub delay_ms: Option<u64>,
    /// Due at this Unix epoch ms, at most 253402300799999 (end of year 9999).
    #[schema(maximum = 253402300799999_u64)]
    pub due_at_ms: Option<u64>,
    /// Durable write: answer only once this many replicas confirm it, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// `?replicas=` of a cancel.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct CancelQuery {
    /// Durable write: answer only once this many replicas confirm the cancel, else 503
    /// `not_replicated` (applied on the primary; repeat it to be sure). 0 to 16; default the
    /// server's setting.
    #[param(minimum = 0, maximum = 16)]
    pub replicas: Option<u8>,
}

/// The new due time.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct RescheduleResponse {
    /// Due time, Unix epoch ms.
    pub due_at_ms: u64,
}

fn due(delay_ms: Option<u64>, due_at_ms: Option<u64>) -> ApiResult<Option<Due>> {
    match (delay_ms, due_at_ms) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give delay_ms or due_at_ms, not both")),
        (Some(d), None) => Ok(Some(Due::DelayMs(d))),
        (None, Some(t)) => Ok(Some(Due::AtMs(t))),
        (None, None) => Ok(None),
    }
}

/// The W3C trace context (`traceparent`, `tracestate`) an enqueue request carries as HTTP
/// headers: it goes into the headers of the tasks whose body gives no `traceparent`, when it is
/// valid and fits their limits ([`dueq::trace::add_context`]); an HTTP client's
/// instrumentation sends it unasked, so it never makes an enqueue fail.
#[derive(Debug, Default)]
pub(crate) struct RequestTrace(dueq::Headers);

impl RequestTrace {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let mut h = dueq::Headers::new();
        for name in [dueq::TRACEPARENT, dueq::TRACESTATE] {
            if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
                h.insert(name, value);
            }
        }
        Self(h)
    }

    fn apply(&self, options: &mut dueq::TaskOptions) {
        dueq::trace::add_context(&mut options.headers, self.0.clone());
    }
}

fn spec(r: &EnqueueRequest, trace: &RequestTrace) -> ApiResult<TaskSpec> {
    if let Some(p) = &r.payload
        && json_depth(p.get()) > MAX_PAYLOAD_DEPTH
    {
        return Err(ApiError::invalid(format!(
            "payload nests deeper than {MAX_PAYLOAD_DEPTH} levels"
        )));
    }
    let payload = r
        .payload
        .as_deref()
        .map(payload_bytes)
        .unwrap_or_else(|| b"null".to_vec());
    let mut s = TaskSpec::new(payload);
    if let Some(d) = due(r.delay_ms, r.due_at_ms)? {
        s = s.due(d);
    }
    if let Some(k) = &r.key {
        s = s.key(k.clone());
    }
    match r.on_conflict {
        Some(OnConflictBody::Replace) => s = s.on_conflict(OnConflict::Replace),
        Some(OnConflictBody::Debounce) => s = s.on_conflict(OnConflict::Debounce),
        _ => {}
    }
    if let Some(m) = r.debounce_max_ms {
        s = s.debounce_max_ms(m);
    }
    match (r.ttl_ms, r.expires_at_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give ttl_ms or expires_at_ms, not both (expires_at_ms is refused with ttl_ms)",
            ));
        }
        (Some(t), None) => s = s.ttl_ms(t),
        (None, Some(t)) => s = s.expires_at_ms(t),
        (None, None) => {}
    }
    let mut options = r.task_options();
    trace.apply(&mut options);
    Ok(s.options(options))
}

/// The answer to one enqueue of `r`.
fn result(r: &EnqueueRequest, e: Enqueued) -> Result<EnqueueResponse, ApiError> {
    let state = match e.outcome {
        EnqueueOutcome::InProgress => {
            return Err(ApiError::conflict(
                "in_progress",
                format!("task {} with this key is running; not replaced", e.id),
            ));
        }
        EnqueueOutcome::Finished(s) if r.on_conflict.is_some_and(|c| c != OnConflictBody::Keep) => {
            return Err(ApiError::conflict(
                "unique_window",
                format!(
                    "the key is in the unique window of task {}, which finished as {}; not \
                     replaced",
                    e.id,
                    s.as_str()
                ),
            ));
        }
        EnqueueOutcome::Finished(s) => FinishedStateJson::of(s),
        _ => None,
    };
    Ok(EnqueueResponse {
        id: e.id.as_str().to_owned(),
        due_at_ms: e.due_at_ms,
        created: e.created(),
        state,
    })
}

/// Enqueue one task.
///
/// The task runs at its due time (`delay_ms` from now, or `due_at_ms`), never before. With a `key`,
/// at most one live task holds the key: `on_conflict` says whether a second enqueue keeps the first
/// task (answers 200 with `created: false`), replaces it, or debounces it. Answers 201 with the new
/// task's id and due time.
#[utoipa::path(post, path = "/v1/queues/{queue}/tasks", tag = "tasks", operation_id = "enqueue",
    params(("queue" = String, Path, description = "Queue name, [A-Za-z0-9_.-]{1,128}")),
    request_body = EnqueueRequest,
    responses(
        (status = 201, description = "Created", body = EnqueueResponse),
        (status = 200, description = "The key was live: existing task (kept or replaced); or in the unique window of a finished task (`state` says how it ended; nothing written)", body = EnqueueResponse),
        (status = 400, description = "Bad input; nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 409, description = "`in_progress`: replace refused, the task is running; `unique_window`: replace or debounce refused, the key is in the unique window of a finished task", body = ErrorBody),
        (status = 413, description = "Payload or body too large; nothing written", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn enqueue(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<EnqueueRequest>,
) -> ApiResult<(StatusCode, Json<EnqueueResponse>)> {
    let q = durable(st.queue(&queue)?, body.replicas)?;
    let e = q.enqueue(spec(&body, &RequestTrace::of(&headers))?).await?;
    let r = result(&body, e)?;
    let status = if r.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(r)))
}

/// Enqueue up to 1000 tasks in one call.
///
/// One atomic call on a queue of one partition. On a queue of several, one call per partition, and
/// a partition that failed fails its own tasks only: each answers with its error, so re-send those.
/// The answer has one result per task, in order.
#[utoipa::path(post, path = "/v1/queues/{queue}/tasks/batch", tag = "tasks", operation_id = "enqueue_batch",
    params(("queue" = String, Path, description = "Queue name")),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "One result per task, in order: the task, or the error that kept it out", body = BatchResponse),
        (status = 400, description = "A bad task (message names its index); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 413, description = "Payload or body too large; nothing written", body = ErrorBody),
        (status = 503, description = "Redis unavailable (no task written), or `not_replicated`", body = ErrorBody),
    ))]
pub async fn enqueue_batch(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<BatchRequest>,
) -> ApiResult<Json<BatchResponse>> {
    let trace = RequestTrace::of(&headers);
    let q = st.queue(&queue)?;
    if body.tasks.is_empty() || body.tasks.len() > MAX_BATCH_TASKS {
        return Err(ApiError::invalid(format!(
            "tasks must hold 1 to {MAX_BATCH_TASKS} tasks"
        )));
    }
    let specs = body
        .tasks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            spec(r, &trace).map_err(|e| ApiError::invalid(format!("task {i}: {}", e.message())))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let replicas = body.tasks.iter().filter_map(|t| t.replicas).max();
    let done = per_item(durable(q, replicas)?.enqueue_each(&specs).await?)?;
    let results = done
        .into_iter()
        .zip(&body.tasks)
        .map(|(e, r)| match e.map(|e| result(r, e)) {
            Ok(Ok(r)) => BatchItem::Ok(r),
            Ok(Err(e)) => BatchItem::Err(e.into()),
            Err(body) => BatchItem::Err(body),
        })
        .collect();
    Ok(Json(BatchResponse { results }))
}

async fn get_task(st: &AppState, queue: &str, target: TaskRef) -> ApiResult<Json<TaskResponse>> {
    let q = st.queue(queue)?;
    if let Some(t) = q.get(&target).await? {
        return Ok(Json(t.into()));
    }
    // a key whose task finished otherwise than dead may still be held by its unique window
    if let TaskRef::Key(key) = &target
        && let Some(w) = q.unique_window(key).await?
    {
        return Err(ApiError::not_found(format!(
            "no live or dead task under this key; it is in the unique window of task {}, \
             which finished as {}, until {} (epoch ms)",
            w.id,
            w.state.as_str(),
            w.ends_at_ms
        )));
    }
    Err(ApiError::not_found("no such task"))
}

async fn cancel_task(
    st: &AppState,
    queue: &str,
    target: TaskRef,
    query: CancelQuery,
) -> ApiResult<(StatusCode, Json<CancelResponse>)> {
    let q = durable(st.queue(queue)?, query.replicas)?;
    let outcome = q.cancel(&target).await?;
    let (status, outcome) = match outcome {
        CancelOutcome::Cancelled => (StatusCode::OK, CancelOutcomeJson::Cancelled),
        CancelOutcome::InProgress => (StatusCode::CONFLICT, CancelOutcomeJson::InProgress),
        _ => (StatusCode::NOT_FOUND, CancelOutcomeJson::NotFound),
    };
    Ok((status, Json(CancelResponse { outcome })))
}

async fn reschedule_task(
    st: &AppState,
    queue: &str,
    target: TaskRef,
    body: RescheduleRequest,
) -> ApiResult<Json<RescheduleResponse>> {
    let q = durable(st.queue(queue)?, body.replicas)?;
    let Some(d) = due(body.delay_ms, body.due_at_ms)? else {
        return Err(ApiError::invalid("give delay_ms or due_at_ms"));
    };
    match q.reschedule(&target, d).await? {
        RescheduleOutcome::Rescheduled { due_at_ms } => Ok(Json(RescheduleResponse { due_at_ms })),
        RescheduleOutcome::InProgress => Err(ApiError::conflict(
            "in_progress",
            "the task is running; not rescheduled",
        )),
        _ => Err(ApiError::not_found("no scheduled task")),
    }
}

fn by_id(id: String) -> ApiResult<TaskRef> {
    Ok(TaskRef::id(id)?)
}

fn by_key(key: String) -> ApiResult<TaskRef> {
    Ok(TaskRef::key(key)?)
}

/// Look up a task by id.
///
/// Shows its state, due time, attempts, payload and last error. 404 when it is not there: finished
/// tasks are not kept unless the queue keeps succeeded ones.
#[utoipa::path(get, path = "/v1/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "get_task",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task", body = TaskResponse),
        (status = 400, description = "Bad queue name or id", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such task", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get_by_id(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
) -> ApiResult<Json<TaskResponse>> {
    get_task(&st, &queue, by_id(id)?).await
}

/// Look up a task by business key.
///
/// The key is URL-encoded in the path. Answers the live task under the key, else the newest dead
/// one; 404 when there is neither.
#[utoipa::path(get, path = "/v1/queues/{queue}/keys/{key}", tag = "tasks", operation_id = "get_task_by_key",
    params(("queue" = String, Path, description = "Queue name"), ("key" = String, Path, description = "Business key, URL-encoded")),
    responses(
        (status = 200, description = "The task", body = TaskResponse),
        (status = 400, description = "Bad queue name or key", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No live task with this key", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get_by_key(
    State(st): State<AppState>,
    ApiPath((queue, key)): ApiPath<(String, String)>,
) -> ApiResult<Json<TaskResponse>> {
    get_task(&st, &queue, by_key(key)?).await
}

/// Cancel a scheduled task by id.
///
/// `cancelled`: it will never run. `in_progress` (409): a worker runs it now, and it is left alone.
/// `not_found` (404): no such task, or it already finished.
#[utoipa::path(delete, path = "/v1/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "cancel_task",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id"), CancelQuery),
    responses(
        (status = 200, description = "`cancelled`: it will never run", body = CancelResponse),
        (status = 409, description = "`in_progress`: a worker is running it; untouched", body = CancelResponse),
        (status = 404, description = "`not_found`: no live task", body = CancelResponse),
        (status = 400, description = "Bad queue name or id", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn cancel_by_id(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<CancelQuery>,
) -> ApiResult<(StatusCode, Json<CancelResponse>)> {
    cancel_task(&st, &queue, by_id(id)?, query).await
}

/// Cancel a scheduled task by business key.
///
/// The key is URL-encoded in the path. `cancelled`: it will never run. `in_progress` (409): a
/// worker runs it now, and it is left alone. `not_found` (404): no live task holds the key.
#[utoipa::path(delete, path = "/v1/queues/{queue}/keys/{key}", tag = "tasks", operation_id = "cancel_task_by_key",
    params(("queue" = String, Path, description = "Queue name"), ("key" = String, Path, description = "Business key, URL-encoded"), CancelQuery),
    responses(
        (status = 200, description = "`cancelled`: it will never run", body = CancelResponse),
        (status = 409, description = "`in_progress`: a worker is running it; untouched", body = CancelResponse),
        (status = 404, description = "`not_found`: no live task", body = CancelResponse),
        (status = 400, description = "Bad queue name or key", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn cancel_by_key(
    State(st): State<AppState>,
    ApiPath((queue, key)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<CancelQuery>,
) -> ApiResult<(StatusCode, Json<CancelResponse>)> {
    cancel_task(&st, &queue, by_key(key)?, query).await
}

/// Move the due time of a scheduled task, by id.
///
/// Give `delay_ms` (from now) or `due_at_ms`. A task that a worker runs now cannot move (409
/// `in_progress`).
#[utoipa::path(patch, path = "/v1/queues/{queue}/tasks/{id}", tag = "tasks", operation_id = "reschedule_task",
    params(("queue" = String, Path, description = "Queue name"), ("id" = String, Path, description = "Task id")),
    request_body = RescheduleRequest,
    responses(
        (status = 200, description = "Rescheduled", body = RescheduleResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No scheduled task", body = ErrorBody),
        (status = 409, description = "`in_progress`: the task is running", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn reschedule_by_id(
    State(st): State<AppState>,
    ApiPath((queue, id)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RescheduleRequest>,
) -> ApiResult<Json<RescheduleResponse>> {
    reschedule_task(&st, &queue, by_id(id)?, body).await
}

/// Move the due time of a scheduled task, by business key.
///
/// The key is URL-encoded in the path. Give `delay_ms` (from now) or `due_at_ms`. A task that a
/// worker runs now cannot move (409 `in_progress`).
#[utoipa::path(patch, path = "/v1/queues/{queue}/keys/{key}", tag = "tasks", operation_id = "reschedule_task_by_key",
    params(("queue" = String, Path, description = "Queue name"), ("key" = String, Path, description = "Business key, URL-encoded")),
    request_body = RescheduleRequest,
    responses(
        (status = 200, description = "Rescheduled", body = RescheduleResponse),
        (status = 400, description = "Bad input", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No scheduled task", body = ErrorBody),
        (status = 409, description = "`in_progress`: the task is running", body = ErrorBody),
        (status = 503, description = "Redis unavailable, or `not_replicated`: fewer replicas than `replicas` confirmed in time", body = ErrorBody),
    ))]
pub async fn reschedule_by_key(
    State(st): State<AppState>,
    ApiPath((queue, key)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RescheduleRequest>,
) -> ApiResult<Json<RescheduleResponse>> {
    reschedule_task(&st, &queue, by_key(key)?, body).await
}
