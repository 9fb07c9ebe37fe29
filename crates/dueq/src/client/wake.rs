//! The wake hub is responsible for the "a task became due earlier" notifications of one
//! [`Client`](crate::Client): one pub/sub connection, subscribed to the
//! [`QueueKeys::wake`](crate::QueueKeys) channel of each queue a [`DueClaimer`](crate::DueClaimer)
//! waits on, fanned out to the claimers of that queue in this process (the message is the due
//! time, epoch ms).
//!
//! Notifications are a shortcut, not a guarantee: a claimer also sleeps only until the next
//! due time by the Redis clock and looks at least every second (DESIGN 2.6, case C02), so a
//! lost message or a dropped connection delays nothing by more than that. The connection is
//! opened on first use and reopened after a pause when it drops; after each (re)subscription
//! every claimer is told to look once (message `0`), so a wake-up sent while nobody listened
//! is not lost.
//!
//! On a Redis that runs the test clock, the hub also listens on its channel
//! (`dueq:test_clock`): a move of the clock has every waiter of every channel look once.
//!
//! The table of channels is bounded (at most `max`,
//! [`ClientBuilder::wake_channels_max`](crate::ClientBuilder::wake_channels_max)): a channel
//! nobody waits on is dropped (and unsubscribed) once idle for [`IDLE`] (checked every
//! [`SWEEP_EVERY`]), or sooner when the table is full: then the least recently used ones
//! without a waiter go, down to 90 %, in one pass. A channel with a waiter is never dropped;
//! when every channel has one, a claimer of a further queue falls back to polling.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{broadcast, watch};

use crate::protocol::conn::PubsubSource;
use crate::protocol::keys::TEST_CLOCK_KEY;

/// A channel without a waiter for this long is dropped.
const IDLE: Duration = Duration::from_secs(60);

/// Pause between two sweeps for idle channels.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// Most channels in one SUBSCRIBE or UNSUBSCRIBE command.
const CHUNK: usize = 1000;

/// Messages a slow claimer may fall behind by before it is told to look at once.
const BACKLOG: usize = 64;

/// Longest wait for one (UN)SUBSCRIBE command, or for a connection to open.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// Pause before reconnecting a dropped connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// Longest pause between reconnect attempts while Redis stays away (the pause doubles from
/// [`RECONNECT_PAUSE`] after each failed attempt, with jitter).
const MAX_RECONNECT_PAUSE: Duration = Duration::from_secs(2);

/// One queue's wake channel.
struct Channel {
    /// Its waiters hold receivers: a receiver count above 0 means "in use".
    tx: broadcast::Sender<u64>,
    /// When a claimer last waited on it (as far as the last look saw).
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
            if c.tx.receiver_count() > 0 {
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
    pubsub: PubsubSource,
    max: usize,
    /// The Redis runs the test clock: its moves wake everyone.
    test_clock: bool,
    /// Told of every move of the test clock (and after each (re)connect), for duties that
    /// wait on no queue's channel (`LeaseRecoverer`).
    moved: broadcast::Sender<u64>,
    state: Mutex<HubState>,
    /// Held while (un)subscribing, so that the commands reach Redis in the order decided.
    subscribing: tokio::sync::Mutex<()>,
    connected: watch::Sender<bool>,
}

impl WakeHub {
    /// A hub of at most `max` channels (0: none, every claimer polls), connecting through
    /// `pubsub` (on a cluster one seed node: a plain `PUBLISH` reaches every node).
    pub(crate) fn new(pubsub: PubsubSource, max: usize, test_clock: bool) -> Arc<Self> {
        Arc::new(Self {
            pubsub,
            max,
            test_clock,
            moved: broadcast::Sender::new(BACKLOG),
            state: Mutex::new(HubState::default()),
            subscribing: tokio::sync::Mutex::new(()),
            connected: watch::Sender::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        // Every update of the table is a single insert, remove or field write, so a panic
        // while holding the lock cannot leave it half-updated: a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver for `channel`, `None` when every channel the table can hold has a waiter.
    fn receiver(&self, channel: &str) -> Option<broadcast::Receiver<u64>> {
        let now = Instant::now();
        let mut st = self.lock();
        if let Some(c) = st.channels.get_mut(channel) {
            c.used = now;
            return Some(c.tx.subscribe());
        }
        if st.channels.len() >= self.max {
            st.sweep(now, self.max.saturating_sub((self.max / 10).max(1)));
            if st.channels.len() >= self.max {
                return None;
            }
        }
        let (tx, rx) = broadcast::channel(BACKLOG);
        st.channels
            .insert(channel.to_owned(), Channel { tx, used: now });
        Some(rx)
    }

    /// Hands `due` to the waiters of `channel` in this process.
    fn notify(&self, channel: &str, due: u64) {
        if let Some(c) = self.lock().channels.get(channel) {
            let _ = c.tx.send(due);
        }
    }

    /// Has every waiter of every channel, and of the test clock's moves, look once.
    fn notify_all(&self) {
        for c in self.lock().channels.values() {
            let _ = c.tx.send(0);
        }
        let _ = self.moved.send(0);
    }

    /// A receiver told of each move of the test clock (`None`: the Redis does not run it).
    /// Starts the hub's connection if need be; dropping the receiver is all the release.
    pub(crate) fn clock_moves(self: &Arc<Self>) -> Option<broadcast::Receiver<u64>> {
        if !self.test_clock {
            return None;
        }
        let rx = self.moved.subscribe();
        self.start();
        Some(rx)
    }

    /// A receiver of `channel`'s wake-ups, or `None` when every channel the table can hold
    /// has a waiter. Never waits: the subscription is made in the background (the connection
    /// opened first if need be), and once it is in effect the receiver gets a `0` ("look
    /// once"), so a task enqueued between the caller's last claim and the subscription is
    /// not missed. A claimer holds its receiver as long as it may wait; a channel is dropped
    /// once no claimer has held one for a while.
    pub(crate) fn listen(self: &Arc<Self>, channel: &str) -> Option<broadcast::Receiver<u64>> {
        let rx = self.receiver(channel)?;
        self.start();
        let hub = self.clone();
        tokio::spawn(async move { hub.sync().await });
        Some(rx)
    }

    /// Unsubscribes the dropped channels still subscribed, then subscribes every channel of
    /// the table not subscribed yet (new ones, and ones whose subscribe failed before) and
    /// has their waiters look once.
    async fn sync(&self) {
        let _order = self.subscribing.lock().await;
        let (mut sink, gone, add) = {
            let mut st = self.lock();
            let Some(sink) = st.sink.clone() else { return };
            let dropped = std::mem::take(&mut st.dropped);
            let gone: Vec<String> = dropped
                .into_iter()
                .filter(|c| !st.channels.contains_key(c) && st.subscribed.contains(c))
                .collect();
            let add: Vec<String> = st
                .channels
                .keys()
                .filter(|c| !st.subscribed.contains(*c))
                .cloned()
                .collect();
            (sink, gone, add)
        };
        for chunk in gone.chunks(CHUNK) {
            let r = tokio::time::timeout(COMMAND_TIMEOUT, sink.unsubscribe(chunk)).await;
            let mut st = self.lock();
            if let Ok(Ok(())) = r {
                for c in chunk {
                    st.subscribed.remove(c);
                }
            } else {
                // try again next time (a lost connection resets everything anyway)
                st.dropped.extend_from_slice(chunk);
            }
        }
        for chunk in add.chunks(CHUNK) {
            let r = tokio::time::timeout(COMMAND_TIMEOUT, sink.subscribe(chunk)).await;
            if let Ok(Ok(())) = r {
                let mut st = self.lock();
                for c in chunk {
                    if let Some(ch) = st.channels.get(c) {
                        let _ = ch.tx.send(0);
                    }
                    st.subscribed.insert(c.clone());
                }
            }
            // on failure the channels stay unsubscribed: the next sync (at the latest the
            // sweep tick) tries again; meanwhile their claimers poll
        }
    }

    /// Drops `channel` from the table and unsubscribes it (in the background) when no
    /// claimer waits on it any more (a stopped worker), instead of when it has been idle for
    /// [`IDLE`].
    pub(crate) fn release(self: &Arc<Self>, channel: &str) {
        {
            let mut st = self.lock();
            let unused = st
                .channels
                .get(channel)
                .is_some_and(|c| c.tx.receiver_count() == 0);
            if !unused {
                return;
            }
            st.channels.remove(channel);
            st.dropped.push(channel.to_owned());
        }
        let hub = self.clone();
        tokio::spawn(async move { hub.sync().await });
    }

    /// Drops the channels idle for [`IDLE`] and unsubscribes them.
    async fn sweep_idle(&self) {
        self.lock().sweep(Instant::now(), usize::MAX);
        self.sync().await;
    }

    fn start(self: &Arc<Self>) {
        let mut st = self.lock();
        if st.started {
            return;
        }
        st.started = true;
        tokio::spawn(run(Arc::downgrade(self)));
    }
}

/// The connection loop; ends when the hub (its client) is gone. A connection whose
/// subscriptions fail is dropped and made anew after a pause.
async fn run(hub: Weak<WakeHub>) {
    let mut pause = RECONNECT_PAUSE;
    loop {
        let Some(h) = hub.upgrade() else { return };
        // a Sentinel source names the primary of now, so a failover is followed here too
        let pubsub = h.pubsub.client();
        drop(h);
        // a node that is down but not refusing (a lost host) must not hold the loop
        let opened = tokio::time::timeout(COMMAND_TIMEOUT, pubsub.get_async_pubsub()).await;
        if let Ok(Ok(ps)) = opened {
            let (mut sink, mut stream) = ps.split();
            let Some(h) = hub.upgrade() else { return };
            let order = h.subscribing.lock().await;
            let channels: Vec<String> = {
                let mut st = h.lock();
                st.dropped.clear();
                st.channels.keys().cloned().collect()
            };
            let mut ok = true;
            if h.test_clock {
                let r = tokio::time::timeout(COMMAND_TIMEOUT, sink.subscribe(TEST_CLOCK_KEY)).await;
                ok &= matches!(r, Ok(Ok(())));
            }
            for chunk in channels.chunks(CHUNK) {
                let r = tokio::time::timeout(COMMAND_TIMEOUT, sink.subscribe(chunk)).await;
                ok &= matches!(r, Ok(Ok(())));
            }
            if ok {
                pause = RECONNECT_PAUSE;
                {
                    let mut st = h.lock();
                    st.subscribed = channels.into_iter().collect();
                    st.sink = Some(sink);
                }
                // wake-ups sent while nobody listened: have every waiter look once
                h.notify_all();
                h.connected.send_replace(true);
                drop(order);
                drop(h);
                let mut sweep = tokio::time::interval(SWEEP_EVERY);
                sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = sweep.tick() => {
                            let Some(h) = hub.upgrade() else { return };
                            // not inline: the stream keeps being read meanwhile
                            tokio::spawn(async move { h.sweep_idle().await });
                        }
                        msg = stream.next() => {
                            let Some(msg) = msg else { break };
                            let Some(h) = hub.upgrade() else { return };
                            // anything but a number still means "look now"
                            let due = msg.get_payload::<u64>().unwrap_or(0);
                            let channel = msg.get_channel_name();
                            if h.test_clock && channel == TEST_CLOCK_KEY {
                                h.notify_all();
                            } else {
                                h.notify(channel, due);
                            }
                        }
                    }
                }
            } else {
                drop(order);
                drop(h);
            }
            if let Some(h) = hub.upgrade() {
                h.pubsub.failed();
                h.connected.send_replace(false);
                let mut st = h.lock();
                st.sink = None;
                st.subscribed.clear();
                st.dropped.clear();
            }
            tracing::debug!("wake-up connection lost; reconnecting");
        } else if let Some(h) = hub.upgrade() {
            h.pubsub.failed();
        }
        tokio::time::sleep(crate::backoff::jittered(pause)).await;
        pause = (pause * 2).min(MAX_RECONNECT_PAUSE);
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
                    tx: broadcast::channel(1).0,
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
        let waiter = st.channels["a"].tx.subscribe();
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
        let _waiter = st.channels["q0"].tx.subscribe();
        st.sweep(t0 + Duration::from_secs(1), 7);
        assert_eq!(
            names(&st),
            ["q0", "q4", "q5", "q6", "q7", "q8", "q9"],
            "{:?}",
            st.dropped
        );
        // every channel in use: nothing can go
        let mut st = table(&["x", "y"], t0);
        let _w: Vec<_> = st.channels.values().map(|c| c.tx.subscribe()).collect();
        st.sweep(t0 + IDLE * 2, 0);
        assert_eq!(names(&st), ["x", "y"]);
    }

    #[tokio::test]
    async fn the_table_never_exceeds_its_limit() {
        let server = dueq_testkit::RedisServer::start();
        let hub = WakeHub::new(
            PubsubSource::Fixed(Box::new(redis::Client::open(server.url()).unwrap())),
            10,
            false,
        );
        let held: Vec<_> = (0..5)
            .map(|i| hub.receiver(&format!("held{i}")).unwrap())
            .collect();
        for i in 0..100 {
            assert!(hub.receiver(&format!("q{i}")).is_some());
            assert!(hub.lock().channels.len() <= 10);
        }
        let st = hub.lock();
        for i in 0..5 {
            assert!(st.channels.contains_key(&format!("held{i}")));
        }
        drop(st);
        // all ten in use: the eleventh queue polls
        let more: Vec<_> = (0..5)
            .map(|i| hub.receiver(&format!("more{i}")).unwrap())
            .collect();
        assert!(hub.receiver("one-too-many").is_none());
        drop((held, more));
        assert!(hub.receiver("one-too-many").is_some());
    }
}
