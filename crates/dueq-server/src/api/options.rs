//! The task options in request bodies: [`with_task_options!`] adds each field of
//! [`dueq::TaskOptions`], with its documentation and bounds, to the body of an enqueue and of a
//! schedule, and `task_options()` to read them back. A new option's HTTP field is written here
//! once.

/// Declares a request body struct with the task options' fields after its own, and
/// `fn task_options(&self) -> dueq::TaskOptions`.
macro_rules! with_task_options {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($fields:tt)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($fields)*
            /// Attempts before the dead-letter queue, 1 to 65535. Default for an enqueue: the
            /// queue's `max_attempts` setting, else 5; for a schedule's ticks: 5.
            #[schema(minimum = 1, maximum = 65535)]
            pub max_attempts: Option<u32>,
            /// Lease of a claim, 1000 to 4294967295 ms. Default for an enqueue: the queue's
            /// `lease_ms` setting, else 30000; for a schedule's ticks: 30000.
            #[schema(minimum = 1000, maximum = 4294967295_u64)]
            pub lease_ms: Option<u64>,
            /// Priority 0 (served first, the default) to 9: among due tasks a lower number is
            /// claimed first; never before the due time. With `group`, it orders the group's
            /// own due tasks (groups are still served round-robin).
            #[schema(minimum = 0, maximum = 9)]
            pub priority: Option<u8>,
            /// Group (a tenant, a customer), 1 to 256 bytes: `group_concurrency` and
            /// `group_rate_limit` apply to each group on its own, and due tasks of different
            /// groups are handed out round-robin. An enqueue that replaces a live task keeps
            /// that task's group.
            #[schema(min_length = 1, max_length = 256)]
            pub group: Option<String>,
            /// Unique window, 0 to 31622400000 ms (366 days); needs a `key`. After the task
            /// finished (succeeded, dead, cancelled or expired) its key stays taken this long:
            /// an enqueue of the key meanwhile creates nothing and answers the finished task
            /// (200 with `created: false` and its `state`; a replace or debounce is a 409
            /// `unique_window`). Default: the queue's `unique_for_ms` setting, else none.
            #[schema(minimum = 0, maximum = 31622400000_u64)]
            pub unique_for_ms: Option<u64>,
            /// Headers: a small string map carried with the task and returned by get, claim
            /// and push delivery; replaced with the payload on `replace` / `debounce`. At most
            /// 32 entries, names of `A-Z a-z 0-9 _ . -` up to 64 bytes (compared
            /// case-insensitively, stored lower-case), values of printable ASCII up to 1024
            /// bytes, 4096 bytes in all. A `traceparent` / `tracestate` here is the producer's
            /// W3C trace context.
            #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
            pub headers: Option<dueq::Headers>,
        }

        impl $name {
            /// The task options given (checked where they are used).
            pub(crate) fn task_options(&self) -> dueq::TaskOptions {
                let mut o = dueq::TaskOptions::new();
                o.max_attempts = self.max_attempts;
                o.lease_ms = self.lease_ms;
                o.priority = self.priority.unwrap_or(0);
                o.group = self.group.clone();
                o.unique_for_ms = self.unique_for_ms;
                o.headers = self.headers.clone().unwrap_or_default();
                o
            }
        }
    };
}

pub(crate) use with_task_options;
