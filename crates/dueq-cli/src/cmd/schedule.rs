//! `schedule set | get | list | delete | pause | resume`: a queue's recurring schedules.

use anyhow::{Result, bail};
use dueq::{Client, Misfire, Overlap, Schedule, ScheduleSpec, SetOutcome};
use serde_json::{Value, json};

use super::{payload_json, print_json};
use crate::args::ScheduleCommand;

/// A schedule as the HTTP API shows it.
fn schedule_json(queue: &str, s: &Schedule) -> Value {
    let spec = &s.spec;
    json!({
        "queue": queue,
        "name": spec.name,
        "cron": spec.cron,
        "every_ms": spec.every_ms,
        "tz": spec.tz,
        "payload": payload_json(&spec.payload),
        "misfire": if spec.misfire == Misfire::FireOnce { "fire_once" } else { "skip" },
        "misfire_grace_ms": spec.misfire_grace_ms,
        "overlap": if spec.overlap == Overlap::Skip { "skip" } else { "allow" },
        "max_attempts": spec.max_attempts,
        "lease_ms": spec.lease_ms,
        "priority": spec.priority,
        "group": spec.group,
        "next_fire_at_ms": s.next_fire_at_ms,
        "upcoming_ms": s.upcoming_ms,
        "last_fire_at_ms": s.last_fire_at_ms,
        "skipped_total": s.skipped_total,
        "fired_total": s.fired_total,
        "paused": s.paused,
    })
}

fn print_text(s: &Schedule) {
    let spec = &s.spec;
    let timing = match (&spec.cron, spec.every_ms) {
        (Some(c), _) => format!("cron {c:?} tz={}", spec.tz.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => format!("every_ms={ms}"),
        _ => String::new(),
    };
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |t| t.to_string());
    let task = match &spec.group {
        Some(g) => format!(" priority={} group={g}", spec.priority),
        None if spec.priority > 0 => format!(" priority={}", spec.priority),
        None => String::new(),
    };
    outln!(
        "{} {timing}{task} next_fire_at_ms={} last_fire_at_ms={} fired={} skipped={}{}",
        spec.name,
        opt(s.next_fire_at_ms),
        opt(s.last_fire_at_ms),
        s.fired_total,
        s.skipped_total,
        if s.paused { " paused" } else { "" }
    );
}

async fn show(client: &Client, queue: &str, name: &str, json_out: bool) -> Result<()> {
    let Some(s) = client.queue(queue)?.schedule(name).await? else {
        bail!("queue {queue} has no schedule {name}");
    };
    if json_out {
        print_json(&schedule_json(queue, &s));
    } else {
        print_text(&s);
        outln!("upcoming_ms: {:?}", s.upcoming_ms);
    }
    Ok(())
}

/// Runs one `dueq schedule` subcommand.
pub async fn run(client: &Client, cmd: &ScheduleCommand, json_out: bool) -> Result<()> {
    match cmd {
        ScheduleCommand::Set(a) => {
            let q = client.queue(&a.queue)?;
            let mut spec = ScheduleSpec::new(a.name.as_str(), a.payload.as_bytes().to_vec())
                .misfire_grace_ms(a.misfire_grace_ms)
                .misfire(if a.misfire == "fire-once" {
                    Misfire::FireOnce
                } else {
                    Misfire::Skip
                })
                .overlap(if a.overlap == "skip" {
                    Overlap::Skip
                } else {
                    Overlap::Allow
                });
            spec.cron = a.cron.clone();
            spec.every_ms = a.every_ms;
            spec.tz = a.tz.clone();
            if let Some(n) = a.max_attempts {
                spec = spec.max_attempts(n);
            }
            if let Some(l) = a.lease_ms {
                spec = spec.lease_ms(l);
            }
            if let Some(p) = a.priority {
                spec = spec.priority(p);
            }
            spec.group = a.group.clone();
            let r = q.set_schedule(&spec).await?;
            let outcome = match r.outcome {
                SetOutcome::Created => "created",
                SetOutcome::Replaced => "replaced",
                _ => "unchanged",
            };
            if json_out {
                print_json(&json!({"outcome": outcome, "next_fire_at_ms": r.next_fire_at_ms}));
            } else {
                outln!(
                    "{outcome}; next fire at {}",
                    r.next_fire_at_ms
                        .map_or("- (paused)".to_owned(), |t| t.to_string())
                );
            }
        }
        ScheduleCommand::Get { queue, name } => show(client, queue, name, json_out).await?,
        ScheduleCommand::List { queue } => {
            let all = client.queue(queue)?.schedules().await?;
            if json_out {
                let v: Vec<Value> = all.iter().map(|s| schedule_json(queue, s)).collect();
                print_json(&json!({"schedules": v}));
            } else {
                for s in &all {
                    print_text(s);
                }
            }
        }
        ScheduleCommand::Delete { queue, name } => {
            if !client.queue(queue)?.delete_schedule(name).await? {
                bail!("queue {queue} has no schedule {name}");
            }
            if json_out {
                print_json(&json!({"name": name, "deleted": true}));
            } else {
                outln!("deleted");
            }
        }
        ScheduleCommand::Pause { queue, name } => {
            if client.queue(queue)?.pause_schedule(name).await?.is_none() {
                bail!("queue {queue} has no schedule {name}");
            }
            show(client, queue, name, json_out).await?;
        }
        ScheduleCommand::Resume { queue, name } => {
            if client.queue(queue)?.resume_schedule(name).await?.is_none() {
                bail!("queue {queue} has no schedule {name}");
            }
            show(client, queue, name, json_out).await?;
        }
    }
    Ok(())
}
