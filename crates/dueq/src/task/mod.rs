//! Tasks and the values that name, schedule and report on them.
//!
//! Times are integer milliseconds: `*_at_ms` are Unix epoch milliseconds by the Redis
//! server's clock, `*_ms` alone are durations.
//!
//! One file per kind: `id.rs` (names: [`TaskId`], [`TaskRef`], [`LeaseToken`]), `spec.rs`
//! (what to enqueue: [`TaskSpec`] and its options), `view.rs` (a task as read or claimed),
//! `outcome.rs` (what each operation did). Queue counts are `stats.rs` at the crate root.

mod id;
mod outcome;
mod spec;
mod view;

pub use id::{LeaseToken, MAX_ID_BYTES, MAX_KEY_BYTES, TaskId, TaskRef, validate_key};
pub use outcome::{
    AckOutcome, CancelOutcome, DeadRetryOutcome, EnqueueOutcome, Enqueued, NackOutcome,
    RescheduleOutcome,
};
pub use spec::{
    DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, Due, Expiry, MAX_ATTEMPTS, MAX_DELAY_MS, MAX_DUE_AT_MS,
    MAX_GROUP_BYTES, MAX_LEASE_MS, MAX_PRIORITY, MIN_LEASE_MS, OnConflict, TaskSpec,
    validate_group, validate_lease_ms,
};
pub use view::{ClaimedTask, DeadPage, DeadTask, Task, TaskState};
