//! The wake listener is responsible for the "a task became due earlier" notifications: one
//! pub/sub connection subscribed to the wake channel of every queue of the worker, forwarding
//! each due time to that queue's claimer. Notifications are a shortcut, not a guarantee: when
//! the connection drops it reconnects after a pause, and claimers poll at most every second
//! meanwhile (case C02). After each (re)subscription every claimer is told to look once, so a
//! wake-up sent while nobody listened is not lost.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::client::Client;

pub(super) async fn run(
    client: Client,
    queues: Vec<(String, mpsc::UnboundedSender<u64>)>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            r = listen(&client, &queues) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "wake-up connection lost; reconnecting");
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

async fn listen(
    client: &Client,
    queues: &[(String, mpsc::UnboundedSender<u64>)],
) -> redis::RedisResult<()> {
    let mut pubsub = client.pubsub_client().get_async_pubsub().await?;
    for (channel, _) in queues {
        pubsub.subscribe(channel).await?;
    }
    // Anything enqueued before the subscription took effect (at start-up or while the
    // connection was down) sent a wake-up nobody heard: have every claimer look once now.
    for (_, tx) in queues {
        let _ = tx.send(0);
    }
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let Ok(due) = msg.get_payload::<u64>() else {
            continue;
        };
        if let Some((_, tx)) = queues.iter().find(|(c, _)| c == msg.get_channel_name()) {
            let _ = tx.send(due);
        }
    }
    Ok(())
}
