//! Recurring schedules: a cron pattern or a fixed interval that enqueues one task per tick
//! (DESIGN section 1 "schedule", guarantee 2.11).
//!
//! A [`ScheduleSpec`] is checked in full before anything is written
//! ([`ScheduleSpec::validate`]; each error names its field). It is stored in Redis beside its
//! queue, by name, so every worker and server sees the same one; registering the same spec
//! again changes nothing ([`SetOutcome::Unchanged`]). Fire times come from [`timing`]: pure
//! functions of the schedule's own grid and the Redis clock. The firing duty is
//! [`ScheduleFirer`](crate::ScheduleFirer).
//!
//! The rules, with their tests: `docs/SCHEDULES.md` in the repository.
//!
//! Files: `spec.rs` (what a schedule is and its checks), `state.rs` (its stored firing
//! state), `timing.rs` (fire times).

mod spec;
mod state;
pub(crate) mod timing;

pub use spec::{
    DEFAULT_MISFIRE_GRACE_MS, MAX_CRON_BYTES, MAX_MISFIRE_GRACE_MS, MAX_SCHEDULE_NAME_BYTES,
    MIN_EVERY_MS, MIN_MISFIRE_GRACE_MS, Misfire, Overlap, ScheduleSpec, validate_schedule_name,
};
pub(crate) use state::State;

/// How many fire times [`Schedule::upcoming_ms`] lists.
pub const UPCOMING: usize = 5;
/// How long before its fire time a tick may fire, ms: its task is enqueued then, due at the
/// fire time, so when the tick comes the task is handed out on the millisecond by the claim
/// path like any task (however many schedules share the tick), instead of being created
/// after it. At most [`MAX_TICKS_AHEAD`] ticks of a schedule wait ahead at once, and a firer
/// acts on a schedule again once at most [`REFILL_AT`] of them still wait, so one step fires
/// several ticks of a frequent schedule (a schedule every second: ten ticks every ten
/// seconds) and the Redis work per tick shrinks. A pause, a changed definition or a delete
/// before a tick takes its task back (counted as cancelled). Schedules with
/// [`Overlap::Skip`] fire at the tick itself: whether the previous task is still live can
/// only be judged then.
pub const FIRE_AHEAD_MS: u64 = 12_000;
/// Most ticks of one schedule fired ahead of their time and waiting at once.
pub const MAX_TICKS_AHEAD: usize = 12;
/// A firer acts on a schedule again (to fire its next ticks ahead) once at most this many of
/// its ticks fired ahead still wait.
pub const REFILL_AT: usize = 2;

/// What [`Queue::set_schedule`](crate::Queue::set_schedule) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetOutcome {
    /// There was no schedule of that name.
    Created,
    /// A different definition was replaced (same timing: the next fire time is kept).
    Replaced,
    /// The stored definition was the same; nothing written.
    Unchanged,
}

/// A stored schedule with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Schedule {
    /// The definition.
    pub spec: ScheduleSpec,
    /// Next fire time, epoch ms (Redis clock); `None` while paused or when the grid has no
    /// further tick. A tick fired ahead ([`FIRE_AHEAD_MS`]) is next until its time comes.
    pub next_fire_at_ms: Option<u64>,
    /// The next [`UPCOMING`] fire times from `next_fire_at_ms` on (empty while paused).
    pub upcoming_ms: Vec<u64>,
    /// Fire time of the last tick that came and enqueued a task (or found its key live),
    /// epoch ms.
    pub last_fire_at_ms: Option<u64>,
    /// Ticks not fired: missed (misfire `skip`) or skipped for overlap.
    pub skipped_total: u64,
    /// Tasks enqueued by ticks (ticks fired ahead included; ones taken back are not).
    pub fired_total: u64,
    /// Whether it is paused (no tick fires nor counts while paused).
    pub paused: bool,
}

/// What [`Queue::set_schedule`](crate::Queue::set_schedule) reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetReport {
    /// Created, replaced or unchanged.
    pub outcome: SetOutcome,
    /// Next fire time, epoch ms (`None` when paused or the grid has no further tick).
    pub next_fire_at_ms: Option<u64>,
}
