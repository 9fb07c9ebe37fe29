//! `settings get|set`: a queue's stored settings, as JSON (the bodies of `GET` / `PATCH
//! /v1/queues/{queue}/settings`).

use anyhow::{Context, Result};
use dueq::{Client, SettingsPatch};

use super::print_json;
use crate::args::SettingsCommand;

/// `dueq settings ...`.
pub async fn run(client: &Client, c: &SettingsCommand) -> Result<()> {
    let settings = match c {
        SettingsCommand::Get { queue } => client.queue(queue)?.settings().await?,
        SettingsCommand::Set { queue, patch } => {
            // an array would be read into the fields by position: refuse it
            if patch.trim_start().starts_with('[') {
                anyhow::bail!("settings patch must be a JSON object, not an array");
            }
            let patch: SettingsPatch =
                serde_json::from_str(patch).context("settings patch is not valid")?;
            client.queue(queue)?.update_settings(&patch).await?
        }
    };
    print_json(&serde_json::to_value(settings)?);
    Ok(())
}
