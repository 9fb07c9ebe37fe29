//! A small order service: each order and its "cancel if unpaid after N ms" timer are written
//! in one PostgreSQL transaction; a payment cancels the timer in the payment's transaction.
//! A relay carries the timers into Redis and a dueq worker cancels the orders still unpaid.
//!
//! ```sh
//! cargo run -p dueq-outbox --example order_service -- \
//!     postgres://postgres@127.0.0.1:5432/shop redis://127.0.0.1:6390
//! ```
//! (the database must exist: `createdb -h 127.0.0.1 -U postgres shop`). It places three orders
//! due for cancelling after 2 s, pays the second, and prints every order's status once the
//! timers have run.

use std::time::Duration;

use dueq::{Outcome, Worker};
use dueq_outbox::{OutboxTask, Relay, RelayConfig, cancel_in_tx, enqueue_in_tx, migrate};
use sqlx::PgPool;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const UNPAID_TIMEOUT_MS: u64 = 2_000;

/// Places an order and its cancel timer: both commit, or neither.
async fn place_order(pool: &PgPool, id: i64) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id, status) VALUES ($1, 'unpaid')")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let timer =
        OutboxTask::new(format!("order:{id}:cancel"), id.to_string()).delay_ms(UNPAID_TIMEOUT_MS);
    enqueue_in_tx(&mut tx, "orders", &timer).await?;
    tx.commit().await?;
    Ok(())
}

/// Records a payment and cancels the timer in the same transaction.
async fn pay(pool: &PgPool, id: i64) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE orders SET status = 'paid' WHERE id = $1 AND status = 'unpaid'")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    cancel_in_tx(&mut tx, "orders", &format!("order:{id}:cancel")).await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let pg = args
        .next()
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/shop".into());
    let redis = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let pool = PgPool::connect(&pg).await?;
    migrate(&pool).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, status text NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("TRUNCATE orders").execute(&pool).await?;
    let client = dueq::Client::connect(&redis).await?;

    let relay = Relay::new(pool.clone(), client.clone(), RelayConfig::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut s1 = stopped.clone();
    let relay_task = tokio::spawn(async move {
        relay
            .run_until(async move {
                let _ = s1.changed().await;
            })
            .await
    });
    // The worker: cancel the order if it is still unpaid (idempotent: at-least-once).
    let wpool = pool.clone();
    let worker = Worker::builder(client)
        .handle("orders", move |task| {
            let pool = wpool.clone();
            async move {
                let id: i64 = String::from_utf8_lossy(&task.payload).parse().unwrap_or(0);
                match sqlx::query(
                    "UPDATE orders SET status = 'cancelled' WHERE id = $1 AND status = 'unpaid'",
                )
                .bind(id)
                .execute(&pool)
                .await
                {
                    Ok(_) => Outcome::Success,
                    Err(e) => Outcome::Retry {
                        error: e.to_string(),
                        after_ms: None,
                    },
                }
            }
        })
        .build()?
        .start();

    for id in 1..=3 {
        place_order(&pool, id).await?;
    }
    pay(&pool, 2).await?;

    // Wait until every timer is finished in the table (the relay writes outcomes back).
    for _ in 0..300 {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM dueq_outbox WHERE queue = 'orders'
             AND state IN ('pending', 'relayed', 'cancelling')",
        )
        .fetch_one(&pool)
        .await?;
        if open == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    worker.shutdown().await?;
    relay_task.await??;
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT o.id, o.status, t.state FROM orders o
         JOIN dueq_outbox t ON t.key = 'order:' || o.id || ':cancel' ORDER BY o.id",
    )
    .fetch_all(&pool)
    .await?;
    for (id, status, timer) in rows {
        println!("order {id}: {status} (timer {timer})");
    }
    Ok(())
}
