//! `dead list | retry | delete`.

use anyhow::Result;
use dueq::{Client, DeadRetryOutcome, TaskId};
use serde_json::json;

use super::{known_queue, print_json, task_json};
use crate::args::DeadCommand;
use crate::human::when;

fn ids(v: &[String]) -> Result<Vec<TaskId>> {
    Ok(v.iter().map(TaskId::new).collect::<Result<_, _>>()?)
}

/// Runs one `dueq dead` subcommand.
pub async fn run(client: &Client, cmd: &DeadCommand, json_out: bool) -> Result<()> {
    match cmd {
        DeadCommand::List {
            queue,
            offset,
            limit,
        } => {
            let page = known_queue(client, queue)
                .await?
                .dead_list(*offset, *limit)
                .await?;
            if json_out {
                let tasks: Vec<_> = page
                    .tasks
                    .iter()
                    .map(|d| {
                        let mut v = task_json(&d.task);
                        v["died_at_ms"] = json!(d.died_at_ms);
                        v
                    })
                    .collect();
                print_json(&json!({"total": page.total, "tasks": tasks}));
            } else {
                outln!("{} dead in {queue}", page.total);
                for d in &page.tasks {
                    outln!(
                        "{} key={} attempts={} died {} error={}",
                        d.task.id,
                        d.task.key.as_deref().unwrap_or("-"),
                        d.task.attempt,
                        when(d.died_at_ms),
                        d.task.last_error.as_deref().unwrap_or("-")
                    );
                }
            }
        }
        DeadCommand::Retry { queue, ids: v } => {
            let ids = ids(v)?;
            let out = known_queue(client, queue).await?.dead_retry(&ids).await?;
            let mut failed = 0;
            for (id, o) in ids.iter().zip(out) {
                let s = match o {
                    DeadRetryOutcome::Retried => "retried",
                    DeadRetryOutcome::Conflict => "conflict",
                    _ => "not_found",
                };
                failed += usize::from(o != DeadRetryOutcome::Retried);
                if json_out {
                    print_json(&json!({"id": id.as_str(), "outcome": s}));
                } else {
                    outln!("{id} {s}");
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} task(s) not retried");
            }
        }
        DeadCommand::Delete { queue, ids: v } => {
            let ids = ids(v)?;
            let out = known_queue(client, queue).await?.dead_delete(&ids).await?;
            let mut failed = 0;
            for (id, ok) in ids.iter().zip(out) {
                let s = if ok { "deleted" } else { "not_found" };
                failed += usize::from(!ok);
                if json_out {
                    print_json(&json!({"id": id.as_str(), "outcome": s}));
                } else {
                    outln!("{id} {s}");
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} task(s) not found");
            }
        }
    }
    Ok(())
}
