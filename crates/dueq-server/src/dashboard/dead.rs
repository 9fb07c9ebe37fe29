//! The dead-letter page of a queue (`/ui/queues/{queue}/dead?offset=`: newest first, 20 a
//! page, retry and delete per task) and its bulk form, `POST /ui/queues/{queue}/dead/bulk`:
//! retry or delete every dead task that matches the filters of [`dueq::DeadFilter`] (error
//! text, died after / before, key prefix, group), at most `limit` of them, retries spread
//! over a duration.
//!
//! A bulk action takes two POSTs (see [`confirm`](super::confirm)). The first is a dry run:
//! it pins "died before" to the Redis time of the press (unless given), counts the matches
//! with [`dueq::Queue::dead_retry_where`] in `dry_run` mode and shows "N tasks match" with a
//! confirm button; so the confirmed run acts on the tasks that were counted, not on those
//! that died since. The confirmed POST calls the library (bounded work per Redis call) again
//! and again from its cursor until the run is over, or until the action budget is spent:
//! then it shows what it did and a "continue" button that carries the cursor (and the counts
//! so far, so the limit holds over the whole run).

use std::time::Duration;

use askama::Template;
use axum::Extension;
use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use dueq::{DeadBulk, DeadBulkReport, DeadFilter, Queue};
use serde::Deserialize;
use tokio::time::Instant;

use super::actions::form;
use super::confirm::{self, ConfirmPage, confirmed};
use super::notice::Notice;
use super::pages::{PageResult, path, query};
use super::session::Session;
use super::{Dash, Layout, PageError, render, view};

/// Dead tasks per page.
const DEAD_PAGE: u64 = 20;
/// Longest one library call of a bulk run works before it hands back its cursor, ms (the
/// HTTP API's budget per request).
const CALL_BUDGET_MS: u64 = crate::api::cleanup::BULK_BUDGET_MS;

/// `?offset=` of the dead-letter page, plus the notice.
#[derive(Debug, Deserialize)]
pub(super) struct DeadQuery {
    offset: Option<u64>,
    done: Option<String>,
    n: Option<u64>,
    refused: Option<u64>,
}

/// One dead task, formatted.
#[derive(Debug)]
struct DeadRow {
    id: String,
    key: Option<String>,
    attempts: String,
    died: String,
    died_ago: String,
    error: String,
    payload: String,
}

#[derive(Template)]
#[template(path = "dead.html")]
struct DeadPage {
    layout: Layout,
    csrf: String,
    queue: String,
    total: u64,
    first: u64,
    last: u64,
    prev: Option<u64>,
    next: Option<u64>,
    rows: Vec<DeadRow>,
}

/// `/ui/queues/{queue}/dead?offset=`: the dead-letter queue, newest first, 20 a page, with
/// the bulk form.
pub(super) async fn dead(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    q: Result<Query<DeadQuery>, QueryRejection>,
) -> PageResult {
    let name = path(p)?;
    let dq = query(q)?;
    let offset = dq.offset.unwrap_or(0);
    let page = d.app.queue(&name)?.dead_list(offset, DEAD_PAGE).await?;
    let now = view::now_ms(d.app.client()).await;
    let rows: Vec<DeadRow> = page
        .tasks
        .into_iter()
        .map(|t| DeadRow {
            id: t.task.id.as_str().to_owned(),
            key: t.task.key.clone(),
            attempts: format!("{}/{}", t.task.attempt, t.task.max_attempts),
            died: view::time(t.died_at_ms),
            died_ago: view::relative(t.died_at_ms, now),
            error: view::short(t.task.last_error.as_deref().unwrap_or(""), 160),
            payload: view::short(&view::preview(&t.task.payload, 512).0, 80),
        })
        .collect();
    let mut layout = Layout::new(&d, &s, format!("Dead tasks of {name}"));
    layout.flash = Notice {
        done: dq.done,
        n: dq.n,
        refused: dq.refused,
    }
    .text();
    let shown = rows.len() as u64;
    Ok(render(&DeadPage {
        layout,
        csrf: s.csrf,
        queue: name,
        total: page.total,
        first: if shown == 0 { 0 } else { offset + 1 },
        last: offset + shown,
        prev: (offset > 0).then(|| offset.saturating_sub(DEAD_PAGE)),
        next: (offset + shown < page.total).then_some(offset + shown),
        rows,
    }))
}

/// The bulk form, as the dead-letter page sends it (empty fields count as not given) and as
/// the confirmation page sends it back (times and durations then in ms).
#[derive(Debug, Deserialize)]
pub(super) struct BulkForm {
    /// `retry` or `delete` (the button pressed).
    action: Option<String>,
    error_contains: Option<String>,
    /// A time (see [`view::parse_time_ms`]).
    died_after: Option<String>,
    died_before: Option<String>,
    key_prefix: Option<String>,
    group: Option<String>,
    /// Most tasks to act on, over the whole run.
    limit: Option<String>,
    /// A duration (see [`view::parse_duration_ms`]); retry only.
    spread: Option<String>,
    /// `yes` on the confirmed POST.
    confirm: Option<String>,
    /// Where a "continue" goes on from.
    cursor: Option<String>,
    /// Retried or deleted by the earlier requests of this run.
    done_so_far: Option<u64>,
    /// Retries refused by the earlier requests of this run.
    refused_so_far: Option<u64>,
    /// A shorter time budget per request, ms ([`confirm::budget`]).
    budget_ms: Option<u64>,
}

/// A bulk run, checked.
struct Bulk {
    retry: bool,
    filter: DeadFilter,
    limit: Option<u64>,
    spread_ms: u64,
    /// The form's `budget_ms`, carried to the next POST.
    budget_ms: Option<u64>,
}

/// `Some(text)` for a field that was filled in.
fn given(v: Option<&String>) -> Option<&str> {
    v.map(String::as_str).filter(|s| !s.trim().is_empty())
}

fn bad(field: &str, e: impl std::fmt::Display) -> PageError {
    PageError::bad(format!("{field}: {e}"))
}

impl Bulk {
    fn parse(f: &BulkForm) -> Result<Self, PageError> {
        let retry = match f.action.as_deref() {
            Some("retry") => true,
            Some("delete") => false,
            other => {
                return Err(PageError::bad(format!(
                    "choose \"retry\" or \"delete\", not {other:?}"
                )));
            }
        };
        let mut filter = DeadFilter::new();
        // the text filters are taken as typed: spaces may be part of an error message
        filter.error_contains = given(f.error_contains.as_ref()).map(str::to_owned);
        filter.key_prefix = given(f.key_prefix.as_ref()).map(str::to_owned);
        filter.group = given(f.group.as_ref()).map(str::to_owned);
        filter.died_after_ms = given(f.died_after.as_ref())
            .map(view::parse_time_ms)
            .transpose()
            .map_err(|e| bad("died after", e))?;
        filter.died_before_ms = given(f.died_before.as_ref())
            .map(view::parse_time_ms)
            .transpose()
            .map_err(|e| bad("died before", e))?;
        let limit = match given(f.limit.as_ref()) {
            None => None,
            Some(t) => match t.trim().parse::<u64>() {
                Ok(n) if n > 0 => Some(n),
                _ => return Err(bad("at most", format!("{t:?} is not a count of 1 or more"))),
            },
        };
        let spread_ms = match given(f.spread.as_ref()) {
            // the form has one set of fields for both buttons: a delete has nothing to spread
            Some(t) if retry => {
                let ms = view::parse_duration_ms(t).map_err(|e| bad("spread", e))?;
                if ms > dueq::MAX_SPREAD_MS {
                    return Err(bad("spread", "at most 30 days"));
                }
                ms
            }
            _ => 0,
        };
        Ok(Self {
            retry,
            filter,
            limit,
            spread_ms,
            budget_ms: f.budget_ms,
        })
    }

    fn verb(&self) -> &'static str {
        if self.retry { "Retry" } else { "Delete" }
    }

    /// One library call: counts (`dry_run`) or acts on at most `limit` tasks.
    async fn call(
        &self,
        q: &Queue,
        dry_run: bool,
        limit: Option<u64>,
        cursor: Option<&str>,
        budget: Duration,
    ) -> Result<DeadBulkReport, PageError> {
        let mut run = DeadBulk::new(self.filter.clone())
            .dry_run(dry_run)
            .spread_ms(self.spread_ms);
        run.limit = limit;
        let r = if self.retry {
            q.dead_retry_where(&run, cursor, budget).await?
        } else {
            q.dead_delete_where(&run, cursor, budget).await?
        };
        Ok(r)
    }

    /// The form fields that carry this run to the next POST.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let f = &self.filter;
        let mut out = vec![(
            "action",
            if self.retry { "retry" } else { "delete" }.to_owned(),
        )];
        let texts = [
            ("error_contains", f.error_contains.clone()),
            ("key_prefix", f.key_prefix.clone()),
            ("group", f.group.clone()),
            ("died_after", f.died_after_ms.map(|t| t.to_string())),
            ("died_before", f.died_before_ms.map(|t| t.to_string())),
            ("limit", self.limit.map(|n| n.to_string())),
            (
                "spread",
                (self.spread_ms > 0).then(|| self.spread_ms.to_string()),
            ),
            ("budget_ms", self.budget_ms.map(|ms| ms.to_string())),
        ];
        out.extend(texts.into_iter().filter_map(|(k, v)| Some((k, v?))));
        out
    }

    /// What the run does, one line each, for the confirmation page.
    fn lines(&self, pinned_before: bool) -> Vec<String> {
        let f = &self.filter;
        let mut filters = Vec::new();
        if let Some(e) = &f.error_contains {
            filters.push(format!("last error contains {e:?}"));
        }
        if let Some(k) = &f.key_prefix {
            filters.push(format!("key starts with {k:?}"));
        }
        if let Some(g) = &f.group {
            filters.push(format!("group {g:?}"));
        }
        if let Some(t) = f.died_after_ms {
            filters.push(format!("died at or after {}", view::time(t)));
        }
        if let Some(t) = f.died_before_ms {
            let note = if pinned_before {
                " (when the count was made: tasks that die later are left alone)"
            } else {
                ""
            };
            filters.push(format!("died before {}{note}", view::time(t)));
        }
        let mut lines = vec![if filters.is_empty() {
            "Filters: none (every dead task).".to_owned()
        } else {
            format!("Filters: {}.", filters.join("; "))
        }];
        if let Some(l) = self.limit {
            lines.push(format!("At most {} (oldest death first).", view::tasks(l)));
        }
        lines.push(if !self.retry {
            "They are deleted for good.".to_owned()
        } else if self.spread_ms > 0 {
            format!(
                "Each is scheduled again, attempts counted afresh, due at a time spread evenly \
                 over the next {}. A task whose business key is taken by another task (live, or \
                 in its unique window) stays dead.",
                view::duration(self.spread_ms)
            )
        } else {
            "Each is scheduled again, attempts counted afresh, due now. A task whose business \
             key is taken by another task (live, or in its unique window) stays dead."
                .to_owned()
        });
        lines
    }
}

/// `POST /ui/queues/{queue}/dead/bulk`: the dry run's count and a confirm button; then, with
/// `confirm=yes`, the run (or as much of it as fits in the action budget, and "continue").
pub(super) async fn bulk(
    State(d): State<Dash>,
    Extension(s): Extension<Session>,
    p: Result<Path<String>, PathRejection>,
    f: Result<Form<BulkForm>, FormRejection>,
) -> Result<Response, PageError> {
    let queue = path(p)?;
    let f = form(f)?;
    let mut b = Bulk::parse(&f)?;
    let q = d.app.queue(&queue)?;
    let deadline = Instant::now() + confirm::budget(&d, b.budget_ms);
    let call_budget = || {
        deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(CALL_BUDGET_MS))
    };
    let mut cursor = given(f.cursor.as_ref()).map(str::to_owned);
    let title = format!("{} dead tasks of {queue}", b.verb());
    let back = format!("/ui/queues/{queue}/dead");

    if confirmed(f.confirm.as_deref()) {
        let mut done = f.done_so_far.unwrap_or(0);
        let mut refused = f.refused_so_far.unwrap_or(0);
        loop {
            let left = match b.limit {
                Some(l) => match l.checked_sub(done.saturating_add(refused)) {
                    Some(n) if n > 0 => Some(n),
                    _ => {
                        cursor = None;
                        break;
                    }
                },
                None => None,
            };
            let r = b
                .call(&q, false, left, cursor.as_deref(), call_budget())
                .await?;
            done = done.saturating_add(r.done);
            refused = refused.saturating_add(r.conflicts);
            cursor = r.cursor;
            if b.limit.is_some_and(|l| done.saturating_add(refused) >= l) {
                // the limit is reached: over, even if the slice left a cursor
                cursor = None;
            }
            if cursor.is_none() || Instant::now() >= deadline {
                break;
            }
        }
        let Some(c) = cursor else {
            let what = if b.retry { "retried" } else { "deleted" };
            let to = format!("{back}?done=bulk_{what}&n={done}&refused={refused}");
            return Ok(Redirect::to(&to).into_response());
        };
        let mut fields = b.fields();
        fields.extend([
            ("cursor", c),
            ("done_so_far", done.to_string()),
            ("refused_so_far", refused.to_string()),
        ]);
        let did = if b.retry { "retried" } else { "deleted" };
        let mut lines = vec![
            "The run stopped at this request's time budget; continue with the rest (same \
             filters, the limit counted over the whole run)."
                .to_owned(),
        ];
        lines.extend(b.lines(false));
        return Ok(render(&ConfirmPage {
            layout: Layout::new(&d, &s, title.clone()),
            heading: format!("{title}: not done yet"),
            count: Some(format!(
                "{} {did} so far, {refused} refused",
                view::tasks(done)
            )),
            lines,
            action: format!("/ui/queues/{queue}/dead/bulk"),
            fields,
            button: Some("Continue".to_owned()),
            danger: true,
            back,
            back_label: "Stop here",
        }));
    }

    // the dry run: pin the end of the range to now by the Redis clock (as the script would:
    // the millisecond after now), so the confirmed run acts on what is counted here
    let pinned = b.filter.died_before_ms.is_none();
    if pinned {
        b.filter.died_before_ms = Some(q.stats().await?.now_ms + 1);
    }
    let (mut matched, mut looked_at) = (0u64, 0u64);
    loop {
        let r = b
            .call(&q, true, None, cursor.as_deref(), call_budget())
            .await?;
        matched += r.matched;
        looked_at += r.looked_at;
        cursor = r.cursor;
        if cursor.is_none() || Instant::now() >= deadline {
            break;
        }
    }
    let complete = cursor.is_none();
    let mut lines = b.lines(pinned);
    let count = if complete {
        if matched == 0 {
            "No dead task matches.".to_owned()
        } else if matched == 1 {
            "1 task matches".to_owned()
        } else {
            format!("{matched} tasks match")
        }
    } else {
        lines.insert(
            0,
            format!(
                "Counting stopped at this request's time budget after looking at {looked_at} \
                 dead tasks; the run itself goes through all of them."
            ),
        );
        format!("At least {} match", view::tasks(matched))
    };
    let acts_on = b.limit.map_or(matched, |l| l.min(matched));
    let button = (matched > 0 || !complete).then(|| {
        if complete {
            format!("{} {}", b.verb(), view::tasks(acts_on))
        } else {
            format!("{} the matching tasks", b.verb())
        }
    });
    Ok(render(&ConfirmPage {
        layout: Layout::new(&d, &s, title.clone()),
        heading: format!("{title}?"),
        count: Some(count),
        lines,
        action: format!("/ui/queues/{queue}/dead/bulk"),
        fields: b.fields(),
        button,
        danger: !b.retry,
        back,
        back_label: "Back to the dead-letter queue",
    }))
}
