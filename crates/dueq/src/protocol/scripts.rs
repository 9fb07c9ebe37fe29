//! The registry of Lua operations: one file per operation, which sits beside the Rust
//! wrapper of its resource (`tasks/enqueue.lua` next to `tasks/mod.rs`), the keys each takes,
//! and `lib/` (the shared helpers, one file per concern).
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
//! A Redis run with the test clock (`dueq serve --test-clock`, see `client/test_clock.rs`) is
//! served by a second library, the same operations each opened by `test_clock.lua`: "now" is
//! Redis `TIME` plus the offset kept in `dueq:test_clock`, which `call.rs` passes as a last
//! key. The two differ in text, so in name: a connection calls the one its Redis runs
//! ([`Function::name_on`]), and the first library stays exactly as written.
//!
//! In a debug build with the `frozen-clock` feature (dueq's own tests), `frozen_clock.lua` opens
//! each function: it takes the clock argument that `call.rs` adds off `ARGV` (see
//! `crate::frozen_clock`). A release build never includes it.

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;

use redis::ServerErrorKind;
use tokio::time::Instant;

use super::conn::Conn;
use super::keys::{GlobalKey, Span};
use crate::error::Result;

/// One operation of the library: the name `FCALL` takes, its operation name (the file's), and
/// what it takes in `KEYS`: a [`Span`] of its queue's keys, or one [`GlobalKey`].
pub(crate) struct Function<T> {
    name: String,
    /// The name in the test clock's library.
    test_name: String,
    pub(crate) op: &'static str,
    pub(crate) takes: T,
}

/// What an operation takes in `KEYS`, for the registry's test.
#[derive(Clone, Copy)]
#[cfg_attr(not(test), allow(dead_code))]
enum Takes {
    Span(Span),
    GlobalKey(GlobalKey),
}

/// The helpers every operation may use, in the order they are defined: each file may use what
/// the ones before it define.
const LIB: &[(&str, &str)] = &[
    ("lib/base.lua", include_str!("lib/base.lua")),
    ("lib/keys.lua", include_str!("lib/keys.lua")),
    ("lib/record.lua", include_str!("lib/record.lua")),
    ("lib/active.lua", include_str!("lib/active.lua")),
    ("lib/windows.lua", include_str!("lib/windows.lua")),
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

/// The library every operation calls on the Redis clock.
static LIBRARY: LazyLock<Library> = LazyLock::new(|| build(""));

/// The same operations on the test clock (`test_clock.lua` opens each function), for a Redis
/// run with `dueq serve --test-clock`. A second library rather than a branch in the first, so
/// the library of every other Redis runs exactly as written.
static TEST_LIBRARY: LazyLock<Library> = LazyLock::new(|| build(include_str!("test_clock.lua")));

/// The library with `prelude` at the top of each function (after the frozen clock of dueq's
/// own tests, when compiled in).
fn build(prelude: &str) -> Library {
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    let frozen = include_str!("frozen_clock.lua");
    #[cfg(not(all(feature = "frozen-clock", debug_assertions)))]
    let frozen = "";
    let mut source = format!("#!lua name={NAME_SLOT}\n");
    for (_, text) in LIB {
        source.push_str(text);
        source.push('\n');
    }
    for (file, text, _, flags) in SOURCES {
        let prelude = if REAL_TIME.contains(&op_of(file)) {
            ""
        } else {
            prelude
        };
        // writing to a String cannot fail
        let _ = write!(
            source,
            "\nredis.register_function{{function_name = '{NAME_SLOT}_{op}', flags = {{{flags}}},\n\
             callback = function(keys, argv)\nKEYS, ARGV, struct_unpack = keys, argv, struct.unpack\n\
             {frozen}\n{prelude}\n{text}\nend}}\n",
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
    let name = format!("dueq_{:016x}", crate::hash::fnv1a64(source.as_bytes()));
    Library {
        source: source.replace(NAME_SLOT, &name),
        name,
    }
}

/// The operations that keep Redis time on the test clock, so take no clock key: the live
/// workers list is about processes, whose heartbeats come on real time, and an advance must
/// not make every worker look gone.
const REAL_TIME: &[&str] = &["worker_beat", "worker_remove", "worker_list"];

/// Whether operation `op` called on `conn` runs on the test clock (and so takes its key).
pub(crate) fn on_test_clock(conn: &Conn, op: &str) -> bool {
    conn.test_clock() && !REAL_TIME.contains(&op)
}

/// The library a connection calls: the test clock's on a Redis that runs it.
fn library(conn: &Conn) -> &'static Library {
    if conn.test_clock() {
        &TEST_LIBRARY
    } else {
        &LIBRARY
    }
}

impl<T> Function<T> {
    fn named(file: &'static str, takes: T) -> Self {
        Self {
            name: format!("{}_{}", LIBRARY.name, op_of(file)),
            test_name: format!("{}_{}", TEST_LIBRARY.name, op_of(file)),
            op: op_of(file),
            takes,
        }
    }

    /// The name `FCALL` takes on `conn`.
    pub(crate) fn name_on(&self, conn: &Conn) -> &str {
        if conn.test_clock() {
            &self.test_name
        } else {
            &self.name
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
    ($($name:ident => $file:literal, $kind:ident::$takes:ident, $flags:expr;)*) => {
        $(
            #[doc = concat!("The function of `", $file, "`.")]
            pub(crate) static $name: LazyLock<Function<$kind>> =
                LazyLock::new(|| Function::named($file, $kind::$takes));
        )*
        /// Every operation: (file name, source, what it takes in KEYS, its flags: [`READS`],
        /// [`DRAINS`] or [`ADDS`]).
        const SOURCES: &[(&str, &str, Takes, &str)] =
            &[$(($file, include_str!($file), Takes::$kind($kind::$takes), $flags)),*];
    };
}

scripts! {
    ENQUEUE => "tasks/enqueue.lua", Span::Scheduled, ADDS;
    CLAIM => "leases/claim.lua", Span::Claims, DRAINS;
    ACK => "leases/ack.lua", Span::Finish, DRAINS;
    NACK => "leases/nack.lua", Span::Dead, DRAINS;
    EXTEND => "leases/extend.lua", Span::Leases, DRAINS;
    RELEASE => "leases/release.lua", Span::Scheduled, DRAINS;
    RECOVER => "leases/recover.lua", Span::Claims, DRAINS;
    CANCEL => "tasks/cancel.lua", Span::Scheduled, DRAINS;
    RESCHEDULE => "tasks/reschedule.lua", Span::Scheduled, ADDS;
    GET => "tasks/get.lua", Span::Dead, READS;
    WINDOW => "tasks/window.lua", Span::Finish, READS;
    BROWSE => "tasks/browse.lua", Span::Scheduled, READS;
    STATS => "queues/stats.lua", Span::Dead, READS;
    HISTORY => "queues/history.lua", Span::Finish, READS;
    RECOVERY_DUE => "queues/recovery_due.lua", GlobalKey::RECOVERY, DRAINS;
    RECOVERY_DONE => "queues/recovery_done.lua", GlobalKey::RECOVERY, DRAINS;
    PURGE => "queues/purge.lua", Span::Dead, DRAINS;
    QUEUE_DELETE => "queues/queue_delete.lua", Span::All, DRAINS;
    DUE_COUNTS => "queues/due_counts.lua", Span::Scheduled, READS;
    DEAD_LIST => "dead/dead_list.lua", Span::Dead, READS;
    DEAD_RETRY => "dead/dead_retry.lua", Span::Dead, ADDS;
    DEAD_DELETE => "dead/dead_delete.lua", Span::Dead, DRAINS;
    DEAD_BULK => "dead/dead_bulk.lua", Span::Dead, ADDS;
    SETTINGS_SET => "queues/settings_set.lua", Span::Finish, ADDS;
    WEBHOOK_SET => "webhook/webhook_set.lua", Span::All, ADDS;
    WEBHOOK_CLEAR => "webhook/webhook_clear.lua", Span::All, DRAINS;
    WEBHOOK_FAILED => "webhook/webhook_failed.lua", Span::All, DRAINS;
    SCHEDULE_SET => "schedules/schedule_set.lua", Span::All, ADDS;
    SCHEDULE_DELETE => "schedules/schedule_delete.lua", Span::All, DRAINS;
    SCHEDULE_PAUSE => "schedules/schedule_pause.lua", Span::All, ADDS;
    SCHEDULE_GET => "schedules/schedule_get.lua", Span::All, READS;
    SCHEDULE_LIST => "schedules/schedule_list.lua", Span::All, READS;
    SCHEDULE_DUE => "schedules/schedule_due.lua", Span::All, DRAINS;
    SCHEDULE_FIRE => "schedules/schedule_fire.lua", Span::All, ADDS;
    WORKER_BEAT => "workers/worker_beat.lua", GlobalKey::WORKERS, ADDS;
    WORKER_REMOVE => "workers/worker_remove.lua", GlobalKey::WORKERS, DRAINS;
    WORKER_LIST => "workers/worker_list.lua", GlobalKey::WORKERS, READS;
    CLOCK_ADVANCE => "clock/clock_advance.lua", GlobalKey::TEST_CLOCK, ADDS;
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
            .arg(&library(conn).source)
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
                    library(conn).name
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
    let library = library(conn);
    holds(conn, library).await
}

/// Whether the server holds the test clock's library: a Redis that ran the test clock keeps
/// it through a `FLUSHALL`, which drops the clock's key but not functions. Unknown is no.
pub(crate) async fn has_test_library(conn: &mut Conn) -> bool {
    holds(conn, &TEST_LIBRARY).await.unwrap_or(false)
}

/// Whether the server (on a cluster: every primary) holds `library`, as [`has_library`].
async fn holds(conn: &mut Conn, library: &Library) -> redis::RedisResult<bool> {
    let mut probe = redis::cmd("FCALL");
    probe.arg(format!("{}_version", library.name)).arg(0);
    match conn.on_every_primary(probe).await {
        Ok(name) => Ok(redis::from_redis_value::<String>(name).is_ok_and(|n| n == library.name)),
        Err(e) if is_missing_function(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::protocol::keys::SCRIPT_KEYS;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol");

    /// The names of the keys `takes` passes, as scripts read them (`K.<name>`).
    fn names(takes: Takes) -> BTreeSet<&'static str> {
        match takes {
            Takes::Span(span) => SCRIPT_KEYS[..span.len()].iter().copied().collect(),
            Takes::GlobalKey(g) => BTreeSet::from([g.name]),
        }
    }

    /// Code lines of a Lua text: comments and the text of strings dropped (a rough cut that
    /// fits these files: no long strings, no `--` inside a string).
    fn code(text: &str) -> String {
        text.lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The names of `K` a piece of Lua code reads or passes on: `K.<name>`, and for `K.s[..]`
    /// every scheduled set by priority. `pl`, `pn` and `woke` are per-call state, not keys.
    fn keys_read(code: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (at, _) in code.match_indices("K.") {
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = code[at + 2..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            match name.as_str() {
                "pl" | "pn" | "woke" => {}
                "s" => {
                    out.insert("sched".to_owned());
                    out.extend((1..=9).map(|p| format!("sched:{p}")));
                }
                _ => {
                    out.insert(name);
                }
            }
        }
        out
    }

    /// The helpers of `lib/` (name → code of its body), split at each top-level
    /// `local function`.
    fn helpers() -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (_, text) in LIB {
            let text = code(text);
            let mut starts: Vec<usize> = text
                .match_indices("\nlocal function ")
                .map(|(at, _)| at + 1)
                .collect();
            starts.push(text.len());
            for w in starts.windows(2) {
                let body = &text[w[0]..w[1]];
                let name: String = body["local function ".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name, body.to_owned());
            }
        }
        out
    }

    /// Whether `code` calls `name(` (not a longer name ending in it).
    fn calls(code: &str, name: &str) -> bool {
        code.match_indices(&format!("{name}(")).any(|(at, _)| {
            !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
        })
    }

    /// Every key `code` reads, itself or through the helpers it calls (and those they call).
    fn keys_used(code: &str, helpers: &BTreeMap<String, String>) -> BTreeSet<String> {
        let mut used = keys_read(code);
        let mut seen = BTreeSet::new();
        let mut todo = vec![code.to_owned()];
        while let Some(c) = todo.pop() {
            for (name, body) in helpers {
                // they build `K`: reading it there is not using a key
                if name == "queue_keys" || name == "global_key" {
                    continue;
                }
                if !seen.contains(name) && calls(&c, name) {
                    seen.insert(name.clone());
                    used.extend(keys_read(body));
                    todo.push(body.clone());
                }
            }
        }
        used
    }

    /// Each file's header names what it takes in KEYS, as the registry does; every operation
    /// file is registered; and every key an operation reads, itself or through the helpers
    /// it calls, is among those its call passes (on Redis Cluster a script may touch only
    /// keys passed in KEYS).
    #[test]
    fn headers_and_keys_match_registry() {
        let registered: Vec<_> = SOURCES.iter().map(|(f, _, _, _)| *f).collect();
        let mut found = Vec::new();
        for entry in std::fs::read_dir(DIR).unwrap() {
            let path = entry.unwrap().path();
            let resource = path.file_name().unwrap().to_str().unwrap().to_owned();
            if !path.is_dir() || resource == "lib" {
                continue;
            }
            for file in std::fs::read_dir(&path).unwrap() {
                let name = file.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".lua") {
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
        let helpers = helpers();
        assert!(helpers.len() > 50, "{:?}", helpers.keys());
        for &(file, text, takes, _) in SOURCES {
            let first = text.lines().next().unwrap();
            let op = op_of(file);
            assert!(
                first.starts_with(&format!("-- {op}: ")),
                "{file}: bad first line"
            );
            assert!(text.contains("-- Returns:"), "{file}: no Returns line");
            let header: String = text.lines().take_while(|l| l.starts_with("--")).collect();
            let body = code(text);
            assert!(!body.contains("KEYS["), "{file}: reads KEYS by number");
            match takes {
                Takes::Span(span) => {
                    let said = format!("-- KEYS: queue_keys, Span::{span:?} (keys.rs)");
                    assert!(header.contains(&said), "{file}: header lacks {said:?}");
                    assert!(body.contains("queue_keys()"), "{file}");
                }
                Takes::GlobalKey(g) => {
                    let said = format!("-- KEYS: global_key('{}'): {}", g.name, g.key);
                    assert!(header.contains(&said), "{file}: header lacks {said:?}");
                    assert!(
                        body.contains(&format!("global_key('{}')", g.name)),
                        "{file}"
                    );
                }
            }
            let passed = names(takes);
            let used = keys_used(&body, &helpers);
            let missing: Vec<_> = used
                .iter()
                .filter(|k| !passed.contains(k.as_str()))
                .collect();
            assert!(missing.is_empty(), "{file} reads {missing:?}, not passed");
        }
    }

    /// `queue_keys` in `lib/keys.lua` reads each key at its place in [`SCRIPT_KEYS`].
    #[test]
    fn lua_key_names_match_keys_rs() {
        let lua = code(LIB[1].1);
        for (i, name) in SCRIPT_KEYS.iter().enumerate() {
            if !name.starts_with("sched:") {
                let n = i + 1;
                assert!(
                    lua.contains(&format!("{name} = KEYS[{n}]")),
                    "{name} is not KEYS[{n}]"
                );
            }
        }
        // the sets of priorities 1 to 9 follow `sched`, in order
        let at = SCRIPT_KEYS.iter().position(|k| *k == "sched").unwrap();
        let sets: Vec<String> = (1..=9).map(|p| format!("sched:{p}")).collect();
        assert_eq!(SCRIPT_KEYS[at + 1..at + 10], sets[..]);
        let s = &lua[lua.find("K.s = {").unwrap()..];
        let s = &s[..s.find('}').unwrap()];
        let listed: Vec<String> = (at + 2..=at + 10).map(|n| format!("KEYS[{n}]")).collect();
        let want = format!("K.s = {{[0] = KEYS[{}], {}", at + 1, listed.join(", "));
        let squeeze = |t: &str| t.split_whitespace().collect::<String>();
        assert_eq!(squeeze(s), squeeze(&want));
    }
}
