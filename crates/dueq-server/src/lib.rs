//! dueq-server: the HTTP API of dueq (`dueq serve`, DESIGN 4.2), as a library.
//!
//! [`router`] builds the axum [`Router`] (testable with `tower::ServiceExt::oneshot`);
//! [`serve`] runs it on a listener until a shutdown future completes. Everything a handler
//! needs is in [`AppState`].
//!
//! * `src/api/` holds one file per resource (`tasks`, `claim`, `queues`, `dead`, `webhook`,
//!   `schedules`, `workers`, `system`); each route is registered together with its OpenAPI description.
//! * [`dashboard`]: the operator UI at `/` (HTML, htmx; outside `/v1` and the OpenAPI document).
//! * [`error`]: every failure as a status and `{"error": {"code", "message"}}`.
//! * [`auth`]: bearer tokens (constant-time check) on `/v1`; `/healthz` and `/readyz` open.
//! * [`origin`]: cross-origin writes to `/v1` refused (403), tokens or not; on a loopback
//!   listener, requests whose `Host` is not a loopback name refused (DNS rebinding).
//! * [`push`]: push delivery (webhooks), a background task of [`serve`]; the others are the
//!   library's [`dueq::Duties`]: its [`dueq::LeaseRecoverer`] over every queue, its
//!   [`dueq::ScheduleFirer`] over every queue with schedules, and its [`dueq::Heartbeat`]
//!   (the server in `GET /v1/workers`), started and stopped in one order.
//! * `metrics`: DESIGN 4.4 names; queue numbers read from Redis on scrape.
//! * payloads: stored as the JSON text sent, shown through [`dueq::json`] (shared with the CLI).
//! * `options`: plain option structs the state holds ([`HttpOptions`]: connection limits).
//! * `connections`: the accept loop (hyper's HTTP/1.1 connection builder) with the
//!   header-read and idle timeouts and the connection cap.
//!
//! Waiting for due work (long-poll claims, push delivery) is the library's
//! [`dueq::DueClaimer`]; nothing here computes a sleep.
//!
//! # Example
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let client = dueq::Client::connect("redis://127.0.0.1:6379").await?;
//! let state = dueq_server::AppState::new(client);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! dueq_server::serve(listener, state, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod api;
pub mod auth;
mod connections;
pub mod dashboard;
pub mod error;
mod extract;
mod metrics;
pub mod openapi;
mod options;
pub mod origin;
pub mod push;
mod shutdown;
mod state;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

pub use auth::Tokens;
pub use dueq::DEFAULT_RECOVER_INTERVAL_MS;
pub use error::{ApiError, ErrorBody};
pub use extract::{ApiJson, ApiPath, ApiQuery};
pub use options::{
    DEFAULT_HEADER_READ_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_MAX_CONNECTIONS, HttpOptions,
};
pub use state::{
    AppState, AppStateBuilder, BODY_OVERHEAD_BYTES, DEFAULT_REQUEST_TIMEOUT_MS,
    READINESS_CHECK_TIMEOUT_MS, ReadinessCheck,
};

/// Default listen address of `dueq serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The full router: `/v1` (cross-origin writes refused, then the token check when tokens are
/// configured), `/healthz`, `/readyz`, `/metrics`, `/openapi.json`, and the [`dashboard`]. Unknown paths get 404 and
/// wrong methods 405, both with the error body. Every request (body included) has
/// [`request_timeout_ms`](AppStateBuilder::request_timeout_ms) to complete, a claim its
/// `wait_ms` on top; past it the answer is 408.
pub fn router(state: AppState) -> Router {
    let limit = Duration::from_millis(state.request_timeout_ms());
    let claim_limit = limit + Duration::from_millis(api::claim::MAX_WAIT_MS);
    let (batch, _) = api::batch_routes().split_for_parts();
    let batch = batch
        .layer(DefaultBodyLimit::max(state.batch_body_limit_bytes()))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            time_limit(limit, api_timeout, req, next)
        }));
    let (claim, _) = api::claim_routes().split_for_parts();
    let claim = claim
        .layer(middleware::from_fn(empty_claim_body))
        .layer(DefaultBodyLimit::max(state.body_limit_bytes()))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            time_limit(claim_limit, api_timeout, req, next)
        }));
    let (v1, _) = api::v1_routes().split_for_parts();
    let v1 = v1
        .layer(DefaultBodyLimit::max(state.body_limit_bytes()))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            time_limit(limit, api_timeout, req, next)
        }))
        .merge(batch)
        .merge(claim)
        .route_layer(middleware::from_fn_with_state(
            state.tokens().clone(),
            auth::require_token,
        ))
        .route_layer(middleware::from_fn(origin::same_origin_writes));
    let (system, _) = api::system_routes().split_for_parts();
    let system = system.layer(middleware::from_fn(move |req: Request, next: Next| {
        time_limit(limit, api_timeout, req, next)
    }));
    Router::new()
        .merge(v1)
        .merge(system)
        .merge(dashboard::routes(&state))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this path",
            )
        })
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            request_metrics,
        ))
        .with_state(state)
}

/// Records each answered request of a known route in `http_server_request_duration_seconds`.
async fn request_metrics(
    axum::extract::State(st): axum::extract::State<AppState>,
    route: axum::extract::MatchedPath,
    req: Request,
    next: Next,
) -> Response {
    // a method the HTTP conventions do not name is `_OTHER`, so no request adds a series
    let method = match req.method().as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS" | "TRACE"
        | "CONNECT") => m,
        _ => "_OTHER",
    }
    .to_owned();
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    st.metrics().http_request(
        &method,
        route.as_str(),
        res.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    res
}

/// A claim sent with no body and no `Content-Type` is read as `{}` (every field of a claim
/// is optional), instead of the 415 that a JSON body without its content type gets.
async fn empty_claim_body(mut req: Request, next: Next) -> Response {
    use axum::body::{Body, HttpBody};
    if !req.headers().contains_key(header::CONTENT_TYPE)
        && req.body().size_hint().exact() == Some(0)
    {
        let h = req.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.remove(header::CONTENT_LENGTH);
        *req.body_mut() = Body::from("{}");
    }
    next.run(req).await
}

/// Answers with `timed_out(limit)` (a 408) when the request (body included) takes longer
/// than `limit`. The one time limit of every route group (the dashboard's answer is a page).
pub(crate) async fn time_limit(
    limit: Duration,
    timed_out: fn(Duration) -> Response,
    req: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(res) => res,
        Err(_) => timed_out(limit),
    }
}

/// 408 `request_timeout` with the error body.
fn api_timeout(limit: Duration) -> Response {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request did not complete within {} ms",
            limit.as_millis()
        ),
    )
    .into_response()
}

/// Time a connection may stay open after the shutdown signal beyond the request time limit
/// (room to send the 408 of a request cut by it), ms.
const SHUTDOWN_MARGIN_MS: u64 = 1000;

/// What a server answers before its state exists (`dueq serve` while its first connection to
/// Redis waits, for example for a Redis that is still loading its data set after a restart):
/// `/healthz` 200 (alive) and `/readyz` 503 naming `why`, every other path 503
/// `redis_unavailable`, so probes see "alive, not ready" instead of a refused connection.
/// Serves `listener` (with the connection limits `http`) until `until` completes, then lets
/// requests in flight finish.
///
/// # Errors
/// None in practice: a failed accept is logged and retried.
pub async fn serve_starting(
    listener: tokio::net::TcpListener,
    why: String,
    http: HttpOptions,
    until: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ready = api::system::Ready {
        ready: false,
        redis: false,
        scripts: false,
        eviction_policy: None,
        eviction_safe: false,
        checks: Default::default(),
        error: Some(why.clone()),
        test_clock: None,
    };
    let ready = axum::Json(ready);
    let app = Router::new()
        .route("/healthz", axum::routing::get(api::system::healthz))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let r = ready.clone();
                async move { (StatusCode::SERVICE_UNAVAILABLE, r) }
            }),
        )
        .fallback(move || {
            let why = why.clone();
            async move {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable", why)
                    .into_response()
            }
        });
    connections::run(listener, app, http, until).await;
    Ok(())
}

/// Serves [`router`] on `listener` until `shutdown` completes, then stops accepting, ends
/// waiting claims at once (they answer with what they have) and waits for in-flight requests
/// to finish, for at most [`request_timeout_ms`](AppStateBuilder::request_timeout_ms) + 1 s:
/// connections still open then (a client that stalls sending a request head or reading an
/// answer) are closed. While it runs, a background task recovers expired leases and expired
/// tasks ([`dueq::LeaseRecoverer`]: the queues the recovery index says are due, every
/// [`recover_interval_ms`](AppStateBuilder::recover_interval_ms), and a slow sweep of every
/// queue); it is stopped
/// (its call in flight finished) before this returns. The server lists itself in the live
/// workers list (`GET /v1/workers`) with a heartbeat every
/// [`heartbeat_ms`](AppStateBuilder::heartbeat_ms) and removes itself last. Push delivery ([`push`]) runs beside it and is shut
/// down too before this returns, its unfinished leases handed back. When `listener` is on a
/// loopback address, requests whose `Host` is not a loopback name get 403
/// ([`origin::loopback_hosts_only`], the DNS-rebinding guard).
///
/// Connections (HTTP/1.1) are bounded by the state's [`HttpOptions`]
/// ([`http`](AppStateBuilder::http)): a client that has not sent a complete request head
/// within the header-read timeout (default 10 s) or leaves a keep-alive connection idle past
/// the idle timeout (default 60 s) is disconnected, and at most `max_connections` (default
/// 10 000) are open at once; past that, new connections wait in the listen backlog.
///
/// # Errors
/// The I/O error of the listener's address.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = router(state.clone());
    if listener.local_addr()?.ip().to_canonical().is_loopback() {
        app = app.layer(middleware::from_fn(origin::loopback_hosts_only));
    }
    let push_load = push::PushLoad::default();
    let pusher = tokio::spawn(push::run(
        state.clone(),
        state.shutdown_rx(),
        push_load.clone(),
    ));
    let duties = server_duties(&state, push_load).start();
    let stopping = state.clone();
    let (kill, killed) = tokio::sync::watch::channel(false);
    let serving = connections::run(
        shutdown::Guarded::new(listener, killed),
        app,
        state.http_options(),
        async move {
            shutdown.await;
            stopping.begin_shutdown();
        },
    );
    let grace = Duration::from_millis(
        state
            .request_timeout_ms()
            .saturating_add(SHUTDOWN_MARGIN_MS),
    );
    let mut stopped = state.shutdown_rx();
    let bound = async move {
        if stopped.wait_for(|s| *s).await.is_ok() {
            tokio::time::sleep(grace).await;
            tracing::warn!("closing the connections still open {grace:?} after shutdown began");
            kill.send_replace(true);
        }
        // keep `kill` alive: dropping it would close every connection
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = serving => {}
        () = bound => {}
    }
    // Also when serving failed. The duties stop in their order (`dueq::duties`): lease
    // recovery and schedule firing first, then push delivery, which stops on the same signal
    // and hands its unfinished leases back, then the heartbeat, which removes the server
    // from the live workers list.
    state.begin_shutdown();
    duties
        .shutdown(async {
            if let Err(e) = pusher.await {
                tracing::error!(error = %e, "push delivery task failed");
            }
        })
        .await;
    Ok(())
}

/// The duties `serve` runs beside its routes: the [`dueq::LeaseRecoverer`] over every queue,
/// the [`dueq::ScheduleFirer`] over every queue with schedules, and the heartbeat; each one
/// off when its interval is 0.
fn server_duties(state: &AppState, push_load: push::PushLoad) -> dueq::Duties {
    let mut duties = dueq::Duties::new();
    if state.recover_interval_ms() > 0 {
        duties = duties.recover_leases(
            dueq::LeaseRecoverer::new(state.client().clone())
                .interval_ms(state.recover_interval_ms()),
        );
    }
    if state.schedule_poll_ms() > 0 {
        duties = duties.fire_schedules(
            dueq::ScheduleFirer::all_queues(state.client().clone())
                .poll_ms(state.schedule_poll_ms()),
        );
    }
    if let Some(hb) = server_heartbeat(state, push_load) {
        duties = duties.heartbeat(hb);
    }
    duties
}

/// The server's entry in the live workers list: its push delivery's queues and load.
fn server_heartbeat(state: &AppState, push_load: push::PushLoad) -> Option<dueq::Heartbeat> {
    let ms = state.heartbeat_ms();
    if ms == 0 {
        return None;
    }
    let hb = dueq::Heartbeat::new(state.client().clone(), dueq::WorkerKind::Server)
        .interval_ms(ms)
        .inspect_err(|e| tracing::error!(error = %e, "not listed among the live workers"))
        .ok()?;
    Some(hb.load(move || push_load.total()))
}
