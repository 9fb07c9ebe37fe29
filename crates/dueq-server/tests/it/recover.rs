//! The background recoverer of `serve()`: a task claimed over HTTP whose lease runs out goes
//! back to `scheduled` (attempt counted) or to `dead` with no claim ever made again, and the
//! lease-expired metric counts it.

use std::time::Duration;

use dueq_server::serve;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::{Ctx, DEADLINE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_are_recovered_without_claims() {
    let c = Ctx::with(|b| b.recover_interval_ms(50), None).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, c.state.clone(), async {
        let _ = stopped.await;
    }));

    let retried = c.enqueue("q", json!({"payload": 1, "key": "k1"})).await;
    let dying = c
        .enqueue("q", json!({"payload": 2, "max_attempts": 1}))
        .await;
    let r = c
        .post("/v1/queues/q/claim", json!({"max": 2, "lease_ms": 1000}))
        .await;
    let claimed: Vec<&str> = r.body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(claimed, [retried.as_str(), dying.as_str()], "{r:?}");
    let lease_expires_at_ms = r.body["tasks"][0]["lease_expires_at_ms"].as_u64().unwrap();
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{retried}")).await.body["state"],
        "active"
    );

    // Never acked, and nobody claims from "q" again: only the recoverer can bring them back.
    let task = |id: String| {
        let c = &c;
        async move { c.get(&format!("/v1/queues/q/tasks/{id}")).await.body }
    };
    dueq_testkit::wait_until_async(DEADLINE, "both expired leases are recovered", || {
        let (a, b) = (task(retried.clone()), task(dying.clone()));
        async move { a.await["state"] == "scheduled" && b.await["state"] == "dead" }
    })
    .await;

    // DESIGN 2.4: back to scheduled counting the attempt, or dead when none is left.
    let t: Value = task(retried.clone()).await;
    assert_eq!(t["attempt"], 1, "{t}");
    assert_eq!(t["last_error"], "lease expired", "{t}");
    assert!(
        t["due_at_ms"].as_u64().unwrap() >= lease_expires_at_ms,
        "{t}"
    );
    let d: Value = task(dying.clone()).await;
    assert_eq!(d["attempt"], 1, "{d}");
    let stats = c.client.queue("q").unwrap().stats().await.unwrap();
    assert_eq!((stats.active, stats.scheduled, stats.dead), (0, 1, 1));

    let metrics = c.get("/metrics").await.text;
    assert!(
        metrics
            .lines()
            .any(|l| l == "dueq_lease_expired_total{queue=\"q\"} 2"),
        "{metrics}"
    );

    // shutdown stops the recoverer with the server
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
