//! `purge` and `queue delete`, and what the bulk commands share (`dead retry|delete` without
//! ids too): each library call (a step) does bounded work for at most the hidden `--step`
//! (default 250 ms) and says what is left, and the command calls again until nothing is,
//! showing its progress on stderr.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use dueq::{Client, Purge};
use serde_json::json;

use super::{known_queue, print_json};
use crate::args::{PurgeArgs, PurgeStateArg};

/// Tasks between two progress lines when stderr is not a terminal.
const LINE_EVERY: u64 = 10_000;

/// Progress of a bulk run on stderr: on a terminal one line, rewritten after each step;
/// otherwise a line each time the count passes another [`LINE_EVERY`] tasks. Only steps
/// that leave work to do report, so a run done in one step shows nothing.
pub struct Progress {
    tty: bool,
    shown: bool,
    next_line: u64,
}

impl Progress {
    /// Progress for stderr as it is now (a terminal or not).
    pub fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            shown: false,
            next_line: LINE_EVERY,
        }
    }

    /// After a step that left work to do: `count` tasks handled so far, `line` what to show.
    pub fn step(&mut self, count: u64, line: impl FnOnce() -> String) {
        let mut err = std::io::stderr();
        // progress is a courtesy: a closed stderr must not stop the run
        if self.tty {
            let _ = write!(err, "\r{}\x1b[K", line());
            let _ = err.flush();
            self.shown = true;
        } else if count >= self.next_line {
            let _ = writeln!(err, "{}", line());
            self.next_line = (count / LINE_EVERY + 1) * LINE_EVERY;
        }
    }

    /// Clears the terminal line, before the result is printed.
    pub fn finish(&mut self) {
        if self.shown {
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

/// `dueq purge QUEUE --state S`: drops every task of the state, a step at a time, until none
/// is left; `--json` prints `{"dropped", "left"}` as `POST /v1/queues/{queue}/purge` does
/// (summed over the steps). Exit status 1 for an unknown queue, or when tasks are left that
/// a step could not drop.
pub async fn purge(client: &Client, a: &PurgeArgs, json_out: bool) -> Result<()> {
    let q = known_queue(client, &a.queue).await?;
    let state = match a.state {
        PurgeStateArg::Scheduled => Purge::Scheduled,
        PurgeStateArg::Dead => Purge::Dead,
        PurgeStateArg::Succeeded => Purge::Succeeded,
    };
    let name = state.as_str();
    let mut progress = Progress::new();
    let mut dropped = 0;
    let left = loop {
        let r = q.purge(state, Duration::from_millis(a.step_ms)).await.with_context(|| {
            format!(
                "purge stopped after dropping {dropped} {name} tasks (they stay dropped; run it \
                 again for the rest)"
            )
        });
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        };
        dropped += r.dropped;
        // a step that dropped nothing would drop nothing again: stop instead of spinning
        if r.left == 0 || r.dropped == 0 {
            break r.left;
        }
        progress.step(dropped, || {
            format!("purging {name} tasks: {dropped} dropped, {} left", r.left)
        });
    };
    progress.finish();
    if json_out {
        print_json(&json!({"dropped": dropped, "left": left}))?;
    } else {
        let cancelled = if state == Purge::Scheduled {
            " (counted as cancelled)"
        } else {
            ""
        };
        outln!("dropped {dropped} {name} tasks of {}{cancelled}", a.queue);
    }
    if left > 0 {
        bail!("{left} {name} tasks could not be dropped");
    }
    Ok(())
}

/// `dueq queue delete QUEUE [--force]`: `--json` prints `{"deleted": true}` as
/// `DELETE /v1/queues/{queue}` does; refused with its `not_empty` message (exit status 1)
/// while tasks are scheduled or running, unless forced.
pub async fn delete_queue(client: &Client, queue: &str, force: bool, json_out: bool) -> Result<()> {
    let q = known_queue(client, queue).await?;
    if !q.delete_queue(force).await? {
        bail!(
            "not_empty: queue {queue} has scheduled or running tasks: purge them first, or \
             delete with --force"
        );
    }
    if json_out {
        print_json(&json!({"deleted": true}))?;
    } else {
        outln!("deleted queue {queue}");
    }
    Ok(())
}
