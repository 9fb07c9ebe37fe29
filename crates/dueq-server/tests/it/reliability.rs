//! Case C23 of `shared/cases/CASES.md` (Redis restarts under a live server and worker) and the
//! HTTP side of durable writes (`replicas` on enqueue, 503 `not_replicated`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use dueq::{Client, Outcome, TaskSpec, Worker};
use dueq_server::{AppState, router};
use dueq_testkit::{RedisServer, wait_until_async};
use serde_json::json;

use crate::support::{Ctx, DEADLINE};

/// Within this long of Redis being back, the server and the worker work again (C23).
const BACK_WITHIN: Duration = Duration::from_secs(2);

/// Case C23 in shared/cases/CASES.md: Redis restarts under a live worker and server.
///
/// Proves that with AOF (`appendfsync always`) a server (router and its client) and a Rust
/// worker (its own client) stay up through `kill -9` and a restart of Redis: `/readyz` is 503
/// while Redis is down and 200 within 2 s of it being back; tasks enqueued before the crash
/// (100 for the worker, 100 for HTTP claims, falling due during the outage) are all handed
/// out within 2 s of Redis being back: nothing is lost. `/metrics` counts the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c23_restart_under_live_worker_and_server() {
    let mut server = RedisServer::builder().appendonly(true).start();
    let client = Client::connect(&server.url()).await.unwrap();
    let state = AppState::builder(client.clone()).build();
    let ctx = Ctx {
        app: router(state.clone()),
        state,
        client,
        // Ctx wants a server of its own; the one under test is `server` above
        server: RedisServer::start(),
        token: None,
    };
    let worker_client = Client::connect(&server.url()).await.unwrap();
    let ran: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let r2 = ran.clone();
    let worker = Worker::builder(worker_client.clone())
        .handle("w", move |t| {
            let r2 = r2.clone();
            async move {
                r2.lock().unwrap().insert(t.payload.clone());
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let wq = worker_client.queue("w").unwrap();
    for i in 0..100u32 {
        wq.enqueue(TaskSpec::new(i.to_be_bytes().to_vec()).delay_ms(1_000))
            .await
            .unwrap();
        ctx.enqueue("h", json!({"payload": i, "delay_ms": 1_000}))
            .await;
    }
    assert_eq!(ctx.get("/readyz").await.status, StatusCode::OK);

    server.kill9();
    wait_until_async(DEADLINE, "/readyz is 503 while Redis is down", || async {
        ctx.get("/readyz").await.status == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    // the tasks fall due while Redis is away; nothing is awaited here
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(ran.lock().unwrap().is_empty());
    server.restart();
    let back = Instant::now();

    wait_until_async(BACK_WITHIN, "/readyz is 200 again", || async {
        ctx.get("/readyz").await.status == StatusCode::OK
    })
    .await;
    let claimed: Arc<Mutex<HashSet<String>>> = Arc::default();
    wait_until_async(BACK_WITHIN, "HTTP claims get every task", || {
        let claimed = claimed.clone();
        let ctx = &ctx;
        async move {
            let r = ctx
                .post("/v1/queues/h/claim", json!({"max": 100, "wait_ms": 100}))
                .await;
            let mut c = claimed.lock().unwrap();
            if r.status == StatusCode::OK {
                for t in r.body["tasks"].as_array().unwrap() {
                    c.insert(t["id"].as_str().unwrap().to_owned());
                }
            }
            c.len() == 100
        }
    })
    .await;
    wait_until_async(BACK_WITHIN, "the worker ran every task", || {
        let n = ran.lock().unwrap().len();
        async move { n == 100 }
    })
    .await;
    let took = back.elapsed();
    assert!(took < BACK_WITHIN * 2, "{took:?}");
    let stats = worker.shutdown().await.unwrap();
    assert!(stats.redis_errors < 40, "{stats:?}");
    let m = ctx.get("/metrics").await;
    assert!(m.text.contains("dueq_redis_up 1"), "{}", m.text);
    assert!(m.text.contains("dueq_redis_outages_total 1"), "{}", m.text);
}

/// Durable writes over HTTP (DESIGN 4.2 `replicas`): with no replica to confirm, an enqueue
/// asking for one answers 503 `not_replicated`; more than 16 is refused with 400; the same
/// enqueue without `replicas` answers normally.
#[tokio::test]
async fn enqueue_with_replicas_reports_not_replicated() {
    let ctx = Ctx::new().await;
    let r = ctx
        .post(
            "/v1/queues/d/tasks",
            json!({"payload": 1, "key": "k", "replicas": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
    assert_eq!(r.body["error"]["code"], "not_replicated", "{r:?}");
    let r = ctx
        .post("/v1/queues/d/tasks", json!({"payload": 1, "replicas": 17}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let r = ctx
        .post(
            "/v1/queues/d/tasks",
            json!({"payload": 1, "key": "k", "replicas": 0}),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the first write was on the primary: {r:?}"
    );
    let r = ctx
        .post(
            "/v1/queues/d/tasks/batch",
            json!({"tasks": [{"payload": 2}, {"payload": 3, "replicas": 1}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
}

/// Per-call durable writes on ack, nack (single and batch), cancel and reschedule: on a server
/// without replicas `"replicas": 1` answers 503 `not_replicated` after the write was applied
/// on the primary; 17 is refused with 400 and writes nothing.
#[tokio::test]
async fn acks_cancels_and_reschedules_with_replicas_report_not_replicated() {
    let ctx = Ctx::new().await;
    let not_replicated = |r: &crate::support::Res| {
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
        assert_eq!(r.body["error"]["code"], "not_replicated", "{r:?}");
    };
    for i in 0..4 {
        ctx.enqueue("d", json!({"payload": i})).await;
    }
    let t = ctx.claim("d", 4).await;
    let (id, token) = (
        t[0]["id"].as_str().unwrap().to_owned(),
        t[0]["lease_token"].as_str().unwrap().to_owned(),
    );
    let r = ctx
        .post(
            &format!("/v1/queues/d/tasks/{id}/ack"),
            json!({"lease_token": token, "replicas": 17}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert_eq!(
        ctx.get(&format!("/v1/queues/d/tasks/{id}")).await.body["state"],
        "active"
    );
    let r = ctx
        .post(
            &format!("/v1/queues/d/tasks/{id}/ack"),
            json!({"lease_token": token, "replicas": 1}),
        )
        .await;
    not_replicated(&r);
    assert_eq!(
        ctx.get(&format!("/v1/queues/d/tasks/{id}")).await.status,
        StatusCode::NOT_FOUND,
        "the ack was applied on the primary"
    );
    let item = |i: usize| json!({"id": t[i]["id"], "lease_token": t[i]["lease_token"]});
    not_replicated(
        &ctx.post(
            &format!("/v1/queues/d/tasks/{}/nack", t[1]["id"].as_str().unwrap()),
            json!({"lease_token": t[1]["lease_token"], "retry_in_ms": 60000, "replicas": 1}),
        )
        .await,
    );
    not_replicated(
        &ctx.post(
            "/v1/queues/d/acks",
            json!({"acks": [item(2)], "replicas": 1}),
        )
        .await,
    );
    not_replicated(
        &ctx.post(
            "/v1/queues/d/nacks",
            json!({"nacks": [{"id": t[3]["id"], "lease_token": t[3]["lease_token"], "retry_in_ms": 60000}], "replicas": 1}),
        )
        .await,
    );
    let s = ctx.get("/v1/queues/d").await.body;
    assert_eq!(
        (s["active"].as_u64(), s["scheduled"].as_u64()),
        (Some(0), Some(2)),
        "{s}"
    );

    let r = ctx
        .call(
            axum::http::Method::PATCH,
            &format!("/v1/queues/d/tasks/{}", t[1]["id"].as_str().unwrap()),
            Some(json!({"delay_ms": 120000, "replicas": 1})),
        )
        .await;
    not_replicated(&r);
    let r = ctx
        .delete(&format!(
            "/v1/queues/d/tasks/{}?replicas=17",
            t[1]["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let r = ctx
        .delete(&format!(
            "/v1/queues/d/tasks/{}?replicas=1",
            t[1]["id"].as_str().unwrap()
        ))
        .await;
    not_replicated(&r);
    assert_eq!(
        ctx.get(&format!(
            "/v1/queues/d/tasks/{}",
            t[1]["id"].as_str().unwrap()
        ))
        .await
        .status,
        StatusCode::NOT_FOUND,
        "the cancel was applied on the primary"
    );
}
