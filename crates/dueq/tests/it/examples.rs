//! The examples the user guide shows (`examples/`), run against a throwaway Redis, so the
//! guide's code compiles and does what the guide says.

use dueq::{RateLimit, TaskRef};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE};

#[path = "../../examples/order_timeout.rs"]
#[allow(dead_code)] // its `main`
mod order_timeout;

#[path = "../../examples/test_clock.rs"]
#[allow(dead_code)] // its `main`
mod test_clock;

#[tokio::test]
async fn the_test_clock_example_passes_on_a_fresh_redis_and_fails_beside_real_queues() {
    let ctx = Ctx::new().await;
    test_clock::an_unpaid_order_is_cancelled_after_30_minutes(&ctx.server.url())
        .await
        .unwrap();
    // only order 42's timer ran, 30 minutes on by the virtual clock
    let orders = ctx.queue("orders");
    let s = orders.stats().await.unwrap();
    assert_eq!(
        (s.succeeded_total, s.cancelled_total, s.scheduled),
        (1, 1, 0)
    );

    // the same test on a Redis with real queues is refused before it writes anything
    let busy = Ctx::new().await;
    busy.queue("real")
        .enqueue(dueq::TaskSpec::new(b"x".to_vec()))
        .await
        .unwrap();
    let e = test_clock::an_unpaid_order_is_cancelled_after_30_minutes(&busy.server.url())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("made without the test clock"), "{e}");
    assert!(!busy.client.has_queue("orders").await.unwrap());
}

#[tokio::test]
async fn the_order_timeout_example_does_what_the_guide_says() {
    let ctx = Ctx::new().await;
    let orders = ctx.queue("orders");
    let shutdown = {
        let orders = orders.clone();
        async move {
            // the worker ran the unpaid order's timer
            wait_until_async(DEADLINE, "order 43's timer ran", || async {
                orders.stats().await.unwrap().succeeded_total == 1
            })
            .await;
        }
    };
    order_timeout::run(&ctx.server.url(), shutdown)
        .await
        .unwrap();

    // order 42 was paid: its timer is gone, never run
    let s = orders.stats().await.unwrap();
    assert_eq!(
        (s.scheduled, s.succeeded_total, s.cancelled_total),
        (0, 1, 1)
    );
    assert!(
        orders
            .get(&TaskRef::key("order:42:cancel").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let report = orders.schedule("nightly-report").await.unwrap().unwrap();
    assert_eq!(report.spec.tz.as_deref(), Some("Europe/Berlin"));
    let payouts = ctx.queue("payouts");
    let settings = payouts.settings().await.unwrap();
    assert_eq!(settings.rate_limit, Some(RateLimit::new(100, 1_000)));
    assert_eq!(settings.group_concurrency, Some(5));
    assert_eq!(payouts.stats().await.unwrap().scheduled, 1);
}
