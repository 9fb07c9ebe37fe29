//! Reading the order trace and planning the replay (no I/O besides reading the CSV).
//!
//! # Time
//!
//! The trace timestamps are `YYYY-MM-DD HH:MM:SS` with no time zone (presumably Brazil local
//! time). They are parsed as civil (naive) date-times and converted to integer Unix seconds *as
//! if they were UTC*. The result is not the true instant, but the replay only uses differences
//! between trace times and their order, and both are preserved exactly by this choice (there is
//! no DST shift to get in the way). `--from`/`--to` values ([`parse_trace_time`]) use the same
//! convention, so a window is given in the trace's own wall-clock time.
//!
//! # What the plan contains
//!
//! Each order yields (see [`Plan::build`]):
//!
//! * at purchase: enqueue [`TaskKind::CancelUnpaid`], key `order:{id}:cancel`, due purchase +
//!   [`CANCEL_UNPAID_AFTER_S`];
//! * at purchase: enqueue [`TaskKind::ReviewReminder`], key `order:{id}:review`, due at the
//!   estimated delivery date (possibly already in the past: it then runs at once);
//! * at approval, if any: cancel key `order:{id}:cancel`;
//! * at customer delivery, if any: enqueue [`TaskKind::AutoConfirm`], key `order:{id}:confirm`,
//!   due delivery + [`AUTO_CONFIRM_AFTER_S`].
//!
//! The expected outcome comes straight from the CSV: auto-confirm and review-reminder tasks always
//! run once; a cancel-unpaid task runs unless the order was approved *strictly before* its due
//! time.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use jiff::civil::DateTime;
use jiff::fmt::strtime;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

/// Delay of a cancel-unpaid task after purchase: 30 minutes.
pub const CANCEL_UNPAID_AFTER_S: i64 = 30 * 60;

/// Delay of an auto-confirm task after customer delivery: 7 days.
pub const AUTO_CONFIRM_AFTER_S: i64 = 7 * 24 * 3600;

/// Format of every timestamp in the trace.
const TRACE_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// One row of the order trace, with timestamps as Unix seconds (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// `order_id` (32 hex characters in the real trace).
    pub order_id: String,
    /// `customer_id`.
    pub customer_id: String,
    /// `order_status` (final status: delivered, shipped, canceled, ...).
    pub status: String,
    /// `order_purchase_timestamp`.
    pub purchase_s: i64,
    /// `order_approved_at`; `None` = never approved.
    pub approved_s: Option<i64>,
    /// `order_delivered_carrier_date`; `None` = absent.
    pub delivered_carrier_s: Option<i64>,
    /// `order_delivered_customer_date`; `None` = absent.
    pub delivered_customer_s: Option<i64>,
    /// `order_estimated_delivery_date`.
    pub estimated_delivery_s: i64,
}

/// An error while reading the trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened.
    #[error("cannot open trace file {}: {source}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The CSV is malformed (I/O error, bad quoting, missing column, ...). The message carries
    /// the position.
    #[error("malformed trace CSV: {0}")]
    Csv(#[from] csv::Error),
    /// A timestamp cell does not hold `YYYY-MM-DD HH:MM:SS`.
    #[error(
        "line {line}, column `{column}`: bad timestamp `{value}` (expected YYYY-MM-DD HH:MM:SS): {source}"
    )]
    BadTimestamp {
        /// 1-based line in the file (the header is line 1).
        line: u64,
        /// Column name.
        column: &'static str,
        /// The cell as found.
        value: String,
        /// Why jiff rejected it.
        source: jiff::Error,
    },
    /// A cell that must not be empty is empty.
    #[error("line {line}, column `{column}`: value is required but the cell is empty")]
    MissingValue {
        /// 1-based line in the file (the header is line 1).
        line: u64,
        /// Column name.
        column: &'static str,
    },
    /// The same `order_id` occurs twice (its task keys would collide).
    #[error("line {line}: duplicate order_id `{order_id}` (first seen on line {first_line})")]
    DuplicateOrderId {
        /// 1-based line of the second occurrence.
        line: u64,
        /// The repeated id.
        order_id: String,
        /// 1-based line of the first occurrence.
        first_line: u64,
    },
}

/// A CSV row as it comes, before timestamp parsing. Columns are matched by header name.
#[derive(Debug, Deserialize)]
struct RawOrder<'a> {
    order_id: &'a str,
    customer_id: &'a str,
    order_status: &'a str,
    order_purchase_timestamp: &'a str,
    order_approved_at: &'a str,
    order_delivered_carrier_date: &'a str,
    order_delivered_customer_date: &'a str,
    order_estimated_delivery_date: &'a str,
}

/// Reads the trace CSV at `path`. See [`load_orders_from_reader`].
///
/// Errors other than [`TraceError::Open`] do not repeat the path; callers should add it as
/// context.
pub fn load_orders(path: impl AsRef<Path>) -> Result<Vec<Order>, TraceError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Open {
        path: path.to_owned(),
        source,
    })?;
    load_orders_from_reader(io::BufReader::new(file))
}

/// Reads a trace CSV (with header row) from `reader`, keeping the row order.
///
/// Columns are matched by name; extra columns are ignored. Empty cells mean "absent" for the
/// approval and delivery columns; `order_id`, `order_purchase_timestamp` and
/// `order_estimated_delivery_date` are required. Cells are trimmed of surrounding whitespace.
pub fn load_orders_from_reader<R: io::Read>(reader: R) -> Result<Vec<Order>, TraceError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let headers = rdr.headers()?.clone();
    let mut record = csv::StringRecord::new();
    let mut orders = Vec::new();
    let mut first_line_of: HashMap<String, u64> = HashMap::new();
    while rdr.read_record(&mut record)? {
        let line = record.position().map_or(0, csv::Position::line);
        let raw: RawOrder<'_> = record.deserialize(Some(&headers))?;
        let order = parse_order(&raw, line)?;
        if let Some(&first_line) = first_line_of.get(&order.order_id) {
            return Err(TraceError::DuplicateOrderId {
                line,
                order_id: order.order_id,
                first_line,
            });
        }
        first_line_of.insert(order.order_id.clone(), line);
        orders.push(order);
    }
    Ok(orders)
}

fn parse_order(raw: &RawOrder<'_>, line: u64) -> Result<Order, TraceError> {
    let required = |column: &'static str, value: &str| -> Result<i64, TraceError> {
        parse_cell(column, value, line)?.ok_or(TraceError::MissingValue { line, column })
    };
    if raw.order_id.is_empty() {
        return Err(TraceError::MissingValue {
            line,
            column: "order_id",
        });
    }
    Ok(Order {
        order_id: raw.order_id.to_owned(),
        customer_id: raw.customer_id.to_owned(),
        status: raw.order_status.to_owned(),
        purchase_s: required("order_purchase_timestamp", raw.order_purchase_timestamp)?,
        approved_s: parse_cell("order_approved_at", raw.order_approved_at, line)?,
        delivered_carrier_s: parse_cell(
            "order_delivered_carrier_date",
            raw.order_delivered_carrier_date,
            line,
        )?,
        delivered_customer_s: parse_cell(
            "order_delivered_customer_date",
            raw.order_delivered_customer_date,
            line,
        )?,
        estimated_delivery_s: required(
            "order_estimated_delivery_date",
            raw.order_estimated_delivery_date,
        )?,
    })
}

/// Parses one timestamp cell; empty means absent.
fn parse_cell(column: &'static str, value: &str, line: u64) -> Result<Option<i64>, TraceError> {
    if value.is_empty() {
        return Ok(None);
    }
    parse_with(TRACE_TIME_FORMAT, value)
        .map(Some)
        .map_err(|source| TraceError::BadTimestamp {
            line,
            column,
            value: value.to_owned(),
            source,
        })
}

/// Parses `value` with the strftime-style `format` (which must consume the whole input) as a
/// civil date-time, and returns its Unix seconds as if it were UTC.
fn parse_with(format: &str, value: &str) -> Result<i64, jiff::Error> {
    let parsed = strtime::parse(format, value)?;
    let dt: DateTime = if format.contains("%H") {
        parsed.to_datetime()?
    } else {
        parsed.to_date()?.to_datetime(jiff::civil::Time::midnight())
    };
    Ok(TimeZone::UTC.to_timestamp(dt)?.as_second())
}

/// A `--from`/`--to` value that is not a recognised trace time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid trace time `{value}`: expected `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` or \
     `YYYY-MM-DDTHH:MM:SS` (trace wall-clock time, no time zone)"
)]
pub struct TraceTimeError {
    /// The value given.
    pub value: String,
}

/// Parses a `--from`/`--to` value: `YYYY-MM-DD` (midnight), `YYYY-MM-DD HH:MM:SS` or
/// `YYYY-MM-DDTHH:MM:SS`, into Unix seconds with the same convention as the trace (civil time
/// read as UTC; see the module docs). Surrounding whitespace is ignored. Usable as a clap
/// `value_parser`.
pub fn parse_trace_time(value: &str) -> Result<i64, TraceTimeError> {
    let trimmed = value.trim();
    ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]
        .into_iter()
        .find_map(|format| parse_with(format, trimmed).ok())
        .ok_or_else(|| TraceTimeError {
            value: value.to_owned(),
        })
}

/// The kind of a planned task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Cancel the order if still unpaid 30 minutes after purchase.
    CancelUnpaid,
    /// Confirm receipt automatically 7 days after delivery.
    AutoConfirm,
    /// Remind the customer to review, at the estimated delivery date.
    ReviewReminder,
}

impl TaskKind {
    /// The task kind name used in the queue and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::CancelUnpaid => "cancel-unpaid",
            TaskKind::AutoConfirm => "auto-confirm",
            TaskKind::ReviewReminder => "review-reminder",
        }
    }

    /// Position of this kind: 0 cancel-unpaid, 1 auto-confirm, 2 review-reminder.
    pub fn index(self) -> usize {
        match self {
            TaskKind::CancelUnpaid => 0,
            TaskKind::AutoConfirm => 1,
            TaskKind::ReviewReminder => 2,
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task the replay enqueues, with what the trace says must happen to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTask {
    /// Kind of task.
    pub kind: TaskKind,
    /// The order it comes from.
    pub order_id: String,
    /// Queue key: `order:{order_id}:cancel`, `:confirm` or `:review`.
    pub key: String,
    /// Trace time at which it is enqueued (Unix seconds).
    pub enqueue_at_s: i64,
    /// Trace time at which it is due (Unix seconds); may be earlier than `enqueue_at_s`.
    pub due_at_s: i64,
    /// Whether it must run (exactly once). `false` only for a cancel-unpaid task whose order
    /// was approved strictly before the due time (the cancel must then succeed).
    pub expected_run: bool,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Enqueue `plan.tasks[task]`.
    Enqueue {
        /// Index into [`Plan::tasks`].
        task: usize,
    },
    /// Cancel the key of `plan.tasks[task]` (always a cancel-unpaid task). It must succeed iff
    /// the task's `expected_run` is false; otherwise the task has run (or is running) and the
    /// cancel answers not-found or in-progress.
    Cancel {
        /// Index into [`Plan::tasks`].
        task: usize,
    },
}

impl Action {
    /// Index into [`Plan::tasks`] of the task this action is about.
    #[cfg(test)]
    pub fn task(self) -> usize {
        match self {
            Action::Enqueue { task } | Action::Cancel { task } => task,
        }
    }

    /// Sort rank at equal times: enqueues before cancels.
    fn rank(self) -> u8 {
        match self {
            Action::Enqueue { .. } => 0,
            Action::Cancel { .. } => 1,
        }
    }
}

/// One operation of the replay, at a trace time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Trace time (Unix seconds).
    pub at_s: i64,
    /// What to do.
    pub action: Action,
}

/// Per-kind expectations computed from the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// Tasks enqueued.
    pub enqueued: u64,
    /// Tasks that must run.
    pub expected_runs: u64,
    /// Tasks that must be cancelled successfully (approval strictly before due; cancel-unpaid
    /// only). `expected_runs + expected_cancels == enqueued`.
    pub expected_cancels: u64,
}

/// Which orders to replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Keep orders purchased at or after this trace time (Unix seconds); `None` = no bound.
    pub from: Option<i64>,
    /// Keep orders purchased strictly before this trace time (Unix seconds); `None` = no bound.
    pub to: Option<i64>,
}

impl PlanOptions {
    /// Whether an order purchased at `purchase_s` is in the window `[from, to)`.
    pub fn contains(&self, purchase_s: i64) -> bool {
        self.from.is_none_or(|from| purchase_s >= from) && self.to.is_none_or(|to| purchase_s < to)
    }
}

/// The replay plan: tasks, time-ordered steps and expected counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Every task, grouped by order in CSV order (cancel-unpaid, review-reminder, then
    /// auto-confirm if delivered).
    pub tasks: Vec<PlannedTask>,
    /// Steps sorted by `at_s`; at equal times enqueues come before cancels, and otherwise the
    /// CSV order (then the order within a row, as in `tasks`) is kept.
    pub steps: Vec<Step>,
    /// Number of orders picked by the window.
    pub orders: usize,
    /// Rows whose approval is earlier than their purchase: their cancel step is moved to the
    /// purchase time (after the enqueue); `expected_run` still uses the raw times. (None in the
    /// real trace.)
    pub quirks: usize,
    /// Expected counts, indexed by [`TaskKind::index`].
    pub counts: [KindCounts; 3],
}

impl Plan {
    /// Builds the plan for the orders whose purchase is in the window of `options`. All events
    /// of a picked order are kept, even those after `options.to`.
    pub fn build(orders: &[Order], options: &PlanOptions) -> Plan {
        let mut plan = Plan::default();
        for order in orders.iter().filter(|o| options.contains(o.purchase_s)) {
            plan.add_order(order);
        }
        // Stable sort: equal (time, rank) keeps the CSV order.
        plan.steps
            .sort_by_key(|step| (step.at_s, step.action.rank()));
        plan
    }

    fn add_order(&mut self, order: &Order) {
        self.orders += 1;
        let id = &order.order_id;
        let cancel_due = order.purchase_s + CANCEL_UNPAID_AFTER_S;
        // Approved strictly before due ⇒ the cancel wins; at or after due ⇒ the task runs.
        let cancelled = order
            .approved_s
            .is_some_and(|approved| approved < cancel_due);
        let cancel_task = self.push_task(PlannedTask {
            kind: TaskKind::CancelUnpaid,
            order_id: id.clone(),
            key: format!("order:{id}:cancel"),
            enqueue_at_s: order.purchase_s,
            due_at_s: cancel_due,
            expected_run: !cancelled,
        });
        self.push_task(PlannedTask {
            kind: TaskKind::ReviewReminder,
            order_id: id.clone(),
            key: format!("order:{id}:review"),
            enqueue_at_s: order.purchase_s,
            due_at_s: order.estimated_delivery_s,
            expected_run: true,
        });
        if let Some(approved) = order.approved_s {
            if approved < order.purchase_s {
                self.quirks += 1;
            }
            self.steps.push(Step {
                at_s: approved.max(order.purchase_s),
                action: Action::Cancel { task: cancel_task },
            });
        }
        if let Some(delivered) = order.delivered_customer_s {
            self.push_task(PlannedTask {
                kind: TaskKind::AutoConfirm,
                order_id: id.clone(),
                key: format!("order:{id}:confirm"),
                enqueue_at_s: delivered,
                due_at_s: delivered + AUTO_CONFIRM_AFTER_S,
                expected_run: true,
            });
        }
    }

    /// Appends a task, its enqueue step and its counts; returns its index.
    fn push_task(&mut self, task: PlannedTask) -> usize {
        let index = self.tasks.len();
        let counts = &mut self.counts[task.kind.index()];
        counts.enqueued += 1;
        if task.expected_run {
            counts.expected_runs += 1;
        } else {
            counts.expected_cancels += 1;
        }
        self.steps.push(Step {
            at_s: task.enqueue_at_s,
            action: Action::Enqueue { task: index },
        });
        self.tasks.push(task);
        index
    }

    /// Expected counts for one kind.
    #[cfg(test)]
    pub fn counts(&self, kind: TaskKind) -> KindCounts {
        self.counts[kind.index()]
    }

    /// Every trace time the replay cares about: all step times and all due times (unsorted,
    /// with repeats).
    pub fn instants(&self) -> impl Iterator<Item = i64> + '_ {
        self.steps
            .iter()
            .map(|step| step.at_s)
            .chain(self.tasks.iter().map(|task| task.due_at_s))
    }

    /// `(first step time, latest step or due time)`, or `None` for an empty plan.
    #[cfg(test)]
    pub fn span_s(&self) -> Option<(i64, i64)> {
        let first = self.steps.first()?.at_s;
        let last = self.instants().max()?;
        Some((first, last))
    }

    /// The trace-to-real time mapping over [`Plan::instants`]; see [`TimeMap::new`].
    ///
    /// # Panics
    ///
    /// If the parameters are invalid (see [`TimeMap::check_params`]).
    pub fn time_map(&self, speedup: f64, max_gap_ms: f64) -> TimeMap {
        TimeMap::new(self.instants(), speedup, max_gap_ms)
    }

    /// The cancel step that lands closest (in mapped real time) to its task's due time:
    /// `(margin in ms between the two rounded offsets, index into steps)`. `None` if there is
    /// no cancel step. A small margin means the run-versus-cancel race in a real replay could
    /// go either way, so the exact-match check would be unreliable.
    pub fn min_cancel_margin_ms(&self, map: &TimeMap) -> Option<(u64, usize)> {
        self.steps
            .iter()
            .enumerate()
            .filter_map(|(index, step)| match step.action {
                Action::Cancel { task } => {
                    let due = map.offset_ms(self.tasks[task].due_at_s);
                    Some((due.abs_diff(map.offset_ms(step.at_s)), index))
                }
                Action::Enqueue { .. } => None,
            })
            .min()
    }
}

/// Invalid [`TimeMap`] parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimeMapError {
    /// The speed-up is not a finite number greater than 0.
    #[error("speed-up must be a finite number > 0, got {0}")]
    Speedup(f64),
    /// The gap cap is negative or NaN.
    #[error("max gap must be >= 0 ms (or infinite), got {0}")]
    MaxGap(f64),
}

/// Maps trace times (Unix seconds) to real-time offsets (ms) from the start of a replay.
///
/// Built from a set of instants `t0 < t1 < ...` (duplicates removed): `t0` maps to 0 and each
/// gap maps to `min((t_i - t_{i-1}) * 1000 / speedup, max_gap_ms)`. The order of instants is thus
/// kept (non-strictly after rounding to whole ms), while long idle stretches are compressed to
/// at most `max_gap_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeMap {
    instants: Vec<i64>,
    /// Unrounded offset of each instant, in ms; non-decreasing.
    offsets_ms: Vec<f64>,
    speedup: f64,
    max_gap_ms: f64,
}

impl TimeMap {
    /// Checks `speedup` (finite, > 0) and `max_gap_ms` (>= 0, `f64::INFINITY` = no cap).
    pub fn check_params(speedup: f64, max_gap_ms: f64) -> Result<(), TimeMapError> {
        if !(speedup.is_finite() && speedup > 0.0) {
            return Err(TimeMapError::Speedup(speedup));
        }
        if max_gap_ms.is_nan() || max_gap_ms < 0.0 {
            return Err(TimeMapError::MaxGap(max_gap_ms));
        }
        Ok(())
    }

    /// Builds the map over `instants` (any order, repeats allowed).
    ///
    /// # Panics
    ///
    /// If [`TimeMap::check_params`] rejects `speedup` or `max_gap_ms`; check user input with it
    /// first.
    pub fn new(instants: impl IntoIterator<Item = i64>, speedup: f64, max_gap_ms: f64) -> TimeMap {
        if let Err(err) = TimeMap::check_params(speedup, max_gap_ms) {
            panic!("TimeMap::new: {err}");
        }
        let mut instants: Vec<i64> = instants.into_iter().collect();
        instants.sort_unstable();
        instants.dedup();
        let mut offsets_ms = Vec::with_capacity(instants.len());
        let mut acc = 0.0_f64;
        for (i, &t) in instants.iter().enumerate() {
            if i > 0 {
                acc += Self::gap_ms(t - instants[i - 1], speedup, max_gap_ms);
            }
            offsets_ms.push(acc);
        }
        TimeMap {
            instants,
            offsets_ms,
            speedup,
            max_gap_ms,
        }
    }

    fn gap_ms(delta_s: i64, speedup: f64, max_gap_ms: f64) -> f64 {
        (delta_s as f64 * 1000.0 / speedup).min(max_gap_ms)
    }

    /// Real-time offset of trace time `t_s`, in ms, rounded to the nearest ms.
    ///
    /// Exact for the instants the map was built from. Between two instants the offset is
    /// interpolated linearly within that segment; before the first instant it is 0; after the
    /// last one the same rule as for a gap applies (`total_ms` + the capped scaled distance).
    /// The result is non-decreasing in `t_s`.
    pub fn offset_ms(&self, t_s: i64) -> u64 {
        round_ms(self.offset_ms_f64(t_s))
    }

    fn offset_ms_f64(&self, t_s: i64) -> f64 {
        let (Some(&first), Some(&last), Some(&total)) = (
            self.instants.first(),
            self.instants.last(),
            self.offsets_ms.last(),
        ) else {
            return 0.0;
        };
        if t_s <= first {
            return 0.0;
        }
        if t_s >= last {
            return total + Self::gap_ms(t_s - last, self.speedup, self.max_gap_ms);
        }
        match self.instants.binary_search(&t_s) {
            Ok(i) => self.offsets_ms[i],
            // first < t_s < last, so 0 < i < len: both neighbours exist.
            Err(i) => {
                let (t0, t1) = (self.instants[i - 1], self.instants[i]);
                let (o0, o1) = (self.offsets_ms[i - 1], self.offsets_ms[i]);
                o0 + (o1 - o0) * ((t_s - t0) as f64 / (t1 - t0) as f64)
            }
        }
    }

    /// Real-time offset of the last instant, in ms (0 for an empty map).
    pub fn total_ms(&self) -> u64 {
        round_ms(self.offsets_ms.last().copied().unwrap_or(0.0))
    }

    /// The distinct instants, sorted.
    #[cfg(test)]
    pub fn instants(&self) -> &[i64] {
        &self.instants
    }
}

/// Rounds a non-negative offset to whole ms (the `as` cast saturates; an infinite offset, only
/// possible past the last instant with no cap, becomes `u64::MAX`).
fn round_ms(ms: f64) -> u64 {
    ms.round() as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const HEADER: &str = "order_id,customer_id,order_status,order_purchase_timestamp,order_approved_at,order_delivered_carrier_date,order_delivered_customer_date,order_estimated_delivery_date\n";

    fn t(s: &str) -> i64 {
        parse_trace_time(s).unwrap()
    }

    /// Builds a CSV from rows `(id, purchase, approved, delivered, estimated)`.
    fn csv(rows: &[(&str, &str, &str, &str, &str)]) -> String {
        let mut out = HEADER.to_owned();
        for (id, purchase, approved, delivered, estimated) in rows {
            out.push_str(&format!(
                "{id},c{id},delivered,{purchase},{approved},,{delivered},{estimated}\n"
            ));
        }
        out
    }

    fn orders(rows: &[(&str, &str, &str, &str, &str)]) -> Vec<Order> {
        load_orders_from_reader(csv(rows).as_bytes()).unwrap()
    }

    fn task<'a>(plan: &'a Plan, order: &str, kind: TaskKind) -> Option<&'a PlannedTask> {
        plan.tasks
            .iter()
            .find(|task| task.order_id == order && task.kind == kind)
    }

    const EST: &str = "2018-03-20 00:00:00";

    #[test]
    fn parses_rows_and_empty_cells() {
        let text = format!(
            "{HEADER}a1,c1,shipped,2018-03-05 10:00:00,2018-03-05 10:10:00,2018-03-06 09:00:00,,2018-03-20 00:00:00\n"
        );
        let orders = load_orders_from_reader(text.as_bytes()).unwrap();
        assert_eq!(
            orders,
            vec![Order {
                order_id: "a1".into(),
                customer_id: "c1".into(),
                status: "shipped".into(),
                purchase_s: 1_520_244_000,
                approved_s: Some(1_520_244_600),
                delivered_carrier_s: Some(1_520_326_800),
                delivered_customer_s: None,
                estimated_delivery_s: 1_521_504_000,
            }]
        );
    }

    #[test]
    fn bad_timestamp_reports_line_and_column() {
        let text = csv(&[
            ("a", "2018-03-05 10:00:00", "", "", EST),
            ("b", "2018-03-05 10:00:00", "2018-03-05 25:00:00", "", EST),
        ]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        match &err {
            TraceError::BadTimestamp {
                line,
                column,
                value,
                ..
            } => {
                assert_eq!((*line, *column), (3, "order_approved_at"));
                assert_eq!(value, "2018-03-05 25:00:00");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("line 3") && message.contains("order_approved_at"));

        let text = csv(&[("a", "", "", "", EST)]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(
            err,
            TraceError::MissingValue {
                line: 2,
                column: "order_purchase_timestamp"
            }
        ));

        let text = csv(&[("a", "2018-03-05T10:00:00", "", "", EST)]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(err, TraceError::BadTimestamp { line: 2, .. }));
    }

    #[test]
    fn structural_errors() {
        let err = load_orders("/nonexistent/trace.csv").unwrap_err();
        assert!(matches!(err, TraceError::Open { .. }));
        assert!(err.to_string().contains("/nonexistent/trace.csv"));

        let err = load_orders_from_reader("order_id,customer_id\na,b\n".as_bytes()).unwrap_err();
        assert!(matches!(err, TraceError::Csv(_)), "{err}");

        let text = csv(&[
            ("a", "2018-03-05 10:00:00", "", "", EST),
            ("a", "2018-03-05 11:00:00", "", "", EST),
        ]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(
            err,
            TraceError::DuplicateOrderId {
                line: 3,
                first_line: 2,
                ..
            }
        ));
    }

    #[test]
    fn load_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.csv");
        std::fs::write(&path, csv(&[("a", "2018-03-05 10:00:00", "", "", EST)])).unwrap();
        assert_eq!(load_orders(&path).unwrap().len(), 1);
    }

    #[test]
    fn trace_time_arguments() {
        assert_eq!(t("1970-01-01"), 0);
        assert_eq!(t("1970-01-02 00:00:01"), 86_401);
        assert_eq!(t("1970-01-02T00:00:01"), 86_401);
        assert_eq!(t(" 2018-03-05 "), 1_520_208_000);
        for bad in [
            "",
            "2018-03",
            "2018-03-05 10:00",
            "2018-02-30",
            "yesterday",
            "2018-03-05Z",
        ] {
            let err = parse_trace_time(bad).unwrap_err();
            assert!(err.to_string().contains("YYYY-MM-DD"), "{err}");
        }
    }

    #[test]
    fn cancel_unpaid_outcomes() {
        let orders = orders(&[
            // approved 29:59 after purchase: strictly before due ⇒ cancelled.
            (
                "before",
                "2018-03-05 10:00:00",
                "2018-03-05 10:29:59",
                "",
                EST,
            ),
            // approved exactly at due ⇒ runs.
            ("at", "2018-03-05 10:00:00", "2018-03-05 10:30:00", "", EST),
            // approved after due ⇒ runs.
            (
                "after",
                "2018-03-05 10:00:00",
                "2018-03-06 10:00:00",
                "",
                EST,
            ),
            // never approved ⇒ runs, no cancel step.
            ("never", "2018-03-05 10:00:00", "", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let expected = [
            ("before", false),
            ("at", true),
            ("after", true),
            ("never", true),
        ];
        for (id, runs) in expected {
            let task = task(&plan, id, TaskKind::CancelUnpaid).unwrap();
            assert_eq!(task.expected_run, runs, "{id}");
            assert_eq!(task.key, format!("order:{id}:cancel"));
            assert_eq!(task.enqueue_at_s, t("2018-03-05 10:00:00"));
            assert_eq!(task.due_at_s, t("2018-03-05 10:30:00"));
        }
        let cancels: Vec<(i64, &str)> = plan
            .steps
            .iter()
            .filter_map(|step| match step.action {
                Action::Cancel { task } => Some((step.at_s, plan.tasks[task].order_id.as_str())),
                Action::Enqueue { .. } => None,
            })
            .collect();
        assert_eq!(
            cancels,
            vec![
                (t("2018-03-05 10:29:59"), "before"),
                (t("2018-03-05 10:30:00"), "at"),
                (t("2018-03-06 10:00:00"), "after"),
            ]
        );
        assert_eq!(
            plan.counts(TaskKind::CancelUnpaid),
            KindCounts {
                enqueued: 4,
                expected_runs: 3,
                expected_cancels: 1
            }
        );
        assert_eq!(
            plan.counts(TaskKind::ReviewReminder),
            KindCounts {
                enqueued: 4,
                expected_runs: 4,
                expected_cancels: 0
            }
        );
        assert_eq!(plan.counts(TaskKind::AutoConfirm), KindCounts::default());
        assert_eq!((plan.orders, plan.quirks), (4, 0));
    }

    #[test]
    fn auto_confirm_and_review_reminder() {
        let orders = orders(&[
            (
                "d",
                "2018-03-05 10:00:00",
                "2018-03-05 10:05:00",
                "2018-03-09 15:00:00",
                // estimated before purchase: due in the past, still runs.
                "2018-03-01 00:00:00",
            ),
            ("nd", "2018-03-05 11:00:00", "2018-03-05 11:05:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let confirm = task(&plan, "d", TaskKind::AutoConfirm).unwrap();
        assert_eq!(confirm.key, "order:d:confirm");
        assert_eq!(confirm.enqueue_at_s, t("2018-03-09 15:00:00"));
        assert_eq!(confirm.due_at_s, t("2018-03-16 15:00:00"));
        assert!(confirm.expected_run);
        assert!(task(&plan, "nd", TaskKind::AutoConfirm).is_none());

        let review = task(&plan, "d", TaskKind::ReviewReminder).unwrap();
        assert_eq!(review.key, "order:d:review");
        assert_eq!(review.enqueue_at_s, t("2018-03-05 10:00:00"));
        assert_eq!(review.due_at_s, t("2018-03-01"));
        assert!(review.expected_run);

        assert_eq!(plan.counts(TaskKind::AutoConfirm).enqueued, 1);
        assert_eq!(plan.counts(TaskKind::AutoConfirm).expected_runs, 1);
        assert_eq!(plan.counts(TaskKind::ReviewReminder).expected_runs, 2);
        assert_eq!(plan.tasks.len(), 5);
        // 5 enqueues + 2 cancels, sorted by time.
        assert_eq!(plan.steps.len(), 7);
        assert!(plan.steps.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        assert_eq!(
            plan.span_s(),
            Some((t("2018-03-05 10:00:00"), t("2018-03-20")))
        );
    }

    #[test]
    fn window_filtering() {
        let orders = orders(&[
            ("early", "2018-03-04 23:59:59", "", "", EST),
            (
                "first",
                "2018-03-05 00:00:00",
                "2018-03-09 00:00:00",
                "2018-03-15 12:00:00",
                EST,
            ),
            ("last", "2018-03-06 23:59:59", "", "", EST),
            ("late", "2018-03-07 00:00:00", "", "", EST),
        ]);
        let window = PlanOptions {
            from: Some(t("2018-03-05")),
            to: Some(t("2018-03-07")),
        };
        let plan = Plan::build(&orders, &window);
        assert_eq!(plan.orders, 2);
        let ids: Vec<&str> = plan.tasks.iter().map(|t| t.order_id.as_str()).collect();
        assert_eq!(ids, ["first", "first", "first", "last", "last"]);
        // Events after `to` are kept: approval on 03-09, delivery on 03-15.
        assert!(plan.steps.iter().any(|s| s.at_s == t("2018-03-09")));
        assert!(
            plan.steps
                .iter()
                .any(|s| s.at_s == t("2018-03-15 12:00:00"))
        );

        let open_end = PlanOptions {
            from: Some(t("2018-03-06")),
            to: None,
        };
        assert_eq!(Plan::build(&orders, &open_end).orders, 2);
        let open_start = PlanOptions {
            from: None,
            to: Some(t("2018-03-05")),
        };
        assert_eq!(Plan::build(&orders, &open_start).orders, 1);
        assert_eq!(Plan::build(&orders, &PlanOptions::default()).orders, 4);
    }

    #[test]
    fn equal_time_ordering() {
        let orders = orders(&[
            // Its approval coincides with the purchase of b and c.
            ("a", "2018-03-05 09:50:00", "2018-03-05 10:00:00", "", EST),
            ("b", "2018-03-05 10:00:00", "", "", EST),
            // Approved at purchase: its cancel comes after its own enqueue.
            ("c", "2018-03-05 10:00:00", "2018-03-05 10:00:00", "", EST),
            // Approval before purchase (quirk): clamped to after its enqueue.
            ("q", "2018-03-05 10:00:00", "2018-03-05 09:00:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let at_ten: Vec<(bool, &str, TaskKind)> = plan
            .steps
            .iter()
            .filter(|s| s.at_s == t("2018-03-05 10:00:00"))
            .map(|s| {
                let task = &plan.tasks[s.action.task()];
                (
                    matches!(s.action, Action::Cancel { .. }),
                    task.order_id.as_str(),
                    task.kind,
                )
            })
            .collect();
        use TaskKind::{CancelUnpaid as C, ReviewReminder as R};
        assert_eq!(
            at_ten,
            vec![
                (false, "b", C),
                (false, "b", R),
                (false, "c", C),
                (false, "c", R),
                (false, "q", C),
                (false, "q", R),
                (true, "a", C),
                (true, "c", C),
                (true, "q", C),
            ]
        );
        assert_eq!(plan.quirks, 1);
        assert!(!task(&plan, "q", C).unwrap().expected_run);
        assert!(!task(&plan, "c", C).unwrap().expected_run);
        assert!(!task(&plan, "a", C).unwrap().expected_run);
        // Every cancel comes after the enqueue of its task.
        for (i, step) in plan.steps.iter().enumerate() {
            if let Action::Cancel { task } = step.action {
                let enqueue = plan
                    .steps
                    .iter()
                    .position(|s| s.action == Action::Enqueue { task })
                    .unwrap();
                assert!(enqueue < i);
            }
        }
    }

    #[test]
    fn time_map_preserves_order_and_caps_gaps() {
        let map = TimeMap::new([100, 0, 10, 10, 3600 * 24, 3600 * 24 + 1], 10.0, 1000.0);
        assert_eq!(map.instants(), [0, 10, 100, 86_400, 86_401]);
        // 10 s → 1000 ms; 90 s → 9000 ms capped to 1000; 1 day capped; 1 s → 100 ms.
        let offsets: Vec<u64> = map.instants().iter().map(|&t| map.offset_ms(t)).collect();
        assert_eq!(offsets, [0, 1000, 2000, 3000, 3100]);
        assert_eq!(map.total_ms(), 3100);
        // Interpolation inside a segment and clamping outside.
        assert_eq!(map.offset_ms(5), 500);
        assert_eq!(map.offset_ms(55), 1500);
        assert_eq!(map.offset_ms(-5), 0);
        assert_eq!(map.offset_ms(86_402), 3200);
        assert_eq!(map.offset_ms(90_000), 4100);

        let uncapped = TimeMap::new([0, 10, 100], 10.0, f64::INFINITY);
        assert_eq!(uncapped.offset_ms(100), 10_000);
        assert_eq!(uncapped.total_ms(), 10_000);
        assert_eq!(uncapped.offset_ms(1000), 100_000);

        let empty = TimeMap::new([], 1.0, 1.0);
        assert_eq!((empty.total_ms(), empty.offset_ms(42)), (0, 0));

        assert!(TimeMap::check_params(0.0, 1.0).is_err());
        assert!(TimeMap::check_params(f64::NAN, 1.0).is_err());
        assert!(TimeMap::check_params(1.0, -1.0).is_err());
        assert!(TimeMap::check_params(1.0, f64::NAN).is_err());
        assert!(TimeMap::check_params(1.0, f64::INFINITY).is_ok());
    }

    #[test]
    fn plan_time_map_keeps_step_order() {
        let orders = orders(&[
            (
                "a",
                "2018-03-05 10:00:00",
                "2018-03-05 10:20:00",
                "2018-03-09 15:00:00",
                EST,
            ),
            ("b", "2018-03-05 10:00:01", "2018-03-05 12:00:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let map = plan.time_map(60.0, 2000.0);
        let step_offsets: Vec<u64> = plan.steps.iter().map(|s| map.offset_ms(s.at_s)).collect();
        assert!(step_offsets.windows(2).all(|w| w[0] <= w[1]));
        // Instants: 10:00:00, 10:00:01, 10:20:00, 10:30:00, 10:30:01, 12:00:00, 03-09 15:00,
        // 03-16 15:00, 03-20 00:00.
        assert_eq!(map.instants().len(), 9);
        // Two 1 s gaps of 16.67 ms (10:00:00→01 and 10:30:00→01); the six others are capped.
        assert_eq!(map.offset_ms(t("2018-03-05 10:00:01")), 17);
        assert_eq!(map.total_ms(), 2000 * 6 + 33);
        // a's cancel at 10:20 is 2000 ms before its due; b's at 12:00 is 2000 ms after.
        let (margin, step) = plan.min_cancel_margin_ms(&map).unwrap();
        assert_eq!(margin, 2000);
        assert!(matches!(plan.steps[step].action, Action::Cancel { .. }));
    }

    #[test]
    fn real_trace_counts_are_consistent() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/olist_orders_union_sample.csv"
        );
        if !Path::new(path).exists() {
            println!("skipping: trace file {path} does not exist");
            return;
        }
        let orders = load_orders(path).unwrap();
        assert_eq!(orders.len(), 24_553);
        let delivered = orders
            .iter()
            .filter(|o| o.delivered_customer_s.is_some())
            .count() as u64;
        assert_eq!(delivered, 21_588);
        let approved = orders.iter().filter(|o| o.approved_s.is_some()).count();

        let plan = Plan::build(&orders, &PlanOptions::default());
        assert_eq!(plan.orders, 24_553);
        let cancel = plan.counts(TaskKind::CancelUnpaid);
        let confirm = plan.counts(TaskKind::AutoConfirm);
        let review = plan.counts(TaskKind::ReviewReminder);
        assert_eq!(cancel.enqueued, 24_553);
        assert_eq!(
            cancel.expected_runs + cancel.expected_cancels,
            cancel.enqueued
        );
        assert_eq!(confirm.enqueued, delivered);
        assert_eq!(confirm.expected_runs, delivered);
        assert_eq!(review.enqueued, 24_553);
        assert_eq!(review.expected_runs, 24_553);
        assert_eq!(confirm.expected_cancels + review.expected_cancels, 0);
        // The data README: no approval precedes its purchase.
        assert_eq!(plan.quirks, 0);

        let cancel_steps = plan
            .steps
            .iter()
            .filter(|s| matches!(s.action, Action::Cancel { .. }))
            .count();
        assert_eq!(cancel_steps, approved);
        assert_eq!(plan.tasks.len() + cancel_steps, plan.steps.len());
        assert!(plan.steps.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        let expected_cancels = plan.tasks.iter().filter(|t| !t.expected_run).count() as u64;
        assert_eq!(expected_cancels, cancel.expected_cancels);

        let map = plan.time_map(1_000_000.0, 100.0);
        let offsets: Vec<u64> = plan.steps.iter().map(|s| map.offset_ms(s.at_s)).collect();
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }
}
