//! `webhook set | get | clear`: a queue's push delivery target (see `dueq_server::push`).

use anyhow::{Result, bail};
use dueq::{Client, Webhook, WebhookConfig};
use serde_json::{Value, json};

use super::print_json;
use crate::args::WebhookCommand;
use crate::human::{duration, when};

/// The URL to show: with its password as `***` unless the secret is shown too.
fn shown_url(w: &Webhook, secret: bool) -> String {
    if secret {
        w.url.clone()
    } else {
        w.redacted_url()
    }
}

fn webhook_json(w: &Webhook, secret: bool) -> Value {
    let mut v = json!({
        "queue": w.queue,
        "url": shown_url(w, secret),
        "concurrency": w.concurrency,
        "timeout_ms": w.timeout_ms,
        "updated_at_ms": w.updated_at_ms,
    });
    if secret {
        v["secret"] = json!(w.secret);
    }
    v
}

fn print_text(w: &Webhook, secret: bool) {
    outln!(
        "{} -> {} concurrency={} timeout={} updated {}",
        w.queue,
        shown_url(w, secret),
        w.concurrency,
        duration(w.timeout_ms),
        when(w.updated_at_ms)
    );
    if secret {
        outln!("secret: {}", w.secret);
    }
}

/// Runs one `dueq webhook` subcommand.
pub async fn run(client: &Client, cmd: &WebhookCommand, json_out: bool) -> Result<()> {
    match cmd {
        WebhookCommand::Set {
            queue,
            url,
            concurrency,
            timeout_ms,
            secret,
        } => {
            let q = client.queue(queue)?;
            let mut config = WebhookConfig::new(url.as_str());
            if let Some(n) = concurrency {
                config = config.concurrency(*n);
            }
            if let Some(ms) = timeout_ms {
                config = config.timeout_ms(*ms);
            }
            if let Some(s) = secret {
                config = config.secret(s.as_str());
            }
            let set = q.set_webhook(config).await?;
            if json_out {
                let mut v = webhook_json(&set.webhook, true);
                v["secret_generated"] = json!(set.secret_generated);
                print_json(&v)?;
            } else {
                print_text(&set.webhook, true);
            }
        }
        WebhookCommand::Get { queue, show_secret } => {
            let Some(w) = client.queue(queue)?.webhook().await? else {
                bail!("queue {queue} has no webhook");
            };
            if json_out {
                print_json(&webhook_json(&w, *show_secret))?;
            } else {
                print_text(&w, *show_secret);
            }
        }
        WebhookCommand::Clear { queue } => {
            let removed = client.queue(queue)?.clear_webhook().await?;
            if json_out {
                print_json(&json!({"queue": queue, "removed": removed}))?;
            } else if removed {
                outln!("{queue}: webhook removed");
            }
            if !removed {
                bail!("queue {queue} has no webhook");
            }
        }
    }
    Ok(())
}
