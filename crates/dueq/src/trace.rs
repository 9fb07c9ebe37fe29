//! Trace context that survives the delay: the producer's W3C trace context goes into a task's
//! headers at enqueue, and each run is an OpenTelemetry consumer span.
//!
//! The spans are `tracing` spans of target [`SPAN_TARGET`], turned into OpenTelemetry spans
//! by a `tracing-opentelemetry` layer when the program installs one (`dueq serve`, `dueq work`
//! and `dueq relay` do when `OTEL_EXPORTER_OTLP_ENDPOINT` is set). Without such a layer, or
//! with the target filtered out, the spans are disabled and cost next to nothing.
//!
//! A run is a *child* of the producer's span when the task runs at once on its first
//! attempt ([`ClaimedTask::continues_trace`]); otherwise (delayed, retried, a schedule's
//! tick) it starts a new trace with a *link* to the producer's span, so a timer of 7 days does
//! not make a trace of 7 days.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::task::{ClaimedTask, Headers, TRACEPARENT, TRACESTATE};
use crate::worker::Outcome;

/// The `tracing` target of the consumer spans: enable it (at INFO) in the filter of the
/// layer that exports them.
pub const SPAN_TARGET: &str = "dueq::otel";

struct HeadersMut<'a>(&'a mut Headers);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value);
    }
}

struct HeadersRef<'a>(&'a Headers);

impl Extractor for HeadersRef<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k).collect()
    }
}

/// The trace context to hand on: the current `tracing` span's OpenTelemetry context when it
/// has one, else the OpenTelemetry API's current context.
pub(crate) fn current() -> Option<opentelemetry::Context> {
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        return Some(cx);
    }
    let cx = opentelemetry::Context::current();
    cx.span().span_context().is_valid().then_some(cx)
}

/// Puts the caller's trace context (`traceparent`, `tracestate`) into `headers`, unless they
/// already carry a `traceparent` or there is no active span.
pub fn inject_current(headers: &mut Headers) {
    if headers.traceparent().is_some() {
        return;
    }
    if let Some(cx) = current() {
        inject(&cx, headers);
    }
}

/// The trace context a run hands on to what it calls (`traceparent`, `tracestate`; push
/// delivery sends them, `dueq work` sets `TRACEPARENT` / `TRACESTATE`): the current span's, which
/// in a [`Worker`](crate::Worker) is the run's consumer span when spans are exported, else the
/// task's own from its headers. Empty when neither has one.
pub fn run_context(task: &ClaimedTask) -> Headers {
    let mut out = Headers::new();
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut HeadersMut(&mut out));
    } else if task.continues_trace && producer(&task.headers).is_some() {
        // no span of the run's own: what it calls joins the producer's trace only where the
        // run itself would (a delayed run handing it on would stretch that trace), and only
        // from a valid traceparent (W3C: an invalid one is dropped, with its tracestate).
        // The strings are handed on as given: written out again, the trace flags would lose
        // the bits OpenTelemetry does not know (the W3C "random" flag)
        for name in [TRACEPARENT, TRACESTATE] {
            if let Some(v) = task.headers.get(name) {
                out.insert(name, v);
            }
        }
    }
    // an empty tracestate says nothing
    if out.get(TRACESTATE) == Some("") {
        out.remove(TRACESTATE);
    }
    out
}

/// Puts the trace context of `cx` into `headers` ([`add_context`]).
pub(crate) fn inject(cx: &opentelemetry::Context, headers: &mut Headers) {
    let mut context = Headers::new();
    TraceContextPropagator::new().inject_context(cx, &mut HeadersMut(&mut context));
    add_context(headers, context);
}

/// Adds a producer's trace context (`traceparent` and maybe `tracestate`, as sent by a caller
/// that may not know the task's limits) to `headers`: never when they hold a `traceparent`,
/// never a `traceparent` that is not a valid W3C one, and never so that the headers go over
/// their limits (without the `tracestate` when only it does not fit). Trace context handed
/// on implicitly never makes an enqueue fail.
pub fn add_context(headers: &mut Headers, context: Headers) {
    if headers.traceparent().is_some() || producer(&context).is_none() {
        return;
    }
    let mut with_all = headers.clone();
    let mut with_parent = headers.clone();
    for (name, value) in context.iter() {
        if name == TRACEPARENT {
            with_parent.insert(name, value);
        }
        // a tracestate the caller gave stays theirs
        let own_state = name == TRACESTATE && headers.get(TRACESTATE).is_some();
        if name == TRACEPARENT || (name == TRACESTATE && !value.is_empty() && !own_state) {
            with_all.insert(name, value);
        }
    }
    if with_all.check().is_ok() {
        *headers = with_all;
    } else if with_parent.check().is_ok() {
        *headers = with_parent;
    }
}

/// The producer's context from a task's headers, if they carry a valid `traceparent`.
fn producer(headers: &Headers) -> Option<opentelemetry::Context> {
    if !w3c_traceparent(headers.get(TRACEPARENT)?) {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(&HeadersRef(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Whether `v` has the W3C form of a `traceparent`: version, trace id, parent id and flags
/// in lower-case hex of 2, 32, 16 and 2 digits, the ids not all zero, version `ff` refused,
/// and only a version above `00` followed by more (`-...`). OpenTelemetry's parser is looser
/// (it trims spaces and takes other lengths), and the value is handed on as given.
fn w3c_traceparent(v: &str) -> bool {
    let hex = |f: &str, n: usize| {
        f.len() == n
            && f.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut fields = v.splitn(5, '-');
    let (Some(version), Some(trace), Some(parent), Some(flags)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    let rest_ok = match fields.next() {
        None => true,
        Some(_) => version != "00",
    };
    hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2)
        && rest_ok
}

/// The consumer span of one run of `task` from `queue` (OpenTelemetry messaging conventions:
/// span name `process {queue}`, kind consumer), a child of or linked to the producer's span.
/// Enter it (or `instrument` the handler with it) for the run, then [`record_outcome`].
pub fn consumer_span(queue: &str, task: &ClaimedTask) -> tracing::Span {
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "process",
        otel.name = format_args!("process {queue}"),
        otel.kind = "consumer",
        otel.status_code = Empty,
        otel.status_description = Empty,
        messaging.system = "dueq",
        messaging.destination.name = queue,
        messaging.operation.type = "process",
        messaging.message.id = task.id.as_str(),
        dueq.task.key = Empty,
        // signed: OpenTelemetry's integers are i64 (the bridge records a u64 as text)
        dueq.task.attempt = i64::from(task.attempt),
        dueq.task.due_at_ms = i64::try_from(task.due_at_ms).unwrap_or(i64::MAX),
        dueq.task.lateness_ms =
            i64::try_from(task.started_at_ms.saturating_sub(task.due_at_ms)).unwrap_or(i64::MAX),
        dueq.task.group = Empty,
        dueq.task.outcome = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(key) = &task.key {
        span.record("dueq.task.key", key.as_str());
    }
    if let Some(group) = &task.group {
        span.record("dueq.task.group", group.as_str());
    }
    match producer(&task.headers) {
        Some(cx) if task.continues_trace => {
            let _ = span.set_parent(cx);
        }
        Some(cx) => {
            // a root, not a child of whatever span is current where the run starts
            let _ = span.set_parent(opentelemetry::Context::new());
            span.add_link(cx.span().span_context().clone());
        }
        None => {
            let _ = span.set_parent(opentelemetry::Context::new());
        }
    }
    span
}

/// What became of a run, as the consumer span records it (`dueq.task.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// Acknowledged.
    Succeeded,
    /// Failed; another attempt follows.
    Retried,
    /// Failed for the last time, or permanently: in the dead-letter queue.
    Dead,
    /// Stopped by the worker's shutdown before the handler ended; handed back to run again.
    HandedBack,
    /// Stopped when the lease was lost (it ran out and another worker may hold the task).
    LeaseLost,
}

impl RunOutcome {
    /// The outcome of a handler's `outcome`: a failure of the last attempt is dead.
    pub fn of(outcome: &Outcome, last_attempt: bool) -> Self {
        match outcome {
            Outcome::Success => Self::Succeeded,
            Outcome::Fail { .. } => Self::Dead,
            Outcome::Retry { .. } if last_attempt => Self::Dead,
            Outcome::Retry { .. } => Self::Retried,
        }
    }

    /// The name the span records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Dead => "dead",
            Self::HandedBack => "handed_back",
            Self::LeaseLost => "lease_lost",
        }
    }
}

/// Records the run's outcome on its consumer span, and an error status with the failure's text.
pub fn record_outcome(span: &tracing::Span, outcome: RunOutcome, error: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    span.record("dueq.task.outcome", outcome.as_str());
    if let Some(e) = error {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_description", e);
    }
}

/// Records a handler's `outcome` on `span` ([`record_outcome`]).
pub fn record_handler_outcome(span: &tracing::Span, outcome: &Outcome, last_attempt: bool) {
    let error = match outcome {
        Outcome::Success => None,
        Outcome::Retry { error, .. } | Outcome::Fail { error } => Some(error.as_str()),
    };
    record_outcome(span, RunOutcome::of(outcome, last_attempt), error);
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn context(tp: &str, ts: &str) -> Headers {
        [(TRACEPARENT, tp), (TRACESTATE, ts)].into_iter().collect()
    }

    #[test]
    fn only_the_w3c_form_of_a_traceparent_counts() {
        let (t, p) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
        for ok in [
            format!("00-{t}-{p}-01"),
            format!("00-{t}-{p}-03"),
            format!("01-{t}-{p}-01-future"),
        ] {
            assert!(w3c_traceparent(&ok), "{ok}");
        }
        for bad in [
            "00-1-2-01".to_owned(),
            format!("00-{t}-{p}-01-"),
            format!("00-+{}-{p}-01", &t[1..]),
            format!("00-{t}-{p}-+1"),
            format!("00-{t}-{p}-1"),
            format!("0-{t}-{p}-01"),
            format!(" 00-{t}-{p}-01 "),
            format!("00-{}-{p}-01", t.to_uppercase()),
            format!("00-{}-{p}-01", "0".repeat(32)),
            format!("00-{t}-{}-01", "0".repeat(16)),
            format!("ff-{t}-{p}-01"),
            "garbage".to_owned(),
        ] {
            assert!(!w3c_traceparent(&bad), "{bad:?}");
        }
    }

    #[test]
    fn context_handed_on_never_breaks_the_limits_or_wins_over_the_callers() {
        // added to what fits
        let mut h: Headers = [("x", "1")].into_iter().collect();
        add_context(&mut h, context(TP, "k=v"));
        assert_eq!(
            (h.traceparent(), h.get(TRACESTATE)),
            (Some(TP), Some("k=v"))
        );
        // the caller's own traceparent wins
        let mine = "00-11111111111111111111111111111111-2222222222222222-01";
        let mut h: Headers = [(TRACEPARENT, mine)].into_iter().collect();
        add_context(&mut h, context(TP, "k=v"));
        assert_eq!((h.traceparent(), h.get(TRACESTATE)), (Some(mine), None));
        // a 33rd entry would be refused: nothing added
        let full: Headers = (0..32).map(|i| (format!("h{i}"), "v")).collect();
        let mut h = full.clone();
        add_context(&mut h, context(TP, "k=v"));
        assert_eq!(h, full);
        // a tracestate over the value limit is left out, the traceparent kept
        let mut h = Headers::new();
        add_context(&mut h, context(TP, &"k=v,".repeat(300)));
        assert_eq!((h.traceparent(), h.get(TRACESTATE)), (Some(TP), None));
        // a tracestate given explicitly is kept
        let mut h: Headers = [(TRACESTATE, "mine=1")].into_iter().collect();
        add_context(&mut h, context(TP, "k=v"));
        assert_eq!(
            (h.traceparent(), h.get(TRACESTATE)),
            (Some(TP), Some("mine=1"))
        );
        // an empty tracestate is left out
        let mut h = Headers::new();
        add_context(&mut h, context(TP, ""));
        assert_eq!((h.len(), h.traceparent()), (1, Some(TP)));
        // a traceparent that is not W3C is dropped with its tracestate
        for bad in [
            "00-xyz",
            &format!("00-{}", "a".repeat(2000)),
            "",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            let mut h = Headers::new();
            add_context(&mut h, context(bad, "k=v"));
            assert!(h.is_empty(), "{bad:?}");
        }
    }
}
