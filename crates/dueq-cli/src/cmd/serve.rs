//! `dueq serve`: the HTTP API (crate `dueq-server`) on `--listen`, against `--redis` or, by
//! default, an embedded `redis-server` it starts, supervises and stops.
//!
//! With `--postgres URL` it also runs the outbox relay and reconciler (the code of `dueq
//! relay`, [`super::relay::Outbox`]) on the server's client, so their `dueq_outbox_*`
//! metrics are on this server's `/metrics`, and `/readyz` checks the database
//! (`checks.postgres`).
//!
//! Shutdown order on SIGINT/SIGTERM: stop accepting, end waiting claims, finish in-flight
//! requests, and meanwhile let the relay finish its round (at most [`RELAY_STOP`], after which
//! its open batch is rolled back and taken again by the next relay); then stop the embedded
//! Redis (so no request and no relay round loses its Redis mid-way).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use dueq_server::{AppState, HttpOptions, Tokens};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::relay::Outbox;
use crate::args::ServeArgs;
use crate::embedded::EmbeddedRedis;

/// Longest wait for the relay's round in flight after the shutdown signal.
const RELAY_STOP: Duration = Duration::from_secs(15);

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(redis: Option<&str>, replicas: u8, a: &ServeArgs) -> Result<()> {
    let mut tokens = Tokens::from_env();
    // a variable or file that expands to nothing must not leave the API open without a word
    if std::env::var_os(dueq_server::auth::TOKENS_ENV).is_some() && !tokens.enabled() {
        bail!(
            "{} is set but holds no token: refusing to start with an open API (unset it to run without tokens)",
            dueq_server::auth::TOKENS_ENV
        );
    }
    if let Some(f) = &a.tokens_file {
        let from_file =
            Tokens::from_file(f).with_context(|| format!("reading tokens from {}", f.display()))?;
        if !from_file.enabled() {
            bail!("{} holds no token (one per line)", f.display());
        }
        tokens = tokens.merge(from_file);
    }
    dueq::validate_heartbeat_ms(a.heartbeat_ms).context("--heartbeat-ms")?;
    if a.metrics_auth && !tokens.enabled() {
        bail!("--metrics-auth needs tokens (DUEQ_TOKENS or --tokens-file)");
    }
    let outbox = a
        .postgres
        .as_deref()
        .map(|url| Outbox::prepare(url, &a.outbox))
        .transpose()?;
    let (url, embedded) = match redis {
        Some(u) => (u.to_owned(), None),
        None => {
            let e = EmbeddedRedis::start(Some(&a.data_dir)).await?;
            // the other commands find it by the URL file it keeps in the data directory
            let from = if std::env::var_os(crate::embedded::DATA_DIR_ENV).is_none()
                && a.data_dir == std::path::Path::new(crate::embedded::DEFAULT_DATA_DIR)
            {
                "from this directory".to_owned()
            } else {
                let dir = a.data_dir.display();
                format!("with {}={dir}", crate::embedded::DATA_DIR_ENV)
            };
            crate::logging::status(
                "INFO",
                &format!(
                    "dueq serve: embedded Redis at {} (dueq commands run {from} without --redis \
                     use it)",
                    e.url()
                ),
            );
            (e.url().to_owned(), Some(e))
        }
    };
    let result = serve(&url, replicas, a, tokens, outbox).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn serve(
    url: &str,
    replicas: u8,
    a: &ServeArgs,
    tokens: Tokens,
    outbox: Option<Outbox>,
) -> Result<()> {
    let listener = TcpListener::bind(&a.listen)
        .await
        .with_context(|| format!("listening on {}", a.listen))?;
    let addr = listener.local_addr()?;
    if !tokens.enabled() && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "no tokens configured: the API is open to anyone who can reach it");
    }
    crate::logging::status(
        "INFO",
        &format!("dueq serve: bound http://{addr}; connecting to Redis (/readyz 503 until then)"),
    );
    // Until the client is connected (a Redis still loading its data set makes that wait),
    // the same socket answers /healthz 200 and /readyz 503 instead of refusing connections.
    let socket = listener.into_std()?;
    let early = TcpListener::from_std(socket.try_clone()?)?;
    let listener = TcpListener::from_std(socket)?;
    let (connected, on_connected) = tokio::sync::oneshot::channel::<()>();
    let http = HttpOptions::default()
        .header_read_timeout_ms(a.header_read_timeout_ms)
        .idle_timeout_ms(a.idle_timeout_ms)
        .max_connections(usize::try_from(a.max_http_connections).unwrap_or(usize::MAX));
    let starting = tokio::spawn(dueq_server::serve_starting(
        early,
        "connecting to Redis (it may still be loading its data set)".to_owned(),
        http,
        async move {
            let _ = on_connected.await;
        },
    ));
    let mut builder = dueq::Client::builder(url)
        .payload_limit_bytes(a.payload_limit_bytes)
        .replicas(replicas);
    if a.test_clock {
        builder = builder.test_clock();
    }
    let client = builder
        .connect()
        .await
        .with_context(|| format!("connecting to {}", dueq::redact_url(url)));
    let _ = connected.send(());
    match starting.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the start-up listener failed"),
        Err(e) => tracing::warn!(error = %e, "the start-up listener task failed"),
    }
    let client = client?;
    let mut builder = AppState::builder(client)
        .tokens(tokens)
        .protect_metrics(a.metrics_auth)
        .heartbeat_ms(a.heartbeat_ms)
        .http(http);
    if let Some(o) = &outbox {
        let pool = o.pool.clone();
        builder = builder.readiness_check("postgres", move || {
            let pool = pool.clone();
            async move { dueq_outbox::postgres_readiness(&pool).await }
        });
    }
    let state = builder.build();
    // One signal stops both the API and the relay.
    let (stop, stopped) = watch::channel(false);
    let stop = Arc::new(stop);
    let relay = outbox.map(|o| {
        let mut stopped = stopped.clone();
        // the state's client: the relay's metrics go to this server's /metrics
        tokio::spawn(o.run("dueq serve", state.client().clone(), async move {
            // a dropped sender means serve() is gone: stop as well
            let _ = stopped.wait_for(|s| *s).await;
        }))
    });
    if state.client().test_clock().is_some() {
        crate::logging::status(
            "WARN",
            "dueq serve: TEST CLOCK on: every queue runs on a virtual clock that tests move \
             forward (dueq test-clock advance, POST /v1/test/clock); for tests only",
        );
    }
    crate::logging::status("INFO", &format!("dueq serve: listening on http://{addr}"));
    let signal = {
        let stop = stop.clone();
        async move {
            crate::shutdown_signal().await;
            stop.send_replace(true);
        }
    };
    let result = dueq_server::serve(listener, state, signal).await;
    stop.send_replace(true);
    if let Some(task) = relay {
        let abort = task.abort_handle();
        match tokio::time::timeout(RELAY_STOP, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "outbox relay task failed"),
            Err(_) => {
                tracing::warn!(
                    "outbox relay still busy {RELAY_STOP:?} after shutdown; stopping it (its \
                     open batch rolls back and is relayed again by the next relay)"
                );
                abort.abort();
            }
        }
    }
    result?;
    crate::logging::status("INFO", "dueq serve: stopped");
    Ok(())
}
