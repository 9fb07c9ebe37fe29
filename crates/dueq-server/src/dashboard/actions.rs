//! The dashboard's POST actions (pause, resume, retry and delete a dead task) and the login
//! and logout forms. Every request here has already passed the origin and CSRF checks of
//! [`session_gate`](super::session_gate); a refused one never reaches these handlers.

use askama::Template;
use axum::Extension;
use axum::extract::rejection::{FormRejection, PathRejection};
use axum::extract::{Form, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use dueq::{DeadRetryOutcome, TaskId};
use serde::Deserialize;

use super::pages::path;
use super::session::{self, Session};
use super::{Dash, Layout, PageError, render};

type ActionResult = Result<Response, PageError>;

/// Where pause and resume send the browser back to: `overview` (`/`, at the page after
/// `after`) or the queue page.
#[derive(Debug, Deserialize)]
pub(super) struct BackForm {
    back: Option<String>,
    after: Option<String>,
}

/// The form, or 400 naming what is wrong with it.
pub(super) fn form<T>(f: Result<Form<T>, FormRejection>) -> Result<T, PageError> {
    f.map(|Form(t)| t)
        .map_err(|e| PageError::bad(format!("bad form: {}", e.body_text())))
}

fn back_to(queue: &str, f: &BackForm, done: &str) -> Response {
    match f.back.as_deref() {
        Some("overview") => match f.after.as_deref() {
            // a queue name is URL-safe as it is
            Some(a) if dueq::validate_queue_name(a).is_ok() => {
                Redirect::to(&format!("/?after={a}&done={done}")).into_response()
            }
            _ => Redirect::to(&format!("/?done={done}")).into_response(),
        },
        _ => Redirect::to(&format!("/ui/queues/{queue}?done={done}")).into_response(),
    }
}

/// `POST /ui/queues/{queue}/pause`.
pub(super) async fn pause(
    State(d): State<Dash>,
    p: Result<Path<String>, PathRejection>,
    f: Result<Form<BackForm>, FormRejection>,
) -> ActionResult {
    let name = path(p)?;
    let f = form(f)?;
    d.app.queue(&name)?.pause().await?;
    Ok(back_to(&name, &f, "paused"))
}

/// `POST /ui/queues/{queue}/resume`.
pub(super) async fn resume(
    State(d): State<Dash>,
    p: Result<Path<String>, PathRejection>,
    f: Result<Form<BackForm>, FormRejection>,
) -> ActionResult {
    let name = path(p)?;
    let f = form(f)?;
    let q = d.app.queue(&name)?;
    q.resume().await?;
    Ok(back_to(&name, &f, "resumed"))
}

/// `POST /ui/queues/{queue}/dead/{id}/retry`: due now, attempts counted afresh.
pub(super) async fn retry(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ActionResult {
    let (name, id) = path(p)?;
    let q = d.app.queue(&name)?;
    let id = TaskId::new(id)?;
    match q.dead_retry(std::slice::from_ref(&id)).await?.first() {
        Some(DeadRetryOutcome::Retried) => {
            Ok(Redirect::to(&format!("/ui/queues/{name}/dead?done=retried")).into_response())
        }
        Some(DeadRetryOutcome::Conflict) => Err(PageError {
            status: StatusCode::CONFLICT,
            message: format!(
                "task {id} was left dead: its business key is taken by another task (live, or \
                 in its unique window)"
            ),
        }),
        _ => Err(PageError::not_found(format!(
            "no dead task {id} in queue {name}"
        ))),
    }
}

/// `POST /ui/queues/{queue}/dead/{id}/delete`: gone for good.
pub(super) async fn delete(
    State(d): State<Dash>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ActionResult {
    let (name, id) = path(p)?;
    let q = d.app.queue(&name)?;
    let id = TaskId::new(id)?;
    if q.dead_delete(std::slice::from_ref(&id)).await?.first() == Some(&true) {
        Ok(Redirect::to(&format!("/ui/queues/{name}/dead?done=deleted")).into_response())
    } else {
        Err(PageError::not_found(format!(
            "no dead task {id} in queue {name}"
        )))
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage<'a> {
    layout: Layout,
    error: Option<&'a str>,
}

fn login_page(d: &Dash, s: &Session, status: StatusCode, error: Option<&str>) -> Response {
    let mut layout = Layout::new(d, s, "Log in");
    layout.nav = false;
    let page = LoginPage { layout, error };
    (status, render(&page)).into_response()
}

/// `GET /login`: the token form (straight to `/` when no token is needed or already in).
pub(super) async fn login_form(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
) -> Response {
    if !d.app.tokens().enabled() || s.authenticated {
        return Redirect::to("/").into_response();
    }
    login_page(&d, &s, StatusCode::OK, None)
}

/// The login form's fields (`csrf` is checked by the gate).
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    token: Option<String>,
}

/// `POST /login`: a configured API token starts a logged-in session (new id, new CSRF
/// token); a wrong one gets 401 and the form again.
pub(super) async fn login(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    f: Result<Form<LoginForm>, FormRejection>,
) -> ActionResult {
    let f = form(f)?;
    if !d.app.tokens().enabled() {
        return Ok(Redirect::to("/").into_response());
    }
    let token = f.token.unwrap_or_default();
    if !d.app.tokens().accepts(token.trim().as_bytes()) {
        return Ok(login_page(
            &d,
            &s,
            StatusCode::UNAUTHORIZED,
            Some("That token is not one of the server's tokens."),
        ));
    }
    let new = d.sessions.login(&s.id);
    Ok((
        [(header::SET_COOKIE, session::set_cookie(&new.id))],
        Redirect::to("/"),
    )
        .into_response())
}

/// `POST /logout`: ends the session.
pub(super) async fn logout(State(d): State<Dash>, Extension(s): Extension<Session>) -> Response {
    d.sessions.remove(&s.id);
    let to = if d.app.tokens().enabled() {
        "/login"
    } else {
        "/"
    };
    (
        [(header::SET_COOKIE, session::clear_cookie())],
        Redirect::to(to),
    )
        .into_response()
}
