//! `examples/webhook_receiver.py` against a live server.

use std::time::Duration;

use dueq_testkit::wait_until_async;
use serde_json::{Value, json};

use super::harness::{SECRET, Server, now_ms};
use crate::support::DEADLINE;

/// `examples/webhook_receiver.py` (standard library only) refuses a forged delivery and
/// accepts real ones, checking their signatures. Skipped when `python3` is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_receiver_example_verifies_deliveries() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("python3 not found; skipping");
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/webhook_receiver.py"
    );
    let mut child = tokio::process::Command::new("python3")
        .arg(script)
        .env("DUEQ_WEBHOOK_SECRET", SECRET)
        .env("PORT", "0")
        .env("STOP_AFTER", "2")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    tokio::time::timeout(DEADLINE, stdout.read_line(&mut url))
        .await
        .unwrap()
        .unwrap();
    let url = url.trim().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    // a forged signature is refused
    let body = br#"{"order":1}"#;
    let forged = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(&url)
        .header("webhook-id", "push_py:000000000999")
        .header("webhook-timestamp", (now_ms() / 1000).to_string())
        .header("webhook-signature", format!("v1,{}", "A".repeat(44)))
        .header("dueq-task-id", "000000000999")
        .body(&body[..])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);

    let mut s = Server::start().await;
    s.set_webhook("push_py", json!({"url": url, "secret": SECRET}))
        .await;
    let a = s
        .ctx
        .enqueue(
            "push_py",
            json!({"payload": {"order": 42}, "key": "order:42:cancel"}),
        )
        .await;
    let b = s.ctx.enqueue("push_py", json!({"payload": [1, 2]})).await;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    let accepted: Value = serde_json::from_str(rest.trim()).unwrap();
    let mut got: Vec<(String, Value, Value)> = accepted
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_owned(),
                t["key"].clone(),
                t["payload"].clone(),
            )
        })
        .collect();
    got.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        got,
        vec![
            (a, json!("order:42:cancel"), json!({"order": 42})),
            (b, Value::Null, json!([1, 2])),
        ]
    );
    wait_until_async(DEADLINE, "both deliveries are acknowledged", || async {
        s.succeeded("push_py").await == 2
    })
    .await;
    s.shutdown().await;
}
