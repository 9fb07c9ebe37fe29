//! The error type of every fallible dueq operation.
//!
//! Expected outcomes of an operation (a cancel that finds the task running, an ack whose lease
//! was lost) are *values* in the operation's result type, not errors: callers branch on them.
//! [`Error`] is for what the caller did wrong ([`ErrorKind::InvalidInput`],
//! [`ErrorKind::PayloadTooLarge`]) or what went wrong underneath ([`ErrorKind::Redis`]).

use std::fmt;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input was refused before anything was written: a bad queue name, an empty or
    /// over-long business key, a due time past year 9999, a batch that is too large.
    InvalidInput,
    /// The payload is larger than the client's payload limit; nothing was written.
    PayloadTooLarge,
    /// A business key is taken by another task (live, or in its unique window) (for example when
    /// retrying a dead task).
    Conflict,
    /// Redis could not be reached or answered with an error (connection lost, timeout,
    /// `BUSY`, `READONLY`, ...). The operation may or may not have been applied when the
    /// failure came after the request was sent. An enqueue with a key sent again returns the
    /// first task while that task is scheduled or running (no duplicate), but creates a
    /// second task once the first has finished (succeeded, dead, cancelled or expired). An
    /// ack, nack, cancel or reschedule sent again answers that it was already applied.
    Redis,
    /// Redis answered something the protocol does not expect (a broken invariant, or a
    /// server whose keys were changed by hand).
    Protocol,
    /// Fewer replicas than asked confirmed a durable write in time (`WAIT`; see
    /// [`ClientBuilder::replicas`](crate::ClientBuilder::replicas)). The write did happen on
    /// the primary and may or may not survive a failover. Repeating an enqueue by key adds
    /// no duplicate while the first task is scheduled or running (see [`ErrorKind::Redis`]).
    NotReplicated,
}

/// A dueq error: a [`ErrorKind`] plus a human-readable message.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<redis::RedisError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, message)
    }

    /// The same error with `context` (what was being done) before its message.
    pub(crate) fn context(mut self, context: &str) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// The same error with `hint` (what to do about it) after its message.
    pub(crate) fn hint(mut self, hint: &str) -> Self {
        self.message.push_str(hint);
        self
    }

    /// The same error again (kind and message, without its source), for each of several
    /// items one failure stopped.
    pub(crate) fn again(&self) -> Self {
        Self::new(self.kind, self.message.clone())
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether repeating the same call later may succeed (Redis unreachable, timed out,
    /// busy, failing over). Input errors are never retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Redis | ErrorKind::NotReplicated)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Self {
            kind: ErrorKind::Redis,
            message: format!("redis: {e}"),
            source: Some(e),
        }
    }
}

/// `Result` with dueq's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
