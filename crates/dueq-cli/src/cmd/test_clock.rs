//! `dueq test-clock advance|set|get`: the test clock of a Redis run with `dueq serve
//! --test-clock`, as `/v1/test/clock` shows and moves it.

use std::time::Duration;

use anyhow::Result;
use dueq::{Client, ClockReading};
use serde_json::json;

use super::print_json;
use crate::args::TestClockCommand;
use crate::human::{datetime, duration};

/// Runs one `dueq test-clock` command.
pub async fn run(client: &Client, cmd: &TestClockCommand, json_out: bool) -> Result<()> {
    let Some(clock) = client.test_clock() else {
        anyhow::bail!(
            "this Redis does not run the test clock; start one for tests with dueq serve \
             --test-clock, on a Redis (or --data-dir) of its own"
        );
    };
    let r: ClockReading = match cmd {
        TestClockCommand::Advance { by_ms } => clock.advance(Duration::from_millis(*by_ms)).await?,
        TestClockCommand::Set { at_ms } => clock.set_ms(*at_ms).await?,
        TestClockCommand::Get => clock.now().await?,
    };
    if json_out {
        return print_json(&json!({"now_ms": r.now_ms, "offset_ms": r.offset_ms}));
    }
    let ahead = if r.offset_ms == 0 {
        "at Redis time".to_owned()
    } else {
        format!("{} ahead of Redis time", duration(r.offset_ms))
    };
    println!("test clock: {} ({ahead})", datetime(r.now_ms));
    Ok(())
}
