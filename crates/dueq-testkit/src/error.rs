//! The error of the `try_` forms, for callers that report failures themselves.

use std::fmt;
use std::time::Duration;

/// Why a server or cluster could not be started or did not reach the state waited for. Its
/// text is the message the panicking form of the same call panics with.
#[derive(Debug, Clone)]
pub struct Error {
    message: String,
}

impl Error {
    pub(crate) fn new(message: String) -> Self {
        Self { message }
    }

    /// A wait for `what` that ran out after `deadline`.
    pub(crate) fn timeout(deadline: Duration, what: &str) -> Self {
        Self::new(format!("timed out after {deadline:?} waiting until {what}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
