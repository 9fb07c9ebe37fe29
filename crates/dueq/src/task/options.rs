//! [`TaskOptions`]: how a task runs, whatever made it: an enqueue ([`TaskSpec`]), a schedule's
//! tick ([`ScheduleSpec`]) or an outbox row. Each option is defined, documented and checked
//! here once; the builders get its setter from [`task_option_setters!`].
//!
//! What belongs to one enqueue rather than to the task stays on [`TaskSpec`]: the due time, the
//! expiry (relative to it), the business key and what a live key does.
//!
//! [`TaskSpec`]: crate::TaskSpec
//! [`ScheduleSpec`]: crate::ScheduleSpec

use serde::{Deserialize, Serialize};

use super::headers::Headers;
use crate::error::{Error, Result};

/// Most attempts a task may be given (`max_attempts`); stored in 16 bits.
pub const MAX_ATTEMPTS: u32 = 65_535;

/// Default attempts before a task goes to the dead-letter queue.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// Default lease (visibility timeout) of a claimed task.
pub const DEFAULT_LEASE_MS: u64 = 30_000;

/// Longest lease dueq accepts: about 49 days (it is stored in 32 bits).
pub const MAX_LEASE_MS: u64 = u32::MAX as u64;

/// Shortest lease dueq accepts: a worker renews a lease when less than half of it
/// is left, so a shorter one expires under a live worker on an ordinary network or
/// scheduling pause, and another worker runs the task at the same time.
pub const MIN_LEASE_MS: u64 = 1_000;

/// Highest (last-served) priority; 0 is served first.
pub const MAX_PRIORITY: u8 = 9;

/// Longest unique window (`unique_for_ms`): 366 days.
pub const MAX_UNIQUE_FOR_MS: u64 = 366 * 24 * 3_600_000;

/// Longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 256;

/// The options of one task. `None` and 0 are the defaults: the queue's settings where the
/// task runs. Every field is checked by [`TaskOptions::check`], each error naming its field.
///
/// Serialized as a JSON object that leaves out the options at their defaults (a stored
/// schedule keeps its options so); `null` reads as the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskOptions {
    /// Attempts before the dead-letter queue, 1 to [`MAX_ATTEMPTS`]. `None`: the queue's
    /// `max_attempts` setting (else 5), read when an attempt fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// How long a worker holds the task before it is presumed dead, [`MIN_LEASE_MS`] to
    /// [`MAX_LEASE_MS`]. `None`: the queue's `lease_ms` setting (else 30 000), read at each
    /// claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// 0 (served first, the default) to [`MAX_PRIORITY`].
    #[serde(
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "null_as_zero"
    )]
    pub priority: u8,
    /// The group (a tenant, a customer), 1 to [`MAX_GROUP_BYTES`] bytes; `None` for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// How long the task's business key stays taken after the task finished (succeeded,
    /// dead, cancelled or expired), 0 to [`MAX_UNIQUE_FOR_MS`]: an enqueue of the key
    /// within that window creates nothing. Needs a key. `None`: the queue's `unique_for_ms`
    /// setting (else 0, no window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_for_ms: Option<u64>,
    /// The task's headers ([`Headers`]): a small string map carried with it, returned by
    /// get, claim and push delivery. Empty for none.
    #[serde(default, skip_serializing_if = "Headers::is_empty")]
    pub headers: Headers,
}

fn is_zero(p: &u8) -> bool {
    *p == 0
}

fn null_as_zero<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<u8, D::Error> {
    Ok(Option::<u8>::deserialize(d)?.unwrap_or(0))
}

impl TaskOptions {
    /// The name of every option, as in the HTTP API and the JSON form; an error of
    /// [`TaskOptions::check`] starts with one of them.
    pub const FIELDS: &'static [&'static str] = &[
        "max_attempts",
        "lease_ms",
        "priority",
        "group",
        "unique_for_ms",
        "headers",
    ];

    /// The defaults: every option from the queue's settings.
    pub fn new() -> Self {
        Self::default()
    }

    fn task_options_mut(&mut self) -> &mut TaskOptions {
        self
    }

    crate::task_option_setters!(@setters);

    /// Checks every option; the error's message starts with the field's name.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the first bad field.
    pub fn check(&self) -> Result<()> {
        if let Some(n) = self.max_attempts
            && !(1..=MAX_ATTEMPTS).contains(&n)
        {
            return Err(Error::invalid(format!(
                "max_attempts: must be 1 to {MAX_ATTEMPTS}, got {n}"
            )));
        }
        if let Some(l) = self.lease_ms {
            validate_lease_ms(l)?;
        }
        if self.priority > MAX_PRIORITY {
            return Err(Error::invalid(format!(
                "priority: must be 0 to {MAX_PRIORITY}, got {}",
                self.priority
            )));
        }
        if let Some(g) = &self.group {
            validate_group(g)?;
        }
        if let Some(w) = self.unique_for_ms {
            validate_unique_for_ms(w)?;
        }
        self.headers.check()?;
        Ok(())
    }
}

/// The setter of every [`TaskOptions`] field, and `options` to set them all, for a builder
/// whose field `$field` holds them: `task_option_setters!(options)` in
/// [`TaskSpec`](crate::TaskSpec), [`ScheduleSpec`](crate::ScheduleSpec) and the outbox's
/// `OutboxTask`. A new option's setter is written here once.
#[doc(hidden)]
#[macro_export]
macro_rules! task_option_setters {
    ($field:ident) => {
        fn task_options_mut(&mut self) -> &mut $crate::TaskOptions {
            &mut self.$field
        }

        /// Sets every task option at once.
        pub fn options(mut self, options: $crate::TaskOptions) -> Self {
            self.$field = options;
            self
        }

        $crate::task_option_setters!(@setters);
    };
    (@setters) => {
        /// Attempts before the task goes to the dead-letter queue (1 to 65 535). Default: the
        /// queue's `max_attempts` setting (else 5), read when an attempt fails; a schedule's
        /// ticks: 5.
        pub fn max_attempts(mut self, max_attempts: u32) -> Self {
            self.task_options_mut().max_attempts = Some(max_attempts);
            self
        }

        /// How long a worker holds the task before it is presumed dead (1 000 ms to about 49
        /// days). Default: the queue's `lease_ms` setting (else 30 000), read at each claim;
        /// a schedule's ticks: 30 000.
        pub fn lease_ms(mut self, lease_ms: u64) -> Self {
            self.task_options_mut().lease_ms = Some(lease_ms);
            self
        }

        /// Priority 0 (served first, the default) to 9. Among tasks that are due, a lower
        /// number is claimed first; within one priority, due-time order, then enqueue order.
        /// Priority never makes a task claimable before its due time. With a group it orders
        /// the group's own due tasks; groups are still served round-robin, whatever their
        /// tasks' priorities.
        pub fn priority(mut self, priority: u8) -> Self {
            self.task_options_mut().priority = priority;
            self
        }

        /// The group (a tenant, a customer; 1 to 256 bytes): the queue's `group_concurrency`
        /// and `group_rate_limit` apply to each group on its own, and due tasks of different
        /// groups are handed out round-robin. Default none. A replace keeps the group the task
        /// has.
        pub fn group(mut self, group: impl Into<String>) -> Self {
            self.task_options_mut().group = Some(group.into());
            self
        }

        /// The unique window (0 to 366 days, in ms): after the task finished (succeeded,
        /// dead, cancelled or expired) its business key stays taken this long, so an enqueue
        /// of the key meanwhile creates nothing and answers the finished task
        /// ([`EnqueueOutcome::Finished`](crate::EnqueueOutcome::Finished)); a replace or
        /// debounce is refused the same way. Needs a key. Default: the queue's
        /// `unique_for_ms` setting (else none: the key is free once its task finished).
        pub fn unique_for_ms(mut self, unique_for_ms: u64) -> Self {
            self.task_options_mut().unique_for_ms = Some(unique_for_ms);
            self
        }

        /// Sets header `name` (lower-cased) to `value`: a small string map carried with the
        /// task and returned by get, claim and push delivery (at most 32 entries, names of
        /// `A-Z a-z 0-9 _ . -` up to 64 bytes, printable ASCII values up to 1 KiB, 4 KiB in
        /// all). A replace or debounce replaces them with the payload.
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.task_options_mut().headers.insert(name, value);
            self
        }

        /// Sets all headers at once (see [`header`](Self::header)).
        pub fn headers(mut self, headers: $crate::Headers) -> Self {
            self.task_options_mut().headers = headers;
            self
        }
    };
}

/// Checks a unique window: 0 to [`MAX_UNIQUE_FOR_MS`].
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), message starting
/// `unique_for_ms:`.
pub fn validate_unique_for_ms(ms: u64) -> Result<()> {
    if ms > MAX_UNIQUE_FOR_MS {
        return Err(Error::invalid(format!(
            "unique_for_ms: must be 0 to {MAX_UNIQUE_FOR_MS} (366 days), got {ms}"
        )));
    }
    Ok(())
}

/// Checks a lease length: [`MIN_LEASE_MS`] to [`MAX_LEASE_MS`].
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), message starting `lease_ms:`.
pub fn validate_lease_ms(lease_ms: u64) -> Result<()> {
    if lease_ms < MIN_LEASE_MS {
        return Err(Error::invalid(format!(
            "lease_ms: must be {MIN_LEASE_MS} to {MAX_LEASE_MS}, got {lease_ms}: a shorter \
             lease expires before a worker can renew it, and the task runs twice at once"
        )));
    }
    if lease_ms > MAX_LEASE_MS {
        return Err(Error::invalid(format!(
            "lease_ms: must be {MIN_LEASE_MS} to {MAX_LEASE_MS} (about 49 days), got {lease_ms}"
        )));
    }
    Ok(())
}

/// Checks a group name: 1 to 256 bytes of UTF-8.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming `group`.
pub fn validate_group(group: &str) -> Result<()> {
    if group.is_empty() || group.len() > MAX_GROUP_BYTES {
        return Err(Error::invalid(format!(
            "group: must be 1 to {MAX_GROUP_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_name_their_field() {
        let cases = [
            (TaskOptions::new().max_attempts(0), "max_attempts:"),
            (TaskOptions::new().max_attempts(65_536), "max_attempts:"),
            (TaskOptions::new().lease_ms(999), "lease_ms:"),
            (TaskOptions::new().priority(10), "priority:"),
            (TaskOptions::new().group(""), "group:"),
            (TaskOptions::new().header("a b", "v"), "headers:"),
        ];
        for (o, field) in cases {
            assert!(TaskOptions::FIELDS.contains(&field.trim_end_matches(':')));
            let e = o.check().unwrap_err();
            assert!(
                e.to_string().starts_with(field),
                "{e} should start with {field}"
            );
        }
        let long = TaskOptions::new()
            .lease_ms(MAX_LEASE_MS + 1)
            .check()
            .unwrap_err();
        assert!(!long.to_string().contains("shorter"), "{long}");
        TaskOptions::new()
            .max_attempts(1)
            .lease_ms(1_000)
            .priority(9)
            .group("g")
            .check()
            .unwrap();
    }

    #[test]
    fn json_leaves_out_defaults() {
        assert_eq!(serde_json::to_string(&TaskOptions::new()).unwrap(), "{}");
        let o = TaskOptions::new().priority(2).group("m");
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(text, r#"{"priority":2,"group":"m"}"#);
        assert_eq!(serde_json::from_str::<TaskOptions>(&text).unwrap(), o);
        let nulls = r#"{"max_attempts":null,"lease_ms":null,"priority":null,"group":null}"#;
        assert_eq!(
            serde_json::from_str::<TaskOptions>(nulls).unwrap(),
            TaskOptions::new()
        );
    }
}
