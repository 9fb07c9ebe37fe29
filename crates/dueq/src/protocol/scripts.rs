//! The registry of Lua operations: one file per operation, which sits beside the Rust
//! wrapper of its resource (`tasks/enqueue.lua` next to `tasks/mod.rs`), and `lib/` (the
//! shared helpers, one file per concern).
//!
//! All of them form one Redis function library (`FUNCTION LOAD`, Redis 7): the files of
//! `lib/` run once when the library loads, and each operation is a function of it called with
//! `FCALL`, so a call pays for its own work only (as an `EVALSHA` script, every call ran the
//! helpers' definitions again; docs/BENCHMARKS.md has what that cost). The library's name and
//! its functions' names carry a digest of the code (`dueq_<digest>_claim`), so processes of
//! two dueq versions on one Redis each call their own. A function the server does not have
//! (a restart without persistence, `FUNCTION FLUSH`, a node that never had it) answers
//! `Function not found`; the call loads the library and is sent again (`call.rs`), so a
//! flushed library heals by itself. [`ensure_loaded`] loads it at start-up so a broken script
//! fails fast.
//!
//! Redis refuses a function that may write, before it starts, while it is at `maxmemory`
//! (OOM) unless the function is flagged `allow-oom`, and while writes are refused (too few
//! replicas for `min-replicas-to-write`, a failed save) unless it is flagged `no-writes`.
//! The reads carry `no-writes`; the operations that drain a queue or remove things (claim,
//! ack, nack, extend, release, recovery, cancel, ...) carry `allow-oom`, so workers keep
//! draining a full Redis and free memory, as they did as scripts; the ones that add work
//! (enqueue, reschedule, retry from the DLQ, settings, schedules) carry neither and get
//! Redis's OOM error.
//!
//! In a debug build with the `test-clock` feature (dueq's own tests), `test_clock.lua` opens
//! each function: it takes the clock argument that `call.rs` adds off `ARGV` (see
//! `crate::test_clock`). A release build never includes it.

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;

use redis::ServerErrorKind;
use tokio::time::Instant;

use super::conn::Conn;
use crate::error::Result;

/// One operation of the library: the name `FCALL` takes.
pub(crate) struct Function {
    pub(crate) name: String,
}

/// The helpers every operation may use, in the order they are defined: each file may use what
/// the ones before it define.
const LIB: &[(&str, &str)] = &[
    ("lib/base.lua", include_str!("lib/base.lua")),
    ("lib/record.lua", include_str!("lib/record.lua")),
    ("lib/stats.lua", include_str!("lib/stats.lua")),
    ("lib/priorities.lua", include_str!("lib/priorities.lua")),
    ("lib/groups.lua", include_str!("lib/groups.lua")),
    ("lib/limits.lua", include_str!("lib/limits.lua")),
    ("lib/lifecycle.lua", include_str!("lib/lifecycle.lua")),
    ("lib/schedules.lua", include_str!("lib/schedules.lua")),
];

/// The library's name (with the digest) and its source text.
struct Library {
    name: String,
    source: String,
}

/// The file's operation name: `leases/claim.lua` is `claim`.
fn op_of(file: &str) -> &str {
    let base = file.rsplit('/').next().unwrap_or(file);
    base.strip_suffix(".lua").unwrap_or(base)
}

/// Stands for the library's name while its text is hashed (the name is the digest).
const NAME_SLOT: &str = "dueq_0000000000000000";

static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    #[cfg(all(feature = "test-clock", debug_assertions))]
    let clock = include_str!("test_clock.lua");
    #[cfg(not(all(feature = "test-clock", debug_assertions)))]
    let clock = "";
    let mut source = format!("#!lua name={NAME_SLOT}\n");
    for (_, text) in LIB {
        source.push_str(text);
        source.push('\n');
    }
    for (file, text, _, flags) in SOURCES {
        // writing to a String cannot fail
        let _ = write!(
            source,
            "\nredis.register_function{{function_name = '{NAME_SLOT}_{op}', flags = {{{flags}}},\n\
             callback = function(keys, argv)\nKEYS, ARGV, struct_unpack = keys, argv, struct.unpack\n\
             {clock}\n{text}\nend}}\n",
            op = op_of(file),
        );
    }
    // the probe `has_library` calls: answers the library's name
    let _ = write!(
        source,
        "\nredis.register_function{{function_name = '{NAME_SLOT}_version', flags = {{{READS}}},\n\
         callback = function() return '{NAME_SLOT}' end}}\n"
    );
    // over the whole text, wrapper included
    let name = format!("dueq_{:016x}", super::keys::fnv1a64(source.as_bytes()));
    Library {
        source: source.replace(NAME_SLOT, &name),
        name,
    }
});

impl Function {
    fn named(file: &str) -> Self {
        Self {
            name: format!("{}_{}", LIBRARY.name, op_of(file)),
        }
    }
}

/// Flags of an operation that only reads: Redis runs it also at `maxmemory`, while writes are
/// refused for want of replicas (`min-replicas-to-write`) or after a failed save.
const READS: &str = "'no-writes'";
/// Flags of an operation that drains a queue or removes things: it runs at `maxmemory`.
const DRAINS: &str = "'allow-oom'";
/// Flags of an operation that adds work: refused at `maxmemory`, before it starts.
const ADDS: &str = "";

macro_rules! scripts {
    ($($name:ident => $file:literal, $keys:literal, $flags:expr;)*) => {
        $(
            #[doc = concat!("The function of `", $file, "`.")]
            pub(crate) static $name: LazyLock<Function> = LazyLock::new(|| Function::named($file));
        )*
        /// Every operation: (file name, source, number of KEYS the Rust side passes, its
        /// flags: [`READS`], [`DRAINS`] or [`ADDS`]).
        const SOURCES: &[(&str, &str, usize, &str)] = &[$(($file, include_str!($file), $keys, $flags)),*];
    };
}

scripts! {
    ENQUEUE => "tasks/enqueue.lua", 25, ADDS;
    CLAIM => "leases/claim.lua", 32, DRAINS;
    ACK => "leases/ack.lua", 18, DRAINS;
    NACK => "leases/nack.lua", 30, DRAINS;
    EXTEND => "leases/extend.lua", 2, DRAINS;
    RELEASE => "leases/release.lua", 25, DRAINS;
    RECOVER => "leases/recover.lua", 31, DRAINS;
    CANCEL => "tasks/cancel.lua", 27, DRAINS;
    RESCHEDULE => "tasks/reschedule.lua", 25, ADDS;
    GET => "tasks/get.lua", 29, READS;
    BROWSE => "tasks/browse.lua", 18, READS;
    STATS => "queues/stats.lua", 19, READS;
    HISTORY => "queues/history.lua", 1, READS;
    RECOVERY_DUE => "queues/recovery_due.lua", 1, DRAINS;
    RECOVERY_DONE => "queues/recovery_done.lua", 1, DRAINS;
    PURGE => "queues/purge.lua", 28, DRAINS;
    QUEUE_DELETE => "queues/queue_delete.lua", 3, DRAINS;
    DUE_COUNTS => "queues/due_counts.lua", 13, READS;
    DEAD_LIST => "dead/dead_list.lua", 4, READS;
    DEAD_RETRY => "dead/dead_retry.lua", 26, ADDS;
    DEAD_DELETE => "dead/dead_delete.lua", 5, DRAINS;
    DEAD_BULK => "dead/dead_bulk.lua", 26, ADDS;
    SETTINGS_SET => "queues/settings_set.lua", 11, ADDS;
    WEBHOOK_SET => "webhook/webhook_set.lua", 1, ADDS;
    WEBHOOK_CLEAR => "webhook/webhook_clear.lua", 1, DRAINS;
    WEBHOOK_FAILED => "webhook/webhook_failed.lua", 1, DRAINS;
    SCHEDULE_SET => "schedules/schedule_set.lua", 29, ADDS;
    SCHEDULE_DELETE => "schedules/schedule_delete.lua", 29, DRAINS;
    SCHEDULE_PAUSE => "schedules/schedule_pause.lua", 28, ADDS;
    SCHEDULE_GET => "schedules/schedule_get.lua", 3, READS;
    SCHEDULE_LIST => "schedules/schedule_list.lua", 3, READS;
    SCHEDULE_DUE => "schedules/schedule_due.lua", 4, DRAINS;
    SCHEDULE_FIRE => "schedules/schedule_fire.lua", 29, ADDS;
    WORKER_BEAT => "workers/worker_beat.lua", 1, ADDS;
    WORKER_REMOVE => "workers/worker_remove.lua", 1, DRAINS;
    WORKER_LIST => "workers/worker_list.lua", 1, READS;
}

/// Whether `e` says the server lacks a function (so the library must be loaded). The text,
/// not `detail()`: a pipeline's error (`FCALL` then `WAIT`) carries its commands' errors
/// inside, with no detail of its own.
pub(crate) fn is_missing_function(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().contains("Function not found")
}

/// Loads the library (`FUNCTION LOAD`; on a cluster the command goes to every primary), as a
/// call does that was answered `Function not found` (see also [`ensure_loaded`]). A
/// server that has it already answers that the library exists, which is success: the name
/// carries the digest of the code. Redis refuses `FUNCTION LOAD` itself at `maxmemory` (and
/// while writes are refused), and so does an ACL user without `function|load`: then a server
/// that has the library is fine too ([`has_library`]), so a worker or `dueq serve` starts,
/// and stays ready, beside a full Redis, or as a user allowed only `FCALL`, once the library
/// is there. While Redis answers `LOADING` (it is reading its data set from disk after a
/// restart, which always ends), it waits and asks again (50 ms doubling to 1 s, with
/// jitter), so a worker or server started beside a Redis that is still loading waits for it
/// instead of exiting.
pub(crate) async fn load_all(conn: &mut Conn) -> Result<()> {
    let mut pause = Duration::from_millis(50);
    let mut waiting_since = None;
    loop {
        let answer: redis::RedisResult<redis::Value> = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&LIBRARY.source)
            .query_async(conn)
            .await;
        match answer {
            Ok(_) => break,
            // the text, as above: on a cluster the answer gathers the nodes' answers
            Err(e) if e.to_string().contains("already exists") => break,
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
            Err(e) => {
                let what = format!(
                    "loading dueq's function library {} (FUNCTION LOAD)",
                    LIBRARY.name
                );
                match has_library(conn).await {
                    Ok(true) => {
                        tracing::debug!(error = %e, "FUNCTION LOAD refused; the library is there");
                        break;
                    }
                    Ok(false) => {
                        let needs = if e.code() == Some("NOPERM") {
                            ": this Redis user needs +function|load, or a user who has it must \
                             load the library first (any dueq command run as that user does)"
                        } else {
                            ""
                        };
                        return Err(crate::Error::from(e)
                            .context(&what)
                            .hint(&format!("; the server does not have the library{needs}")));
                    }
                    // whether the server has it is not known (busy, timed out, ...)
                    Err(_) => return Err(crate::Error::from(e).context(&what)),
                }
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

/// Makes sure the server holds the library: asks first ([`has_library`], one small call), and
/// loads it ([`load_all`]) only when that does not say yes. For start-up and readiness checks,
/// which then cost a call instead of sending the whole library (about 120 KB) each time, and
/// work for a user without `function|load` once the library is there.
pub(crate) async fn ensure_loaded(conn: &mut Conn) -> Result<()> {
    if let Ok(true) = has_library(conn).await {
        return Ok(());
    }
    load_all(conn).await
}

/// Whether the server (on a cluster: every primary) holds this library: its `version`
/// function answers the library's name, or `Function not found`. A call, not `FUNCTION
/// LIST`, so it needs only the `FCALL` that every operation needs. Any other answer (busy,
/// loading, timed out, refused) is an error: then it is not known.
async fn has_library(conn: &mut Conn) -> redis::RedisResult<bool> {
    let mut probe = redis::cmd("FCALL");
    probe.arg(format!("{}_version", LIBRARY.name)).arg(0);
    match conn.on_every_primary(probe).await {
        Ok(name) => Ok(redis::from_redis_value::<String>(name).is_ok_and(|n| n == LIBRARY.name)),
        Err(e) if is_missing_function(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file's header names its KEYS; the registry must pass exactly that many, and every
    /// operation file must be registered.
    #[test]
    fn headers_match_registry() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol");
        let registered: Vec<_> = SOURCES.iter().map(|(f, _, _, _)| *f).collect();
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            // lib/ holds the helpers, not operations
            if !path.is_dir() || path.ends_with("lib") {
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
        for &(file, _, keys, _) in SOURCES {
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
            // `option_keys(a)` the ten from `a` (lib/groups.lua, lib/priorities.lua)
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
                // the priority-0 set is the script's KEYS[1] (lib/priorities.lua)
                used.extend(a..a + 10);
                used.push(1);
            }
            used.sort_unstable();
            used.dedup();
            assert_eq!(used.len(), keys, "{file}: body uses {used:?}");
        }
    }
}
