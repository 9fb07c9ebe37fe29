//! The dashboard of `dueq serve` at `/`: server-rendered HTML (askama templates in
//! `templates/`, escaped by default), live parts refreshed by htmx polling, charts as inline
//! SVG. It is outside `/v1` and not in the OpenAPI document; all data comes from the `dueq`
//! library (`Client::queues`, `Client::workers`, `Queue::stats`, `history`, `browse`,
//! `due_histogram`, `get`, `cancel`, `reschedule`, `dead_*` (`dead_retry_where`,
//! `dead_delete_where` included), `purge`, `webhook`, `pause`, `resume`, `schedule_names`,
//! `schedule`, `pause_schedule`, `resume_schedule`, `delete_schedule`).
//!
//! Pages: `/?after=` (queues with counts, 100 a page by name, reading only the page's
//! queues; pause/resume, task lookup), `/ui/queues/{queue}` (counts, throughput and
//! lateness over the last hour, the webhook target and the newest delivery error, purge per
//! state), `/ui/queues/{queue}/dead` (the dead-letter queue, paged, with retry and delete,
//! and retry or delete in bulk by filter), `/ui/task?queue=&by=id|key&value=` (one task: run
//! now and cancel while it is scheduled, the worker holding it while it is active),
//! `/ui/workers` (live worker processes and servers, `Client::workers`),
//! `/ui/queues/{queue}/schedules?after=` (recurring schedules, 100 a page by name, with
//! pause, resume and delete),
//! `/ui/queues/{queue}/scheduled?after=` (how many tasks fall due in each of the next 60
//! minutes and 24 hours, then the scheduled tasks in due order, paged by cursor) and
//! `/ui/queues/{queue}/active?after=` (tasks held by workers, by lease deadline, each with
//! its worker and claim time). `/login` and `/logout` when tokens are configured.
//!
//! Actions are POST forms: pause and resume (`actions.rs`), a dead task's retry and delete,
//! a schedule's pause, resume and delete (`schedules.rs`), a scheduled task's run now and
//! cancel (`task_actions.rs`), bulk retry and delete of dead tasks (`dead.rs`), and purge
//! (`purge.rs`). The destructive ones (cancel, bulk, purge) answer their first POST with a
//! confirmation page (`confirm.rs`) and act only on the second.
//!
//! Security (details in `session.rs`): with tokens configured every page needs a login with
//! one of them; the session is a random id in an `HttpOnly; SameSite=Strict` cookie, looked up
//! in server memory once logged in (the token itself is never stored in the browser). Every
//! POST, tokens or not, must come from this origin (`Origin`/`Referer` = `Host`) and carry the
//! session's CSRF token (checked in constant time), else 403 and nothing changes. Every request
//! has the server's request time limit (408 past it). Pages are sent with a
//! strict Content-Security-Policy, `X-Frame-Options: DENY` and `Cache-Control: no-store`.
//!
//! The one vendored file, `htmx.min.js`, is htmx 2.0.11 (`npm pack htmx.org@2.0.11`,
//! `dist/htmx.min.js`, licence 0BSD, sha256
//! d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717), served from the binary
//! at [`HTMX_PATH`] with a year-long immutable cache header; there is no JS build step.

mod actions;
mod chart;
mod confirm;
mod dead;
mod notice;
mod overview;
mod pages;
mod purge;
mod schedules;
pub(crate) mod session;
mod task_actions;
mod tasks;
mod view;
mod workers;

use std::sync::Arc;

use askama::Template;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::error::ApiError;
use crate::state::AppState;
use session::{Session, Sessions};

/// Where the vendored htmx is served (versioned, so it can be cached for good).
pub const HTMX_PATH: &str = "/ui/static/htmx-2.0.11.min.js";

static HTMX_JS: &[u8] = include_bytes!("htmx.min.js");

/// Largest body of a dashboard POST (forms hold a token and a field or two), bytes.
const FORM_LIMIT_BYTES: usize = 16 * 1024;

/// Content-Security-Policy of every dashboard page: scripts only from this server (htmx),
/// inline styles (the page's `<style>` and htmx's indicator style), no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                   img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What the dashboard handlers share.
#[derive(Clone)]
struct Dash {
    app: AppState,
    sessions: Arc<Sessions>,
}

/// The dashboard routes, merged into [`crate::router`]; sessions live as long as the router.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let dash = Dash {
        app: state.clone(),
        sessions: Arc::default(),
    };
    let protected = Router::new()
        .route("/", get(overview::overview))
        .route("/ui/fragments/queues", get(overview::queues_fragment))
        .route("/ui/queues/{queue}", get(pages::queue))
        .route("/ui/queues/{queue}/live", get(pages::queue_live))
        .route("/ui/queues/{queue}/dead", get(dead::dead))
        .route("/ui/queues/{queue}/scheduled", get(tasks::scheduled))
        .route("/ui/queues/{queue}/active", get(tasks::active))
        .route("/ui/task", get(pages::task))
        .route("/ui/workers", get(workers::page))
        .route("/ui/fragments/workers", get(workers::fragment))
        .route("/ui/queues/{queue}/pause", post(actions::pause))
        .route("/ui/queues/{queue}/resume", post(actions::resume))
        .route("/ui/queues/{queue}/dead/{id}/retry", post(actions::retry))
        .route("/ui/queues/{queue}/dead/{id}/delete", post(actions::delete))
        .route("/ui/queues/{queue}/dead/bulk", post(dead::bulk))
        .route("/ui/queues/{queue}/purge", post(purge::purge))
        .route(
            "/ui/queues/{queue}/tasks/{id}/cancel",
            post(task_actions::cancel),
        )
        .route(
            "/ui/queues/{queue}/tasks/{id}/run-now",
            post(task_actions::run_now),
        )
        .route("/ui/queues/{queue}/schedules", get(schedules::page))
        .route(
            "/ui/queues/{queue}/schedules/{name}/pause",
            post(schedules::pause),
        )
        .route(
            "/ui/queues/{queue}/schedules/{name}/resume",
            post(schedules::resume),
        )
        .route(
            "/ui/queues/{queue}/schedules/{name}/delete",
            post(schedules::delete),
        )
        .route_layer(middleware::from_fn_with_state(dash.clone(), require_login));
    let gated = Router::new()
        .route("/login", get(actions::login_form).post(actions::login))
        .route("/logout", post(actions::logout))
        .merge(protected)
        .route_layer(middleware::from_fn_with_state(dash.clone(), session_gate))
        .with_state(dash);
    let limit = std::time::Duration::from_millis(state.request_timeout_ms());
    Router::new()
        .route(HTMX_PATH, get(htmx))
        .merge(gated)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            crate::time_limit(limit, timed_out, req, next)
        }))
        .layer(middleware::map_response(security_headers))
}

/// The 408 page of a request (a form body, say) that took longer than the time limit.
fn timed_out(limit: std::time::Duration) -> Response {
    page_error(
        StatusCode::REQUEST_TIMEOUT,
        &format!(
            "the request did not complete within {} ms",
            limit.as_millis()
        ),
    )
}

/// The vendored htmx, cached for a year (the path changes with the version).
async fn htmx() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
        ],
        HTMX_JS,
    )
        .into_response()
}

async fn security_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        // pages carry the CSRF token and live data
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// Finds (or, for a GET, starts) the request's session and puts it in the request's
/// extensions; refuses a non-GET request with 403 unless it passes the origin and CSRF
/// checks (module [`session`]). Runs before the body reaches a handler.
async fn session_gate(State(d): State<Dash>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let found = session::cookie_id(&parts.headers).and_then(|id| d.sessions.get(&id));
    let safe = parts.method == Method::GET || parts.method == Method::HEAD;
    let (sess, fresh, body) = if safe {
        match found {
            Some(s) => (s, false, body),
            None => (d.sessions.create(), true, body),
        }
    } else {
        let authority = parts.uri.authority().map(|a| a.as_str());
        if crate::origin::source(&parts.headers, authority, true)
            != crate::origin::Source::SameOrigin
        {
            return page_error(
                StatusCode::FORBIDDEN,
                "refused: this form was not sent from this dashboard (Origin/Referer check)",
            );
        }
        let Some(s) = found else {
            return page_error(
                StatusCode::FORBIDDEN,
                "refused: no valid session (it may have expired); reload the page and try again",
            );
        };
        let bytes = match axum::body::to_bytes(body, FORM_LIMIT_BYTES).await {
            Ok(b) => b,
            Err(_) => return page_error(StatusCode::PAYLOAD_TOO_LARGE, "form too large"),
        };
        let header_token = parts
            .headers
            .get(session::CSRF_HEADER)
            .map(HeaderValue::as_bytes);
        let token = header_token.or_else(|| session::form_csrf(&bytes));
        if !session::csrf_ok(&s, token) {
            return page_error(
                StatusCode::FORBIDDEN,
                "refused: missing or wrong CSRF token; reload the page and try again",
            );
        }
        (s, false, Body::from(bytes))
    };
    let id = sess.id.clone();
    parts.extensions.insert(sess);
    let mut res = next.run(Request::from_parts(parts, body)).await;
    if fresh && !res.headers().contains_key(header::SET_COOKIE) {
        res.headers_mut()
            .append(header::SET_COOKIE, session::set_cookie(&id));
    }
    res
}

/// With tokens configured, sends a visitor who has not logged in to `/login` (htmx
/// requests get 401 and `HX-Redirect`, so the whole page goes there).
async fn require_login(State(d): State<Dash>, req: Request, next: Next) -> Response {
    let logged_in = req
        .extensions()
        .get::<Session>()
        .is_some_and(|s| s.authenticated);
    if !d.app.tokens().enabled() || logged_in {
        return next.run(req).await;
    }
    if req.headers().contains_key("hx-request") {
        return (
            StatusCode::UNAUTHORIZED,
            [("hx-redirect", "/login")],
            "log in first",
        )
            .into_response();
    }
    Redirect::to("/login").into_response()
}

/// What every page shows around its content.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// The `<title>` (before ` · dueq`).
    pub title: String,
    /// The session's CSRF token (hidden form fields, `hx-headers`).
    pub csrf: String,
    /// Show the logout button.
    pub logout: bool,
    /// Show the navigation (not on the login form).
    pub nav: bool,
    /// A one-line notice (from a fixed list, see [`notice`]).
    pub flash: Option<String>,
    /// Path of the htmx script.
    pub htmx: &'static str,
    /// The Redis runs the test clock: every page says so.
    pub test_clock: bool,
}

impl Layout {
    fn new(d: &Dash, s: &Session, title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            csrf: s.csrf.clone(),
            logout: d.app.tokens().enabled() && s.authenticated,
            nav: true,
            flash: None,
            htmx: HTMX_PATH,
            test_clock: d.app.client().test_clock().is_some(),
        }
    }
}

/// A failure shown as an error page with its status.
#[derive(Debug)]
pub(super) struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    /// 400 with this message.
    fn bad(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404 with this message.
    fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        Self {
            status: e.status(),
            message: e.message().to_owned(),
        }
    }
}

impl From<dueq::Error> for PageError {
    fn from(e: dueq::Error) -> Self {
        ApiError::from(e).into()
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        page_error(self.status, &self.message)
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    layout: Layout,
    status: u16,
    reason: &'a str,
    message: &'a str,
}

fn page_error(status: StatusCode, message: &str) -> Response {
    let page = ErrorPage {
        layout: Layout {
            title: format!("Error {}", status.as_u16()),
            nav: true,
            htmx: HTMX_PATH,
            ..Layout::default()
        },
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or(""),
        message,
    };
    (status, render(&page)).into_response()
}

/// The rendered template, or a plain 500 if rendering failed.
fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "dashboard template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "template error").into_response()
        }
    }
}
