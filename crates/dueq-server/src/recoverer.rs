//! The background recoverer: every `recover_interval_ms` it runs [`dueq::Queue::recover`] on
//! every known queue, so a task whose lease expired goes back to `scheduled` (attempt counted)
//! or to `dead` within about one interval (DESIGN 2.4) even when nobody claims from its queue.
//!
//! Claims recover expired leases by themselves (Rust workers, and the HTTP claim route when
//! the claim sees a deadline in the past), but a queue served only by HTTP clients that died,
//! or one nobody claims from at all, would keep its expired tasks `active` forever without
//! this task. Recovery is one atomic script per call, so several servers (and workers) doing
//! it at once is harmless. The script counts `lease_expired_total` in the queue's Redis stats,
//! which `/metrics` publishes as `dueq_lease_expired_total{queue}`; nothing is counted here.
//!
//! Errors (Redis down, a queue gone) are logged with `tracing` and the next pass tries again;
//! the task ends when the server's shutdown signal is sent.

use std::time::Duration;

use dueq::Client;
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::state::AppState;

/// Default pause between two recovery passes, ms.
pub const DEFAULT_RECOVER_INTERVAL_MS: u64 = 1000;

/// Tasks one `recover` call handles at most (the library's batch cap); a pass calls again on
/// a queue while a call came back full.
const RECOVER_BATCH: u64 = 1000;

/// Calls per queue and pass at most, so one huge backlog cannot starve the other queues.
const MAX_CALLS_PER_QUEUE: usize = 10;

/// Queues recovered concurrently within one pass.
const CONCURRENCY: usize = 8;

/// Starts the recoverer; `None` when the interval is 0 (turned off). It stops once
/// [`AppState::begin_shutdown`] has been called (finishing the call in flight).
pub(crate) fn spawn(state: &AppState) -> Option<JoinHandle<()>> {
    let interval_ms = state.recover_interval_ms();
    if interval_ms == 0 {
        return None;
    }
    let client = state.client().clone();
    let shutdown = state.shutdown_rx();
    Some(tokio::spawn(run(
        client,
        Duration::from_millis(interval_ms),
        shutdown,
    )))
}

async fn run(client: Client, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        tokio::select! {
            _ = tick.tick() => {}
            changed = shutdown.changed() => {
                // A dropped sender means the state is gone: stop as well.
                if changed.is_err() {
                    return;
                }
                continue;
            }
        }
        pass(&client).await;
    }
}

/// One recovery pass over every known queue.
async fn pass(client: &Client) {
    let names = match client.queues().await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "recoverer: could not list queues");
            return;
        }
    };
    futures_util::stream::iter(names)
        .for_each_concurrent(CONCURRENCY, |name| async move {
            recover_queue(client, &name).await;
        })
        .await;
}

async fn recover_queue(client: &Client, name: &str) {
    let q = match client.queue(name) {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!(queue = name, error = %e, "recoverer: bad queue name in the registry");
            return;
        }
    };
    for _ in 0..MAX_CALLS_PER_QUEUE {
        match q.recover().await {
            Ok(r) => {
                let n = r.recovered + r.dead;
                if n > 0 {
                    tracing::info!(
                        queue = name,
                        recovered = r.recovered,
                        dead = r.dead,
                        "recoverer: expired leases recovered"
                    );
                }
                if n < RECOVER_BATCH {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(queue = name, error = %e, "recoverer: recover failed");
                return;
            }
        }
    }
}
