//! A shop's checkout, traced: its `checkout` span enqueues a receipt due now and a cancel due in
//! 2 s, and a `dueq::Worker` runs both. The spans go by OTLP to the collector that
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names (e.g. `http://localhost:4318`); the Redis is
//! `DUEQ_REDIS_URL`.
//!
//! The receipt's run is a child of the checkout; the cancel's run starts a trace of its own,
//! linked to the checkout.

use std::time::Duration;

use dueq::{Client, Outcome, TaskSpec, Worker};
use opentelemetry::trace::TracerProvider as _;
use tracing::Instrument as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DUEQ_REDIS_URL")?;
    let export = dueq_otel::Export::from_env("shop")?
        .ok_or("set OTEL_EXPORTER_OTLP_ENDPOINT to the collector")?;
    checkout_and_work(&url, export).await
}

/// Installs the subscriber, runs the checkout and the worker until both tasks ran, and sends
/// the spans.
pub async fn checkout_and_work(
    url: &str,
    export: dueq_otel::Export,
) -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: setup
    // dueq's run spans, and the program's own spans (target "shop"), go out by OTLP
    let shop = tracing_opentelemetry::layer()
        .with_tracer(export.provider().tracer("shop"))
        .with_filter(Targets::new().with_target("shop", tracing::Level::INFO));
    tracing_subscriber::registry()
        .with(export.layer())
        .with(shop)
        .init();
    // ANCHOR_END: setup

    let client = Client::connect(url).await?;
    let orders = client.queue("orders")?;
    let (done, mut ran) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(client.clone())
        .handle("orders", move |task| {
            let done = done.clone();
            async move {
                let what = match task.key.as_deref() {
                    Some("order:42:cancel") => "cancel order",
                    _ => "send receipt",
                };
                // the handler's own work: a child of the run's span
                async { tokio::time::sleep(Duration::from_millis(30)).await }
                    .instrument(tracing::info_span!(target: "shop", "work", otel.name = what))
                    .await;
                let _ = done.send(());
                Outcome::Success
            }
        })
        .build()?
        .start();

    // ANCHOR: checkout
    async {
        // the current span's trace context goes into each task's headers
        orders
            .enqueue(TaskSpec::new(b"42".to_vec()).key("order:42:receipt"))
            .await?;
        orders
            .enqueue(
                TaskSpec::new(b"42".to_vec())
                    .key("order:42:cancel")
                    .delay_ms(2_000),
            )
            .await?;
        Ok::<_, dueq::Error>(())
    }
    .instrument(tracing::info_span!(target: "shop", "checkout", otel.kind = "server"))
    .await?;
    // ANCHOR_END: checkout

    for _ in 0..2 {
        ran.recv().await;
    }
    worker.shutdown().await?;
    // ANCHOR: shutdown
    export.shutdown().await; // sends the spans still buffered
    // ANCHOR_END: shutdown
    Ok(())
}
