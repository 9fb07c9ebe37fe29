//! The dashboard's GET pages and the htmx fragments they poll.

use askama::Template;
use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use dueq::{QueueStats, Task, TaskRef};
use serde::Deserialize;

use super::chart::{self, Chart, Minute};
use super::notice::Notice;
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// Payload bytes shown on the task page.
const PAYLOAD_PREVIEW_BYTES: usize = 4096;

pub(super) type PageResult = Result<Response, PageError>;

pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, PageError> {
    q.map(|Query(t)| t)
        .map_err(|e| PageError::bad(format!("bad query: {}", e.body_text())))
}

pub(super) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, PageError> {
    p.map(|Path(t)| t)
        .map_err(|e| PageError::bad(format!("bad path: {}", e.body_text())))
}

/// One queue's counts, formatted.
#[derive(Debug)]
pub(super) struct QueueRow {
    pub name: String,
    pub paused: bool,
    pub scheduled: u64,
    pub due: u64,
    pub dead: u64,
    pub succeeded_total: u64,
    pub failed_total: u64,
    pub next_due: String,
    pub oldest_wait: String,
    /// The queue limit holding due work back now (`rate`, `concurrency`), or "".
    pub throttled: &'static str,
    /// Over its alert threshold.
    pub behind: bool,
    /// Active tasks, with the concurrency limit when there is one ("3 / 7").
    pub active_text: String,
}

impl From<QueueStats> for QueueRow {
    fn from(s: QueueStats) -> Self {
        Self {
            next_due: s
                .next_due_at_ms
                .map(|t| view::relative(t, s.now_ms))
                .unwrap_or_else(|| "–".to_owned()),
            oldest_wait: if s.oldest_due_age_ms == 0 {
                "–".to_owned()
            } else {
                view::duration(s.oldest_due_age_ms)
            },
            throttled: s.throttled.unwrap_or(""),
            behind: s.behind,
            active_text: match s.concurrency_limit {
                Some(limit) => format!("{} / {limit}", s.active),
                None => s.active.to_string(),
            },
            name: s.queue,
            paused: s.paused,
            scheduled: s.scheduled,
            due: s.due,
            dead: s.dead,
            succeeded_total: s.succeeded_total,
            failed_total: s.failed_total,
        }
    }
}

/// A queue's counts and charts.
#[derive(Debug)]
struct Live {
    row: QueueRow,
    charts: Vec<Chart>,
    /// The queue's settings as (name, value) lines, defaults included.
    settings: Vec<(&'static str, String)>,
    /// Each partition's counts, when the queue has more than one.
    partitions: Vec<QueueRow>,
}

/// The settings a queue page shows, with the built-in defaults for those not set.
fn settings_lines(s: &dueq::QueueSettings) -> Vec<(&'static str, String)> {
    let or = |v: Option<String>, default: &str| v.unwrap_or_else(|| format!("{default} (default)"));
    let rate = |r: Option<dueq::RateLimit>| r.map(|r| format!("{} per {} ms", r.max, r.per_ms));
    vec![
        ("rate limit", or(rate(s.rate_limit), "none")),
        (
            "concurrency",
            or(s.concurrency.map(|c| c.to_string()), "none"),
        ),
        ("group rate limit", or(rate(s.group_rate_limit), "none")),
        (
            "group concurrency",
            or(s.group_concurrency.map(|c| c.to_string()), "none"),
        ),
        (
            "max attempts",
            or(
                s.max_attempts.map(|n| n.to_string()),
                &dueq::DEFAULT_MAX_ATTEMPTS.to_string(),
            ),
        ),
        (
            "lease",
            or(
                s.lease_ms.map(|n| format!("{n} ms")),
                &format!("{} ms", dueq::DEFAULT_LEASE_MS),
            ),
        ),
        (
            "backoff",
            or(
                s.backoff
                    .map(|b| format!("{} ms × {} up to {} ms", b.base_ms, b.factor, b.max_ms)),
                "1000 ms × 2 up to 3600000 ms",
            ),
        ),
        (
            "dead-letter cap",
            or(s.dead_max.map(|n| n.to_string()), "10000"),
        ),
        (
            "succeeded kept",
            or(s.succeeded_max.map(|n| n.to_string()), "0"),
        ),
        (
            "behind when oldest due waits",
            or(s.alert_due_age_ms.map(view::duration), "no threshold"),
        ),
        (
            "behind when due tasks reach",
            or(s.alert_due_count.map(|n| n.to_string()), "no threshold"),
        ),
        ("partitions", or(s.partitions.map(|n| n.to_string()), "1")),
    ]
}

async fn live(d: &Dash, name: &str) -> Result<Live, PageError> {
    let q = d.app.queue(name)?;
    let s = q.stats().await?;
    let looks_empty = s.scheduled == 0
        && s.active == 0
        && s.dead == 0
        && s.enqueued_total == 0
        && s.succeeded_total == 0
        && !s.paused;
    if looks_empty && !d.app.client().has_queue(name).await? {
        return Err(PageError::not_found(format!("no queue named {name:?}")));
    }
    let minutes: Vec<Minute> = q.history().await?.iter().map(Minute::from).collect();
    let settings = q.settings().await?;
    let partitions = if settings.partition_count() > 1 {
        let parts = q.partition_stats().await?;
        parts.into_iter().map(QueueRow::from).collect()
    } else {
        Vec::new()
    };
    Ok(Live {
        row: s.into(),
        charts: vec![chart::throughput(&minutes), chart::lateness(&minutes)],
        settings: settings_lines(&settings),
        partitions,
    })
}

/// A queue's push delivery target, formatted for the queue page.
#[derive(Debug)]
struct WebhookView {
    /// The URL, a password in it shown as `***`.
    url: String,
    concurrency: u32,
    timeout: String,
    updated: String,
    updated_ago: String,
    /// The last failed delivery's error (cut for the page) and when, since the webhook was
    /// last set.
    last_error: Option<(String, String, String)>,
}

async fn webhook_view(q: &dueq::Queue, now: u64) -> Result<Option<WebhookView>, PageError> {
    let Some(w) = q.webhook().await? else {
        return Ok(None);
    };
    let last_error = w.last_error.as_ref().map(|(e, at)| {
        (
            view::short(e, 600),
            view::time(*at),
            view::relative(*at, now),
        )
    });
    Ok(Some(WebhookView {
        url: w.redacted_url(),
        concurrency: w.concurrency,
        timeout: view::duration(w.timeout_ms),
        updated: view::time(w.updated_at_ms),
        updated_ago: view::relative(w.updated_at_ms, now),
        last_error,
    }))
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    layout: Layout,
    csrf: String,
    live: Live,
    webhook: Option<WebhookView>,
}

#[derive(Template)]
#[template(path = "queue_live.html")]
struct QueueLive {
    csrf: String,
    live: Live,
}

/// `/ui/queues/{queue}`: counts, pause/resume and the last hour's charts (live), the
/// webhook, the purge buttons.
pub(super) async fn queue(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<Notice>, QueryRejection>,
) -> PageResult {
    let name = path(p)?;
    let n = query(q)?;
    let live = live(&d, &name).await?;
    let now = view::now_ms(d.app.client()).await;
    let webhook = webhook_view(&d.app.queue(&name)?, now).await?;
    let mut layout = Layout::new(&d, &s, format!("Queue {name}"));
    layout.flash = n.text();
    Ok(render(&QueuePage {
        layout,
        csrf: s.csrf,
        live,
        webhook,
    }))
}

/// The live part of the queue page alone (polled).
pub(super) async fn queue_live(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
) -> PageResult {
    let name = path(p)?;
    Ok(render(&QueueLive {
        csrf: s.csrf,
        live: live(&d, &name).await?,
    }))
}

/// `?queue=&by=id|key&value=`: which task to show.
#[derive(Debug, Deserialize)]
pub(super) struct Lookup {
    queue: Option<String>,
    by: Option<String>,
    value: Option<String>,
    /// What an action just did (the notice).
    done: Option<String>,
}

/// One task, formatted.
#[derive(Debug)]
struct TaskView {
    id: String,
    key: Option<String>,
    state: &'static str,
    attempt: u32,
    max_attempts: u32,
    due: String,
    due_rel: String,
    created: String,
    state_at: Option<(&'static str, String)>,
    lease: String,
    /// The worker holding it (active, when its claimer gave its id).
    worker: Option<String>,
    /// When the running attempt was claimed (active): the time and how long ago.
    claimed: Option<(String, String)>,
    last_error: Option<String>,
    priority: u8,
    group: Option<String>,
    /// Its headers, by name.
    headers: Vec<(String, String)>,
    payload: String,
    payload_len: usize,
    payload_more: usize,
}

impl TaskView {
    /// The view of `t` with times relative to `now`.
    fn new(t: Task, now: u64) -> Self {
        let (payload, payload_more) = view::preview(&t.payload, PAYLOAD_PREVIEW_BYTES);
        let state_at = t.state_at_ms.and_then(|at| {
            let label = match t.state {
                dueq::TaskState::Active => "lease ends",
                dueq::TaskState::Dead => "died",
                dueq::TaskState::Succeeded => "succeeded",
                _ => return None,
            };
            Some((label, view::time(at)))
        });
        Self {
            id: t.id.as_str().to_owned(),
            state: t.state.as_str(),
            attempt: t.attempt,
            max_attempts: t.max_attempts,
            due: view::time(t.due_at_ms),
            due_rel: view::relative(t.due_at_ms, now),
            created: view::time(t.created_at_ms),
            state_at,
            lease: view::duration(t.lease_ms),
            worker: t.worker,
            claimed: t
                .claimed_at_ms
                .map(|at| (view::time(at), view::relative(at, now))),
            payload_len: t.payload.len(),
            payload,
            payload_more,
            key: t.key,
            last_error: t.last_error,
            priority: t.priority,
            group: t.group,
            headers: t
                .headers
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    layout: Layout,
    csrf: String,
    queue: String,
    t: TaskView,
}

/// `/ui/task?queue=&by=id|key&value=`: one task's state, attempts, times, last error and
/// payload; run now and cancel when it is scheduled, the worker holding it when it is active,
/// retry and delete when it is dead.
pub(super) async fn task(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    q: Result<Query<Lookup>, QueryRejection>,
) -> PageResult {
    let l = query(q)?;
    let queue = l.queue.unwrap_or_default();
    let queue = queue.trim();
    if queue.is_empty() {
        return Err(PageError::bad("give the queue name"));
    }
    let value = l.value.unwrap_or_default();
    let (target, what) = match l.by.as_deref().unwrap_or("id") {
        "id" => (
            TaskRef::id(value.trim())?,
            format!("with id {:?}", value.trim()),
        ),
        "key" => (TaskRef::key(value.clone())?, format!("with key {value:?}")),
        other => {
            return Err(PageError::bad(format!(
                "look up by \"id\" or \"key\", not {other:?}"
            )));
        }
    };
    let q = d.app.queue(queue)?;
    let Some(t) = q.get(&target).await? else {
        return Err(PageError::not_found(format!(
            "no task {what} in queue {queue:?} (finished tasks are kept only when the queue retains them)"
        )));
    };
    let mut layout = Layout::new(&d, &s, format!("Task {}", t.id));
    layout.flash = Notice {
        done: l.done,
        ..Notice::default()
    }
    .text();
    Ok(render(&TaskPage {
        layout,
        csrf: s.csrf,
        queue: queue.to_owned(),
        t: TaskView::new(t, view::now_ms(d.app.client()).await),
    }))
}
