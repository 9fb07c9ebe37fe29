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
    let (old, until) = rotated.webhook.previous_secret.clone().unwrap();
    assert_eq!(old, set.webhook.secret);
    assert_eq!(
        until,
        rotated.webhook.updated_at_ms + dueq::WEBHOOK_ROTATION_MS
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
