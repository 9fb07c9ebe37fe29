//! PostgreSQL as the source of truth for dueq: a transactional outbox, a relay into Redis and
//! a reconciler.
//!
//! An order and its cancel timer are business facts that must commit together. The
//! application writes the timer as a row of the `dueq_outbox` table **in its own
//! transaction** ([`enqueue_in_tx`], [`cancel_in_tx`], [`reschedule_in_tx`]); a [`Relay`]
//! moves committed rows into Redis (woken by `LISTEN/NOTIFY`, polling as a fallback), writes
//! outcomes back (succeeded, dead, cancelled), and its reconciler ([`Relay::reconcile`])
//! repairs either side when they disagree: tasks Redis lost are re-added with their original
//! due time and key, Redis tasks whose row was deleted or finished by hand are removed (and,
//! in queues declared owned by the outbox, Redis tasks with no live row at all).
//! Redis stays the fast, precise scheduling index; PostgreSQL is the record.
//!
//! ```no_run
//! # async fn f() -> Result<(), dueq_outbox::Error> {
//! use dueq_outbox::{OutboxTask, Relay, RelayConfig, enqueue_in_tx, migrate};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/shop").await?;
//! migrate(&pool).await?;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! enqueue_in_tx(&mut tx, "orders", &OutboxTask::new("order:42:cancel", b"42".to_vec())
//!     .delay_ms(30 * 60_000)).await?;
//! tx.commit().await?; // both or neither
//!
//! // elsewhere (or `dueq relay --postgres URL`):
//! let client = dueq::Client::connect("redis://127.0.0.1:6379").await?;
//! Relay::new(pool, client, RelayConfig::default())
//!     .run_until(async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees and their bounds
//!
//! * **Commit or rollback together.** A rolled-back transaction leaves no row and no task; a
//!   committed row reaches Redis within one relay round (milliseconds with notifications, at
//!   most `poll_ms` without).
//! * **No double enqueue** with several relays: batches are taken with `FOR UPDATE SKIP
//!   LOCKED`, and the Redis enqueue is idempotent by key (a relay that died after Redis
//!   answered but before its commit finds the same task again).
//! * **At-least-once, as dueq.** A task Redis lost is re-added by the reconciler before its
//!   due time when its due time is within the horizon, and at once otherwise. A task that
//!   ran and was acknowledged just before Redis lost it, and whose success the relay had not
//!   yet recorded (normally within `recheck_ms` of the ack), runs again.
//! * **Due times** are absolute in the row; a delay is turned into one by the database clock
//!   at the INSERT (`dueq_outbox_now_ms()`), so clock skew between PostgreSQL and Redis
//!   shifts the firing time by that skew.
//!
//! The table and the row format (the contract for writers in other languages) are described
//! in the crate README and in `migrations/0001_outbox.sql`.

mod config;
mod error;
mod orphans;
mod queues;
mod reconciler;
mod relay;
mod report;
mod rows;
mod schema;
mod task;
mod tombstones;

pub use config::RelayConfig;
pub use error::{Error, Result};
pub use relay::{CHANNEL, Relay, postgres_readiness};
pub use report::{ReconcileReport, RelayReport};
pub use schema::migrate;
pub use task::{
    MAX_DELAY_MS, MAX_PAYLOAD_BYTES, OutboxCancel, OutboxDue, OutboxEnqueued, OutboxStats,
    OutboxTask, cancel_in_tx, enqueue_in_tx, reschedule_in_tx, stats,
};
