//! `schedule set | get | list | delete | pause | resume | trigger | backfill`: a queue's
//! recurring schedules.

use anyhow::{Result, bail};
use dueq::{Client, Misfire, Overlap, Schedule, ScheduleSpec, SetOutcome, TaskRef};
use dueq_server::api::schedules::ScheduleResponse;
use serde_json::json;

use super::{known_queue, print_json};
use crate::args::{MisfireArg, OverlapArg, ScheduleCommand};
use crate::human::{duration, when, when_opt};

/// The API's names of the enums.
fn misfire_str(m: Misfire) -> &'static str {
    if m == Misfire::FireOnce {
        "fire_once"
    } else {
        "skip"
    }
}

fn overlap_str(o: Overlap) -> &'static str {
    if o == Overlap::Skip { "skip" } else { "allow" }
}

/// How a schedule fires: `cron "0 30 2 * * *" tz=Europe/Berlin` or `every 1h`.
fn timing(s: &Schedule) -> String {
    let spec = &s.spec;
    match (&spec.cron, spec.every_ms) {
        (Some(c), _) => format!("cron {c:?} tz={}", spec.tz.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => format!("every {}", duration(ms)),
        _ => String::new(),
    }
}

/// One line per schedule (`dueq schedule list`).
fn print_line(s: &Schedule) {
    let spec = &s.spec;
    let task = match &spec.task.group {
        Some(g) => format!(" priority={} group={g}", spec.task.priority),
        None if spec.task.priority > 0 => format!(" priority={}", spec.task.priority),
        None => String::new(),
    };
    outln!(
        "{} {}{task}; next fire {}; last fire {}; fired {}, skipped {}{}",
        spec.name,
        timing(s),
        s.next_fire_at_ms
            .map_or_else(|| "- (paused)".to_owned(), when),
        when_opt(s.last_fire_at_ms),
        s.fired_total,
        s.skipped_total,
        if s.paused { "; paused" } else { "" }
    );
}

/// One schedule in full (`dueq schedule get`, `pause`, `resume`).
fn print_full(s: &Schedule) {
    let spec = &s.spec;
    outln!("name:          {}", spec.name);
    outln!("timing:        {}", timing(s));
    outln!(
        "misfire:       {} (grace {})",
        misfire_str(spec.misfire),
        duration(spec.misfire_grace_ms)
    );
    outln!("overlap:       {}", overlap_str(spec.overlap));
    outln!("payload:       {}", String::from_utf8_lossy(&spec.payload));
    let task = spec.tick_options();
    outln!("priority:      {}", task.priority);
    outln!("group:         {}", task.group.as_deref().unwrap_or("-"));
    outln!(
        "max_attempts:  {}",
        task.max_attempts.unwrap_or(dueq::DEFAULT_MAX_ATTEMPTS)
    );
    outln!(
        "lease:         {}",
        duration(task.lease_ms.unwrap_or(dueq::DEFAULT_LEASE_MS))
    );
    outln!(
        "unique for:    {}",
        task.unique_for_ms
            .map_or_else(|| "the queue's setting".to_owned(), duration)
    );
    outln!("paused:        {}", if s.paused { "yes" } else { "no" });
    outln!(
        "next_fire_at:  {}",
        s.next_fire_at_ms
            .map_or_else(|| "- (paused)".to_owned(), when)
    );
    outln!("last_fire_at:  {}", when_opt(s.last_fire_at_ms));
    outln!("fired:         {}", s.fired_total);
    outln!("skipped:       {}", s.skipped_total);
    let mut label = "upcoming:     ";
    for t in &s.upcoming_ms {
        outln!("{label} {}", when(*t));
        label = "              ";
    }
}

async fn show(client: &Client, queue: &str, name: &str, json_out: bool) -> Result<()> {
    let Some(s) = known_queue(client, queue).await?.schedule(name).await? else {
        bail!("queue {queue} has no schedule {name}");
    };
    if json_out {
        print_json(&ScheduleResponse::new(queue, s))?;
    } else {
        print_full(&s);
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
                .misfire(match a.misfire {
                    MisfireArg::FireOnce => Misfire::FireOnce,
                    MisfireArg::Skip => Misfire::Skip,
                })
                .overlap(match a.overlap {
                    OverlapArg::Skip => Overlap::Skip,
                    OverlapArg::Allow => Overlap::Allow,
                });
            spec.cron = a.cron.clone();
            spec.every_ms = a.every_ms;
            spec.tz = a.tz.clone();
            spec = spec.options(a.options.options()?);
            let r = q.set_schedule(&spec).await?;
            let outcome = match r.outcome {
                SetOutcome::Created => "created",
                SetOutcome::Replaced => "replaced",
                _ => "unchanged",
            };
            if json_out {
                print_json(&json!({"outcome": outcome, "next_fire_at_ms": r.next_fire_at_ms}))?;
            } else {
                outln!(
                    "{outcome}; next fire {}",
                    r.next_fire_at_ms
                        .map_or_else(|| "- (paused)".to_owned(), when)
                );
            }
        }
        ScheduleCommand::Get { queue, name } => show(client, queue, name, json_out).await?,
        ScheduleCommand::List { queue } => {
            let all = known_queue(client, queue).await?.schedules().await?;
            if json_out {
                // the shape of `GET .../schedules`, every schedule on one page
                #[derive(serde::Serialize)]
                struct List {
                    schedules: Vec<ScheduleResponse>,
                    total: usize,
                    next: Option<String>,
                }
                let total = all.len();
                let schedules = all
                    .into_iter()
                    .map(|s| ScheduleResponse::new(queue, s))
                    .collect();
                print_json(&List {
                    schedules,
                    total,
                    next: None,
                })?;
            } else {
                for s in &all {
                    print_line(s);
                }
            }
        }
        ScheduleCommand::Delete { queue, name } => {
            if !known_queue(client, queue)
                .await?
                .delete_schedule(name)
                .await?
            {
                bail!("queue {queue} has no schedule {name}");
            }
            if json_out {
                print_json(&json!({"name": name, "deleted": true}))?;
            } else {
                outln!("deleted");
            }
        }
        ScheduleCommand::Pause { queue, name } => {
            if known_queue(client, queue)
                .await?
                .pause_schedule(name)
                .await?
                .is_none()
            {
                bail!("queue {queue} has no schedule {name}");
            }
            show(client, queue, name, json_out).await?;
        }
        ScheduleCommand::Resume { queue, name } => {
            if known_queue(client, queue)
                .await?
                .resume_schedule(name)
                .await?
                .is_none()
            {
                bail!("queue {queue} has no schedule {name}");
            }
            show(client, queue, name, json_out).await?;
        }
        ScheduleCommand::Trigger { queue, name } => {
            let q = known_queue(client, queue).await?;
            let Some(e) = q.trigger_schedule(name).await? else {
                bail!("queue {queue} has no schedule {name}");
            };
            // the key holds the Redis time of the trigger: read it back, as the HTTP route
            // does (empty if the task already ran and is gone)
            let key = q
                .get(&TaskRef::Id(e.id.clone()))
                .await?
                .and_then(|t| t.key)
                .unwrap_or_default();
            if json_out {
                print_json(&json!({"id": e.id.as_str(), "key": key, "due_at_ms": e.due_at_ms}))?;
            } else {
                outln!("enqueued {} key={key} due {}", e.id, when(e.due_at_ms));
            }
        }
        ScheduleCommand::Backfill {
            queue,
            name,
            from_ms,
            to_ms,
        } => {
            let Some(r) = known_queue(client, queue)
                .await?
                .backfill_schedule(name, *from_ms, *to_ms)
                .await?
            else {
                bail!("queue {queue} has no schedule {name}");
            };
            if json_out {
                print_json(&json!({"ticks": r.ticks, "created": r.created,
                    "existing": r.existing}))?;
            } else {
                outln!(
                    "{} ticks in the range: {} enqueued (due now), {} already present",
                    r.ticks,
                    r.created,
                    r.existing
                );
            }
        }
    }
    Ok(())
}
