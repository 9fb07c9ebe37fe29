//! `POST /ui/queues/{queue}/purge` (the queue page's purge buttons): drop every task of one
//! state with [`dueq::Queue::purge`]: `scheduled` (each counted as cancelled; running tasks
//! are not touched), `dead` or `succeeded` (those kept by retention). The first POST shows
//! how many tasks there are and asks (see [`confirm`](super::confirm)); the confirmed one
//! purges for at most the action budget, 1 000 tasks per Redis call, and either goes back to
//! the queue page with the count or offers to continue with the rest.

use axum::Extension;
use axum::extract::rejection::{FormRejection, PathRejection};
use axum::extract::{Form, Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use dueq::Purge;
use serde::Deserialize;

use super::actions::form;
use super::confirm::{self, ConfirmPage, confirmed};
use super::pages::path;
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// The purge form.
#[derive(Debug, Deserialize)]
pub(super) struct PurgeForm {
    /// `scheduled`, `dead` or `succeeded`.
    state: Option<String>,
    /// `yes` on the confirmed POST.
    confirm: Option<String>,
    /// Tasks dropped by the earlier requests of this purge (a "continue").
    so_far: Option<u64>,
    /// A shorter time budget per request, ms ([`confirm::budget`]).
    budget_ms: Option<u64>,
}

fn state_of(f: &PurgeForm) -> Result<Purge, PageError> {
    match f.state.as_deref() {
        Some("scheduled") => Ok(Purge::Scheduled),
        Some("dead") => Ok(Purge::Dead),
        Some("succeeded") => Ok(Purge::Succeeded),
        other => Err(PageError::bad(format!(
            "purge \"scheduled\", \"dead\" or \"succeeded\" tasks, not {other:?}"
        ))),
    }
}

/// What a purge of `state` does, for the confirmation page.
fn effect(state: Purge) -> &'static str {
    match state {
        Purge::Scheduled => {
            "Every task waiting for its due time or a retry is dropped, each counted as \
             cancelled, ticks a schedule fired ahead included (the schedule goes on with its \
             later ticks). Running tasks are not touched."
        }
        Purge::Dead => "Every task of the dead-letter queue is deleted for good.",
        _ => "Every succeeded task kept by the queue's retention is deleted.",
    }
}

/// `POST /ui/queues/{queue}/purge`: the count and a confirm button, then the purge.
pub(super) async fn purge(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    f: Result<Form<PurgeForm>, FormRejection>,
) -> Result<Response, PageError> {
    let queue = path(p)?;
    let f = form(f)?;
    let state = state_of(&f)?;
    let q = d.app.queue(&queue)?;
    if !d.app.client().has_queue(&queue).await? {
        return Err(PageError::not_found(format!("no queue named {queue:?}")));
    }
    let name = state.as_str();
    let so_far = f.so_far.unwrap_or(0);
    let (count, lines, button) = if confirmed(f.confirm.as_deref()) {
        let r = q.purge(state, confirm::budget(&d, f.budget_ms)).await?;
        let dropped = so_far.saturating_add(r.dropped);
        if r.left == 0 {
            let to = format!("/ui/queues/{queue}?done=purged_{name}&n={dropped}");
            return Ok(Redirect::to(&to).into_response());
        }
        (
            format!("{} dropped so far, {} left", view::tasks(dropped), r.left),
            vec![
                "The purge stopped at this request's time budget; continue to drop the rest."
                    .to_owned(),
            ],
            (dropped, "Continue the purge".to_owned()),
        )
    } else {
        let st = q.stats().await?;
        let n = match state {
            Purge::Scheduled => st.scheduled,
            Purge::Dead => st.dead,
            _ => st.succeeded_kept,
        };
        let lines = vec![effect(state).to_owned()];
        if n == 0 {
            return Ok(render(&ConfirmPage {
                layout: Layout::new(&d, &s, format!("Purge {name} tasks of {queue}")),
                heading: format!("Purge {name} tasks of {queue}"),
                count: Some(format!("No {name} tasks: nothing to purge.")),
                lines,
                action: String::new(),
                fields: Vec::new(),
                button: None,
                danger: true,
                back: format!("/ui/queues/{queue}"),
                back_label: "Back to the queue",
            }));
        }
        (
            format!("{n} {name} task{}", if n == 1 { "" } else { "s" }),
            lines,
            (0, format!("Purge {}", view::tasks(n))),
        )
    };
    let (dropped, label) = button;
    let mut fields = vec![("state", name.to_owned()), ("so_far", dropped.to_string())];
    if let Some(ms) = f.budget_ms {
        fields.push(("budget_ms", ms.to_string()));
    }
    Ok(render(&ConfirmPage {
        layout: Layout::new(&d, &s, format!("Purge {name} tasks of {queue}")),
        heading: format!("Purge {name} tasks of {queue}?"),
        count: Some(count),
        lines,
        action: format!("/ui/queues/{queue}/purge"),
        fields,
        button: Some(label),
        danger: true,
        back: format!("/ui/queues/{queue}"),
        back_label: "Back to the queue",
    }))
}
