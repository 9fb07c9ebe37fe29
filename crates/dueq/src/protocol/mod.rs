//! The only code in dueq that talks to Redis.
//!
//! Everything above this module (client, worker, server, CLI) calls the typed functions here;
//! nothing else issues queue commands. Each state change is one Lua script call (one file per
//! operation, each with a contract header), so every transition of DESIGN section 1 is atomic.
//!
//! One folder per resource, each holding its scripts and the Rust wrappers that call them
//! (keys and arguments in, typed reply out):
//!
//! | module | operations |
//! |---|---|
//! | `tasks/` | enqueue, get, cancel, reschedule, browse (pages of scheduled or active tasks) |
//! | `leases/` | claim, ack, nack, extend, release, recover |
//! | `dead/` | dead-letter list, retry, delete |
//! | `queues/` | stats, history, due-time counts, settings (configure), the queue registry |
//! | `webhook/` | push delivery target |
//! | `schedules/` | recurring schedules: set, delete, pause/resume, get, list, due, fire |
//! | `workers/` | live worker processes: heartbeat (register, refresh, trim), remove, list |
//! | `server.rs` | `PING`, `INFO`, eviction policy (plain commands) |
//!
//! Shared: `lib/` (Lua helpers, the head of the function library), `scripts.rs` (the
//! registry, which builds the library),
//! `call.rs` (argument and reply plumbing), `keys.rs` (every key name), `record.rs` (the task
//! record), `conn.rs` (the connection).
//!
//! # Key layout (one queue `q`; every key carries the hash tag `{q}`)
//!
//! | key | type | holds |
//! |---|---|---|
//! | `dueq:{q}:sched` | sorted set | scheduled ungrouped task ids of priority 0, score = due time (ms) |
//! | `dueq:{q}:sched:1` .. `:sched:9` | sorted set | the same for priorities 1 to 9 (only those in use; docs/OPTIONS.md) |
//! | `dueq:{q}:expiry` | sorted set | scheduled tasks with an expiry that have not started, score = `expires_at_ms` |
//! | `dueq:{q}:active` | sorted set | active task ids, score = lease deadline (ms) |
//! | `dueq:{q}:leases` | hash | active task id → `"<lease token> <deadline ms>"` |
//! | `dueq:{q}:tasks` | hash | task id → record (see `lib/`) |
//! | `dueq:{q}:keys` | hash | business key → id of its live task |
//! | `dueq:{q}:dead` | sorted set | dead-letter ids, score = when they died |
//! | `dueq:{q}:done` | sorted set | succeeded ids kept by retention, score = finish time |
//! | `dueq:{q}:meta` | hash | `seq` (ids and tokens), `paused`, `dead_max`, `done_max`, sweep cursor, settings, `prio` (bitmask of priorities above 0 in use), `exp` (1 once a task had an expiry) |
//! | `dueq:{q}:stats` | hash | counters (`enqueued_total`, `succeeded_total`, ...) |
//! | `dueq:{q}:errors` | hash | task id → last error text (only tasks that failed an attempt) |
//! | `dueq:{q}:hist` | hash | `"<minute>:<counter>"` → count, per minute (ms / 60 000) of about the last hour: `c` claimed, `l` lateness sum and `x` max (ms, claim − due), `s` succeeded, `r` retried, `d` dead |
//! | `dueq:{q}:webhook` | hash | push delivery target: `url`, `secret`, `concurrency`, `timeout_ms`, `updated_at_ms` |
//! | `dueq:{q}:claims` | hash | worker claim id → `"<ms> id token ..."` of its last claim (lost-reply recovery) |
//! | `dueq:{q}:schedules` | hash | schedule name → definition (JSON line, `\n`, payload) |
//! | `dueq:{q}:schedule_state` | hash | schedule name → `"next last skipped paused fired fingerprint"` |
//! | `dueq:{q}:schedule_next` | sorted set | unpaused schedule names, score = when a firer acts on it next (ms; `sched_act_at` in `lib/`) |
//! | `dueq:{q}:schedule_fired` | hash | schedule name → `"t1 t2 …"`: its newest fired ticks (ms, ascending), every tick fired ahead among them |
//! | `dueq:{q}:wake` | pub/sub channel | due time (ms) of a task that became due earlier than before |
//! | `dueq:{q}:schedule_wake` | pub/sub channel | next fire time (ms) of a schedule that changed |
//! | `dueq:queues` | set | names of queues ever used (for listing; outside any hash tag) |
//! | `dueq:webhooks` | set | names of queues whose webhook was ever set (only added to; outside any hash tag) |
//! | `dueq:schedules` | set | names of queues that ever had a schedule (only added to; outside any hash tag) |
//! | `dueq:workers` | hash | worker id → `"<last_seen_ms> <expires_at_ms> <started_at_ms> <in_hand>\n<info JSON>"`, one per live worker process or server (heartbeats; outside any hash tag; capped) |
//!
//! # Invariants
//!
//! * A task id is in at most one of the scheduled sets (`sched`, `sched:1..9`, the group
//!   index), `active`, `dead`, `done`; its record exists while it is in one of them. An
//!   ungrouped scheduled task is in the set of its record's priority, and that priority's bit
//!   is set in `meta` `prio`. An id is in `expiry` only while it is scheduled and has not
//!   started.
//! * An id is in `active` exactly when it has an entry in `leases` (the recover script repairs a
//!   lost `active` entry from the lease's own deadline).
//! * Ids are 12 lower-case hex digits from the per-queue `seq`, so equal due times sort in
//!   enqueue order (FIFO) by member.
//! * "Now" is always the Redis server's `TIME`, read inside the script.

pub(crate) mod call;
pub(crate) mod conn;
pub(crate) mod dead;
pub mod keys;
pub(crate) mod leases;
pub(crate) mod queues;
pub mod record;
pub(crate) mod schedules;
pub(crate) mod scripts;
pub(crate) mod server;
pub(crate) mod tasks;
pub(crate) mod webhook;
pub(crate) mod workers;
