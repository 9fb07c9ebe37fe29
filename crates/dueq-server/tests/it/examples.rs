//! The non-Rust examples run against a live server on a real TCP port.

use std::time::Duration;

use dueq_server::{AppState, serve};
use tokio::net::TcpListener;

use crate::support::Ctx;

/// `examples/dueq_example.py` (standard library only) enqueues with a key, cancels, and
/// works a queue through claim / ack / nack. Skipped when `python3` is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_example_runs_against_a_live_server() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("python3 not found; skipping");
        return;
    }
    let c = Ctx::new().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, AppState::new(c.client.clone()), async {
        let _ = stopped.await;
    }));

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/dueq_example.py"
    );
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("python3")
            .arg(script)
            .env("DUEQ_URL", format!("http://{addr}"))
            .env("DUEQ_QUEUE", "py")
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["cancel"], "cancelled");
    assert_eq!(summary["acked"], serde_json::json!([1, 2, 3]));

    let stats = c.client.queue("py").unwrap().stats().await.unwrap();
    assert_eq!(stats.succeeded_total, 3);
    assert_eq!(stats.failed_total, 1);
    assert_eq!(stats.cancelled_total, 1);

    // graceful shutdown ends the server
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
