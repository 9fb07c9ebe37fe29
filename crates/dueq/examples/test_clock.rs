//! The user guide's page on testing timers as one program: an integration test of "cancel
//! the order 30 minutes after checkout unless it is paid" that runs in well under a second,
//! on the test clock.
//!
//! ```sh
//! redis-server --port 6390 --save '' &    # a Redis of the test's own
//! DUEQ_REDIS_URL=redis://127.0.0.1:6390 cargo run -p dueq --example test_clock
//! ```
//!
//! The guide shows the part between the `ANCHOR` comments; a test runs it against a throwaway
//! Redis, so the guide's code always compiles and works.

use std::time::Duration;

use dueq::{Client, Outcome, TaskRef, TaskSpec, TaskState, Worker};
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> dueq::Result<()> {
    let url =
        std::env::var("DUEQ_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".to_owned());
    an_unpaid_order_is_cancelled_after_30_minutes(&url).await
}

/// The test, against the Redis at `url` (one that holds no queues, or runs the test clock).
pub async fn an_unpaid_order_is_cancelled_after_30_minutes(url: &str) -> dueq::Result<()> {
    // ANCHOR: test
    // the test clock runs only on a Redis of the test's own, never beside real queues
    let client = Client::builder(url).test_clock().connect().await?;
    let clock = client.test_clock().expect("the Redis runs the test clock");
    let orders = client.queue("orders")?;

    // the code under test: a worker that cancels unpaid orders
    let (cancelled, mut seen) = mpsc::unbounded_channel();
    let worker = Worker::builder(client.clone())
        .handle("orders", move |task| {
            let cancelled = cancelled.clone();
            async move {
                let _ = cancelled.send(task.key.unwrap_or_default());
                Outcome::Success
            }
        })
        .build()?
        .start();

    for order in [42, 43] {
        let timer = TaskSpec::new(order.to_string().into_bytes())
            .key(format!("order:{order}:cancel"))
            .delay_ms(30 * 60_000);
        orders.enqueue(timer).await?;
    }
    // order 43 is paid: its timer goes
    orders.cancel(&TaskRef::key("order:43:cancel")?).await?;

    clock.advance(Duration::from_secs(29 * 60)).await?;
    // not run early: still waiting after 29 minutes, with the worker waiting for it
    let timer = orders.get(&TaskRef::key("order:42:cancel")?).await?;
    assert_eq!(timer.map(|t| t.state), Some(TaskState::Scheduled));
    clock.advance(Duration::from_secs(60)).await?;
    // the waiting worker runs the timer at once: no sleep, no real 30 minutes
    let ran = tokio::time::timeout(Duration::from_secs(1), seen.recv()).await;
    assert_eq!(ran, Ok(Some("order:42:cancel".to_owned())));
    worker.shutdown().await?;
    // ANCHOR_END: test
    Ok(())
}
