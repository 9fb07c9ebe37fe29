//! dueq: a delay queue and task scheduler on Redis sorted sets.
//!
//! A producer says "run this task at time T" (or "in 30 minutes"); at T one worker gets it,
//! runs it and acknowledges it. Typical jobs: cancel an unpaid order 30 minutes after it was
//! placed unless payment arrives first, confirm receipt 7 days after delivery, retry a call
//! later.
//!
//! # Guarantees
//!
//! * **At-least-once, never early**: every task not cancelled ends `succeeded` or `dead`; no
//!   task is handed out before its due time.
//! * **One clock**: "now" is the Redis server's `TIME`, read inside the scripts.
//! * **Fencing**: a claim returns a [`LeaseToken`]; ack, nack and extend with a stale token are
//!   refused and change nothing.
//! * **Crash recovery**: an expired lease goes back to scheduled (or dead) within a second,
//!   driven by any live worker.
//! * **Order and precision**: due-time order, FIFO among equal due times; an idle worker wakes
//!   for the next due millisecond by itself.
//! * **Cancel, reschedule and look up by business key** in O(log n), atomic with claims.
//!
//! # Quick start
//!
//! ```no_run
//! use dueq::{Client, Outcome, TaskRef, TaskSpec, Worker};
//!
//! # async fn f() -> dueq::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let orders = client.queue("orders")?;
//! // cancel order 42 in 30 minutes unless it is paid first
//! orders
//!     .enqueue(TaskSpec::new(b"42".to_vec()).key("order:42:cancel").delay_ms(30 * 60_000))
//!     .await?;
//! // ... payment arrived:
//! orders.cancel(&TaskRef::key("order:42:cancel")?).await?;
//!
//! let worker = Worker::builder(client)
//!     .handle("orders", |task| async move {
//!         println!("cancelling order {}", String::from_utf8_lossy(&task.payload));
//!         Outcome::Success
//!     })
//!     .build()?;
//! worker.run_until(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```

pub mod backoff;
mod client;
pub mod due;
pub mod duties;
mod error;
#[cfg(all(feature = "frozen-clock", debug_assertions))]
mod frozen_clock;
mod hash;
pub mod json;
pub mod protocol;
mod redact;
pub mod schedule;
mod settings;
mod stats;
mod task;
pub mod trace;
mod worker;
pub mod written;

pub use backoff::Backoff;
pub use client::Throttle;
pub use client::{BackfillReport, MAX_BACKFILL_TICKS};
pub use client::{
    CancelReport, Claim, Client, ClientBuilder, DEFAULT_PAYLOAD_LIMIT_BYTES,
    DEFAULT_WAKE_CHANNELS_MAX, DeadBulk, DeadBulkReport, DeadFilter, DueHistogram, EvictionCheck,
    LAYOUT_TTL, MAX_DEAD_OFFSET, MAX_ERROR_BYTES, MAX_FILTER_BYTES, MAX_SPREAD_MS, Purge,
    PurgeReport, Queue, READINESS_TIMEOUT_MS, Readiness, RecoverReport, TaskPage,
};
pub use client::{ClockReading, MAX_TEST_CLOCK_ADVANCE_MS, MAX_TEST_CLOCK_MS, TestClock};
pub use client::{ConnectionHealth, DEFAULT_REPLICA_TIMEOUT_MS, MAX_REPLICAS};
pub use client::{
    DEFAULT_HEARTBEAT_MS, HEARTBEAT_MISSES, MAX_HEARTBEAT_MS, MAX_LISTED_QUEUES,
    MAX_WORKER_ID_BYTES, MAX_WORKER_TEXT_BYTES, MAX_WORKERS, MIN_HEARTBEAT_MS, WorkerBeat,
    WorkerInfo, WorkerKind,
};
pub use client::{
    DEFAULT_WEBHOOK_CONCURRENCY, DEFAULT_WEBHOOK_TIMEOUT_MS, MAX_PREVIOUS_WEBHOOK_SECRETS,
    MAX_WEBHOOK_CONCURRENCY, MAX_WEBHOOK_SECRET_BYTES, MAX_WEBHOOK_TIMEOUT_MS,
    MAX_WEBHOOK_URL_BYTES, MIN_WEBHOOK_SECRET_BYTES, WEBHOOK_ROTATION_MS, WEBHOOK_SECRET_PREFIX,
    Webhook, WebhookConfig, WebhookSet, signing_key,
};
pub use due::DueClaimer;
pub use duties::{
    DEFAULT_RECOVER_INTERVAL_MS, DEFAULT_SCHEDULE_POLL_MS, DEFAULT_SWEEP_MS, Duties, Heartbeat,
    LeaseRecoverer, RunningDuties, ScheduleFirer, WorkerLoad, validate_heartbeat_ms,
};
pub use error::{Error, ErrorKind, Result};
#[cfg(all(feature = "frozen-clock", debug_assertions))]
pub use frozen_clock::FrozenClock;
pub use protocol::keys::{
    MAX_PARTITIONS, QueueKeys, partition_of_id, partition_of_key, slot_of, validate_queue_name,
};
pub use redact::redact_url;
pub use schedule::{
    DEFAULT_MISFIRE_GRACE_MS, Misfire, Overlap, Schedule, ScheduleSpec, SetOutcome, SetReport,
    validate_schedule_name,
};
pub use settings::{
    BackoffSettings, MAX_BACKOFF_MS, MAX_LIMIT, MAX_RATE_WINDOW_MS, MAX_RETENTION, OnExpire,
    QueueSettings, RateLimit, SettingsPatch,
};
pub use stats::{
    LATENESS_BOUNDS_MS, MinuteStats, QueueStats, RUN_TIME_BOUNDS_MS, ThrottledMs, Timings,
};
pub use task::{
    AckOutcome, CancelOutcome, ClaimedTask, DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, DeadPage,
    DeadRetryOutcome, DeadTask, Due, EnqueueOutcome, Enqueued, Expiry, Headers, KeyWindow,
    LeaseToken, MAX_ATTEMPTS, MAX_DUE_AT_MS, MAX_GROUP_BYTES, MAX_HEADER_NAME_BYTES,
    MAX_HEADER_VALUE_BYTES, MAX_HEADERS, MAX_HEADERS_BYTES, MAX_ID_BYTES, MAX_KEY_BYTES,
    MAX_LEASE_MS, MAX_PRIORITY, MAX_UNIQUE_FOR_MS, MIN_LEASE_MS, NackOutcome, OnConflict,
    RescheduleOutcome, TRACEPARENT, TRACESTATE, Task, TaskId, TaskOptions, TaskRef, TaskSpec,
    TaskState, validate_group, validate_key, validate_lease_ms, validate_unique_for_ms,
};
pub use worker::{
    HandlerFuture, MAX_QUEUE_WEIGHT, Outcome, QueueOrder, Worker, WorkerBuilder, WorkerHandle,
    WorkerStats,
};
