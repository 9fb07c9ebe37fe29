//! The dashboard's overview at `/?after=`: the queues with their counts (live, the table
//! polled as `/ui/fragments/queues?after=`), 100 a page by name with the total and a next
//! link, reading only the page's queues (`api::queues::stats_page`), pause/resume, and the
//! task lookup form.

use askama::Template;
use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use futures_util::future::BoxFuture;
use serde::Deserialize;

use super::notice::Notice;
use super::pages::{PageResult, QueueRow, query};
use super::session::Session;
use super::{Dash, Layout, PageError, render};

/// Queues per page of the overview.
const QUEUES_PAGE: usize = 100;

/// `?after=&done=`: the page of the overview (a queue name cursor) and the notice.
#[derive(Debug, Deserialize)]
pub(super) struct OverviewQuery {
    after: Option<String>,
    done: Option<String>,
}

/// One page of queues: the rows, the number of queues, the cursor it started after and the
/// next page's.
struct QueuesPage {
    rows: Vec<QueueRow>,
    total: u64,
    after: Option<String>,
    next: Option<String>,
}

/// The page of queues after `after` (checked: a queue name), reading only its queues.
///
/// Boxed: the future of `stats_page` (down to the cluster connection code) is so deeply
/// nested that rustc's `Send` check of the handlers overflowed its recursion limit after a
/// one-line change to a handler; the box ends the check here.
fn rows(d: &Dash, after: Option<String>) -> BoxFuture<'_, Result<QueuesPage, PageError>> {
    Box::pin(async move {
        let after = after.filter(|a| !a.is_empty());
        if let Some(a) = &after {
            dueq::validate_queue_name(a).map_err(|e| PageError::bad(format!("after: {e}")))?;
        }
        let (stats, total, next) =
            crate::api::queues::stats_page(&d.app, after.as_deref(), QUEUES_PAGE).await?;
        Ok(QueuesPage {
            rows: stats.into_iter().map(QueueRow::from).collect(),
            total,
            after,
            next,
        })
    })
}

#[derive(Template)]
#[template(path = "overview.html")]
struct Overview {
    layout: Layout,
    csrf: String,
    page: QueuesPage,
}

#[derive(Template)]
#[template(path = "queues_table.html")]
struct QueuesTable {
    csrf: String,
    page: QueuesPage,
}

/// `/?after=`: the queues with their counts (live), 100 a page by name, pause/resume, and
/// the task lookup form.
pub(super) async fn overview(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    q: Result<Query<OverviewQuery>, QueryRejection>,
) -> PageResult {
    let OverviewQuery { after, done } = query(q)?;
    let mut layout = Layout::new(&d, &s, "Queues");
    layout.flash = Notice {
        done,
        ..Notice::default()
    }
    .text();
    Ok(render(&Overview {
        layout,
        csrf: s.csrf,
        page: rows(&d, after).await?,
    }))
}

/// The queues table of one page alone (polled by `/`).
pub(super) async fn queues_fragment(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    q: Result<Query<OverviewQuery>, QueryRejection>,
) -> PageResult {
    let n = query(q)?;
    Ok(render(&QueuesTable {
        csrf: s.csrf,
        page: rows(&d, n.after).await?,
    }))
}
