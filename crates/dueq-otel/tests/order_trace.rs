//! The example `order_trace` (a Rust program that opts in: its own `checkout` span enqueues a
//! receipt due now and a cancel due in 2 s, a `dueq::Worker` runs both) against a real OTLP/HTTP
//! receiver.
//! The receipt's run is a child of the checkout; the cancel's is the root of a new trace
//! linked to it. With `DUEQ_TRACE_SVG=path` set, the spans received are drawn there (the
//! picture of the user guide's tracing page).

// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use dueq_testkit::RedisServer;
use dueq_testkit::otlp::{OtlpReceiver, ReceivedSpan};

#[path = "../examples/order_trace.rs"]
#[allow(dead_code)] // its `main`
mod order_trace;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_parents_its_receipt_and_links_its_delayed_cancel() {
    let redis = RedisServer::start();
    let otlp = OtlpReceiver::start().await;
    let export = dueq_otel::Export::http(&otlp.http_endpoint, "shop").unwrap();
    order_trace::checkout_and_work(&redis.url(), export)
        .await
        .unwrap();

    let named = |name: &'static str| move |s: &ReceivedSpan| s.span.name == name;
    let by_key =
        |key: &'static str| move |s: &ReceivedSpan| s.attr("dueq.task.key").as_deref() == Some(key);
    let checkout = otlp.wait_for(WAIT, "checkout", named("checkout")).await;
    let receipt = otlp
        .wait_for(WAIT, "receipt run", by_key("order:42:receipt"))
        .await;
    let cancel = otlp
        .wait_for(WAIT, "cancel run", by_key("order:42:cancel"))
        .await;
    let cancel_work = otlp
        .wait_for(WAIT, "cancel work", named("cancel order"))
        .await;
    otlp.wait_for(WAIT, "receipt work", named("send receipt"))
        .await;

    assert_eq!(checkout.service, "shop");
    assert_eq!(receipt.trace_id(), checkout.trace_id());
    assert_eq!(receipt.parent_span_id(), checkout.span_id());
    assert_ne!(cancel.trace_id(), checkout.trace_id());
    assert_eq!(cancel.parent_span_id(), "");
    assert_eq!(
        cancel.links(),
        vec![(checkout.trace_id(), checkout.span_id())]
    );
    assert!(cancel.int("dueq.task.lateness_ms") >= 0);
    assert!(
        cancel.int("dueq.task.due_at_ms") * 1_000_000 >= checkout.span.start_time_unix_nano as i64
    );
    // the handler's own span is a child of its run
    assert_eq!(
        (cancel_work.trace_id(), cancel_work.parent_span_id()),
        (cancel.trace_id(), cancel.span_id())
    );

    if let Ok(path) = std::env::var("DUEQ_TRACE_SVG") {
        std::fs::write(&path, svg(&otlp.spans())).unwrap();
    }
}

/// The spans as a waterfall per trace: one row per span, indented under its parent, a dashed
/// arrow from each link to the span it names.
fn svg(spans: &[ReceivedSpan]) -> String {
    let start = spans
        .iter()
        .map(|s| s.span.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let end = spans
        .iter()
        .map(|s| s.span.end_time_unix_nano)
        .max()
        .unwrap_or(1);
    let ms = |ns: u64| (ns.saturating_sub(start)) as f64 / 1e6;
    let total = ms(end).max(1.0);
    let (left, width, row, top) = (260.0, 480.0, 30.0, 40.0);
    let x = |ns: u64| left + ms(ns) / total * width;
    // traces in the order their first span started; spans in depth-first order
    let mut traces: Vec<String> = Vec::new();
    let mut sorted: Vec<&ReceivedSpan> = spans.iter().collect();
    sorted.sort_by_key(|s| s.span.start_time_unix_nano);
    for s in &sorted {
        if !traces.contains(&s.trace_id()) {
            traces.push(s.trace_id());
        }
    }
    let mut rows: Vec<(&ReceivedSpan, usize)> = Vec::new();
    fn visit<'a>(
        s: &'a ReceivedSpan,
        all: &[&'a ReceivedSpan],
        depth: usize,
        out: &mut Vec<(&'a ReceivedSpan, usize)>,
    ) {
        out.push((s, depth));
        for c in all
            .iter()
            .filter(|c| c.parent_span_id() == s.span_id() && c.trace_id() == s.trace_id())
        {
            visit(c, all, depth + 1, out);
        }
    }
    let mut body = String::new();
    let mut y = top;
    let mut place = std::collections::HashMap::new();
    for (i, t) in traces.iter().enumerate() {
        let roots: Vec<&ReceivedSpan> = sorted
            .iter()
            .copied()
            .filter(|s| {
                &s.trace_id() == t && !sorted.iter().any(|p| p.span_id() == s.parent_span_id())
            })
            .collect();
        let first = rows.len();
        for r in roots {
            visit(r, &sorted, 0, &mut rows);
        }
        body.push_str(&format!(
            "<text x=\"10\" y=\"{:.0}\" class=\"trace\">trace {} ({}…)</text>\n",
            y - 8.0,
            i + 1,
            &t[..8]
        ));
        for (s, depth) in &rows[first..] {
            let (x0, x1) = (x(s.span.start_time_unix_nano), x(s.span.end_time_unix_nano));
            let label = match s.attr("dueq.task.key") {
                Some(key) => format!("{} ({key})", s.span.name),
                None => s.span.name.clone(),
            };
            body.push_str(&format!(
                "<text x=\"{:.0}\" y=\"{:.0}\">{label}</text>\n\
                 <rect x=\"{x0:.1}\" y=\"{:.0}\" width=\"{:.1}\" height=\"16\" rx=\"3\" class=\"{}\"/>\n",
                10.0 + 12.0 * *depth as f64,
                y + 12.0,
                y,
                (x1 - x0).max(2.0),
                if s.span.kind == 5 { "run" } else { "app" }
            ));
            if let Some(late) = s.attr("dueq.task.lateness_ms") {
                body.push_str(&format!(
                    "<text x=\"{:.0}\" y=\"{:.0}\" class=\"note\">attempt {}, lateness {late} ms</text>\n",
                    x1 + 6.0,
                    y + 12.0,
                    s.attr("dueq.task.attempt").unwrap_or_default()
                ));
            }
            place.insert(s.span_id(), (x0, y + 8.0));
            y += row;
        }
        y += 24.0;
    }
    for (s, _) in &rows {
        for (_, linked) in s.links() {
            if let (Some(&(fx, fy)), Some(&(tx, ty))) =
                (place.get(&s.span_id()), place.get(&linked))
            {
                // through the gutter left of the bars, so it crosses no bar or note
                let g = left - 14.0;
                body.push_str(&format!(
                    "<path d=\"M {fx:.1} {fy:.1} H {g:.1} V {ty:.1} H {:.1}\" class=\"link\" \
                     marker-end=\"url(#arrow)\"/>\n\
                     <text x=\"{:.0}\" y=\"{:.0}\" class=\"note\">link to checkout</text>\n",
                    tx - 2.0,
                    g + 8.0,
                    fy - 5.0
                ));
            }
        }
    }
    let axis = format!(
        "<line x1=\"{left}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" class=\"axis\"/>\n\
         <text x=\"{left}\" y=\"{:.0}\" class=\"note\">0 ms</text>\n\
         <text x=\"{:.0}\" y=\"{:.0}\" class=\"note\" text-anchor=\"end\">{total:.0} ms</text>\n",
        y,
        left + width,
        y,
        y + 14.0,
        left + width,
        y + 14.0
    );
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<style>\
         .app{{fill:#8fb8de}} .run{{fill:#f4a259}} .trace{{font-weight:bold}} \
         .note{{fill:#555;font-size:11px}} .axis{{stroke:#999}} \
         .link{{fill:none;stroke:#c0392b;stroke-dasharray:5 4;stroke-width:1.5}}</style>\n\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto\"><path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#c0392b\"/>\
         </marker></defs>\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}{axis}</svg>\n",
        y + 30.0
    )
}
