//! The confirmation step of the dashboard's destructive actions (cancel a task, purge a
//! state, bulk retry or delete of dead tasks): the first POST of such a form only reads
//! (what the task is, how many tasks match) and answers with this page; its button POSTs the
//! same form again with `confirm=yes`, and only that changes anything. The step is on the
//! server, not a script's `confirm()`, so it holds without JavaScript and under the strict
//! Content-Security-Policy. The same page offers "continue" when a bulk run stopped at its
//! time budget.

use std::time::Duration;

use askama::Template;

use super::{Dash, Layout};

/// Longest one dashboard request works on a bulk action (a count, a retry, a purge) before it
/// answers with what it did and a "continue" button, ms; at most half the server's request
/// time limit.
const MAX_ACTION_MS: u64 = 10_000;

/// How long this request may work on a bulk action: the form's `budget_ms` when it asks for
/// less (no page sets it; a caller that wants short requests may, down to 0: one bounded
/// Redis call per request, then "continue"), else the most, [`MAX_ACTION_MS`] or half the
/// request time limit.
pub(super) fn budget(d: &Dash, asked_ms: Option<u64>) -> Duration {
    let most = (d.app.request_timeout_ms() / 2).clamp(1, MAX_ACTION_MS);
    Duration::from_millis(asked_ms.map_or(most, |a| a.min(most)))
}

/// Whether a form's `confirm` field says go.
pub(super) fn confirmed(field: Option<&str>) -> bool {
    field == Some("yes")
}

/// A confirmation (or "continue") page.
#[derive(Template)]
#[template(path = "confirm.html")]
pub(super) struct ConfirmPage {
    pub layout: Layout,
    /// What is about to happen, e.g. `Retry dead tasks of orders`.
    pub heading: String,
    /// The count to check before going on (`#confirm-count`), e.g. `3 tasks match`.
    pub count: Option<String>,
    /// What else to know (filters, effects), one paragraph each.
    pub lines: Vec<String>,
    /// Where the button POSTs.
    pub action: String,
    /// The form's fields besides `csrf` and `confirm=yes`.
    pub fields: Vec<(&'static str, String)>,
    /// The button's label; no button when there is nothing to do.
    pub button: Option<String>,
    /// A destructive action (red button) rather than a harmless one.
    pub danger: bool,
    /// Where "back" leads.
    pub back: String,
    /// The back link's label.
    pub back_label: &'static str,
}
