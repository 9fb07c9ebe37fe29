//! `dueq serve`: the HTTP API (crate `dueq-server`) on `--listen`, against `--redis` or, by
//! default, an embedded `redis-server` it starts, supervises and stops.
//!
//! Shutdown order on SIGINT/SIGTERM: stop accepting, end waiting claims, finish in-flight
//! requests, then stop the embedded Redis (so no request loses its Redis mid-way).

use anyhow::{Context, Result, bail};
use dueq_server::{AppState, Tokens};
use tokio::net::TcpListener;

use crate::args::ServeArgs;
use crate::embedded::EmbeddedRedis;

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
    let (url, embedded) = match redis {
        Some(u) => (u.to_owned(), None),
        None => {
            let e = EmbeddedRedis::start(Some(&a.data_dir)).await?;
            // the CLI (dueq webhook, dueq stats, ...) reaches this Redis with --redis URL
            eprintln!("dueq serve: embedded Redis at {}", e.url());
            (e.url().to_owned(), Some(e))
        }
    };
    let result = serve(&url, replicas, a, tokens).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn serve(url: &str, replicas: u8, a: &ServeArgs, tokens: Tokens) -> Result<()> {
    let client = dueq::Client::builder(url)
        .payload_limit_bytes(a.payload_limit_bytes)
        .replicas(replicas)
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let listener = TcpListener::bind(&a.listen)
        .await
        .with_context(|| format!("listening on {}", a.listen))?;
    let addr = listener.local_addr()?;
    if !tokens.enabled() && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "no tokens configured: the API is open to anyone who can reach it");
    }
    let state = AppState::builder(client)
        .tokens(tokens)
        .protect_metrics(a.metrics_auth)
        .heartbeat_ms(a.heartbeat_ms)
        .build();
    eprintln!("dueq serve: listening on http://{addr}");
    dueq_server::serve(listener, state, crate::shutdown_signal()).await?;
    eprintln!("dueq serve: stopped");
    Ok(())
}
