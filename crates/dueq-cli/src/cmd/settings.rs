//! `settings get|set`: a queue's stored settings, as JSON (the bodies of `GET` / `PATCH
//! /v1/queues/{queue}/settings`).

use anyhow::Result;
use dueq::{Client, SettingsPatch};

use super::print_json;
use crate::args::SettingsCommand;

/// `dueq settings ...`.
pub async fn run(client: &Client, c: &SettingsCommand) -> Result<()> {
    let settings = match c {
        SettingsCommand::Get { queue } => client.queue(queue)?.settings().await?,
        SettingsCommand::Set { queue, patch } => {
            // the reading the HTTP API uses, so a bad field gets the same message
            let patch: SettingsPatch =
                dueq::json::object_from_slice(patch.as_bytes()).map_err(|e| match e.kind {
                    dueq::json::ObjectErrorKind::Array => {
                        anyhow::anyhow!("settings patch must be a JSON object, not an array")
                    }
                    _ => anyhow::anyhow!("settings patch is not valid: {}", e.message),
                })?;
            client.queue(queue)?.update_settings(&patch).await?
        }
    };
    print_json(&serde_json::to_value(settings)?);
    Ok(())
}
