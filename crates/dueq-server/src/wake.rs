//! The wake hub is responsible for waking long-poll claims the moment a task may have become
//! due earlier than they planned: one pub/sub connection per server, subscribed to the
//! `QueueKeys::wake` channel of each queue someone is waiting on, fanned out to in-process
//! [`Notify`]s. Writes made through this server notify directly as well.
//!
//! Notifications are a shortcut, not a guarantee: a waiting claim also sleeps only until the
//! next due time by the Redis clock and re-polls at least every second (DESIGN 2.6), so a lost
//! message or a dropped connection delays nothing by more than that. After each
//! (re)subscription every waiter looks once, so a wake-up sent while nobody listened is not lost.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, watch};

/// Most channels subscribed at once; waiters on further queues rely on polling.
const MAX_CHANNELS: usize = 10_000;

#[derive(Default)]
struct HubState {
    /// Wake channel → the notifier of its waiters.
    notifiers: HashMap<String, Arc<Notify>>,
    /// The live connection's sink, when connected.
    sink: Option<PubSubSink>,
    subscribed: HashSet<String>,
    started: bool,
}

pub(crate) struct WakeHub {
    client: dueq::Client,
    state: Mutex<HubState>,
    connected: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
}

impl WakeHub {
    pub(crate) fn new(client: dueq::Client, stop: watch::Receiver<bool>) -> Arc<Self> {
        Arc::new(Self {
            client,
            state: Mutex::new(HubState::default()),
            connected: watch::Sender::new(false),
            stop,
        })
    }

    fn notifier(&self, channel: &str) -> Option<Arc<Notify>> {
        let mut st = self.state.lock().ok()?;
        if let Some(n) = st.notifiers.get(channel) {
            return Some(n.clone());
        }
        if st.notifiers.len() >= MAX_CHANNELS {
            return None;
        }
        let n = Arc::new(Notify::new());
        st.notifiers.insert(channel.to_owned(), n.clone());
        Some(n)
    }

    /// Wakes the waiters of `channel` in this process (after a write through this server).
    pub(crate) fn notify(&self, channel: &str) {
        let n = self
            .state
            .lock()
            .ok()
            .and_then(|st| st.notifiers.get(channel).cloned());
        if let Some(n) = n {
            n.notify_waiters();
        }
    }

    /// The notifier for `channel`, subscribed on Redis when the connection is up (waits for
    /// the connection at start-up up to 500 ms, and never past `deadline`). `None` when too
    /// many channels are in use.
    pub(crate) async fn listen(
        self: &Arc<Self>,
        channel: &str,
        deadline: tokio::time::Instant,
    ) -> Option<Arc<Notify>> {
        let n = self.notifier(channel)?;
        self.start();
        let mut connected = self.connected.subscribe();
        let until = deadline.min(tokio::time::Instant::now() + Duration::from_millis(500));
        let _ = tokio::time::timeout_at(until, connected.wait_for(|c| *c)).await;
        let sink = self.state.lock().ok().and_then(|st| {
            (!st.subscribed.contains(channel))
                .then(|| st.sink.clone())
                .flatten()
        });
        if let Some(mut sink) = sink {
            let r = tokio::time::timeout(Duration::from_secs(1), sink.subscribe(channel)).await;
            if let Ok(Ok(())) = r
                && let Ok(mut st) = self.state.lock()
            {
                st.subscribed.insert(channel.to_owned());
            }
        }
        Some(n)
    }

    fn start(self: &Arc<Self>) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.started {
            return;
        }
        st.started = true;
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        tokio::spawn(run(weak, stop));
    }
}

async fn run(hub: Weak<WakeHub>, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(h) = hub.upgrade() else { return };
        let pubsub = h.client.pubsub_client().clone();
        drop(h);
        if let Ok(ps) = pubsub.get_async_pubsub().await {
            let (mut sink, mut stream) = ps.split();
            let channels: Vec<String> = match hub.upgrade() {
                Some(h) => h
                    .state
                    .lock()
                    .map(|st| st.notifiers.keys().cloned().collect())
                    .unwrap_or_default(),
                None => return,
            };
            let mut ok = true;
            for c in &channels {
                ok &= sink.subscribe(c).await.is_ok();
            }
            if ok {
                if let Some(h) = hub.upgrade() {
                    if let Ok(mut st) = h.state.lock() {
                        st.subscribed = channels.into_iter().collect();
                        st.sink = Some(sink);
                        // wake-ups sent while nobody listened: have every waiter look once
                        for n in st.notifiers.values() {
                            n.notify_waiters();
                        }
                    }
                    h.connected.send_replace(true);
                }
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        msg = stream.next() => {
                            let Some(msg) = msg else { break };
                            let Some(h) = hub.upgrade() else { return };
                            h.notify(msg.get_channel_name());
                        }
                    }
                }
            }
            if let Some(h) = hub.upgrade() {
                h.connected.send_replace(false);
                if let Ok(mut st) = h.state.lock() {
                    st.sink = None;
                    st.subscribed.clear();
                }
            }
            tracing::debug!("wake-up connection lost; reconnecting");
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
