//! Push delivery (webhooks): the server POSTs each due task of a queue that has a webhook
//! ([`dueq::Queue::set_webhook`], `PUT /v1/queues/{queue}/webhook`, `dueq webhook set`) to
//! its URL.
//!
//! # What a receiver gets
//!
//! `POST <url>` with the payload bytes as stored as the body, and the headers
//!
//! | header | value |
//! |---|---|
//! | `content-type` | `application/json` when the payload is JSON, else `application/octet-stream` |
//! | `webhook-id` | `{queue}:{task id}`, the same for every attempt: the idempotency key |
//! | `webhook-timestamp` | when this attempt started, Unix seconds (Redis clock) |
//! | `webhook-signature` | `v1,<base64 HMAC-SHA256>` per signing key, separated by spaces ([`sign`]) |
//! | `dueq-task-id` | the task id (12 hex digits) |
//! | `dueq-task-key` | the business key, percent-encoded; absent when the task has none |
//! | `dueq-attempt` | this attempt's number, from 1 |
//! | `dueq-queue` | the queue name |
//! | `dueq-due-at-ms` | the task's due time, Unix epoch ms |
//! | `traceparent`, `tracestate` | W3C trace context: the delivery's consumer span when the server exports spans, else the task's own (from its headers); absent when neither has one |
//! | `dueq-header-{name}` | each other task header, by name |
//!
//! A `2xx` answer within the queue's `timeout_ms` acknowledges the task. Any other status
//! (redirects are **not** followed: a `3xx` fails too), a timeout or a connection error is a
//! failed attempt: the task is retried after the backoff ([`PushOptions::backoff`]) and ends
//! in the dead-letter queue after its `max_attempts`, with the answer's status and the start
//! of its body as `last_error`. Delivery is at-least-once: receivers should ignore a
//! `webhook-id` they have already processed.
//!
//! # Checking the signature
//!
//! Deliveries follow the Standard Webhooks specification (standardwebhooks.com), so any of its
//! libraries verifies them with the queue's `whsec_` secret. The signature covers
//! `{webhook-id}.{webhook-timestamp}.{body}`, so neither the id nor the time can be swapped
//! under a valid signature. After a secret change, deliveries carry a signature under the old
//! secret too for [`dueq::WEBHOOK_ROTATION_MS`]. `examples/webhook_receiver.py` is a receiver.
//!
//! # How it runs
//!
//! [`run`] polls which queues have a webhook every [`PushOptions::poll_ms`] and runs one
//! [`dueq::Worker`] per such queue with the webhook's `concurrency` as its limit and a POST as
//! its handler. A changed webhook (URL, secret, concurrency or timeout) stops the old worker
//! (its in-flight deliveries are aborted and their leases handed back) and starts a new one;
//! a removed webhook stops it. Any number of servers may run: leases make each delivery
//! exclusive, and the concurrency limit holds per server. On shutdown every worker stops in
//! its documented order, handing unfinished leases back at once.
//!
//! The delivery workers do not list themselves in the live workers list: the server's own
//! heartbeat reports them ([`PushLoad`]: the queues delivered to, their summed concurrency and
//! the deliveries in flight), so one `dueq serve` is one entry.
//!
//! Lateness and duration of deliveries go to `dueq_task_lateness_seconds` and
//! `dueq_task_duration_seconds`; outcomes are counted in Redis and show in
//! `dueq_tasks_finished_total` like any other worker's.

mod deliver;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dueq::{Webhook, Worker, WorkerHandle, WorkerLoad};
use futures_util::StreamExt;
use tokio::sync::watch;

pub use deliver::{
    HEADER_ATTEMPT, HEADER_DUE_AT, HEADER_QUEUE, HEADER_TASK_ID, HEADER_TASK_KEY,
    HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP, sign,
};

pub use crate::options::PushOptions;
use crate::state::AppState;
use deliver::Deliverer;

/// The HTTP client of every delivery: no redirects, no proxy, rustls with the webpki roots.
fn http_client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("dueq/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// What makes two webhooks deliver differently (not `updated_at_ms`: setting the same
/// target again does not restart delivery).
fn same_target(a: &Webhook, b: &Webhook) -> bool {
    a.url == b.url
        && a.secret == b.secret
        && a.previous_secrets == b.previous_secrets
        && a.concurrency == b.concurrency
        && a.timeout_ms == b.timeout_ms
}

type Probe = Box<dyn Fn() -> WorkerLoad + Send + Sync>;

/// The load of every running delivery worker, by queue, for the server's heartbeat.
#[derive(Clone, Default)]
pub(crate) struct PushLoad(Arc<Mutex<HashMap<String, Probe>>>);

impl PushLoad {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Probe>> {
        // inserts and removes only: a poisoned lock holds a whole map
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues delivered to (sorted), summed concurrency, deliveries in flight.
    pub(crate) fn total(&self) -> WorkerLoad {
        let map = self.map();
        let mut queues: Vec<String> = map.keys().cloned().collect();
        queues.sort();
        let (mut concurrency, mut in_hand) = (0, 0);
        for probe in map.values() {
            let l = probe();
            concurrency += l.concurrency;
            in_hand += l.in_hand;
        }
        WorkerLoad::new(queues, concurrency, in_hand)
    }
}

/// A running delivery worker and the webhook it delivers to.
struct Running {
    webhook: Webhook,
    handle: WorkerHandle,
}

/// Runs push delivery until `stop` turns `true`, then shuts every worker down (leases of
/// deliveries in flight are handed back) and returns.
pub(crate) async fn run(state: AppState, mut stop: watch::Receiver<bool>, load: PushLoad) {
    let opts = state.push_options();
    if !opts.enabled {
        return;
    }
    let http = match http_client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "push delivery disabled: cannot build the HTTP client");
            return;
        }
    };
    let poll = Duration::from_millis(opts.poll_ms);
    let mut running: HashMap<String, Running> = HashMap::new();
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        reconcile(&state, &http, &opts, &mut running, &load).await;
        tokio::select! {
            r = stop.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(poll) => {}
        }
    }
    let load = &load;
    let stops = running.into_iter().map(|(queue, r)| async move {
        load.map().remove(&queue);
        if let Err(e) = r.handle.shutdown().await {
            tracing::warn!(queue = %queue, error = %e, "push worker did not stop cleanly");
        }
    });
    futures_util::future::join_all(stops).await;
}

/// Reads every webhook and starts, restarts or stops workers to match. A queue whose
/// setting cannot be read keeps its current worker (Redis failing is no reason to stop).
async fn reconcile(
    state: &AppState,
    http: &reqwest::Client,
    opts: &PushOptions,
    running: &mut HashMap<String, Running>,
    load: &PushLoad,
) {
    let client = state.client();
    let names = match client.webhook_queues().await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "push: could not list webhooks");
            return;
        }
    };
    let found: Vec<(String, dueq::Result<Option<Webhook>>)> = futures_util::stream::iter(names)
        .map(|name| async move {
            let w = match client.queue(&name) {
                Ok(q) => q.webhook().await,
                Err(e) => Err(e),
            };
            (name, w)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut wanted: HashMap<String, Webhook> = HashMap::new();
    let mut unknown: Vec<String> = Vec::new();
    for (name, w) in found {
        match w {
            Ok(Some(w)) => {
                wanted.insert(name, w);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(queue = %name, error = %e, "push: could not read the webhook");
                unknown.push(name);
            }
        }
    }
    let stale: Vec<String> = running
        .iter()
        .filter(|(name, r)| {
            !unknown.contains(name)
                && wanted
                    .get(*name)
                    .is_none_or(|w| !same_target(w, &r.webhook))
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in stale {
        if let Some(r) = running.remove(&name) {
            load.map().remove(&name);
            tracing::info!(queue = %name, "push: stopping delivery to {}",
                r.webhook.redacted_url());
            if let Err(e) = r.handle.shutdown().await {
                tracing::warn!(queue = %name, error = %e, "push worker did not stop cleanly");
            }
        }
    }
    for (name, w) in wanted {
        if running.contains_key(&name) {
            continue;
        }
        match start(state, http, opts, w.clone()) {
            Ok(handle) => {
                tracing::info!(queue = %name, url = %w.redacted_url(),
                    concurrency = w.concurrency,
                    "push: delivering");
                load.map()
                    .insert(name.clone(), Box::new(handle.load_probe()));
                running.insert(name, Running { webhook: w, handle });
            }
            Err(e) => tracing::warn!(queue = %name, error = %e, "push: cannot start delivery"),
        }
    }
}

fn start(
    state: &AppState,
    http: &reqwest::Client,
    opts: &PushOptions,
    webhook: Webhook,
) -> dueq::Result<WorkerHandle> {
    let queue = webhook.queue.clone();
    let concurrency = webhook.concurrency as usize;
    let d = Arc::new(Deliverer {
        http: http.clone(),
        queue: state.client().queue(&queue)?,
        webhook,
        test_clock: state.client().test_clock(),
    });
    let worker = Worker::builder(state.client().clone())
        .concurrency(concurrency)
        .backoff(opts.backoff)
        .shutdown_grace_ms(opts.shutdown_grace_ms)
        // the server's heartbeat lists it (PushLoad)
        .heartbeat(false)
        .handle(&queue, move |task| {
            let d = d.clone();
            async move { d.deliver(task).await }
        })
        .build()?;
    Ok(worker.start())
}
