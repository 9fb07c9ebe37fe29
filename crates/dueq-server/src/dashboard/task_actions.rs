//! The scheduled-task buttons of the dashboard, on the task page and in the scheduled list:
//! `POST /ui/queues/{queue}/tasks/{id}/cancel` ([`dueq::Queue::cancel`], after a
//! confirmation step: see [`confirm`](super::confirm)) and `POST .../run-now`
//! ([`dueq::Queue::reschedule`] to now, by the Redis clock: the task keeps its id, key and
//! attempts and the next free worker takes it). A task that a worker holds is left alone
//! (409); one that is no longer scheduled gives 404. Both have passed the session gate's
//! origin and CSRF checks before they get here.

use axum::Extension;
use axum::extract::rejection::{FormRejection, PathRejection};
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use dueq::{CancelOutcome, Due, RescheduleOutcome, TaskRef, TaskState};
use serde::Deserialize;

use super::actions::form;
use super::confirm::{ConfirmPage, confirmed};
use super::pages::path;
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// Where the button was pressed and whether this is the confirmed POST.
#[derive(Debug, Deserialize)]
pub(super) struct TaskForm {
    /// `yes` on the confirmation page's POST (cancel only).
    confirm: Option<String>,
    /// `task`: back to the task page; anything else: the scheduled list.
    back: Option<String>,
    /// The scheduled list's page (its `after` cursor) to go back to.
    after: Option<String>,
}

impl TaskForm {
    fn back_to_task(&self) -> bool {
        self.back.as_deref() == Some("task")
    }

    /// The scheduled list's page the button was on, with `done` as its notice.
    fn list(&self, queue: &str, done: Option<&str>) -> String {
        let mut query = Vec::new();
        if let Some(a) = self.after.as_deref().filter(|a| !a.is_empty()) {
            query.push(format!("after={}", view::url_encode(a)));
        }
        if let Some(d) = done {
            query.push(format!("done={d}"));
        }
        let base = format!("/ui/queues/{queue}/scheduled");
        if query.is_empty() {
            base
        } else {
            format!("{base}?{}", query.join("&"))
        }
    }
}

/// The task page of task `id` in `queue` (both checked), with `done` as its notice.
fn task_page(queue: &str, id: &str, done: Option<&str>) -> String {
    let base = format!(
        "/ui/task?queue={}&by=id&value={}",
        view::url_encode(queue),
        view::url_encode(id)
    );
    match done {
        Some(d) => format!("{base}&done={d}"),
        None => base,
    }
}

fn in_progress(id: &str) -> PageError {
    PageError {
        status: StatusCode::CONFLICT,
        message: format!("task {id} is running (a worker holds its lease); it was not touched"),
    }
}

fn not_scheduled(queue: &str, id: &str) -> PageError {
    PageError::not_found(format!("no scheduled task {id} in queue {queue}"))
}

/// `POST /ui/queues/{queue}/tasks/{id}/cancel`: first the confirmation page (the task's key
/// and due time), then, with `confirm=yes`, the cancel; back to the scheduled list.
pub(super) async fn cancel(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<(String, String)>, PathRejection>,
    f: Result<Form<TaskForm>, FormRejection>,
) -> Result<Response, PageError> {
    let (queue, id) = path(p)?;
    let f = form(f)?;
    let q = d.app.queue(&queue)?;
    let target = TaskRef::id(id.as_str())?;
    if confirmed(f.confirm.as_deref()) {
        return match q.cancel(&target).await? {
            CancelOutcome::Cancelled => {
                Ok(Redirect::to(&f.list(&queue, Some("cancelled"))).into_response())
            }
            CancelOutcome::InProgress => Err(in_progress(&id)),
            _ => Err(not_scheduled(&queue, &id)),
        };
    }
    let t = match q.get(&target).await? {
        Some(t) if t.state == TaskState::Scheduled => t,
        Some(t) if t.state == TaskState::Active => return Err(in_progress(&id)),
        _ => return Err(not_scheduled(&queue, &id)),
    };
    let now = view::now_ms(d.app.client()).await;
    let mut lines = vec![format!(
        "Due {} ({}); {} of {} attempts made so far.",
        view::time(t.due_at_ms),
        view::relative(t.due_at_ms, now),
        t.attempt,
        t.max_attempts
    )];
    if let Some(k) = &t.key {
        lines.push(format!("Business key: {k}."));
    }
    lines.push("It is removed before any worker gets it and will never run.".to_owned());
    let mut fields = vec![("back", f.back.clone().unwrap_or_default())];
    if let Some(a) = f.after.clone().filter(|a| !a.is_empty()) {
        fields.push(("after", a));
    }
    let back = if f.back_to_task() {
        task_page(&queue, &id, None)
    } else {
        f.list(&queue, None)
    };
    Ok(render(&ConfirmPage {
        layout: Layout::new(&d, &s, format!("Cancel task {id}")),
        heading: format!("Cancel task {id} of {queue}?"),
        count: None,
        lines,
        action: format!("/ui/queues/{queue}/tasks/{}/cancel", view::url_encode(&id)),
        fields,
        button: Some("Cancel the task".to_owned()),
        danger: true,
        back,
        back_label: "Keep it",
    }))
}

/// `POST /ui/queues/{queue}/tasks/{id}/run-now`: due now (no confirmation: nothing is lost);
/// back where the button was.
pub(super) async fn run_now(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
    f: Result<Form<TaskForm>, FormRejection>,
) -> Result<Response, PageError> {
    let (queue, id) = path(p)?;
    let f = form(f)?;
    let q = d.app.queue(&queue)?;
    match q
        .reschedule(&TaskRef::id(id.as_str())?, Due::DelayMs(0))
        .await?
    {
        RescheduleOutcome::Rescheduled { .. } => {
            let to = if f.back_to_task() {
                task_page(&queue, &id, Some("run_now"))
            } else {
                f.list(&queue, Some("run_now"))
            };
            Ok(Redirect::to(&to).into_response())
        }
        RescheduleOutcome::InProgress => Err(in_progress(&id)),
        _ => Err(not_scheduled(&queue, &id)),
    }
}
