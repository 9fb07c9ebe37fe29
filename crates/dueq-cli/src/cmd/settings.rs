//! `settings get|set`: a queue's settings. `--json` prints the stored settings as the bodies of
//! `GET` / `PATCH /v1/queues/{queue}/settings` do (`null`: the built-in default) plus
//! `"effective"`, every value in effect; text shows the values in effect, readably, defaults
//! marked `(default)`.

use anyhow::Result;
use dueq::{Backoff, Client, QueueSettings, RateLimit, SettingsPatch};
use serde_json::{Value, json};

use super::{known_queue, print_json};
use crate::args::SettingsCommand;
use crate::human::duration;

/// Dead tasks a queue keeps without a `dead_max` setting (the scripts' default; the library
/// exports no constant for it).
const DEFAULT_DEAD_MAX: u64 = 10_000;
/// Succeeded tasks kept without a `succeeded_max` setting.
const DEFAULT_SUCCEEDED_MAX: u64 = 0;
/// Partitions without a `partitions` setting.
const DEFAULT_PARTITIONS: u16 = 1;

/// `dueq settings ...`.
pub async fn run(client: &Client, c: &SettingsCommand, json_out: bool) -> Result<()> {
    let settings = match c {
        // reading a queue that does not exist is an error; setting creates it
        SettingsCommand::Get { queue } => known_queue(client, queue).await?.settings().await?,
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
    let rows = effective(&settings)?;
    if json_out {
        let mut v = serde_json::to_value(settings)?;
        let eff: serde_json::Map<String, Value> = rows
            .iter()
            .map(|r| (r.name.clone(), r.value.clone()))
            .collect();
        v["effective"] = Value::Object(eff);
        print_json(&v)?;
    } else {
        let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0) + 1;
        for r in &rows {
            let name = format!("{}:", r.name);
            let mark = if r.default { " (default)" } else { "" };
            outln!("{name:<width$} {}{mark}", r.text);
        }
    }
    Ok(())
}

/// The settings in the order they are shown.
const ORDER: [&str; 14] = [
    "max_attempts",
    "lease_ms",
    "backoff",
    "dead_max",
    "succeeded_max",
    "rate_limit",
    "group_rate_limit",
    "concurrency",
    "group_concurrency",
    "on_expire",
    "alert_due_age_ms",
    "alert_due_count",
    "partitions",
    "unique_for_ms",
];

/// One setting in effect.
struct Row {
    /// Its name in the API.
    name: String,
    /// The value in effect, as the API writes it (`null`: none).
    value: Value,
    /// The value for people.
    text: String,
    /// Not set: the built-in default applies.
    default: bool,
}

/// Every setting of `s` in effect, in the order the API lists them; a setting this code does
/// not know yet (a newer library) is shown as stored.
fn effective(s: &QueueSettings) -> Result<Vec<Row>> {
    let stored = serde_json::to_value(s)?;
    let Value::Object(mut stored) = stored else {
        anyhow::bail!("the settings are not a JSON object: {stored}");
    };
    // the order of the API's documentation (DESIGN 4.2), then any other in name order
    let mut fields: Vec<(String, Value)> = ORDER
        .iter()
        .filter_map(|name| stored.remove(*name).map(|v| ((*name).to_owned(), v)))
        .collect();
    fields.extend(stored);
    let backoff = Backoff::default();
    let default_backoff = json!({
        "base_ms": backoff.delay_ms(1),
        "factor": backoff.delay_ms(2) as f64 / backoff.delay_ms(1) as f64,
        "max_ms": backoff.delay_ms(u32::MAX),
    });
    let none = || (Value::Null, "none".to_owned());
    let count = |v: Option<u64>| v.map_or_else(none, |n| (json!(n), n.to_string()));
    let ms = |v: Option<u64>| v.map_or_else(none, |n| (json!(n), duration(n)));
    let rate = |r: Option<RateLimit>| {
        r.map_or_else(none, |r| {
            (
                json!({"max": r.max, "per_ms": r.per_ms}),
                format!("{} per {}", r.max, duration(r.per_ms)),
            )
        })
    };
    let mut rows = Vec::new();
    for (name, value) in fields {
        let default = value.is_null();
        let (value, text) = match name.as_str() {
            "max_attempts" => {
                let n = s.max_attempts.unwrap_or(dueq::DEFAULT_MAX_ATTEMPTS);
                (json!(n), n.to_string())
            }
            "lease_ms" => {
                let n = s.lease_ms.unwrap_or(dueq::DEFAULT_LEASE_MS);
                (json!(n), duration(n))
            }
            "backoff" => {
                let v = s.backoff.map_or_else(
                    || default_backoff.clone(),
                    |b| json!({"base_ms": b.base_ms, "factor": b.factor, "max_ms": b.max_ms}),
                );
                let text = format!(
                    "{}, x{} per attempt, up to {}",
                    duration(v["base_ms"].as_u64().unwrap_or(0)),
                    v["factor"].as_f64().unwrap_or(0.0),
                    duration(v["max_ms"].as_u64().unwrap_or(0)),
                );
                (v, text)
            }
            "dead_max" => {
                let n = s.dead_max.unwrap_or(DEFAULT_DEAD_MAX);
                (json!(n), n.to_string())
            }
            "succeeded_max" => {
                let n = s.succeeded_max.unwrap_or(DEFAULT_SUCCEEDED_MAX);
                (json!(n), n.to_string())
            }
            "rate_limit" => rate(s.rate_limit),
            "group_rate_limit" => rate(s.group_rate_limit),
            "concurrency" => count(s.concurrency.map(u64::from)),
            "group_concurrency" => count(s.group_concurrency.map(u64::from)),
            "alert_due_age_ms" => ms(s.alert_due_age_ms),
            "unique_for_ms" => ms(s.unique_for_ms.filter(|&w| w > 0)),
            "alert_due_count" => count(s.alert_due_count),
            "on_expire" => {
                let e = s.on_expire.unwrap_or_default().as_str();
                (json!(e), e.to_owned())
            }
            "partitions" => {
                let n = s.partitions.unwrap_or(DEFAULT_PARTITIONS);
                (json!(n), n.to_string())
            }
            _ => {
                let text = if value.is_null() {
                    "none".to_owned()
                } else {
                    value.to_string()
                };
                (value, text)
            }
        };
        rows.push(Row {
            name,
            value,
            text,
            default,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_are_filled_in_and_marked() {
        let rows = effective(&QueueSettings::default()).unwrap();
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert!(rows.iter().all(|r| r.default));
        assert_eq!(get("lease_ms").text, "30s");
        assert_eq!(get("lease_ms").value, json!(30_000));
        assert_eq!(get("max_attempts").value, json!(5));
        assert_eq!(get("backoff").text, "1s, x2 per attempt, up to 1h");
        assert_eq!(
            get("backoff").value,
            json!({"base_ms": 1000, "factor": 2.0, "max_ms": 3_600_000})
        );
        assert_eq!(get("dead_max").value, json!(10_000));
        assert_eq!(get("concurrency").value, Value::Null);
        assert_eq!(get("concurrency").text, "none");
        assert_eq!(get("on_expire").text, "drop");
        assert_eq!(get("partitions").value, json!(1));
    }

    #[test]
    fn set_values_are_shown_readably_and_not_marked() {
        let patch: SettingsPatch = serde_json::from_str(
            r#"{"lease_ms": 90000, "rate_limit": {"max": 100, "per_ms": 1000}, "concurrency": 3}"#,
        )
        .unwrap();
        let s = QueueSettings::default().patched(&patch);
        let rows = effective(&s).unwrap();
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        assert_eq!(
            (get("lease_ms").text.as_str(), get("lease_ms").default),
            ("1m 30s", false)
        );
        assert_eq!(get("rate_limit").text, "100 per 1s");
        assert_eq!(get("concurrency").value, json!(3));
        assert!(get("max_attempts").default);
    }
}
