//! Tasks and the values that name, schedule and report on them.
//!
//! Times are integer milliseconds: `*_at_ms` are Unix epoch milliseconds by the Redis
//! server's clock, `*_ms` alone are durations.
//!
//! One file per kind: `id.rs` (names: [`TaskId`], [`TaskRef`], [`LeaseToken`]), `options.rs` (how a
//! task runs: [`TaskOptions`]), `headers.rs` (its string map: [`Headers`]), `spec.rs` (what to enqueue: [`TaskSpec`]), `view.rs` (a task as read or claimed),
//! `outcome.rs` (what each operation did). Queue counts are `stats.rs` at the crate root.

mod headers;
mod id;
mod options;
mod outcome;
mod spec;
mod view;

pub use headers::{
    Headers, MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES,
    TRACEPARENT, TRACESTATE,
};
pub use id::{LeaseToken, MAX_ID_BYTES, MAX_KEY_BYTES, TaskId, TaskRef, validate_key};
pub use options::{
    DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS, MAX_GROUP_BYTES, MAX_LEASE_MS,
    MAX_PRIORITY, MAX_UNIQUE_FOR_MS, MIN_LEASE_MS, TaskOptions, validate_group, validate_lease_ms,
    validate_unique_for_ms,
};
pub use outcome::{
    AckOutcome, CancelOutcome, DeadRetryOutcome, EnqueueOutcome, Enqueued, NackOutcome,
    RescheduleOutcome,
};
pub use spec::{Due, Expiry, MAX_DELAY_MS, MAX_DUE_AT_MS, OnConflict, TaskSpec};
pub use view::{ClaimedTask, DeadPage, DeadTask, KeyWindow, Task, TaskState};
