//! The names of a task: its id, a reference by id or business key, and the lease token that
//! proves a claim.

use std::fmt;

use crate::error::{Error, Result};

/// Longest business key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 512;

/// Longest task id, in bytes (ids are ASCII).
pub const MAX_ID_BYTES: usize = 64;

/// A task id: assigned by dueq at enqueue, unique in its queue, opaque ASCII of at most 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

impl TaskId {
    /// Wraps an id given by a caller (for example from a URL).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is empty, longer than
    /// 64 bytes or not printable ASCII.
    pub fn new(id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_ID_BYTES || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid(format!(
                "task id {id:?} is invalid: use 1 to {MAX_ID_BYTES} printable ASCII characters, no spaces"
            )));
        }
        Ok(Self(id))
    }

    pub(crate) fn from_redis(id: String) -> Self {
        Self(id)
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a business key: 1 to 512 bytes of UTF-8, any characters.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when empty or too long.
pub fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid(format!(
            "business key must be 1 to {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// How an operation names its task: by id, or by the business key of a live task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskRef {
    /// By the id dueq assigned.
    Id(TaskId),
    /// By the producer's business key (only live tasks: scheduled or active).
    Key(String),
}

impl TaskRef {
    /// A reference by business key, validated.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty or over-long key.
    pub fn key(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        validate_key(&key)?;
        Ok(Self::Key(key))
    }

    /// A reference by id, validated.
    ///
    /// # Errors
    /// As [`TaskId::new`].
    pub fn id(id: impl Into<String>) -> Result<Self> {
        Ok(Self::Id(TaskId::new(id)?))
    }

    pub(crate) fn parts(&self) -> (&'static str, &str) {
        match self {
            Self::Id(id) => ("id", id.as_str()),
            Self::Key(k) => ("key", k.as_str()),
        }
    }
}

impl From<TaskId> for TaskRef {
    fn from(id: TaskId) -> Self {
        Self::Id(id)
    }
}

/// A lease token: proof of ownership of a claimed task (fencing). A token that is
/// no longer current is refused by ack, nack and extend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// Wraps a token received from a claim (for example over HTTP).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
