//! `/v1/queues/{queue}/schedules`: recurring schedules (DESIGN 4.2). `PUT` creates (201) or
//! replaces / leaves unchanged (200) by name, so services register theirs at every start-up;
//! every running worker and server fires them, each tick exactly once.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use dueq::json::{MAX_PAYLOAD_DEPTH, json_depth, payload_bytes, payload_raw};
use dueq::{
    DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, Misfire, Overlap, Schedule, ScheduleSpec, SetOutcome,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::options::with_task_options;
use super::paging::{self, PageQuery};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

with_task_options! {
/// A schedule: exactly one of `cron` and `every_ms`. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ScheduleRequest {
    /// Cron pattern: 5 fields (minute first) or 6 (seconds first), wall-clock times in `tz`.
    pub cron: Option<String>,
    /// Fixed interval, ms, 1000 or more: fire times are whole multiples of it since the
    /// Unix epoch.
    #[schema(minimum = 1000)]
    pub every_ms: Option<u64>,
    /// IANA time zone of `cron` (`Europe/Berlin`). Default UTC, never the server's zone.
    pub tz: Option<String>,
    /// Payload of every task (any JSON value). Default `null`.
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    /// Ticks whose task has not started `misfire_grace_ms` after their fire time (nothing
    /// ran, or the queue was paused): `skip` (counted in `skipped_total`, the default) or
    /// `fire_once` (one task for the whole missed span).
    pub misfire: Option<MisfireJson>,
    /// How late a tick's task may still start, ms, 100 to 86400000. Default 1000.
    #[schema(minimum = 100, maximum = 86400000)]
    pub misfire_grace_ms: Option<u64>,
    /// `allow` (default) or `skip` (while the previous tick's task is live).
    pub overlap: Option<OverlapJson>,
}
}

/// What a `PUT` of a schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = ScheduleSetOutcome)]
#[non_exhaustive]
pub enum SetOutcomeJson {
    /// It was new.
    Created,
    /// Its definition changed.
    Replaced,
    /// The same definition was stored already.
    Unchanged,
}

/// Misfire policy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MisfireJson {
    /// Missed ticks are counted, not fired.
    Skip,
    /// One task for the whole missed span, at the latest missed fire time.
    FireOnce,
}

/// Overlap policy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlapJson {
    /// Fire whatever the previous task does.
    Allow,
    /// Skip (and count) a tick while the previous tick's task is scheduled or active.
    Skip,
}

/// A stored schedule and its state.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ScheduleResponse {
    /// Queue name.
    pub queue: String,
    /// Schedule name.
    pub name: String,
    /// Cron pattern, if any.
    pub cron: Option<String>,
    /// Interval, ms, if any.
    pub every_ms: Option<u64>,
    /// Time zone of the cron pattern (`null` = UTC).
    pub tz: Option<String>,
    /// Payload of every task (any JSON value, `null` included).
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    /// Misfire policy.
    pub misfire: MisfireJson,
    /// Grace before a tick counts as missed, ms.
    pub misfire_grace_ms: u64,
    /// Overlap policy.
    pub overlap: OverlapJson,
    /// Attempts of each task.
    pub max_attempts: u32,
    /// Lease of each task, ms.
    pub lease_ms: u64,
    /// Priority of each task.
    pub priority: u8,
    /// Group of each task, if any.
    pub group: Option<String>,
    /// Unique window of each task's key, ms (`null`: the queue's `unique_for_ms` setting).
    pub unique_for_ms: Option<u64>,
    /// Headers of each task (`{}` when none).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub headers: dueq::Headers,
    /// Next fire time, epoch ms (Redis clock); `null` while paused. Ticks fire up to 12 s
    /// ahead (their tasks wait, due at their ticks); each is next until its time comes.
    pub next_fire_at_ms: Option<u64>,
    /// The next 5 fire times (empty while paused).
    pub upcoming_ms: Vec<u64>,
    /// Fire time of the last tick fired, epoch ms.
    pub last_fire_at_ms: Option<u64>,
    /// Ticks not fired (missed under `skip`, or skipped for overlap).
    pub skipped_total: u64,
    /// Tasks enqueued by ticks.
    pub fired_total: u64,
    /// Whether it is paused.
    pub paused: bool,
    /// In the answer to `PUT`: what it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<SetOutcomeJson>,
}

impl ScheduleResponse {
    /// Schedule `s` of `queue` as the API shows it.
    pub fn new(queue: &str, s: Schedule) -> Self {
        let spec = s.spec;
        let task = spec.tick_options();
        Self {
            queue: queue.to_owned(),
            payload: payload_raw(&spec.payload),
            name: spec.name,
            cron: spec.cron,
            every_ms: spec.every_ms,
            tz: spec.tz,
            misfire: match spec.misfire {
                Misfire::FireOnce => MisfireJson::FireOnce,
                _ => MisfireJson::Skip,
            },
            misfire_grace_ms: spec.misfire_grace_ms,
            overlap: match spec.overlap {
                Overlap::Skip => OverlapJson::Skip,
                _ => OverlapJson::Allow,
            },
            max_attempts: task.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            lease_ms: task.lease_ms.unwrap_or(DEFAULT_LEASE_MS),
            priority: task.priority,
            group: task.group,
            unique_for_ms: task.unique_for_ms,
            headers: task.headers,
            next_fire_at_ms: s.next_fire_at_ms,
            upcoming_ms: s.upcoming_ms,
            last_fire_at_ms: s.last_fire_at_ms,
            skipped_total: s.skipped_total,
            fired_total: s.fired_total,
            paused: s.paused,
            outcome: None,
        }
    }
}

/// One page of a queue's schedules.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ScheduleList {
    /// This page's schedules, sorted by name.
    pub schedules: Vec<ScheduleResponse>,
    /// Schedules of the queue in all (every page).
    pub total: u64,
    /// Pass as `after` for the next page; `null` when this page reached the end.
    pub next: Option<String>,
}

/// The answer to a delete.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ScheduleDeleted {
    /// Schedule name.
    pub name: String,
    /// Always `true` (an unknown schedule gets 404).
    pub deleted: bool,
}

fn spec(name: String, r: ScheduleRequest) -> ApiResult<ScheduleSpec> {
    if let Some(p) = &r.payload
        && json_depth(p.get()) > MAX_PAYLOAD_DEPTH
    {
        return Err(ApiError::invalid(format!(
            "payload: nests deeper than {MAX_PAYLOAD_DEPTH} levels"
        )));
    }
    let payload = r
        .payload
        .as_deref()
        .map(payload_bytes)
        .unwrap_or_else(|| b"null".to_vec());
    let options = r.task_options();
    let mut s = ScheduleSpec::new(name, payload);
    s.cron = r.cron;
    s.every_ms = r.every_ms;
    s.tz = r.tz;
    if let Some(m) = r.misfire {
        s = s.misfire(match m {
            MisfireJson::Skip => Misfire::Skip,
            MisfireJson::FireOnce => Misfire::FireOnce,
        });
    }
    if let Some(o) = r.overlap {
        s = s.overlap(match o {
            OverlapJson::Allow => Overlap::Allow,
            OverlapJson::Skip => Overlap::Skip,
        });
    }
    if let Some(g) = r.misfire_grace_ms {
        s = s.misfire_grace_ms(g);
    }
    Ok(s.options(options))
}

fn missing(queue: &str, name: &str) -> ApiError {
    ApiError::not_found(format!("queue {queue:?} has no schedule {name:?}"))
}

async fn read(st: &AppState, queue: &str, name: &str) -> ApiResult<ScheduleResponse> {
    let q = st.queue(queue)?;
    match q.schedule(name).await? {
        Some(s) => Ok(ScheduleResponse::new(queue, s)),
        None => Err(missing(queue, name)),
    }
}

/// Create or replace a schedule by name.
///
/// A schedule enqueues its task on a cron expression in a time zone or every `every_ms`. The same
/// definition again changes nothing (200, `unchanged`); a replace that keeps `cron`, `every_ms` and
/// `tz` keeps the next fire time. Answers 201 when it created the schedule.
#[utoipa::path(put, path = "/v1/queues/{queue}/schedules/{name}", tag = "schedules", operation_id = "set_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name, [A-Za-z0-9_.-]{1,128}")),
    request_body = ScheduleRequest,
    responses(
        (status = 201, description = "Created", body = ScheduleResponse),
        (status = 200, description = "Replaced or unchanged", body = ScheduleResponse),
        (status = 400, description = "Bad field (the message names it); nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 413, description = "Payload too large", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn set(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
    ApiJson(req): ApiJson<ScheduleRequest>,
) -> ApiResult<(StatusCode, Json<ScheduleResponse>)> {
    let q = st.queue(&queue)?;
    let s = spec(name.clone(), req)?;
    let r = q.set_schedule(&s).await?;
    let mut res = read(&st, &queue, &name).await?;
    let (status, outcome) = match r.outcome {
        SetOutcome::Created => (StatusCode::CREATED, SetOutcomeJson::Created),
        SetOutcome::Replaced => (StatusCode::OK, SetOutcomeJson::Replaced),
        _ => (StatusCode::OK, SetOutcomeJson::Unchanged),
    };
    res.outcome = Some(outcome);
    Ok((status, Json(res)))
}

/// One schedule with its next fire times.
///
/// Shows the definition, whether it is paused, when it fired last, how many ticks it skipped, and
/// the next few fire times.
#[utoipa::path(get, path = "/v1/queues/{queue}/schedules/{name}", tag = "schedules", operation_id = "get_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "The schedule", body = ScheduleResponse),
        (status = 400, description = "Bad queue or schedule name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
) -> ApiResult<Json<ScheduleResponse>> {
    Ok(Json(read(&st, &queue, &name).await?))
}

/// Delete a schedule.
///
/// No tick fires after this. Tasks it already enqueued stay and run.
#[utoipa::path(delete, path = "/v1/queues/{queue}/schedules/{name}", tag = "schedules", operation_id = "delete_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Deleted", body = ScheduleDeleted),
        (status = 400, description = "Bad queue or schedule name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn delete(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
) -> ApiResult<Json<ScheduleDeleted>> {
    let q = st.queue(&queue)?;
    if q.delete_schedule(&name).await? {
        Ok(Json(ScheduleDeleted {
            name,
            deleted: true,
        }))
    } else {
        Err(missing(&queue, &name))
    }
}

/// Pause a schedule.
///
/// No tick fires or counts as skipped until it is resumed.
#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{name}/pause", tag = "schedules", operation_id = "pause_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Paused", body = ScheduleResponse),
        (status = 400, description = "Bad queue or schedule name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn pause(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
) -> ApiResult<Json<ScheduleResponse>> {
    let q = st.queue(&queue)?;
    q.pause_schedule(&name)
        .await?
        .ok_or_else(|| missing(&queue, &name))?;
    Ok(Json(read(&st, &queue, &name).await?))
}

/// Resume a paused schedule.
///
/// It fires again from its first tick after now; ticks during the pause are not fired.
#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{name}/resume", tag = "schedules", operation_id = "resume_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 200, description = "Resumed", body = ScheduleResponse),
        (status = 400, description = "Bad queue or schedule name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn resume(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
) -> ApiResult<Json<ScheduleResponse>> {
    let q = st.queue(&queue)?;
    q.resume_schedule(&name)
        .await?
        .ok_or_else(|| missing(&queue, &name))?;
    Ok(Json(read(&st, &queue, &name).await?))
}

/// List a queue's schedules, one page at a time.
///
/// Sorted by name. Pass the answer's `next` as `after` for the next page.
#[utoipa::path(get, path = "/v1/queues/{queue}/schedules", tag = "schedules", operation_id = "list_schedules",
    params(("queue" = String, Path, description = "Queue name"), PageQuery),
    responses(
        (status = 200, description = "One page of schedules", body = ScheduleList),
        (status = 400, description = "Bad queue name, `limit` or `after`", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn list(
    State(st): State<AppState>,
    ApiPath(queue): ApiPath<String>,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> ApiResult<Json<ScheduleList>> {
    let q = st.queue(&queue)?;
    let limit = page.limit()?;
    let after = page.after(dueq::validate_schedule_name)?;
    let (list, total, next) = schedules_page(&q, after, limit).await?;
    Ok(Json(ScheduleList {
        schedules: list
            .into_iter()
            .map(|s| ScheduleResponse::new(&queue, s))
            .collect(),
        total,
        next,
    }))
}

/// One page of the queue's schedules (sorted by name, after `after`), their number and the
/// next cursor: the names, then the page's schedules at once. One deleted in between is
/// left out of the page.
pub(crate) async fn schedules_page(
    q: &dueq::Queue,
    after: Option<&str>,
    limit: usize,
) -> ApiResult<(Vec<Schedule>, u64, Option<String>)> {
    let names = q.schedule_names().await?;
    let (shown, next) = paging::page(&names, after, limit);
    let list = futures_util::future::try_join_all(shown.iter().map(|n| q.schedule(n))).await?;
    Ok((
        list.into_iter().flatten().collect(),
        names.len() as u64,
        next,
    ))
}

/// The task a trigger enqueued.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct TriggerResponse {
    /// Task id.
    pub id: String,
    /// Its business key, `schedule:{name}:manual:{ms}`.
    pub key: String,
    /// Its due time (now), Unix epoch ms.
    pub due_at_ms: u64,
}

/// Run a schedule's task once now.
///
/// Enqueues the task under the key `schedule:{name}:manual:{ms}`, due now. The schedule's next fire
/// time does not move.
#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{name}/trigger", tag = "schedules", operation_id = "trigger_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    responses(
        (status = 201, description = "Enqueued, due now, key `schedule:{name}:manual:{ms}`", body = TriggerResponse),
        (status = 400, description = "Bad queue or schedule name", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn trigger(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
) -> ApiResult<(StatusCode, Json<TriggerResponse>)> {
    let q = st.queue(&queue)?;
    let e = q
        .trigger_schedule(&name)
        .await?
        .ok_or_else(|| missing(&queue, &name))?;
    let task = q.get(&dueq::TaskRef::Id(e.id.clone())).await?;
    Ok((
        StatusCode::CREATED,
        Json(TriggerResponse {
            id: e.id.as_str().to_owned(),
            key: task.and_then(|t| t.key).unwrap_or_default(),
            due_at_ms: e.due_at_ms,
        }),
    ))
}

/// A past range of a schedule's ticks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackfillRequest {
    /// First tick time of the range (inclusive), Unix epoch ms.
    pub from_ms: u64,
    /// End of the range (exclusive), Unix epoch ms; at most now.
    pub to_ms: u64,
}

/// What a backfill did.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct BackfillResponse {
    /// Ticks in the range.
    pub ticks: u64,
    /// Tasks enqueued for them.
    pub created: u64,
    /// Ticks whose task was still scheduled or running, or finished inside the unique window
    /// of the template (kept, not duplicated).
    pub existing: u64,
}

/// Enqueue the ticks of a past range that never fired.
///
/// One task per tick of the range (at most 10 000 ticks), each due now and keyed as its tick
/// (`schedule:{name}:{tick_ms}`). A tick whose task is still live keeps it, so running it twice
/// adds nothing while those tasks wait. dueq cannot tell a tick whose task ran and finished from
/// one that never fired: backfill a range where the schedule did not run.
#[utoipa::path(post, path = "/v1/queues/{queue}/schedules/{name}/backfill", tag = "schedules", operation_id = "backfill_schedule",
    params(("queue" = String, Path, description = "Queue name"),
        ("name" = String, Path, description = "Schedule name")),
    request_body = BackfillRequest,
    responses(
        (status = 200, description = "What it enqueued", body = BackfillResponse),
        (status = 400, description = "Bad input: an empty or future range, more than 10 000 ticks; nothing written", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "No such schedule", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn backfill(
    State(st): State<AppState>,
    ApiPath((queue, name)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<BackfillRequest>,
) -> ApiResult<Json<BackfillResponse>> {
    let q = st.queue(&queue)?;
    let r = q
        .backfill_schedule(&name, body.from_ms, body.to_ms)
        .await?
        .ok_or_else(|| missing(&queue, &name))?;
    Ok(Json(BackfillResponse {
        ticks: r.ticks,
        created: r.created,
        existing: r.existing,
    }))
}
