//! The wake hub is responsible for waking long-poll claims the moment a task may have become
//! due earlier than they planned: one pub/sub connection per server, subscribed to the
//! `QueueKeys::wake` channel of each queue someone has recently waited on, fanned out to
//! in-process [`Notify`]s. Writes made through this server notify directly as well.
//!
//! Notifications are a shortcut, not a guarantee: a waiting claim also sleeps only until the
//! next due time by the Redis clock and re-polls at least every second (DESIGN 2.6), so a lost
//! message or a dropped connection delays nothing by more than that. After each
//! (re)subscription every waiter looks once, so a wake-up sent while nobody listened is not lost.
//!
//! The table of channels holds the queues with recent waiters only: a channel nobody waits
//! on is dropped (and unsubscribed) once it has been idle for [`IDLE`] (checked every
//! [`SWEEP_EVERY`]), or sooner when the table is full (at most `max` channels,
//! [`AppStateBuilder::wake_channels_max`](crate::AppStateBuilder::wake_channels_max)): then
//! the least recently used ones without a waiter go, down to 90 %, in one pass. A channel
//! with a waiting claim is never dropped; when every channel has one, a claim on a further
//! queue falls back to polling.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, watch};

/// A channel without a waiter for this long is dropped.
const IDLE: Duration = Duration::from_secs(60);

/// Pause between two sweeps for idle channels.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// Most channels in one SUBSCRIBE or UNSUBSCRIBE command.
const CHUNK: usize = 1000;

/// One queue's wake channel.
struct Channel {
    /// Its waiters wait on this; each holds a clone, so a strong count above 1 means "in use".
    notify: Arc<Notify>,
    /// When a claim last waited on it (as far as the last look saw).
    used: Instant,
}

#[derive(Default)]
struct HubState {
    /// Wake channel → its waiters.
    channels: HashMap<String, Channel>,
    /// The live connection's sink, when connected.
    sink: Option<PubSubSink>,
    /// Channels subscribed on the live connection.
    subscribed: HashSet<String>,
    /// Channels dropped from the table and maybe still subscribed.
    dropped: Vec<String>,
    started: bool,
}

impl HubState {
    /// Drops the channels without a waiter that have been idle for [`IDLE`] at `now`; then,
    /// while more than `keep` are left, the least recently used channels without a waiter.
    /// Channels with a waiter count as used at `now`.
    fn sweep(&mut self, now: Instant, keep: usize) {
        let mut idle = Vec::new();
        for (name, c) in &mut self.channels {
            if Arc::strong_count(&c.notify) > 1 {
                c.used = now;
            } else {
                idle.push((c.used, name.clone()));
            }
        }
        let expired = idle
            .iter()
            .filter(|(used, _)| now.saturating_duration_since(*used) >= IDLE)
            .count();
        let extra = self.channels.len().saturating_sub(keep);
        let n = expired.max(extra).min(idle.len());
        if n == 0 {
            return;
        }
        if n < idle.len() {
            idle.select_nth_unstable(n - 1);
        }
        for (_, name) in idle.into_iter().take(n) {
            self.channels.remove(&name);
            self.dropped.push(name);
        }
    }
}

pub(crate) struct WakeHub {
    client: dueq::Client,
    max: usize,
    state: Mutex<HubState>,
    /// Held while (un)subscribing, so that the commands reach Redis in the order decided.
    subscribing: tokio::sync::Mutex<()>,
    connected: watch::Sender<bool>,
    stop: watch::Receiver<bool>,
}

impl WakeHub {
    /// A hub of at most `max` channels (0: none, every waiting claim polls).
    pub(crate) fn new(client: dueq::Client, max: usize, stop: watch::Receiver<bool>) -> Arc<Self> {
        Arc::new(Self {
            client,
            max,
            state: Mutex::new(HubState::default()),
            subscribing: tokio::sync::Mutex::new(()),
            connected: watch::Sender::new(false),
            stop,
        })
    }

    fn notifier(&self, channel: &str) -> Option<Arc<Notify>> {
        let now = Instant::now();
        let mut st = self.state.lock().ok()?;
        if let Some(c) = st.channels.get_mut(channel) {
            c.used = now;
            return Some(c.notify.clone());
        }
        if st.channels.len() >= self.max {
            st.sweep(now, self.max.saturating_sub((self.max / 10).max(1)));
            if st.channels.len() >= self.max {
                return None;
            }
        }
        let notify = Arc::new(Notify::new());
        st.channels.insert(
            channel.to_owned(),
            Channel {
                notify: notify.clone(),
                used: now,
            },
        );
        Some(notify)
    }

    /// Wakes the waiters of `channel` in this process (after a write through this server).
    pub(crate) fn notify(&self, channel: &str) {
        let n = self
            .state
            .lock()
            .ok()
            .and_then(|st| st.channels.get(channel).map(|c| c.notify.clone()));
        if let Some(n) = n {
            n.notify_waiters();
        }
    }

    /// The notifier for `channel`, subscribed on Redis when the connection is up (waits for
    /// the connection at start-up up to 500 ms, and never past `deadline`). `None` when every
    /// channel the table can hold has a waiter. Hold it only while waiting: a channel is
    /// dropped once no claim has held its notifier for a while.
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
        self.sync(Some(channel)).await;
        Some(n)
    }

    /// Unsubscribes the dropped channels still subscribed, then subscribes `channel` if it
    /// is in the table and not subscribed yet.
    async fn sync(&self, channel: Option<&str>) {
        let _order = self.subscribing.lock().await;
        let (mut sink, gone, add) = {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let Some(sink) = st.sink.clone() else { return };
            let dropped = std::mem::take(&mut st.dropped);
            let gone: Vec<String> = dropped
                .into_iter()
                .filter(|c| !st.channels.contains_key(c) && st.subscribed.contains(c))
                .collect();
            let add = channel
                .filter(|c| st.channels.contains_key(*c) && !st.subscribed.contains(*c))
                .map(str::to_owned);
            (sink, gone, add)
        };
        for chunk in gone.chunks(CHUNK) {
            let r = tokio::time::timeout(Duration::from_secs(1), sink.unsubscribe(chunk)).await;
            if let Ok(mut st) = self.state.lock() {
                if let Ok(Ok(())) = r {
                    for c in chunk {
                        st.subscribed.remove(c);
                    }
                } else {
                    // try again next time (a lost connection resets everything anyway)
                    st.dropped.extend_from_slice(chunk);
                }
            }
        }
        if let Some(c) = add {
            let r = tokio::time::timeout(Duration::from_secs(1), sink.subscribe(&c)).await;
            if let Ok(Ok(())) = r
                && let Ok(mut st) = self.state.lock()
            {
                st.subscribed.insert(c);
            }
        }
    }

    /// Drops the channels idle for [`IDLE`] and unsubscribes them.
    async fn sweep_idle(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.sweep(Instant::now(), usize::MAX);
        }
        self.sync(None).await;
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
            let Some(h) = hub.upgrade() else { return };
            let order = h.subscribing.lock().await;
            let channels: Vec<String> = h
                .state
                .lock()
                .map(|mut st| {
                    st.dropped.clear();
                    st.channels.keys().cloned().collect()
                })
                .unwrap_or_default();
            let mut ok = true;
            for chunk in channels.chunks(CHUNK) {
                ok &= sink.subscribe(chunk).await.is_ok();
            }
            if ok {
                if let Ok(mut st) = h.state.lock() {
                    st.subscribed = channels.into_iter().collect();
                    st.sink = Some(sink);
                    // wake-ups sent while nobody listened: have every waiter look once
                    for c in st.channels.values() {
                        c.notify.notify_waiters();
                    }
                }
                h.connected.send_replace(true);
                drop(order);
                drop(h);
                let mut sweep = tokio::time::interval(SWEEP_EVERY);
                sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        _ = sweep.tick() => {
                            let Some(h) = hub.upgrade() else { return };
                            // not inline: the stream keeps being read meanwhile
                            tokio::spawn(async move { h.sweep_idle().await });
                        }
                        msg = stream.next() => {
                            let Some(msg) = msg else { break };
                            let Some(h) = hub.upgrade() else { return };
                            h.notify(msg.get_channel_name());
                        }
                    }
                }
            } else {
                drop(order);
                drop(h);
            }
            if let Some(h) = hub.upgrade() {
                h.connected.send_replace(false);
                if let Ok(mut st) = h.state.lock() {
                    st.sink = None;
                    st.subscribed.clear();
                    st.dropped.clear();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table(names: &[&str], used: Instant) -> HubState {
        let mut st = HubState::default();
        for n in names {
            st.channels.insert(
                (*n).to_owned(),
                Channel {
                    notify: Arc::new(Notify::new()),
                    used,
                },
            );
        }
        st
    }

    fn names(st: &HubState) -> Vec<&str> {
        let mut v: Vec<&str> = st.channels.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn idle_channels_without_waiters_are_dropped() {
        let t0 = Instant::now();
        let mut st = table(&["a", "b", "c"], t0);
        let waiter = st.channels["a"].notify.clone();
        st.channels.get_mut("c").unwrap().used = t0 + Duration::from_secs(30);

        st.sweep(t0 + IDLE - Duration::from_millis(1), usize::MAX);
        assert_eq!(names(&st), ["a", "b", "c"], "nothing idle long enough yet");
        st.sweep(t0 + IDLE, usize::MAX);
        assert_eq!(names(&st), ["a", "c"], "b idle, a has a waiter");
        assert_eq!(st.dropped, ["b"]);
        // a's waiter kept it in use: it counts as used at the last sweep
        drop(waiter);
        st.sweep(t0 + IDLE + Duration::from_secs(30), usize::MAX);
        assert_eq!(names(&st), ["a"]);
        st.sweep(t0 + IDLE * 2, usize::MAX);
        assert!(st.channels.is_empty());
        assert_eq!(st.dropped, ["b", "c", "a"]);
    }

    #[test]
    fn a_full_table_drops_the_least_recently_used_without_waiters() {
        let t0 = Instant::now();
        let all: Vec<String> = (0..10).map(|i| format!("q{i}")).collect();
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let mut st = table(&refs, t0);
        for (i, n) in all.iter().enumerate() {
            st.channels.get_mut(n).unwrap().used = t0 + Duration::from_millis(i as u64);
        }
        // the oldest has a waiter: it stays, the next oldest go
        let _waiter = st.channels["q0"].notify.clone();
        st.sweep(t0 + Duration::from_secs(1), 7);
        assert_eq!(
            names(&st),
            ["q0", "q4", "q5", "q6", "q7", "q8", "q9"],
            "{:?}",
            st.dropped
        );
        // every channel in use: nothing can go
        let mut st = table(&["x", "y"], t0);
        let _w: Vec<_> = st.channels.values().map(|c| c.notify.clone()).collect();
        st.sweep(t0 + IDLE * 2, 0);
        assert_eq!(names(&st), ["x", "y"]);
    }

    #[tokio::test]
    async fn the_table_never_exceeds_its_limit() {
        let server = dueq_testkit::RedisServer::start();
        let client = dueq::Client::connect(&server.url()).await.unwrap();
        let (_stop, stop_rx) = watch::channel(false);
        let hub = WakeHub::new(client, 10, stop_rx);
        let held: Vec<_> = (0..5)
            .map(|i| hub.notifier(&format!("held{i}")).unwrap())
            .collect();
        for i in 0..100 {
            assert!(hub.notifier(&format!("q{i}")).is_some());
            assert!(hub.state.lock().unwrap().channels.len() <= 10);
        }
        let st = hub.state.lock().unwrap();
        for i in 0..5 {
            assert!(st.channels.contains_key(&format!("held{i}")));
        }
        drop(st);
        // all ten in use: the eleventh queue polls
        let more: Vec<_> = (0..5)
            .map(|i| hub.notifier(&format!("more{i}")).unwrap())
            .collect();
        assert!(hub.notifier("one-too-many").is_none());
        drop((held, more));
        assert!(hub.notifier("one-too-many").is_some());
    }
}
