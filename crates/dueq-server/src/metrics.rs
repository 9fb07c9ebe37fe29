//! Prometheus metrics with the names of DESIGN 4.4.
//!
//! Two sources, on purpose:
//! * **Queue-wide facts are read from Redis on each scrape** (`Queue::stats`): the counters
//!   `dueq_tasks_enqueued_total`, `dueq_tasks_finished_total{outcome}` and
//!   `dueq_lease_expired_total`, and the gauges `dueq_queue_tasks{state}` (states that do
//!   not overlap, so `sum by (queue)` is the tasks held; `succeeded` counts the records kept
//!   by retention, 0 without it), `dueq_queue_due_tasks` (the part of `scheduled` that is
//!   due now, its own gauge so that it is not counted twice),
//!   `dueq_queue_oldest_due_age_seconds`, `dueq_queue_throttled_seconds_total{limit}` (time
//!   due work waited on a limit, kept in Redis by the claim script), `dueq_queue_behind` and
//!   `dueq_queue_concurrency_limit`. They then count every producer and worker (Rust
//!   workers, the CLI, other servers), not only this process; with several servers, take
//!   `max` over instances rather than `sum`. Counting in-process instead was rejected: it
//!   would miss every task not touched by this server, and lease expiry happens inside Redis.
//! * **Timings are observed in this process**, for tasks it hands out (HTTP claims and push
//!   deliveries): `dueq_task_lateness_seconds` (hand-out minus due time, Redis clock;
//!   buckets from 0.5 ms to 1 day, so a backlog hours late lands in a bucket of its own) and `dueq_tasks_claimed_total` are recorded by the library's
//!   claim path ([`dueq::due::metrics`]) into this recorder; `dueq_task_duration_seconds`
//!   (hand-out to ack/nack) is observed here.
//! * Live workers: `dueq_workers{queue}` (worker processes and servers whose heartbeat lists
//!   the queue, [`Client::workers`]) is read from Redis on each scrape, for every known queue
//!   and every queue a worker serves; a queue whose last worker left reads 0 (not its last
//!   value). Like the other Redis-read series it is the same on every server.
//! * Schedules: `dueq_schedule_next_fire_timestamp_seconds{queue,schedule}` is read from Redis
//!   on each scrape; `dueq_schedule_ticks_total{queue,schedule,outcome}` counts the ticks this
//!   server's firer fired or skipped (every process fires, so sum it over instances and
//!   workers).
//!
//! The recorder belongs to the [`AppState`](crate::AppState) (its client records into it), not
//! the process-global `metrics` recorder, so two servers (or tests) in one process never mix
//! their numbers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Client, QueueStats};
use futures_util::StreamExt;
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

pub use dueq::due::metrics::LATENESS_BUCKETS_S;

/// Counter: Redis outages seen by this server.
const REDIS_OUTAGES_TOTAL: &str = "dueq_redis_outages_total";
use dueq::due::metrics::{TASK_LATENESS_SECONDS, TASKS_CLAIMED_TOTAL};

/// Handler duration buckets, seconds: 1 ms to 1 h.
pub const DURATION_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
];

/// Most claims remembered for the duration histogram; beyond it, durations go unrecorded.
const MAX_TRACKED: usize = 100_000;

/// Most queues refreshed per scrape.
const MAX_SCRAPED_QUEUES: usize = 1_000;

/// Gauge of each schedule's next fire time (DESIGN 4.4), read from Redis at scrape time.
const SCHEDULE_NEXT_FIRE: &str = "dueq_schedule_next_fire_timestamp_seconds";

pub(crate) struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    /// (queue, task id, lease token) → when this server handed it out.
    claimed: Mutex<HashMap<(String, String, String), Instant>>,
    /// Queues `dueq_workers` was published for (set to 0 once they have no worker).
    worker_queues: Mutex<HashSet<String>>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        // Both bucket lists are non-empty constants, the only error `set_buckets_for_metric`
        // reports, so the fallback (default summaries) is never taken.
        let builder = PrometheusBuilder::new();
        let builder = match builder
            .set_buckets_for_metric(
                Matcher::Full(TASK_LATENESS_SECONDS.into()),
                LATENESS_BUCKETS_S,
            )
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("dueq_task_duration_seconds".into()),
                    DURATION_BUCKETS_S,
                )
            }) {
            Ok(b) => b,
            Err(_) => PrometheusBuilder::new(),
        };
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let m = Self {
            recorder: Arc::new(recorder),
            handle,
            claimed: Mutex::new(HashMap::new()),
            worker_queues: Mutex::new(HashSet::new()),
        };
        m.with(|| {
            use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
            describe_counter!(
                "dueq_tasks_enqueued_total",
                "Tasks created, ever (from Redis)."
            );
            describe_counter!(
                "dueq_tasks_finished_total",
                "Attempts finished by outcome: succeeded, retried, dead, cancelled (from Redis)."
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
            describe_histogram!(
                TASK_LATENESS_SECONDS,
                Unit::Seconds,
                "Hand-out minus due time of tasks handed out by this server (HTTP and push)."
            );
            describe_counter!(
                TASKS_CLAIMED_TOTAL,
                "Tasks handed out by this server (HTTP claims and push deliveries)."
            );
            describe_histogram!(
                "dueq_task_duration_seconds",
                Unit::Seconds,
                "Claim to ack/nack of tasks handed out by this server."
            );
            describe_counter!(
                dueq::due::metrics::SCHEDULE_TICKS_TOTAL,
                "Schedule ticks this server fired or counted as skipped (misfire skip, overlap)."
            );
            describe_counter!(
                REDIS_OUTAGES_TOTAL,
                "Redis outages this server saw (runs of failed calls: refused, dropped, timed \
                 out, LOADING, READONLY), each logged once when it starts and once when it ends."
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

    /// The recorder, for the client whose claim path records into it.
    pub(crate) fn recorder(&self) -> Arc<PrometheusRecorder> {
        self.recorder.clone()
    }

    /// Remembers handed-out tasks for the duration histogram (their lateness was recorded by
    /// the claim path).
    pub(crate) fn handed_out(&self, queue: &str, tasks: &[dueq::ClaimedTask]) {
        let now = Instant::now();
        let Ok(mut map) = self.claimed.lock() else {
            return;
        };
        if map.len() + tasks.len() > MAX_TRACKED {
            map.retain(|_, at| now.duration_since(*at) < Duration::from_secs(3600));
        }
        for t in tasks {
            if map.len() >= MAX_TRACKED {
                break;
            }
            map.insert(
                (
                    queue.to_owned(),
                    t.id.as_str().to_owned(),
                    t.lease_token.as_str().to_owned(),
                ),
                now,
            );
        }
    }

    /// Records the duration of a task this server handed out, when it finishes.
    pub(crate) fn finished(&self, queue: &str, id: &str, token: &str) {
        let started = self
            .claimed
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&(queue.to_owned(), id.to_owned(), token.to_owned())));
        if let Some(at) = started {
            self.with(|| {
                metrics::histogram!("dueq_task_duration_seconds", "queue" => queue.to_owned())
                    .record(at.elapsed().as_secs_f64());
            });
        }
    }

    fn publish(&self, s: &QueueStats) {
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
                metrics::gauge!(SCHEDULE_NEXT_FIRE, "queue" => queue.to_owned(),
                    "schedule" => s.spec.name.clone())
                .set(s.next_fire_at_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
            }
        });
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
        self.handle.render()
    }
}
