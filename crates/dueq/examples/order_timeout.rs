//! The user guide's Rust page as one program: schedule "cancel order 42 in 30 minutes",
//! cancel it when the payment arrives, register a nightly report, limit a payment provider's
//! calls, and run a worker until Ctrl-C.
//!
//! ```sh
//! DUEQ_REDIS_URL=redis://127.0.0.1:6379 cargo run -p dueq --example order_timeout
//! ```
//!
//! The guide shows its parts between the `ANCHOR` comments; a test runs it against a
//! throwaway Redis, so the guide's code always compiles and works.

use std::future::Future;

use dueq::{Client, Outcome, RateLimit, ScheduleSpec, SettingsPatch, TaskRef, TaskSpec, Worker};

#[tokio::main]
async fn main() -> dueq::Result<()> {
    let url =
        std::env::var("DUEQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    run(&url, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// Everything the guide shows, against the Redis at `url`; the worker stops when `shutdown`
/// resolves.
pub async fn run(url: &str, shutdown: impl Future<Output = ()>) -> dueq::Result<()> {
    // ANCHOR: order_timeout
    let client = Client::connect(url).await?;
    let orders = client.queue("orders")?;
    // cancel order 42 in 30 minutes, unless it is paid before
    orders
        .enqueue(
            TaskSpec::new(b"42".to_vec())
                .key("order:42:cancel")
                .delay_ms(30 * 60_000),
        )
        .await?;
    // the payment arrived: the timer goes
    let outcome = orders.cancel(&TaskRef::key("order:42:cancel")?).await?;
    println!("order 42: {outcome:?}"); // Cancelled
    // ANCHOR_END: order_timeout

    // ANCHOR: schedule
    // registered at every start-up: the first answer is Created, then Unchanged
    let set = orders
        .set_schedule(
            &ScheduleSpec::new("nightly-report", b"{}".to_vec())
                .cron("0 30 2 * * *")
                .tz("Europe/Berlin"),
        )
        .await?;
    println!("nightly-report: {:?}", set.outcome);
    // ANCHOR_END: schedule

    // ANCHOR: settings
    // at most 100 calls a second to the provider, at most 5 at once per merchant
    let payouts = client.queue("payouts")?;
    payouts
        .update_settings(
            &SettingsPatch::default()
                .rate_limit(Some(RateLimit::new(100, 1_000)))
                .group_concurrency(Some(5)),
        )
        .await?;
    payouts
        .enqueue(TaskSpec::new(b"payout 7".to_vec()).group("merchant:981"))
        .await?;
    // ANCHOR_END: settings

    // an order left unpaid: its timer is due now
    orders
        .enqueue(TaskSpec::new(b"43".to_vec()).key("order:43:cancel"))
        .await?;

    // ANCHOR: worker
    let stats = Worker::builder(client)
        .concurrency(64)
        .handle("orders", |task| async move {
            println!(
                "cancelling order {}",
                String::from_utf8_lossy(&task.payload)
            );
            Outcome::Success
        })
        .build()?
        .run_until(shutdown) // in main: tokio::signal::ctrl_c()
        .await?;
    println!("{} tasks done", stats.succeeded);
    // ANCHOR_END: worker
    Ok(())
}
