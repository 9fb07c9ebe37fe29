//! The example the user guide shows (`examples/order_in_tx.rs`), run against a throwaway
//! database and Redis, relayed: the paid order's timer never runs.

use dueq::TaskRef;
use dueq_outbox::RelayConfig;

use crate::support::Env;

#[path = "../../examples/order_in_tx.rs"]
#[allow(dead_code)] // its `main`
mod order_in_tx;

#[tokio::test]
async fn the_outbox_example_does_what_the_guide_says() {
    let env = Env::new().await;
    order_in_tx::run(&env.db.pool).await.unwrap();
    let paid: bool = sqlx::query_scalar("SELECT paid FROM orders WHERE id = 42")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert!(paid);
    env.relay_all(&env.relay(RelayConfig::default())).await;
    assert_eq!(
        env.state("order:42:cancel").await.as_deref(),
        Some("cancelled")
    );
    let orders = env.client.queue("orders").unwrap();
    assert!(
        orders
            .get(&TaskRef::key("order:42:cancel").unwrap())
            .await
            .unwrap()
            .is_none()
    );
}
