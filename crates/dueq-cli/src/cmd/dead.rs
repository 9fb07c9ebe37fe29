//! `dead list | retry | delete`: with ids, those tasks; without, every dead task a filter
//! matches, in bounded steps (see [`super::cleanup`]).

use std::time::Duration;

use anyhow::{Context as _, Result};
use dueq::{Client, DeadBulk, DeadBulkReport, DeadFilter, DeadRetryOutcome, Queue, TaskId};
use serde_json::json;

use super::cleanup::Progress;
use super::{known_queue, print_json};
use crate::args::{DeadBulkArgs, DeadCommand};
use crate::human::{duration, when};
use dueq_server::api::dead::DeadListResponse;

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
                print_json(&DeadListResponse::from(page))?;
            } else {
                outln!("{} dead in {queue}", page.total);
                for d in &page.tasks {
                    let group = d
                        .task
                        .group
                        .as_deref()
                        .map_or_else(String::new, |g| format!(" group={g}"));
                    outln!(
                        "{} key={}{group} attempts={}/{} died {} error={}",
                        d.task.id,
                        d.task.key.as_deref().unwrap_or("-"),
                        d.task.attempt,
                        d.task.max_attempts,
                        when(d.died_at_ms),
                        d.task.last_error.as_deref().unwrap_or("-")
                    );
                }
                let shown = *offset + page.tasks.len() as u64;
                if !page.tasks.is_empty() && shown < page.total {
                    outln!(
                        "showing {} to {shown} of {}, newest first; next page: --offset {shown} \
                         --limit {limit}",
                        offset + 1,
                        page.total
                    );
                }
            }
        }
        DeadCommand::Retry {
            queue,
            ids: v,
            bulk: b,
            spread_ms,
        } if v.is_empty() => {
            let run = bulk_run(b)?.spread_ms(spread_ms.unwrap_or(0));
            let q = known_queue(client, queue).await?;
            let r = run_bulk(&q, Action::Retry, run, step(b)).await?;
            print_bulk(&r, Action::Retry, b, *spread_ms, json_out)?;
        }
        DeadCommand::Delete {
            queue,
            ids: v,
            bulk: b,
        } if v.is_empty() => {
            let run = bulk_run(b)?;
            let q = known_queue(client, queue).await?;
            let r = run_bulk(&q, Action::Delete, run, step(b)).await?;
            print_bulk(&r, Action::Delete, b, None, json_out)?;
        }
        DeadCommand::Retry { queue, ids: v, .. } => {
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
                    print_json(&json!({"id": id.as_str(), "outcome": s}))?;
                } else {
                    outln!("{id} {s}");
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} task(s) not retried");
            }
        }
        DeadCommand::Delete { queue, ids: v, .. } => {
            let ids = ids(v)?;
            let out = known_queue(client, queue).await?.dead_delete(&ids).await?;
            let mut failed = 0;
            for (id, ok) in ids.iter().zip(out) {
                let s = if ok { "deleted" } else { "not_found" };
                failed += usize::from(!ok);
                if json_out {
                    print_json(&json!({"id": id.as_str(), "outcome": s}))?;
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

fn step(b: &DeadBulkArgs) -> Duration {
    Duration::from_millis(b.step_ms)
}

/// What a bulk run does with the tasks it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Delete,
}

impl Action {
    /// The verb of the text output, past tense.
    fn done(self) -> &'static str {
        match self {
            Self::Retry => "retried",
            Self::Delete => "deleted",
        }
    }
}

/// The library's run for the flags; refuses a run without filter or `--all`, so that a
/// forgotten id or a typo does not act on the whole dead-letter queue.
fn bulk_run(b: &DeadBulkArgs) -> Result<DeadBulk> {
    if !b.has_filter() && !b.all {
        anyhow::bail!(
            "name task ids, or choose the dead tasks with --error-contains, --died-after, \
             --died-before, --key-prefix or --group (--all: every dead task of the queue)"
        );
    }
    let mut f = DeadFilter::new();
    f.error_contains.clone_from(&b.error_contains);
    f.died_after_ms = b.died_after_ms;
    f.died_before_ms = b.died_before_ms;
    f.key_prefix.clone_from(&b.key_prefix);
    f.group.clone_from(&b.group);
    let mut run = DeadBulk::new(f).dry_run(b.dry_run);
    run.limit = b.limit;
    Ok(run)
}

/// Calls the library until the run is over (no cursor), each call working for at most
/// `step`, `--limit` counting over the whole run; the counts summed.
async fn run_bulk(
    q: &Queue,
    action: Action,
    mut run: DeadBulk,
    step: Duration,
) -> Result<DeadBulkReport> {
    let limit = run.limit;
    let mut total = DeadBulkReport::default();
    let mut cursor: Option<String> = None;
    let mut progress = Progress::new();
    loop {
        if let Some(l) = limit {
            run.limit = Some(l.saturating_sub(total.done + total.conflicts));
        }
        let answer = match action {
            Action::Retry => q.dead_retry_where(&run, cursor.as_deref(), step).await,
            Action::Delete => q.dead_delete_where(&run, cursor.as_deref(), step).await,
        };
        let r = match answer {
            Ok(r) => r,
            Err(e) => {
                progress.finish();
                let e = anyhow::Error::from(e);
                if total.looked_at == 0 {
                    return Err(e);
                }
                return Err(e).context(format!(
                    "stopped after {} of {} matching dead tasks {} (what was done stays done; \
                     run the command again for the rest)",
                    total.done,
                    total.matched,
                    action.done()
                ));
            }
        };
        total.looked_at += r.looked_at;
        total.matched += r.matched;
        total.done += r.done;
        total.conflicts += r.conflicts;
        cursor = r.cursor;
        let limit_reached = limit.is_some_and(|l| total.done + total.conflicts >= l);
        if cursor.is_none() || limit_reached {
            break;
        }
        progress.step(total.looked_at, || {
            let seen = format!(
                "{} dead tasks looked at: {} matching",
                total.looked_at, total.matched
            );
            if run.dry_run {
                seen
            } else {
                format!("{seen}, {} {}", total.done, action.done())
            }
        });
    }
    progress.finish();
    Ok(total)
}

/// The result of a bulk run: `--json` the object `POST /v1/queues/{queue}/dead/retry` (or
/// `/delete`) answers, summed over the steps; else one line.
fn print_bulk(
    r: &DeadBulkReport,
    action: Action,
    b: &DeadBulkArgs,
    spread_ms: Option<u64>,
    json_out: bool,
) -> Result<()> {
    if json_out {
        print_json(&json!({
            "looked_at": r.looked_at,
            "matched": r.matched,
            "done": r.done,
            "conflicts": r.conflicts,
        }))?;
        return Ok(());
    }
    let what = action.done();
    if r.matched == 0 {
        outln!(
            "{}no dead task matches; nothing {what}",
            if b.dry_run { "dry run: " } else { "" }
        );
        return Ok(());
    }
    if b.dry_run {
        let cap = b
            .limit
            .filter(|l| *l < r.matched)
            .map_or_else(String::new, |l| format!(" (--limit: {l} would be {what})"));
        outln!(
            "dry run: {} of {} dead tasks match{cap}; nothing {what}",
            r.matched,
            r.looked_at
        );
        return Ok(());
    }
    let spread = spread_ms
        .filter(|ms| *ms > 0 && r.done > 0)
        .map_or_else(String::new, |ms| {
            format!(", due over the next {}", duration(ms))
        });
    let conflicts = if r.conflicts > 0 {
        format!(
            "; {} not retried: their key is live on another task or in its unique window",
            r.conflicts
        )
    } else {
        String::new()
    };
    // a run cut by --limit stops looking: more dead tasks may match than it counted
    let left = r.matched.saturating_sub(r.done + r.conflicts);
    let cut = b
        .limit
        .filter(|l| r.done + r.conflicts >= *l)
        .map_or_else(String::new, |l| {
            if left > 0 {
                format!(
                    "; stopped at --limit {l}: {left} more of those looked at match, and more \
                     may beyond them (--dry-run counts them all)"
                )
            } else {
                format!("; stopped at --limit {l}: more may match (--dry-run counts them)")
            }
        });
    outln!(
        "{what} {} of {} matching dead tasks ({} looked at){spread}{conflicts}{cut}",
        r.done,
        r.matched,
        r.looked_at
    );
    Ok(())
}
