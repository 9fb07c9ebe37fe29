//! The registry of Lua scripts: one `Script` per operation file, which sits beside the Rust
//! wrapper of its resource (`tasks/enqueue.lua` next to `tasks/mod.rs`), each with `lib.lua`
//! (the shared helpers) in front.
//!
//! `redis::Script` runs `EVALSHA` and, on `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`),
//! loads the script and retries once, so a flushed script cache heals by itself.
//! [`load_all`] loads every script at start-up so a broken script fails fast.
//!
//! In a debug build with the `test-clock` feature (dueq's own tests), `test_clock.lua` goes
//! between `lib.lua` and the script: it takes the clock argument that `call.rs` adds off
//! `ARGV` (see `crate::test_clock`). A release build never includes it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ServerErrorKind};
use tokio::time::Instant;

use super::conn::Conn;
use crate::error::Result;

macro_rules! scripts {
    ($($name:ident => $file:literal, $keys:literal;)*) => {
        $(
            #[doc = concat!("`", $file, "` with `lib.lua` in front.")]
            #[cfg(not(all(feature = "test-clock", debug_assertions)))]
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(concat!(include_str!("lib.lua"), include_str!($file)))
            });
            #[doc = concat!("`", $file, "` with `lib.lua` and the test clock in front.")]
            #[cfg(all(feature = "test-clock", debug_assertions))]
            pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("lib.lua"),
                    include_str!("test_clock.lua"),
                    include_str!($file)
                ))
            });
        )*
        /// Every script: (file name, script, number of KEYS the Rust side passes).
        pub(crate) fn all() -> Vec<(&'static str, &'static Script, usize)> {
            vec![$(($file, &*$name, $keys)),*]
        }
    };
}

scripts! {
    ENQUEUE => "tasks/enqueue.lua", 25;
    CLAIM => "leases/claim.lua", 30;
    ACK => "leases/ack.lua", 18;
    NACK => "leases/nack.lua", 29;
    EXTEND => "leases/extend.lua", 2;
    RELEASE => "leases/release.lua", 25;
    RECOVER => "leases/recover.lua", 30;
    CANCEL => "tasks/cancel.lua", 27;
    RESCHEDULE => "tasks/reschedule.lua", 25;
    GET => "tasks/get.lua", 28;
    BROWSE => "tasks/browse.lua", 17;
    STATS => "queues/stats.lua", 19;
    HISTORY => "queues/history.lua", 1;
    DUE_COUNTS => "queues/due_counts.lua", 13;
    DEAD_LIST => "dead/dead_list.lua", 3;
    DEAD_RETRY => "dead/dead_retry.lua", 25;
    DEAD_DELETE => "dead/dead_delete.lua", 4;
    SETTINGS_SET => "queues/settings_set.lua", 11;
    WEBHOOK_SET => "webhook/webhook_set.lua", 1;
    WEBHOOK_CLEAR => "webhook/webhook_clear.lua", 1;
    SCHEDULE_SET => "schedules/schedule_set.lua", 28;
    SCHEDULE_DELETE => "schedules/schedule_delete.lua", 28;
    SCHEDULE_PAUSE => "schedules/schedule_pause.lua", 27;
    SCHEDULE_GET => "schedules/schedule_get.lua", 2;
    SCHEDULE_LIST => "schedules/schedule_list.lua", 2;
    SCHEDULE_DUE => "schedules/schedule_due.lua", 3;
    SCHEDULE_FIRE => "schedules/schedule_fire.lua", 27;
    WORKER_BEAT => "workers/worker_beat.lua", 1;
    WORKER_REMOVE => "workers/worker_remove.lua", 1;
    WORKER_LIST => "workers/worker_list.lua", 1;
}

/// Loads every script into the server's script cache (`SCRIPT LOAD`; on a cluster the
/// command goes to every primary).
/// Loads every script. While Redis answers `LOADING` (it is reading its data set from disk
/// after a restart, which always ends), it waits and asks again (50 ms doubling to 1 s, with
/// jitter), so a worker or server started beside a Redis that is still loading waits for it
/// instead of exiting.
pub(crate) async fn load_all(conn: &mut Conn) -> Result<()> {
    let mut pause = Duration::from_millis(50);
    let mut waiting_since = None;
    for (_, script, _) in all() {
        loop {
            match script.load_async(conn).await {
                Ok(_) => break,
                Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::BusyLoading) => {
                    let since = *waiting_since.get_or_insert_with(|| {
                        tracing::warn!("Redis is loading its data set; waiting for it");
                        Instant::now()
                    });
                    tracing::debug!(
                        waited_ms = since.elapsed().as_millis() as u64,
                        "still loading"
                    );
                    tokio::time::sleep(crate::backoff::jittered(pause)).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if let Some(since) = waiting_since {
        tracing::info!(
            waited_ms = since.elapsed().as_millis() as u64,
            "Redis has loaded its data set"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file's header names its KEYS; the registry must pass exactly that many, and every
    /// operation file must be registered.
    #[test]
    fn headers_match_registry() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol");
        let registered: Vec<_> = all().iter().map(|(f, _, _)| *f).collect();
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if !path.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&path).unwrap() {
                let name = file.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".lua") {
                    let resource = path.file_name().unwrap().to_str().unwrap();
                    found.push(format!("{resource}/{name}"));
                }
            }
        }
        for name in &found {
            assert!(
                registered.contains(&name.as_str()),
                "{name} is not registered"
            );
        }
        assert_eq!(found.len(), registered.len(), "{found:?}");
        for (file, _, keys) in all() {
            let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            let first = text.lines().next().unwrap();
            let op = file.rsplit('/').next().unwrap().trim_end_matches(".lua");
            assert!(
                first.starts_with(&format!("-- {op}: ")),
                "{file}: bad first line"
            );
            assert!(text.contains("-- Returns:"), "{file}: no Returns line");
            let header: String = text.lines().take_while(|l| l.starts_with("--")).collect();
            // `KEYS[a..b]` declares a range; `group_keys(a)` uses the nine keys from `a`,
            // `option_keys(a)` the ten from `a`
            let ranges = |text: &str, open: &str, close: &str| -> Vec<usize> {
                text.match_indices(open)
                    .filter_map(|(at, _)| {
                        let rest = &text[at + open.len()..];
                        let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                        rest[n.len()..]
                            .starts_with(close)
                            .then(|| n.parse().unwrap())
                    })
                    .collect()
            };
            let mut declared: Vec<usize> = (1..=40)
                .filter(|i| header.contains(&format!("KEYS[{i}]")))
                .collect();
            for a in ranges(&header, "KEYS[", "..") {
                let len = if header.contains(&format!("KEYS[{a}..{}]", a + 8)) {
                    9
                } else {
                    assert!(header.contains(&format!("KEYS[{a}..{}]", a + 9)), "{file}");
                    10
                };
                declared.extend(a..a + len);
            }
            assert_eq!(declared.len(), keys, "{file}: header declares {declared:?}");
            let body: String = text.lines().filter(|l| !l.starts_with("--")).collect();
            let mut used: Vec<usize> = (1..=40)
                .filter(|i| body.contains(&format!("KEYS[{i}]")))
                .collect();
            for a in ranges(&body, "group_keys(", ")") {
                used.extend(a..a + 9);
            }
            for a in ranges(&body, "option_keys(", ")") {
                // the priority-0 set is the script's KEYS[1] (lib.lua)
                used.extend(a..a + 10);
                used.push(1);
            }
            used.sort_unstable();
            used.dedup();
            assert_eq!(used.len(), keys, "{file}: body uses {used:?}");
        }
    }
}
