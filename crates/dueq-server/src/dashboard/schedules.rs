//! The dashboard's schedules page of a queue (`/ui/queues/{queue}/schedules?after=`): its
//! recurring schedules, 100 a page by name ([`dueq::Queue::schedule_names`], then
//! [`dueq::Queue::schedule`] for the page's), with their timing, next and last fire, fired and skipped
//! counts, and pause, resume and delete buttons (POSTs under the session gate's origin and
//! CSRF checks, like every dashboard form).

use askama::Template;
use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use dueq::{Misfire, Overlap, Schedule};
use serde::Deserialize;

use super::notice::Notice;
use super::pages::{path, query};
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// One schedule, formatted.
#[derive(Debug)]
struct ScheduleRow {
    name: String,
    timing: String,
    tz: String,
    next: String,
    next_in: String,
    last: String,
    last_ago: String,
    fired: u64,
    skipped: u64,
    paused: bool,
    rules: String,
}

impl ScheduleRow {
    fn new(s: Schedule, now_ms: u64) -> Self {
        let spec = s.spec;
        let timing = match (&spec.cron, spec.every_ms) {
            (Some(c), _) => format!("cron {c}"),
            (None, Some(ms)) => format!("every {}", view::duration(ms)),
            (None, None) => "–".to_owned(),
        };
        let misfire = match spec.misfire {
            Misfire::FireOnce => "fire_once",
            _ => "skip",
        };
        let overlap = match spec.overlap {
            Overlap::Skip => "skip",
            _ => "allow",
        };
        Self {
            name: spec.name,
            timing,
            tz: spec.tz.unwrap_or_else(|| "UTC".to_owned()),
            next: s.next_fire_at_ms.map(view::time).unwrap_or_default(),
            next_in: s
                .next_fire_at_ms
                .map_or_else(|| "–".to_owned(), |t| view::relative(t, now_ms)),
            last: s.last_fire_at_ms.map(view::time).unwrap_or_default(),
            last_ago: s
                .last_fire_at_ms
                .map_or_else(|| "never".to_owned(), |t| view::relative(t, now_ms)),
            fired: s.fired_total,
            skipped: s.skipped_total,
            paused: s.paused,
            rules: format!(
                "misfire {misfire} (grace {}), overlap {overlap}",
                view::duration(spec.misfire_grace_ms)
            ),
        }
    }
}

#[derive(Template)]
#[template(path = "schedules.html")]
struct SchedulesPage {
    layout: Layout,
    csrf: String,
    queue: String,
    rows: Vec<ScheduleRow>,
    /// Schedules of the queue in all.
    total: u64,
    /// Whether this is a later page (`after` given).
    later_page: bool,
    /// The next page's cursor.
    next: Option<String>,
    /// How far ahead of its tick a task is enqueued, s.
    ahead_s: u64,
}

/// Schedules per page.
const PAGE: usize = 100;

/// `?after=&done=`: the page (a schedule name cursor) and what an action just did.
#[derive(Debug, Deserialize)]
pub(super) struct SchedulesQuery {
    after: Option<String>,
    done: Option<String>,
}

/// `/ui/queues/{queue}/schedules?after=`: the queue's schedules, 100 a page by name.
pub(super) async fn page(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<SchedulesQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    let name = path(p)?;
    let sq = query(q)?;
    let after = sq.after.filter(|a| !a.is_empty());
    if let Some(a) = &after {
        dueq::validate_schedule_name(a).map_err(|e| PageError::bad(format!("after: {e}")))?;
    }
    let q = d.app.queue(&name)?;
    let (list, total, next) =
        crate::api::schedules::schedules_page(&q, after.as_deref(), PAGE).await?;
    let now = view::now_ms(d.app.client()).await;
    let mut layout = Layout::new(&d, &s, format!("Schedules of {name}"));
    layout.flash = Notice {
        done: sq.done,
        ..Notice::default()
    }
    .text();
    Ok(render(&SchedulesPage {
        layout,
        csrf: s.csrf,
        queue: name,
        rows: list.into_iter().map(|s| ScheduleRow::new(s, now)).collect(),
        total,
        later_page: after.is_some(),
        next,
        ahead_s: dueq::schedule::FIRE_AHEAD_MS / 1000,
    }))
}

fn back(queue: &str, done: &str) -> Response {
    Redirect::to(&format!("/ui/queues/{queue}/schedules?done={done}")).into_response()
}

fn no_such(queue: &str, name: &str) -> PageError {
    PageError::not_found(format!("no schedule {name} in queue {queue}"))
}

/// `POST /ui/queues/{queue}/schedules/{name}/pause`.
pub(super) async fn pause(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, PageError> {
    let (queue, name) = path(p)?;
    match d.app.queue(&queue)?.pause_schedule(&name).await? {
        Some(()) => Ok(back(&queue, "schedule_paused")),
        None => Err(no_such(&queue, &name)),
    }
}

/// `POST /ui/queues/{queue}/schedules/{name}/resume`: at its first tick after now.
pub(super) async fn resume(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, PageError> {
    let (queue, name) = path(p)?;
    match d.app.queue(&queue)?.resume_schedule(&name).await? {
        Some(_) => Ok(back(&queue, "schedule_resumed")),
        None => Err(no_such(&queue, &name)),
    }
}

/// `POST /ui/queues/{queue}/schedules/{name}/delete`: no further tick (tasks already
/// enqueued by earlier ticks stay).
pub(super) async fn delete(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, PageError> {
    let (queue, name) = path(p)?;
    if d.app.queue(&queue)?.delete_schedule(&name).await? {
        Ok(back(&queue, "schedule_deleted"))
    } else {
        Err(no_such(&queue, &name))
    }
}
