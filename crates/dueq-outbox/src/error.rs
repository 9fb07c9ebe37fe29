//! The error type of dueq-outbox: bad input (naming the field), PostgreSQL, or dueq (Redis).
//!
//! A separate type rather than [`dueq::Error`], whose constructors are private to the `dueq`
//! crate: an outbox call fails for reasons dueq has no kind for (a PostgreSQL error).

/// What went wrong in an outbox call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input was refused before anything was written.
    #[error("invalid {field}: {message}")]
    InvalidInput {
        /// The offending field: `queue`, `key`, `payload`, `due_at_ms`, `delay_ms`,
        /// `max_attempts`, `lease_ms`, or a setting's name.
        field: &'static str,
        /// Why.
        message: String,
    },
    /// PostgreSQL failed or refused the statement.
    #[error("postgres: {0}")]
    Postgres(#[from] sqlx::Error),
    /// A dueq (Redis) call failed.
    #[error("{0}")]
    Dueq(#[from] dueq::Error),
}

impl Error {
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            message: message.into(),
        }
    }

    /// The field a refused input names, if this is an input error.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::InvalidInput { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Whether repeating the call later may succeed: a lost or refused connection, a pool
    /// timeout, a serialization failure or deadlock, or a retryable dueq (Redis) error.
    /// Input errors and constraint violations are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::InvalidInput { .. } => false,
            Self::Dueq(e) => e.is_retryable(),
            Self::Postgres(e) => match e {
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_) => true,
                // 40001 serialization_failure, 40P01 deadlock_detected, 57P01..03 shutdown,
                // 08* connection exceptions, 53* insufficient resources
                sqlx::Error::Database(d) => d.code().is_some_and(|c| {
                    c == "40001"
                        || c == "40P01"
                        || c.starts_with("57P")
                        || c.starts_with("08")
                        || c.starts_with("53")
                }),
                _ => false,
            },
        }
    }
}

/// `Result` with the outbox's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
