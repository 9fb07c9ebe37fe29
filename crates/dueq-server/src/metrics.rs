//! Prometheus metrics with the names of DESIGN 4.4.
//!
//! * **Queue-wide facts are read from Redis on each scrape** (`Queue::stats`): the counters
//!   `dueq_tasks_enqueued_total`, `dueq_tasks_finished_total{outcome}`,
//!   `dueq_tasks_claimed_total` and `dueq_lease_expired_total`; the histograms
//!   `dueq_task_lateness_seconds` (claim time minus due time; buckets from 0.5 ms to 1 day,
//!   so a backlog hours late lands in a bucket of its own) and `dueq_task_duration_seconds`
//!   (ack or nack time minus claim time), both counted by the scripts that hand work out and
//!   finish it, by the Redis clock; the gauges `dueq_queue_tasks{state}` (states that do not
//!   overlap, so `sum by (queue)` is the tasks held; `succeeded` counts the records kept by
//!   retention, 0 without it), `dueq_queue_due_tasks` (the part of `scheduled` that is due
//!   now, its own gauge so that it is not counted twice), `dueq_queue_oldest_due_age_seconds`,
//!   `dueq_queue_throttled_seconds_total{limit}` (time due work waited on a limit),
//!   `dueq_queue_behind` and `dueq_queue_concurrency_limit`. They count every producer and
//!   worker (Rust, Python, TypeScript, the CLI, other servers), not only this process, and
//!   are the same on every server: with several servers, take `max` over instances rather
//!   than `sum`.
//! * Live workers: `dueq_workers{queue}` (worker processes and servers whose heartbeat lists
//!   the queue, [`Client::workers`]) is read from Redis on each scrape, for every known queue
//!   and every queue a worker serves; a queue whose last worker left reads 0 (not its last
//!   value).
//! * Schedules: `dueq_schedule_next_fire_timestamp_seconds{queue,schedule}` and
//!   `dueq_schedule_ticks_total{queue,schedule,outcome}` (the schedule's fired and skipped
//!   counts) are read from Redis on each scrape.
//! * This server's own: `dueq_redis_up`, `dueq_redis_outages_total`, and the HTTP request
//!   durations (recorded by the router's middleware).
//!
//! The recorder belongs to the [`AppState`](crate::AppState), not the process-global
//! `metrics` recorder, so two servers (or tests) in one process never mix their numbers. The
//! two histograms are rendered here from Redis's counts (an exporter histogram can only
//! record single values).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use dueq::{Client, LATENESS_BOUNDS_MS, QueueStats, RUN_TIME_BOUNDS_MS, Timings};
use futures_util::StreamExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// Counter: Redis outages seen by this server.
const REDIS_OUTAGES_TOTAL: &str = "dueq_redis_outages_total";

/// Histogram of claim time minus due time (from Redis).
const TASK_LATENESS_SECONDS: &str = "dueq_task_lateness_seconds";
/// Histogram of ack or nack time minus claim time (from Redis).
const TASK_DURATION_SECONDS: &str = "dueq_task_duration_seconds";
/// Counter of schedule ticks by outcome (from Redis).
const SCHEDULE_TICKS_TOTAL: &str = "dueq_schedule_ticks_total";

/// Gauge 1 with the server's version as a label.
const BUILD_INFO: &str = "dueq_build_info";
/// Histogram of HTTP request durations (OpenTelemetry HTTP semantic conventions).
const HTTP_REQUEST_DURATION: &str = "http_server_request_duration_seconds";
/// Bucket bounds of [`HTTP_REQUEST_DURATION`], seconds: the ones the OpenTelemetry HTTP
/// conventions advise.
const HTTP_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// Most queues refreshed per scrape.
const MAX_SCRAPED_QUEUES: usize = 1_000;

/// Gauge of each schedule's next fire time, read from Redis at scrape time.
const SCHEDULE_NEXT_FIRE: &str = "dueq_schedule_next_fire_timestamp_seconds";

pub(crate) struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    /// Queues `dueq_workers` was published for (set to 0 once they have no worker).
    worker_queues: Mutex<HashSet<String>>,
    /// Each queue's lateness and run-time histograms as Redis last gave them.
    timings: Mutex<BTreeMap<String, (Timings, Timings)>>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(HTTP_REQUEST_DURATION.to_owned()),
                HTTP_BUCKETS,
            )
            // the names and bounds are constants: the builder refuses only an empty list
            .unwrap_or_else(|_| PrometheusBuilder::new())
            .build_recorder();
        let handle = recorder.handle();
        let m = Self {
            recorder: Arc::new(recorder),
            handle,
            worker_queues: Mutex::new(HashSet::new()),
            timings: Mutex::new(BTreeMap::new()),
        };
        m.with(|| {
            use metrics::{Unit, describe_counter, describe_gauge};
            describe_counter!(
                "dueq_tasks_enqueued_total",
                "Tasks created, ever (from Redis)."
            );
            describe_counter!(
                "dueq_tasks_finished_total",
                "Attempts finished by outcome: succeeded, retried, dead, cancelled, expired (from \
                 Redis)."
            );
            describe_counter!(
                "dueq_lease_expired_total",
                "Leases that expired (from Redis)."
            );
            describe_gauge!(
                "dueq_queue_tasks",
                "Tasks per state now: scheduled, active, dead, succeeded (records kept by \
                 retention); the states do not overlap. From Redis: the same on every server, \
                 combine servers with max, not sum."
            );
            describe_gauge!(
                "dueq_queue_due_tasks",
                "Scheduled tasks that are due now (a part of state=scheduled). From Redis: \
                 combine servers with max."
            );
            describe_gauge!(
                "dueq_queue_oldest_due_age_seconds",
                Unit::Seconds,
                "How long the earliest due task has waited."
            );
            describe_counter!(
                "dueq_queue_throttled_seconds_total",
                Unit::Seconds,
                "Time due work waited on a limit, whole seconds: rate, concurrency (the queue's), group_rate, \
                 group_concurrency (summed over groups). From Redis: combine servers with max."
            );
            describe_gauge!(
                "dueq_redis_up",
                "1 when this server read its queues from Redis at this scrape, else 0."
            );
            describe_gauge!(
                "dueq_queue_behind",
                "1 while the queue is over its alert threshold (settings alert_due_age_ms, \
                 alert_due_count), else 0. From Redis."
            );
            describe_gauge!(
                "dueq_queue_concurrency_limit",
                "The queue's concurrency limit (compare with dueq_queue_tasks{state=\"active\"}); \
                 absent without one."
            );
            describe_counter!(
                "dueq_tasks_claimed_total",
                "Tasks handed out by any worker or server (claims and push deliveries; from \
                 Redis)."
            );
            describe_counter!(
                SCHEDULE_TICKS_TOTAL,
                "Schedule ticks by outcome: fired (a task was enqueued), skipped (missed under \
                 misfire skip, or skipped for overlap). From Redis."
            );
            describe_counter!(
                REDIS_OUTAGES_TOTAL,
                "Redis outages this server saw (runs of failed calls: refused, dropped, timed \
                 out, LOADING, READONLY), each logged once when it starts and once when it ends."
            );
            describe_gauge!(
                BUILD_INFO,
                "1, with the version of this dueq serve as a label."
            );
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            metrics::describe_histogram!(
                HTTP_REQUEST_DURATION,
                Unit::Seconds,
                "Time to answer an HTTP request, by method, route template and status \
                 (OpenTelemetry HTTP semantic conventions)."
            );
            describe_gauge!(
                "dueq_workers",
                "Live worker processes and servers serving the queue, by their heartbeats (any \
                 language). From Redis: combine servers with max."
            );
            describe_gauge!(
                SCHEDULE_NEXT_FIRE,
                Unit::Seconds,
                "Next fire time of each schedule, Unix epoch seconds (0 while paused; from Redis)."
            );
        });
        m
    }

    /// The outages the connection has seen (taken after the scrape's own calls, so an
    /// outage they ran into counts at once). `dueq_redis_up` is the scrape's own reading.
    fn publish_health(&self, client: &Client) {
        let outages = client.connection_health().outages;
        self.with(|| metrics::counter!(REDIS_OUTAGES_TOTAL).absolute(outages));
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self.recorder.as_ref(), f)
    }

    /// Counts one answered HTTP request of `route` (the route's template, never the path
    /// itself, so the series stay few).
    pub(crate) fn http_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.with(|| {
            metrics::histogram!(
                HTTP_REQUEST_DURATION,
                "http_request_method" => method.to_owned(),
                "http_route" => route.to_owned(),
                "http_response_status_code" => status.to_string(),
            )
            .record(seconds);
        });
    }

    /// The recorder, for the client whose claim path records into it.
    pub(crate) fn recorder(&self) -> Arc<PrometheusRecorder> {
        self.recorder.clone()
    }

    fn publish(&self, s: &QueueStats) {
        if let Ok(mut t) = self.timings.lock() {
            t.insert(s.queue.clone(), (s.lateness.clone(), s.run_time.clone()));
        }
        self.with(|| {
            let q = || s.queue.clone();
            metrics::counter!("dueq_tasks_enqueued_total", "queue" => q())
                .absolute(s.enqueued_total);
            for (outcome, v) in [
                ("succeeded", s.succeeded_total),
                ("retried", s.retried_total),
                ("dead", s.dead_total),
                ("cancelled", s.cancelled_total),
                ("expired", s.expired_total),
            ] {
                metrics::counter!("dueq_tasks_finished_total", "queue" => q(), "outcome" => outcome)
                    .absolute(v);
            }
            metrics::counter!("dueq_lease_expired_total", "queue" => q())
                .absolute(s.lease_expired_total);
            metrics::counter!("dueq_tasks_claimed_total", "queue" => q())
                .absolute(s.claimed_total);
            for (state, v) in [
                ("scheduled", s.scheduled),
                ("active", s.active),
                ("dead", s.dead),
                ("succeeded", s.succeeded_kept),
            ] {
                metrics::gauge!("dueq_queue_tasks", "queue" => q(), "state" => state).set(v as f64);
            }
            metrics::gauge!("dueq_queue_due_tasks", "queue" => q()).set(s.due as f64);
            metrics::gauge!("dueq_queue_oldest_due_age_seconds", "queue" => q())
                .set(s.oldest_due_age_ms as f64 / 1000.0);
            let t = s.throttled_ms;
            for (limit, ms) in [
                ("rate", t.rate),
                ("concurrency", t.concurrency),
                ("group_rate", t.group_rate),
                ("group_concurrency", t.group_concurrency),
            ] {
                // an absolute counter holds integers: whole seconds
                metrics::counter!("dueq_queue_throttled_seconds_total", "queue" => q(), "limit" => limit)
                    .absolute(ms / 1000);
            }
            metrics::gauge!("dueq_queue_behind", "queue" => q()).set(f64::from(u8::from(s.behind)));
            if let Some(c) = s.concurrency_limit {
                metrics::gauge!("dueq_queue_concurrency_limit", "queue" => q()).set(c as f64);
            }
        });
    }

    /// `dueq_workers{queue}`: live workers per queue, 0 for `known` queues without any and
    /// for queues published before that lost their last one.
    fn publish_workers(&self, known: &[String], workers: &[dueq::WorkerInfo]) {
        let mut count: BTreeMap<&str, u64> = known
            .iter()
            .take(MAX_SCRAPED_QUEUES)
            .map(|q| (q.as_str(), 0))
            .collect();
        for w in workers {
            for q in &w.queues {
                *count.entry(q.as_str()).or_insert(0) += 1;
            }
        }
        let Ok(mut before) = self.worker_queues.lock() else {
            return;
        };
        for q in before.iter() {
            count.entry(q.as_str()).or_insert(0);
        }
        let now: HashSet<String> = count.keys().map(|q| (*q).to_owned()).collect();
        self.with(|| {
            for (q, n) in &count {
                metrics::gauge!("dueq_workers", "queue" => (*q).to_owned()).set(*n as f64);
            }
        });
        *before = now;
    }

    fn publish_schedules(&self, queue: &str, schedules: &[dueq::Schedule]) {
        self.with(|| {
            for s in schedules {
                let name = || s.spec.name.clone();
                metrics::gauge!(SCHEDULE_NEXT_FIRE, "queue" => queue.to_owned(),
                    "schedule" => name())
                .set(s.next_fire_at_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
                for (outcome, n) in [("fired", s.fired_total), ("skipped", s.skipped_total)] {
                    metrics::counter!(SCHEDULE_TICKS_TOTAL, "queue" => queue.to_owned(),
                        "schedule" => name(), "outcome" => outcome)
                    .absolute(n);
                }
            }
        });
    }

    /// The two histograms counted in Redis, in the Prometheus text format.
    fn render_timings(&self) -> String {
        let Ok(t) = self.timings.lock() else {
            return String::new();
        };
        let mut out = String::new();
        let families = [
            (
                TASK_LATENESS_SECONDS,
                "Claim time minus due time of every task handed out, by any worker or server \
                 (Redis clock; from Redis).",
                LATENESS_BOUNDS_MS,
                0,
            ),
            (
                TASK_DURATION_SECONDS,
                "Ack or nack time minus claim time of every attempt that ended so, by any \
                 worker or server (Redis clock; from Redis).",
                RUN_TIME_BOUNDS_MS,
                1,
            ),
        ];
        for (name, help, bounds, which) in families {
            if t.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (queue, pair) in t.iter() {
                let h = if which == 0 { &pair.0 } else { &pair.1 };
                let q = label_value(queue);
                let mut cumulative = 0;
                for (i, count) in h.counts.iter().enumerate() {
                    cumulative += count;
                    let le = bounds
                        .get(i)
                        .map_or_else(|| "+Inf".to_owned(), |ms| (ms / 1000.0).to_string());
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{queue=\"{q}\",le=\"{le}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_sum{{queue=\"{q}\"}} {}",
                    h.sum_ms as f64 / 1000.0
                );
                let _ = writeln!(out, "{name}_count{{queue=\"{q}\"}} {cumulative}");
            }
        }
        out
    }

    /// Refreshes the queue metrics from Redis and renders the Prometheus text. A Redis failure
    /// leaves the last values in place (the scrape still answers).
    pub(crate) async fn render(&self, client: &Client) -> String {
        let known = client.queues().await;
        self.with(|| metrics::gauge!("dueq_redis_up").set(f64::from(u8::from(known.is_ok()))));
        match &known {
            Ok(names) => {
                let stats: Vec<_> =
                    futures_util::stream::iter(names.iter().take(MAX_SCRAPED_QUEUES).cloned())
                        .map(|n| async move {
                            let q = client.queue(&n).ok()?;
                            q.stats().await.ok()
                        })
                        .buffer_unordered(8)
                        .collect()
                        .await;
                for s in stats.into_iter().flatten() {
                    self.publish(&s);
                }
            }
            Err(e) => tracing::warn!(error = %e, "metrics: could not list queues"),
        }
        match client.workers().await {
            Ok(workers) => self.publish_workers(known.as_deref().unwrap_or(&[]), &workers),
            Err(e) => tracing::warn!(error = %e, "metrics: could not list workers"),
        }
        match client.schedule_queues().await {
            Ok(names) => {
                let found: Vec<_> =
                    futures_util::stream::iter(names.into_iter().take(MAX_SCRAPED_QUEUES))
                        .map(|n| async move {
                            let q = client.queue(&n).ok()?;
                            Some((n, q.schedules().await.ok()?))
                        })
                        .buffer_unordered(8)
                        .collect()
                        .await;
                for (queue, schedules) in found.into_iter().flatten() {
                    self.publish_schedules(&queue, &schedules);
                }
            }
            Err(e) => tracing::warn!(error = %e, "metrics: could not list schedule queues"),
        }
        self.publish_health(client);
        let mut text = self.handle.render();
        text.push_str(&self.render_timings());
        text
    }
}

/// A label value escaped for the Prometheus text format.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
