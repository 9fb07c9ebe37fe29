//! What a handler is and what it returns.

use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::task::ClaimedTask;

/// What a handler says about the task it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Done: acknowledge it.
    Success,
    /// Failed this attempt: run it again after `after_ms` (or the backoff when `None`), or
    /// move it to the dead-letter queue when it is out of attempts.
    Retry {
        /// Kept as the task's `last_error`.
        error: String,
        /// Delay before the next attempt; `None` uses the worker's backoff.
        after_ms: Option<u64>,
    },
    /// Failed for good: straight to the dead-letter queue.
    Fail {
        /// Kept as the task's `last_error`.
        error: String,
    },
}

impl Outcome {
    /// Retry after the backoff.
    pub fn retry(error: impl Display) -> Self {
        Self::Retry {
            error: error.to_string(),
            after_ms: None,
        }
    }

    /// Retry after `after_ms` milliseconds.
    pub fn retry_after(after_ms: u64, error: impl Display) -> Self {
        Self::Retry {
            error: error.to_string(),
            after_ms: Some(after_ms),
        }
    }

    /// Fail permanently (dead-letter queue).
    pub fn fail(error: impl Display) -> Self {
        Self::Fail {
            error: error.to_string(),
        }
    }
}

impl<E: Display> From<Result<(), E>> for Outcome {
    /// `Ok` acknowledges, `Err` retries after the backoff.
    fn from(r: Result<(), E>) -> Self {
        match r {
            Ok(()) => Self::Success,
            Err(e) => Self::retry(e),
        }
    }
}

/// A boxed handler future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// A handler, boxed once: `async fn(ClaimedTask) -> Outcome`.
pub(crate) type Handler = Arc<dyn Fn(ClaimedTask) -> HandlerFuture + Send + Sync>;

pub(crate) fn boxed<F, Fut>(f: F) -> Handler
where
    F: Fn(ClaimedTask) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    Arc::new(move |t| Box::pin(f(t)))
}
