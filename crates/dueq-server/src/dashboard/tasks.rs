//! The dashboard's live task pages of a queue: `/ui/queues/{queue}/scheduled` (scheduled
//! tasks in due order, under the charts of how many fall due in each of the next 60 minutes
//! and 24 hours: what is coming) and `/ui/queues/{queue}/active` (tasks held by workers, in
//! lease-deadline order). Both are paged by the `after` cursor of [`dueq::Queue::browse`]
//! (forward only, with a link back to the first page); each row links to the task page.
//! A scheduled row has "Run now" and "Cancel" buttons (`task_actions.rs`); an active row
//! names the worker holding the task (linked to its row on the workers page) and when it
//! claimed it.

use askama::Template;
use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::Response;
use dueq::{Task, TaskState};
use serde::Deserialize;

use super::chart::{self, Chart};
use super::notice::Notice;
use super::pages::{path, query};
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// Tasks per page.
const PAGE: usize = 50;
/// Payload characters shown in a row.
const PAYLOAD_CHARS: usize = 80;

/// `?after=`: the cursor of the page (a `next` of [`dueq::Queue::browse`]).
#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    after: Option<String>,
    /// What an action just did (the notice).
    done: Option<String>,
}

/// One live task, formatted.
#[derive(Debug)]
struct Row {
    id: String,
    key: Option<String>,
    group: Option<String>,
    priority: u8,
    /// `2/5`: attempts made (the running one included when active) of those allowed.
    attempt: String,
    due: String,
    due_rel: String,
    /// When the lease runs out (active tasks).
    lease_end: String,
    lease_rel: String,
    /// The worker holding it (active, when its claimer gave its id).
    worker: Option<String>,
    /// When the running attempt was claimed (active), and how long ago.
    claimed: String,
    claimed_rel: String,
    payload: String,
}

impl Row {
    fn new(t: Task, now_ms: u64) -> Self {
        let lease_end = t.state_at_ms.unwrap_or(0);
        let (claimed, claimed_rel) = match t.claimed_at_ms {
            Some(at) => (view::time(at), view::relative(at, now_ms)),
            None => (String::new(), "–".to_owned()),
        };
        Self {
            id: t.id.as_str().to_owned(),
            group: t.group,
            priority: t.priority,
            attempt: format!("{}/{}", t.attempt, t.max_attempts),
            due: view::time(t.due_at_ms),
            due_rel: view::relative(t.due_at_ms, now_ms),
            lease_end: view::time(lease_end),
            lease_rel: view::relative(lease_end, now_ms),
            worker: t.worker,
            claimed,
            claimed_rel,
            payload: view::short(
                &view::preview(&t.payload, 4 * PAYLOAD_CHARS).0,
                PAYLOAD_CHARS,
            ),
            key: t.key,
        }
    }
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    layout: Layout,
    csrf: String,
    queue: String,
    /// `scheduled` or `active`: which page this is.
    state: &'static str,
    /// The coming charts (scheduled page only).
    charts: Vec<Chart>,
    /// Whether this is a later page (`after` given).
    later_page: bool,
    /// This page's cursor ("" on the first), for the buttons to come back to.
    after: String,
    next: Option<String>,
    rows: Vec<Row>,
}

async fn page(
    d: Dash,
    s: Session,
    name: String,
    pq: PageQuery,
    state: TaskState,
) -> Result<Response, PageError> {
    let q = d.app.queue(&name)?;
    let after = pq.after.filter(|a| !a.is_empty());
    let (charts, now_ms) = if state == TaskState::Scheduled {
        let h = q.due_histogram().await?;
        (vec![chart::due_minutes(&h), chart::due_hours(&h)], h.now_ms)
    } else {
        (Vec::new(), view::now_ms(d.app.client()).await)
    };
    let p = q.browse(state, after.as_deref(), PAGE).await?;
    let (title, label) = match state {
        TaskState::Active => (format!("Active tasks of {name}"), "active"),
        _ => (format!("Scheduled tasks of {name}"), "scheduled"),
    };
    let mut layout = Layout::new(&d, &s, title);
    layout.flash = Notice {
        done: pq.done,
        ..Notice::default()
    }
    .text();
    Ok(render(&TasksPage {
        layout,
        csrf: s.csrf,
        queue: name,
        state: label,
        charts,
        later_page: after.is_some(),
        after: after.unwrap_or_default(),
        next: p.next,
        rows: p.tasks.into_iter().map(|t| Row::new(t, now_ms)).collect(),
    }))
}

/// `/ui/queues/{queue}/scheduled?after=`: what falls due when (charts), then the scheduled
/// tasks in due order, 50 a page.
pub(super) async fn scheduled(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    page(d, s, path(p)?, query(q)?, TaskState::Scheduled).await
}

/// `/ui/queues/{queue}/active?after=`: tasks held by workers, by lease deadline, 50 a page.
pub(super) async fn active(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Response, PageError> {
    page(d, s, path(p)?, query(q)?, TaskState::Active).await
}
