//! Webhook settings (`Queue::set_webhook`, `webhook`, `clear_webhook`,
//! `Client::webhook_queues`) on a single server and on a cluster.

use dueq::{Client, ErrorKind, WebhookConfig};
use dueq_testkit::RedisCluster;

use crate::support::Ctx;

/// `whsec_` and the base64 of the 24-byte key `0123456789abcdef-secret!`.
const SECRET: &str = "whsec_MDEyMzQ1Njc4OWFiY2RlZi1zZWNyZXQh";

async fn round_trip(client: &Client, name: &str) {
    let q = client.queue(name).unwrap();
    assert_eq!(q.webhook().await.unwrap(), None);

    // refused input writes nothing
    for bad in [
        WebhookConfig::new("ftp://h/"),
        WebhookConfig::new("http://h/").concurrency(0),
        WebhookConfig::new("http://h/").timeout_ms(300_001),
        WebhookConfig::new("http://h/").secret("short"),
    ] {
        let e = q.set_webhook(bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    assert_eq!(q.webhook().await.unwrap(), None);
    assert!(
        !client
            .webhook_queues()
            .await
            .unwrap()
            .contains(&name.to_owned())
    );

    let set = q
        .set_webhook(
            WebhookConfig::new("https://Example.com/a")
                .concurrency(7)
                .timeout_ms(1234),
        )
        .await
        .unwrap();
    assert!(set.secret_generated && !set.replaced);
    assert_eq!(set.webhook.url, "https://example.com/a");
    assert_eq!(dueq::signing_key(&set.webhook.secret).len(), 32);
    let stored = q.webhook().await.unwrap().unwrap();
    assert_eq!(stored, set.webhook);
    assert!(
        client
            .webhook_queues()
            .await
            .unwrap()
            .contains(&name.to_owned())
    );

    // no secret given: kept; one given: rotated
    let again = q
        .set_webhook(WebhookConfig::new("https://example.com/b"))
        .await
        .unwrap();
    assert!(!again.secret_generated && again.replaced);
    assert_eq!(again.webhook.secret, set.webhook.secret);
    assert_eq!(again.webhook.concurrency, dueq::DEFAULT_WEBHOOK_CONCURRENCY);
    let rotated = q
        .set_webhook(WebhookConfig::new("https://example.com/b").secret(SECRET))
        .await
        .unwrap();
    assert_eq!(rotated.webhook.secret, SECRET);
    // the replaced secret signs beside the new one for the rotation window
    assert_eq!(
        rotated.webhook.previous_secrets,
        vec![(
            set.webhook.secret.clone(),
            rotated.webhook.updated_at_ms + dueq::WEBHOOK_ROTATION_MS
        )]
    );
    assert_eq!(q.webhook().await.unwrap().unwrap(), rotated.webhook);

    assert!(q.clear_webhook().await.unwrap());
    assert!(!q.clear_webhook().await.unwrap());
    assert_eq!(q.webhook().await.unwrap(), None);
}

#[tokio::test]
async fn settings_round_trip() {
    let c = Ctx::new().await;
    round_trip(&c.client, "hooks").await;
    // the settings live in the queue's own tagged key; the queue is listed like any other
    let mut raw = c.raw();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut raw).unwrap();
    assert!(
        keys.iter()
            .all(|k| k.starts_with("dueq:{hooks}:") || k == "dueq:webhooks" || k == "dueq:queues"),
        "{keys:?}"
    );
    assert_eq!(c.client.queues().await.unwrap(), vec!["hooks".to_owned()]);
}

#[tokio::test]
async fn settings_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let client = Client::connect(&cluster.urls().join(",")).await.unwrap();
    // names spread over the slots of all three masters
    for name in ["a", "b", "c", "orders", "payouts"] {
        round_trip(&client, name).await;
    }
}

/// `whsec_` and 32 base64 digits (a 24-byte key), different for each `i`.
fn nth_secret(i: usize) -> String {
    format!("whsec_{i:0>32}")
}

/// Every change within the window keeps the secret it replaced (newest first, up to
/// `MAX_PREVIOUS_WEBHOOK_SECRETS`); a secret whose window ended is dropped at the next change.
#[tokio::test]
async fn each_replaced_secret_signs_for_its_own_window() {
    let c = Ctx::new().await;
    let q = c.client.queue("rot").unwrap();
    let set =
        |i: usize| q.set_webhook(WebhookConfig::new("https://example.com/").secret(nth_secret(i)));
    set(0).await.unwrap();
    set(1).await.unwrap();
    let w = set(2).await.unwrap().webhook;
    let names: Vec<&str> = w.previous_secrets.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, [nth_secret(1), nth_secret(0)]);
    assert!(w.previous_secrets[0].1 >= w.previous_secrets[1].1);
    assert_eq!(w.signing_keys(w.updated_at_ms).len(), 3);

    // the window of secret 0 ends: the next change drops it
    let mut raw = c.raw();
    let ended = serde_json::json!([
        [nth_secret(1), w.previous_secrets[0].1.to_string()],
        [nth_secret(0), "1"]
    ]);
    let () = redis::cmd("HSET")
        .arg("dueq:{rot}:webhook")
        .arg("previous_secrets")
        .arg(ended.to_string())
        .query(&mut raw)
        .unwrap();
    let w = set(3).await.unwrap().webhook;
    let names: Vec<&str> = w.previous_secrets.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, [nth_secret(2), nth_secret(1)]);

    // many changes in one window: the newest are kept, up to the bound
    for i in 4..20 {
        set(i).await.unwrap();
    }
    let w = q.webhook().await.unwrap().unwrap();
    let names: Vec<String> = w.previous_secrets.iter().map(|(s, _)| s.clone()).collect();
    let newest: Vec<String> = (0..dueq::MAX_PREVIOUS_WEBHOOK_SECRETS)
        .map(|k| nth_secret(18 - k))
        .collect();
    assert_eq!(names, newest);
    // setting the secret in force again is no change: nothing more is kept
    let again = set(19).await.unwrap().webhook;
    assert_eq!(again.previous_secrets, w.previous_secrets);
}

/// A replaced secret stored in the fields of earlier versions still signs, and the next
/// change moves it into the list.
#[tokio::test]
async fn a_replaced_secret_of_an_earlier_version_keeps_signing() {
    let c = Ctx::new().await;
    let q = c.client.queue("legacy").unwrap();
    let w = q
        .set_webhook(WebhookConfig::new("https://example.com/").secret(nth_secret(1)))
        .await
        .unwrap()
        .webhook;
    let until = w.updated_at_ms + 60_000;
    let mut raw = c.raw();
    let () = redis::cmd("HSET")
        .arg("dueq:{legacy}:webhook")
        .arg("previous_secret")
        .arg(nth_secret(0))
        .arg("previous_until_ms")
        .arg(until)
        .query(&mut raw)
        .unwrap();
    let read = q.webhook().await.unwrap().unwrap();
    assert_eq!(read.previous_secrets, vec![(nth_secret(0), until)]);
    let w = q
        .set_webhook(WebhookConfig::new("https://example.com/").secret(nth_secret(2)))
        .await
        .unwrap()
        .webhook;
    let names: Vec<&str> = w.previous_secrets.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, [nth_secret(1), nth_secret(0)]);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("dueq:{legacy}:webhook")
        .query(&mut raw)
        .unwrap();
    assert!(!fields.iter().any(|f| f == "previous_secret"), "{fields:?}");
}
