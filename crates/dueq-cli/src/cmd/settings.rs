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
            // the path names the field of a bad value (`rate_limit: invalid type: string`),
            // as the HTTP API's answer does
            let de = &mut serde_json::Deserializer::from_str(patch);
            let patch: SettingsPatch = serde_path_to_error::deserialize(de)
                .map_err(|e| {
                    let path = e.path().to_string();
                    let e = e.into_inner();
                    if path == "." || !e.is_data() {
                        anyhow::Error::new(e)
                    } else {
                        anyhow::anyhow!("{path}: {e}")
                    }
                })
                .context("settings patch is not valid")?;
            client.queue(queue)?.update_settings(&patch).await?
        }
    };
    print_json(&serde_json::to_value(settings)?);
    Ok(())
}
