//! [`AppState`]: what every handler shares (the dueq client, tokens, metrics, limits, the
//! shutdown signal, extra readiness checks), built with [`AppStateBuilder`] from plain option
//! types: this module imports none of the modules that use the state.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use dueq::{Client, Queue};
use tokio::sync::watch;

use crate::auth::Tokens;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::options::{HttpOptions, PushOptions};

/// Room for the fields around the payload in one task's JSON (key, times, whitespace), bytes.
pub const BODY_OVERHEAD_BYTES: usize = 64 * 1024;

/// Smallest default body limit of a batch request, bytes.
pub const MIN_BATCH_BODY_BYTES: usize = 16 << 20;

/// An extra readiness check (see [`AppStateBuilder::readiness_check`]): `Ok(())` when the
/// dependency is usable, else why not.
pub type ReadinessCheck =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync>;

/// Shared server state. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    tokens: Tokens,
    protect_metrics: bool,
    body_limit_bytes: usize,
    batch_body_limit_bytes: usize,
    request_timeout_ms: u64,
    recover_interval_ms: u64,
    schedule_poll_ms: u64,
    heartbeat_ms: u64,
    push: PushOptions,
    http: HttpOptions,
    metrics: Metrics,
    shutdown: watch::Sender<bool>,
    checks: Vec<(String, ReadinessCheck)>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("client", &self.inner.client)
            .field("tokens", &self.inner.tokens)
            .field("protect_metrics", &self.inner.protect_metrics)
            .field("checks", &check_names(&self.inner.checks))
            .finish_non_exhaustive()
    }
}

fn check_names(checks: &[(String, ReadinessCheck)]) -> Vec<&str> {
    checks.iter().map(|(n, _)| n.as_str()).collect()
}

/// Builds an [`AppState`].
pub struct AppStateBuilder {
    client: Client,
    tokens: Tokens,
    protect_metrics: bool,
    batch_body_limit_bytes: Option<usize>,
    request_timeout_ms: u64,
    recover_interval_ms: u64,
    schedule_poll_ms: u64,
    heartbeat_ms: u64,
    push: PushOptions,
    http: HttpOptions,
    checks: Vec<(String, ReadinessCheck)>,
}

impl std::fmt::Debug for AppStateBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppStateBuilder")
            .field("client", &self.client)
            .field("checks", &check_names(&self.checks))
            .finish_non_exhaustive()
    }
}

/// Longest wait for one extra readiness check of `/readyz`, ms.
pub const READINESS_CHECK_TIMEOUT_MS: u64 = 2_000;

/// Default time limit of a request, ms.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;

impl AppStateBuilder {
    /// Time limit of a request (reading the body included), ms; a claim gets its `wait_ms`
    /// on top. Default 30 000. Past it the answer is 408 `request_timeout` (a slow or stalled
    /// client cannot hold a connection and a handler forever).
    pub fn request_timeout_ms(mut self, ms: u64) -> Self {
        self.request_timeout_ms = ms.max(1);
        self
    }

    /// Pause between two passes of the background recoverer, ms: each pass returns the
    /// expired leases of every known queue to `scheduled` (or `dead`), so a queue nobody
    /// claims from does not keep them `active`. Default 1 000 (within 1 s of
    /// expiry); 0 turns the recoverer off. Only [`serve`](crate::serve) runs it.
    pub fn recover_interval_ms(mut self, ms: u64) -> Self {
        self.recover_interval_ms = ms;
        self
    }

    /// Longest sleep of [`serve`](crate::serve)'s schedule firer without a change
    /// notification, and how often it looks for queues that got their first schedule, ms.
    /// Default [`dueq::DEFAULT_SCHEDULE_POLL_MS`]; 0 turns firing off in this server (other
    /// workers and servers still fire).
    pub fn schedule_poll_ms(mut self, ms: u64) -> Self {
        self.schedule_poll_ms = ms;
        self
    }

    /// Time between two heartbeats of [`serve`](crate::serve), which lists the server in the
    /// live workers list (`GET /v1/workers`), ms: [`dueq::MIN_HEARTBEAT_MS`] to
    /// [`dueq::MAX_HEARTBEAT_MS`], default [`dueq::DEFAULT_HEARTBEAT_MS`]; 0 turns it off.
    /// An out-of-range value is logged by `serve` and the server is not listed (check it
    /// first with [`dueq::validate_heartbeat_ms`]).
    pub fn heartbeat_ms(mut self, ms: u64) -> Self {
        self.heartbeat_ms = ms;
        self
    }

    /// Push delivery (webhooks) settings of [`serve`](crate::serve). Default
    /// [`PushOptions::default`]: on, default backoff, settings re-read every second.
    pub fn push(mut self, push: PushOptions) -> Self {
        self.push = push;
        self
    }

    /// Connection limits of [`serve`](crate::serve): header-read and idle timeouts, most
    /// open connections. Default [`HttpOptions::default`] (10 s, 60 s, 10 000).
    pub fn http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }

    /// Adds a readiness check of another dependency (for example the PostgreSQL database of
    /// an outbox relay running in the same process). `/readyz` runs every check on each call,
    /// each for at most [`READINESS_CHECK_TIMEOUT_MS`] (no answer by then counts as a
    /// failure), reports it as `checks.<name>` (`true`/`false`) and is 503 while any fails,
    /// its `error` then `"<name>: <the check's message>"`. Redis readiness is checked as
    /// before, whatever the checks say. Default none. This keeps the server free of the
    /// dependency's client library: the caller owns the check.
    pub fn readiness_check<F, Fut>(mut self, name: impl Into<String>, check: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let check: ReadinessCheck = Arc::new(move || Box::pin(check()));
        self.checks.push((name.into(), check));
        self
    }

    /// Bearer tokens every `/v1` request must carry. Default none (the API is open).
    pub fn tokens(mut self, tokens: Tokens) -> Self {
        self.tokens = tokens;
        self
    }

    /// Require a token on `/metrics` too (when tokens are configured). Default `false`:
    /// Prometheus scrapes without credentials.
    pub fn protect_metrics(mut self, on: bool) -> Self {
        self.protect_metrics = on;
        self
    }

    /// Largest body of `POST .../tasks/batch`, bytes. Default the larger of 16 MiB and the
    /// single-task limit (payload limit + 64 KiB). Larger bodies get 413.
    pub fn batch_body_limit_bytes(mut self, n: usize) -> Self {
        self.batch_body_limit_bytes = Some(n);
        self
    }

    /// The state. Call inside a tokio runtime if long-poll claims will be served.
    pub fn build(self) -> AppState {
        let body_limit_bytes = self
            .client
            .payload_limit_bytes()
            .saturating_add(BODY_OVERHEAD_BYTES);
        let (shutdown, _) = watch::channel(false);
        let metrics = Metrics::new();
        // Components built on the client (the outbox relay) record into this server's recorder.
        let client = self.client.with_metrics_recorder(metrics.recorder());
        AppState {
            inner: Arc::new(Inner {
                batch_body_limit_bytes: self
                    .batch_body_limit_bytes
                    .unwrap_or(body_limit_bytes.max(MIN_BATCH_BODY_BYTES)),
                body_limit_bytes,
                request_timeout_ms: self.request_timeout_ms,
                recover_interval_ms: self.recover_interval_ms,
                schedule_poll_ms: self.schedule_poll_ms,
                heartbeat_ms: self.heartbeat_ms,
                push: self.push,
                http: self.http,
                client,
                tokens: self.tokens,
                protect_metrics: self.protect_metrics,
                metrics,
                shutdown,
                checks: self.checks,
            }),
        }
    }
}

impl AppState {
    /// State with defaults: no tokens, `/metrics` open.
    pub fn new(client: Client) -> Self {
        Self::builder(client).build()
    }

    /// A builder.
    pub fn builder(client: Client) -> AppStateBuilder {
        AppStateBuilder {
            client,
            tokens: Tokens::default(),
            protect_metrics: false,
            batch_body_limit_bytes: None,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            recover_interval_ms: dueq::DEFAULT_RECOVER_INTERVAL_MS,
            schedule_poll_ms: dueq::DEFAULT_SCHEDULE_POLL_MS,
            heartbeat_ms: dueq::DEFAULT_HEARTBEAT_MS,
            push: PushOptions::default(),
            http: HttpOptions::default(),
            checks: Vec::new(),
        }
    }

    /// The dueq client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The configured tokens.
    pub fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// Whether `/metrics` needs a token.
    pub fn metrics_protected(&self) -> bool {
        self.inner.protect_metrics
    }

    /// Body limit of single-task routes: the client's payload limit plus 64 KiB.
    pub fn body_limit_bytes(&self) -> usize {
        self.inner.body_limit_bytes
    }

    /// Body limit of the batch route.
    pub fn batch_body_limit_bytes(&self) -> usize {
        self.inner.batch_body_limit_bytes
    }

    /// Time limit of a request, ms (claims get their `wait_ms` on top).
    pub fn request_timeout_ms(&self) -> u64 {
        self.inner.request_timeout_ms
    }

    /// Push delivery settings.
    pub fn push_options(&self) -> PushOptions {
        self.inner.push
    }

    /// Connection limits of [`serve`](crate::serve).
    pub fn http_options(&self) -> HttpOptions {
        self.inner.http
    }

    /// Pause between two background recovery passes, ms (0: off).
    pub fn recover_interval_ms(&self) -> u64 {
        self.inner.recover_interval_ms
    }

    /// The schedule firer's poll, ms (0: this server fires no schedules).
    pub fn schedule_poll_ms(&self) -> u64 {
        self.inner.schedule_poll_ms
    }

    /// The server's heartbeat interval, ms (0: not listed).
    pub fn heartbeat_ms(&self) -> u64 {
        self.inner.heartbeat_ms
    }

    /// Starts shutting down: waiting claims return what they have (usually nothing) at once.
    /// [`serve`](crate::serve) calls this when its shutdown future completes.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// The extra readiness checks, in the order they were added.
    pub(crate) fn readiness_checks(&self) -> &[(String, ReadinessCheck)] {
        &self.inner.checks
    }

    pub(crate) fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The queue named in a path (400 for a bad name).
    pub(crate) fn queue(&self, name: &str) -> Result<Queue, ApiError> {
        Ok(self.inner.client.queue(name)?)
    }
}
