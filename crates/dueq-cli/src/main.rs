//! The `dueq` command-line tool: enqueue, inspect and cancel tasks, work a queue with any
//! command, and replay the Olist order trace (`dueq replay`).
//!
//! `anyhow` is used here and in the lab (`dueq-lab`) only; the libraries return typed errors.

#[macro_use]
extern crate dueq_lab;

mod args;
mod cmd;
mod embedded;
mod human;
mod logging;

use anyhow::Result;
use clap::Parser;

use args::{Cli, Command};

const DEFAULT_REDIS: &str = "redis://127.0.0.1:6379";

pub use dueq_lab::shutdown_signal;

/// The Redis to use: `--redis` / `DUEQ_REDIS_URL`, else the embedded Redis of a `dueq serve`
/// running on `./dueq-data` (or `$DUEQ_DATA_DIR`), else [`DEFAULT_REDIS`].
async fn redis_url(given: Option<&str>) -> String {
    match given {
        Some(u) => u.to_owned(),
        None => embedded::redis_url(DEFAULT_REDIS).await,
    }
}

async fn connect_with(url: Option<&str>, replicas: u8) -> Result<dueq::Client> {
    let url = &redis_url(url).await;
    let client = dueq::Client::builder(url)
        .replicas(replicas)
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("connecting to {}: {e}", dueq::redact_url(url)))?;
    // on the test clock, times shown as "in 29m" count from the clock's now
    if let Some(clock) = client.test_clock() {
        human::follow_test_clock(clock.now().await?.offset_ms);
    }
    Ok(client)
}

async fn run(cli: Cli) -> Result<()> {
    let json = cli.json;
    let redis = cli.redis.as_deref();
    let replicas = cli.replicas;
    // every command's client does durable writes when --replicas asks for them
    let connect = |url| connect_with(url, replicas);
    match &cli.command {
        Command::Serve(a) => cmd::serve::run(redis, replicas, a).await,
        Command::Enqueue(a) => cmd::tasks::enqueue(&connect(redis).await?, a, json).await,
        Command::Get(a) => cmd::tasks::get(&connect(redis).await?, a, json).await,
        Command::Cancel(a) => cmd::tasks::cancel(&connect(redis).await?, a, json).await,
        Command::Reschedule(a) => cmd::tasks::reschedule(&connect(redis).await?, a, json).await,
        Command::Stats(a) => {
            cmd::stats::stats(&connect(redis).await?, a.queue.as_deref(), json).await
        }
        Command::Pause(a) => {
            cmd::stats::pause(&connect(redis).await?, &a.queue, true, a.create, json).await
        }
        Command::Resume(a) => {
            cmd::stats::pause(&connect(redis).await?, &a.queue, false, false, json).await
        }
        Command::Dead(d) => cmd::dead::run(&connect(redis).await?, d, json).await,
        Command::Purge(a) => cmd::cleanup::purge(&connect(redis).await?, a, json).await,
        Command::Queue(args::QueueCommand::Delete { queue, force }) => {
            cmd::cleanup::delete_queue(&connect(redis).await?, queue, *force, json).await
        }
        Command::Webhook(w) => cmd::webhook::run(&connect(redis).await?, w, json).await,
        Command::Settings(s) => cmd::settings::run(&connect(redis).await?, s, json).await,
        Command::Schedule(s) => cmd::schedule::run(&connect(redis).await?, s, json).await,
        Command::Workers(a) => {
            cmd::workers::list(&connect(redis).await?, a.queue.as_deref(), json).await
        }
        Command::TestClock(c) => cmd::test_clock::run(&connect(redis).await?, c, json).await,
        Command::Work(a) => {
            // bad queue arguments are refused before anything connects or starts
            let queues = cmd::work::queues(a)?;
            let url = redis_url(redis).await;
            cmd::work::run(connect(Some(&url)).await?, &url, a, &queues, json).await
        }
        Command::Replay(a) => cmd::replay::run(redis, a, json).await,
        Command::Relay(a) => cmd::relay::run(connect(redis).await?, a, json).await,
        Command::Chaos(a) => dueq_lab::chaos::command::run(redis, replicas, a, json).await,
        Command::ChaosWorker(a) => {
            let url = redis.ok_or_else(|| anyhow::anyhow!("chaos-worker needs --redis"))?;
            dueq_lab::chaos::worker::run(url, replicas, a).await
        }
        Command::Bench(a) => dueq_lab::bench::command(redis, a, json).await,
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // a chaos run makes Redis fail on purpose: its reconnect warnings are expected noise
    // (DUEQ_LOG=warn shows them)
    let default_log = match cli.command {
        Command::Chaos(_) | Command::ChaosWorker(_) => "error",
        // its start, failed-attempt, dead-task and stop lines (DESIGN 4.3)
        Command::Work(_) => "warn,dueq::cmd::work=info",
        _ => "warn",
    };
    // the processes that run tasks export their spans when OTEL_EXPORTER_OTLP_ENDPOINT is set
    // (the bench's workers too, to measure what tracing costs)
    let service = match cli.command {
        Command::Serve(_) => Some("dueq-serve"),
        Command::Work(_) => Some("dueq-work"),
        Command::Relay(_) => Some("dueq-relay"),
        Command::Bench(_) => Some("dueq-bench"),
        _ => None,
    };
    let export = match service.map(dueq_otel::Export::from_env).transpose() {
        Ok(e) => e.flatten(),
        Err(e) => {
            logging::init(cli.log_format, default_log, None);
            logging::status("ERROR", &format!("error: {e}"));
            std::process::exit(1);
        }
    };
    logging::init(cli.log_format, default_log, export.as_ref());
    let result = run(cli).await;
    if let Some(e) = export {
        e.shutdown().await;
    }
    if let Err(e) = result {
        logging::status("ERROR", &format!("error: {}", error_text(&e)));
        std::process::exit(1);
    }
}

/// An error and its causes joined by ": ", as `{:#}` does, leaving out a cause whose text the
/// message before it already ends with (many errors print their source themselves).
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn an_error_that_prints_its_source_shows_it_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot open x: {source}")]
        struct Open {
            source: std::io::Error,
        }
        let e = anyhow::Error::new(Open { source: io }).context("replay");
        assert_eq!(error_text(&e), "replay: cannot open x: no such file");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), "outer: inner");
    }
}
