//! Plain option structs of the server's background duties, kept apart from the modules that
//! run them so that [`AppState`](crate::AppState) can hold them without importing those
//! modules (which import the state).

use dueq::Backoff;

/// Settings of push delivery in one server.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct PushOptions {
    /// Whether this server delivers at all. Default `true`.
    pub enabled: bool,
    /// Delays between failed attempts. Default [`Backoff::default`] (1 s doubling to 1 h,
    /// 20 % jitter).
    pub backoff: Backoff,
    /// How often the webhook settings are read again, ms (1 to 60 000). Default 1 000: a new,
    /// changed or removed webhook takes effect within about a second.
    pub poll_ms: u64,
    /// How long shutdown waits for deliveries in flight before aborting them and handing
    /// their leases back, ms. Default 0 (hand back at once; the task is delivered again).
    pub shutdown_grace_ms: u64,
}

impl Default for PushOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            backoff: Backoff::default(),
            poll_ms: 1_000,
            shutdown_grace_ms: 0,
        }
    }
}

impl PushOptions {
    /// Turns delivery on or off.
    pub fn enabled(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }

    /// Delays between failed attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How often webhook settings are read, ms (clamped to 1 to 60 000).
    pub fn poll_ms(mut self, ms: u64) -> Self {
        self.poll_ms = ms.clamp(1, 60_000);
        self
    }

    /// Grace for deliveries in flight at shutdown, ms.
    pub fn shutdown_grace_ms(mut self, ms: u64) -> Self {
        self.shutdown_grace_ms = ms;
        self
    }
}
