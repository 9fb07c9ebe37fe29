//! The user guide's outbox page as one program: an order and its 30-minute timer commit in one
//! transaction, and the payment cancels the timer in another. `dueq relay` (or
//! `dueq serve --postgres`) carries both into Redis.
//!
//! ```sh
//! DUEQ_POSTGRES=postgres://app@db/shop cargo run -p dueq-outbox --example order_in_tx
//! ```
//!
//! The guide shows its parts between the `ANCHOR` comments; a test runs it against a
//! throwaway database.

use dueq_outbox::{OutboxTask, cancel_in_tx, enqueue_in_tx, migrate};
use sqlx::PgPool;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("DUEQ_POSTGRES").map_err(|_| "set DUEQ_POSTGRES")?;
    let pool = PgPool::connect(&url).await?;
    migrate(&pool).await?;
    run(&pool).await
}

/// Everything the guide shows, on `pool` (migrated).
pub async fn run(pool: &PgPool) -> Result<(), BoxError> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, paid boolean NOT NULL DEFAULT false)",
    )
    .execute(pool)
    .await?;

    // ANCHOR: enqueue
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id) VALUES (42)")
        .execute(&mut *tx)
        .await?;
    // the timer commits with the order, or not at all
    enqueue_in_tx(
        &mut tx,
        "orders",
        &OutboxTask::new("order:42:cancel", b"42".to_vec()).delay_ms(30 * 60_000),
    )
    .await?;
    tx.commit().await?;
    // ANCHOR_END: enqueue

    // ANCHOR: cancel
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE orders SET paid = true WHERE id = 42")
        .execute(&mut *tx)
        .await?;
    cancel_in_tx(&mut tx, "orders", "order:42:cancel").await?;
    tx.commit().await?;
    // ANCHOR_END: cancel
    Ok(())
}
