//! The dashboard's workers page (`/ui/workers`): every live worker process and server from
//! [`dueq::Client::workers`] with its language, refreshed by htmx polling like the queues
//! table. Each row has the id `worker-{id}`, so the active tasks page links a task to the row
//! of the worker holding it.

use askama::Template;
use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use dueq::WorkerInfo;

use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// One live worker, formatted.
#[derive(Debug)]
pub(super) struct WorkerRow {
    pub id: String,
    pub kind: &'static str,
    pub host: String,
    pub pid: u32,
    pub version: String,
    /// The language of its program (`rust`, `python`, `typescript`, ...).
    pub language: String,
    pub queues: Vec<String>,
    pub concurrency: u64,
    pub in_hand: u64,
    pub started: String,
    pub started_ago: String,
    pub last_seen_ago: String,
}

impl WorkerRow {
    fn new(w: WorkerInfo, now_ms: u64) -> Self {
        Self {
            started: view::time(w.started_at_ms),
            started_ago: view::relative(w.started_at_ms, now_ms),
            last_seen_ago: view::relative(w.last_seen_ms, now_ms),
            id: w.id,
            kind: w.kind.as_str(),
            host: w.host,
            pid: w.pid,
            version: w.version,
            language: w.language,
            queues: w.queues,
            concurrency: w.concurrency,
            in_hand: w.in_hand,
        }
    }
}

async fn rows(d: &Dash) -> Result<Vec<WorkerRow>, PageError> {
    let workers = d.app.client().workers().await?;
    // display only ("3.0 s ago"): the newest heartbeat is the Redis clock to within a beat,
    // and this server's clock must not make a fresh beat look like the future
    let now_ms = workers
        .iter()
        .map(|w| w.last_seen_ms)
        .max()
        .unwrap_or(0)
        .max(view::local_now_ms());
    Ok(workers
        .into_iter()
        .map(|w| WorkerRow::new(w, now_ms))
        .collect())
}

#[derive(Template)]
#[template(path = "workers.html")]
struct WorkersPage {
    layout: Layout,
    rows: Vec<WorkerRow>,
}

#[derive(Template)]
#[template(path = "workers_table.html")]
struct WorkersTable {
    rows: Vec<WorkerRow>,
}

/// `/ui/workers`: the live workers (polled).
pub(super) async fn page(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
) -> Result<Response, PageError> {
    Ok(render(&WorkersPage {
        layout: Layout::new(&d, &s, "Workers"),
        rows: rows(&d).await?,
    }))
}

/// The workers table alone (polled by `/ui/workers`).
pub(super) async fn fragment(State(d): State<Dash>) -> Result<Response, PageError> {
    Ok(render(&WorkersTable {
        rows: rows(&d).await?,
    }))
}
