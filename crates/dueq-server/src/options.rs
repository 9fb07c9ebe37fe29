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

/// Default [`HttpOptions::header_read_timeout_ms`].
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Default [`HttpOptions::idle_timeout_ms`].
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// Default [`HttpOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Connection limits of [`serve`](crate::serve) (HTTP/1.1).
///
/// A connection is in one of three phases: reading a request head, busy with a request (its
/// body, the handler, the answer: bounded by the request time limit), or idle between two
/// requests (keep-alive). The first two timeouts bound the phases a client controls alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Time a client has to send a complete request head, ms: from the connection's accept
    /// for the first request, from the first byte of the head for the next ones on a
    /// keep-alive connection. Past it the connection is closed without an answer (the
    /// slowloris defence). Default 10 000; 0 turns it off.
    pub header_read_timeout_ms: u64,
    /// Time a keep-alive connection may sit idle between the end of an answer and the first
    /// byte of the next request, ms; past it the connection is closed. Default 60 000 (a
    /// client pool reuses its connections across pauses of up to a minute; a long-lived idle
    /// connection costs a slot of `max_connections`); 0 turns it off.
    pub idle_timeout_ms: u64,
    /// Most connections open at once. At the cap the server stops accepting: new connections
    /// wait in the listen backlog of the kernel (and are served, in order, as open ones
    /// close) rather than being accepted and closed at once, so a burst costs clients latency,
    /// not errors, and a client that retries on a reset cannot spin against the server. A
    /// slot held by a client that sends nothing is freed within the two timeouts above.
    /// Default 10 000 (each costs a file descriptor and its buffers: keep it below the
    /// process's open-file limit). At least 1.
    pub max_connections: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl HttpOptions {
    /// Time to send a complete request head, ms (0: no limit).
    pub fn header_read_timeout_ms(mut self, ms: u64) -> Self {
        self.header_read_timeout_ms = ms;
        self
    }

    /// Idle time of a keep-alive connection between requests, ms (0: no limit).
    pub fn idle_timeout_ms(mut self, ms: u64) -> Self {
        self.idle_timeout_ms = ms;
        self
    }

    /// Most connections open at once (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
}
