//! Recurring schedules on a [`Queue`]: set (create or replace), get, list, delete, pause,
//! resume, and the firing step that [`ScheduleFirer`](crate::due::ScheduleFirer) drives.
//!
//! Fire times are computed here from the schedule's grid and a Redis time
//! ([`crate::schedule`]); the scripts decide with their own `TIME` which of the offered times
//! is next, and `schedule_fire.lua` claims each tick atomically.

use super::Queue;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::record;
use crate::protocol::schedules::{self, FireItem, Paused, Raw};
use crate::schedule::timing::{self, Grid};
use crate::schedule::{
    MAX_TICKS_AHEAD, Misfire, Overlap, Schedule, ScheduleSpec, SetOutcome, SetReport, State,
    UPCOMING, validate_schedule_name,
};
use crate::task::{Enqueued, TaskSpec};

/// Fire times offered to a set or resume script (it takes the first after its own now).
const OFFERED: usize = 4;
/// How often a set or resume is offered newer fire times when all offered ones had passed
/// by the script's clock (a schedule of a few ms), before it gives up.
const STALE_TRIES: usize = 5;
/// Schedules one firing step looks at and fires (in calls of at most [`FIRE_TICKS`] ticks).
pub(crate) const FIRE_BATCH: usize = 200;
/// Most ticks one fire script call creates (DESIGN 3: one call does bounded work): a step
/// fires the schedules it read in as many calls as that takes (schedules fire up to twelve
/// ticks ahead, so a batch of new schedules would be 2 400 in one call).
const FIRE_TICKS: usize = 1_000;
/// Most bytes of definitions and tick records one fire call carries and writes (beyond its
/// first schedule): with the 1 MiB payload limit, 200 schedules of twelve ticks would
/// otherwise be gigabytes in one call, Redis blocked for seconds. A step still fires every
/// schedule it read, in more calls.
const FIRE_BYTES: usize = 4 << 20;

/// Most ticks one [`Queue::backfill_schedule`] enqueues.
pub const MAX_BACKFILL_TICKS: usize = 10_000;

/// What a [`Queue::backfill_schedule`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackfillReport {
    /// Ticks in the range.
    pub ticks: u64,
    /// Tasks enqueued for them.
    pub created: u64,
    /// Ticks whose task was still scheduled or running (kept).
    pub existing: u64,
}

/// A task due now with `spec`'s template (payload, attempts, lease, priority, group).
fn template(spec: &ScheduleSpec) -> TaskSpec {
    let mut t = TaskSpec::new(spec.payload.clone())
        .max_attempts(spec.max_attempts)
        .lease_ms(spec.lease_ms)
        .priority(spec.priority);
    if let Some(g) = &spec.group {
        t = t.group(g.clone());
    }
    t
}

/// What one firing step did on a queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FireReport {
    /// Redis time of the step, ms.
    pub now_ms: u64,
    /// When the queue's schedules next need a step (a tick due, or one that may fire
    /// ahead), after this one.
    pub next_fire_at_ms: Option<u64>,
    /// Schedules due were found (look again at once: more may be due).
    pub busy: bool,
    /// Schedules were due but the fire script applied none of them (another process was
    /// first, or a state it cannot move on): look again after a pause, not at once.
    pub stalled: bool,
    pub fired: u64,
    pub skipped: u64,
}

fn decode(raw: &Raw) -> Result<(ScheduleSpec, State)> {
    Ok((
        ScheduleSpec::decode(&raw.name, &raw.def)?,
        State::parse(&raw.name, &raw.state, &raw.ticks)?,
    ))
}

/// The schedule as a reader sees it at Redis time `now_ms`: a tick fired ahead (its task
/// waiting for it) is still a next fire time, not the last one.
fn view(raw: &Raw, now_ms: u64) -> Result<Schedule> {
    let (spec, mut st) = decode(raw)?;
    if let Some(ahead) = st.ticks.iter().copied().find(|&t| t > now_ms) {
        st.next = Some(ahead);
        st.last = st.ticks.iter().copied().rfind(|&t| t <= now_ms);
    }
    let upcoming_ms = match (st.paused, st.next, spec.grid()) {
        (false, Some(next), Ok(grid)) => {
            let mut v = vec![next];
            v.extend(grid.upcoming(next, UPCOMING - 1));
            v
        }
        _ => Vec::new(),
    };
    Ok(Schedule {
        spec,
        next_fire_at_ms: st.next.filter(|_| !st.paused),
        upcoming_ms,
        last_fire_at_ms: st.last,
        skipped_total: st.skipped,
        fired_total: st.fired,
        paused: st.paused,
    })
}

impl Queue {
    /// Creates or replaces the schedule `spec.name` (idempotent: the same spec again answers
    /// [`SetOutcome::Unchanged`] and writes nothing, so registering at every start-up is the
    /// expected use). A replace that keeps the timing (`cron`, `every_ms`, `tz`) keeps the next
    /// fire time and the counters; a new timing starts at its first tick after now. A replace
    /// keeps a paused schedule paused. Running firers are woken.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the bad field (see [`ScheduleSpec::validate`]; also a
    /// cron pattern that never fires), [`ErrorKind::PayloadTooLarge`]; nothing written.
    /// [`ErrorKind::Redis`] when Redis fails (safe to repeat: a schedule is stored by name).
    pub async fn set_schedule(&self, spec: &ScheduleSpec) -> Result<SetReport> {
        let grid = spec.grid()?;
        let limit = self.client().payload_limit_bytes();
        if spec.payload.len() > limit {
            return Err(Error::new(
                ErrorKind::PayloadTooLarge,
                format!(
                    "payload: {} bytes; the limit is {limit}",
                    spec.payload.len()
                ),
            ));
        }
        let mut conn = self.client().conn();
        let mut offered = grid.upcoming(schedules::redis_time_ms(&mut conn).await?, OFFERED);
        if offered.is_empty() {
            return Err(Error::invalid(format!(
                "cron: {:?} never fires again",
                spec.cron.as_deref().unwrap_or("")
            )));
        }
        self.client().register(self.name()).await?;
        // the script takes the first offered time after its own now; a schedule so short
        // that all of them passed on the way is offered newer ones
        let mut tries = 0;
        let (outcome, next) = loop {
            if tries > 0 {
                offered = grid.upcoming(schedules::redis_time_ms(&mut conn).await?, OFFERED);
            }
            let answer = schedules::set(
                &mut conn,
                self.keys(),
                &spec.name,
                &spec.encode(),
                &spec.fingerprint(),
                spec.lead_ms(),
                &offered,
            )
            .await?;
            tries += 1;
            if answer.0 != "stale" || tries >= STALE_TRIES {
                break answer;
            }
        };
        let outcome = match outcome.as_str() {
            "created" => SetOutcome::Created,
            "replaced" => SetOutcome::Replaced,
            "unchanged" => SetOutcome::Unchanged,
            "stale" => {
                return Err(Error::new(
                    ErrorKind::Redis,
                    format!(
                        "schedule {}: every offered fire time had passed; try again",
                        spec.name
                    ),
                ));
            }
            o => {
                return Err(Error::protocol(format!(
                    "schedule_set: unknown outcome {o}"
                )));
            }
        };
        Ok(SetReport {
            outcome,
            next_fire_at_ms: u64::try_from(next).ok(),
        })
    }

    /// The schedule `name` with its state and next fire times, or `None`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad name, [`ErrorKind::Redis`] when Redis fails,
    /// [`ErrorKind::Protocol`] for a stored schedule changed by hand.
    pub async fn schedule(&self, name: &str) -> Result<Option<Schedule>> {
        validate_schedule_name(name)?;
        let (now, raw) = schedules::get(&mut self.client().conn(), self.keys(), name).await?;
        raw.as_ref().map(|r| view(r, now)).transpose()
    }

    /// Every schedule of the queue, sorted by name (read in pages of about 500).
    ///
    /// # Errors
    /// As [`Queue::schedule`].
    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        let mut conn = self.client().conn();
        let mut cursor = "0".to_owned();
        let mut out = Vec::new();
        loop {
            let (now, next, page) =
                schedules::list_page(&mut conn, self.keys(), &cursor, 500).await?;
            for raw in &page {
                out.push(view(raw, now)?);
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        out.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        out.dedup_by(|a, b| a.spec.name == b.spec.name); // HSCAN may repeat an entry
        Ok(out)
    }

    /// The names of every schedule of the queue, sorted (bytewise) and distinct, for paging by
    /// name: read the names, then [`Queue::schedule`] for those of one page. Reads as
    /// [`Queue::schedules`] does, but decodes nothing.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`] when Redis fails.
    pub async fn schedule_names(&self) -> Result<Vec<String>> {
        let mut out = schedules::names(&mut self.client().conn(), self.keys()).await?;
        out.sort_unstable();
        Ok(out)
    }

    /// Deletes the schedule `name`; whether it existed. Tasks it already enqueued stay, but
    /// for the tasks of ticks fired ahead that have not come yet
    /// ([`FIRE_AHEAD_MS`](crate::schedule::FIRE_AHEAD_MS)), which are taken back.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad name, [`ErrorKind::Redis`] when Redis fails.
    pub async fn delete_schedule(&self, name: &str) -> Result<bool> {
        validate_schedule_name(name)?;
        schedules::delete(&mut self.client().conn(), self.keys(), name).await
    }

    /// Pauses the schedule `name`: no tick fires or counts until it is resumed (the tasks of
    /// ticks fired ahead that have not come yet are taken back). `None` when there is no such
    /// schedule, else `Some(())`.
    ///
    /// # Errors
    /// As [`Queue::delete_schedule`].
    pub async fn pause_schedule(&self, name: &str) -> Result<Option<()>> {
        validate_schedule_name(name)?;
        let r =
            schedules::pause(&mut self.client().conn(), self.keys(), name, true, 0, &[]).await?;
        Ok(match r {
            Paused::Missing => None,
            Paused::Done(_) | Paused::Stale => Some(()),
        })
    }

    /// Resumes the schedule `name` at its first tick after now (ticks during the pause are
    /// not fired). `None` when there is no such schedule, else its next fire time.
    ///
    /// # Errors
    /// As [`Queue::schedule`].
    pub async fn resume_schedule(&self, name: &str) -> Result<Option<Option<u64>>> {
        validate_schedule_name(name)?;
        let mut conn = self.client().conn();
        // the read's Redis time serves for the first offered fire times
        let (mut now, Some(raw)) = schedules::get(&mut conn, self.keys(), name).await? else {
            return Ok(None);
        };
        let (spec, _) = decode(&raw)?;
        let grid = spec.grid()?;
        for _ in 0..STALE_TRIES {
            let offered = grid.upcoming(now, OFFERED);
            match schedules::pause(
                &mut conn,
                self.keys(),
                name,
                false,
                spec.lead_ms(),
                &offered,
            )
            .await?
            {
                Paused::Missing => return Ok(None),
                Paused::Done(n) => return Ok(Some(u64::try_from(n).ok())),
                Paused::Stale => now = schedules::redis_time_ms(&mut conn).await?,
            }
        }
        Err(Error::new(
            ErrorKind::Redis,
            format!("schedule {name}: every offered fire time had passed; try again"),
        ))
    }

    /// Runs schedule `name`'s task once now, without moving its grid: a task due now with
    /// the schedule's template and business key `schedule:{name}:manual:{ms}` (`ms` the Redis
    /// time of the trigger). `None` when there is no such schedule. A paused schedule can be
    /// triggered too.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad name, [`ErrorKind::Redis`] when Redis fails.
    pub async fn trigger_schedule(&self, name: &str) -> Result<Option<Enqueued>> {
        validate_schedule_name(name)?;
        let Some(s) = self.schedule(name).await? else {
            return Ok(None);
        };
        let now = schedules::redis_time_ms(&mut self.client().conn()).await?;
        let task = template(&s.spec).key(format!("schedule:{name}:manual:{now}"));
        self.enqueue(task).await.map(Some)
    }

    /// Enqueues one task per tick of schedule `name` in `[from_ms, to_ms)` (epoch ms, a past
    /// range: `to_ms` at most the Redis time now), each due now with the schedule's template
    /// and the business key the tick would have had (`schedule:{name}:{tick_ms}`), so a tick
    /// whose task is still scheduled or running keeps it and a backfill run twice adds
    /// nothing while those tasks wait. dueq cannot tell a tick whose task ran and finished
    /// from one that never fired: backfill a range where the schedule did not run (before it
    /// existed, while it was paused, ticks counted as skipped). `None` when there is no such
    /// schedule.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a bad name, an empty or future range, or more than
    /// [`MAX_BACKFILL_TICKS`] ticks in it (nothing written); [`ErrorKind::Redis`].
    pub async fn backfill_schedule(
        &self,
        name: &str,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Option<BackfillReport>> {
        validate_schedule_name(name)?;
        if from_ms >= to_ms {
            return Err(Error::invalid("from_ms must be before to_ms"));
        }
        let Some(s) = self.schedule(name).await? else {
            return Ok(None);
        };
        let now = schedules::redis_time_ms(&mut self.client().conn()).await?;
        if to_ms > now.saturating_add(1) {
            return Err(Error::invalid(format!(
                "to_ms ({to_ms}) is in the future (Redis time {now}): backfill past ticks only"
            )));
        }
        let grid = s.spec.grid()?;
        let mut ticks = Vec::new();
        let mut t = grid.next_after(from_ms.saturating_sub(1));
        while let Some(tick) = t.filter(|&x| x < to_ms) {
            if ticks.len() == MAX_BACKFILL_TICKS {
                return Err(Error::invalid(format!(
                    "the range holds more than {MAX_BACKFILL_TICKS} ticks: backfill it in parts"
                )));
            }
            ticks.push(tick);
            t = grid.next_after(tick);
        }
        let specs: Vec<_> = ticks
            .iter()
            .map(|t| template(&s.spec).key(format!("schedule:{name}:{t}")))
            .collect();
        let done = if specs.is_empty() {
            Vec::new()
        } else {
            self.enqueue_batch(&specs).await?
        };
        let created = done.iter().filter(|e| e.created()).count() as u64;
        Ok(Some(BackfillReport {
            ticks: ticks.len() as u64,
            created,
            existing: ticks.len() as u64 - created,
        }))
    }

    /// One firing step: fires (or counts as skipped) every tick of this queue's schedules
    /// that is due, up to [`FIRE_BATCH`] schedules, and says when to look again.
    pub(crate) async fn fire_due_schedules(&self) -> Result<FireReport> {
        let mut conn = self.client().conn();
        let due = schedules::due(&mut conn, self.keys(), FIRE_BATCH).await?;
        let mut report = FireReport {
            now_ms: due.now_ms,
            next_fire_at_ms: due.earliest_ms,
            busy: !due.due.is_empty(),
            ..FireReport::default()
        };
        if due.due.is_empty() {
            return Ok(report);
        }
        let mut planned: Vec<Planned<'_>> = Vec::with_capacity(due.due.len());
        for raw in &due.due {
            match plan_one(raw, due.now_ms) {
                Ok(Some(p)) => planned.push(p),
                Ok(None) => {}
                Err(e) => tracing::warn!(queue = self.name(), schedule = raw.name, error = %e,
                    "schedule cannot be fired; fix or delete it"),
            }
        }
        if planned.is_empty() {
            // nothing can be fired: do not spin on them
            report.busy = false;
            return Ok(report);
        }
        report.stalled = true;
        // every schedule read is fired, in calls of at most FIRE_TICKS ticks and FIRE_BYTES
        for chunk in fire_calls(&planned, FIRE_TICKS, FIRE_BYTES) {
            let items: Vec<FireItem<'_>> = chunk.iter().map(|p| p.item()).collect();
            let (_, fired) = schedules::fire(&mut conn, self.keys(), &items).await?;
            for f in &fired {
                if f.code == 1 {
                    report.stalled = false;
                    report.fired += f.created;
                    report.skipped += f.skipped;
                }
            }
        }
        Ok(report)
    }
}

/// `planned` in runs of at most `max_ticks` ticks and `max_bytes` of definitions and tick
/// records (one schedule at least: a schedule with more, which a step never plans for its
/// ticks, makes a run of its own).
fn fire_calls<'p, 'a>(
    planned: &'p [Planned<'a>],
    max_ticks: usize,
    max_bytes: usize,
) -> impl Iterator<Item = &'p [Planned<'a>]> {
    let mut rest = planned;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut ticks, mut bytes) = (0, 0);
        let end = rest
            .iter()
            .position(|p| {
                ticks += p.ticks.len();
                bytes += p.bytes();
                ticks > max_ticks || bytes > max_bytes
            })
            .unwrap_or(rest.len())
            .max(1);
        let (run, after) = rest.split_at(end);
        rest = after;
        Some(run)
    })
}

/// A schedule's planned step, owning what its [`FireItem`] borrows but the definition, which
/// it borrows from the read it was planned from.
struct Planned<'a> {
    name: String,
    expect_next: i64,
    skipped: u64,
    /// The ticks to fire.
    ticks: Vec<u64>,
    /// Their tasks' spec, with an empty key (the script puts each tick's in).
    spec: Vec<u8>,
    /// The stored definition planned from.
    def: &'a [u8],
    next: Option<u64>,
    overlap_skip: bool,
    group: Option<String>,
    lead_ms: u64,
    fire_once: bool,
    grace_ms: u64,
}

impl Planned<'_> {
    /// What its fire step carries and writes: the definition and the spec, and a record per
    /// tick.
    fn bytes(&self) -> usize {
        self.def.len() + (1 + self.ticks.len()) * self.spec.len()
    }

    fn item(&self) -> FireItem<'_> {
        FireItem {
            name: &self.name,
            expect_next: self.expect_next,
            missed: self.skipped,
            ticks: &self.ticks,
            spec: &self.spec,
            def: self.def,
            next: self.next,
            overlap_skip: self.overlap_skip,
            group: self.group.as_deref().unwrap_or(""),
            lead_ms: self.lead_ms,
            fire_once: self.fire_once,
            grace_ms: self.grace_ms,
        }
    }
}

fn plan_one(raw: &Raw, now_ms: u64) -> Result<Option<Planned<'_>>> {
    let (spec, st) = decode(raw)?;
    let grid: Grid = spec.grid()?;
    let Some(next) = st.next else {
        return Ok(None);
    };
    // ticks after now fire ahead up to the look-ahead, while fewer than MAX_TICKS_AHEAD wait
    let room = MAX_TICKS_AHEAD.saturating_sub(st.waiting(now_ms));
    let Some(plan) = timing::plan_ticks(
        &grid,
        next,
        now_ms,
        spec.misfire_grace_ms,
        spec.misfire == Misfire::FireOnce,
        now_ms + spec.lead_ms(),
        room,
    ) else {
        return Ok(None);
    };
    Ok(Some(Planned {
        name: spec.name.clone(),
        expect_next: st.next_raw,
        skipped: plan.skipped,
        ticks: plan.fire,
        spec: record::spec(
            spec.max_attempts,
            spec.lease_ms,
            spec.priority,
            "",
            &spec.payload,
        ),
        def: &raw.def,
        next: plan.next,
        overlap_skip: spec.overlap == Overlap::Skip,
        group: spec.group.clone(),
        lead_ms: spec.lead_ms(),
        fire_once: spec.misfire == Misfire::FireOnce,
        grace_ms: spec.misfire_grace_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Client;

    fn planned(ticks: usize, payload: usize) -> Planned<'static> {
        Planned {
            name: "s".into(),
            expect_next: 0,
            skipped: 0,
            ticks: (0..ticks as u64).collect(),
            spec: vec![0; payload],
            def: vec![0; payload].leak(),
            next: None,
            overlap_skip: false,
            group: None,
            lead_ms: 0,
            fire_once: false,
            grace_ms: 1_000,
        }
    }

    fn sizes(p: &[Planned], ticks: usize, bytes: usize) -> Vec<usize> {
        fire_calls(p, ticks, bytes).map(<[Planned]>::len).collect()
    }

    #[test]
    fn fire_calls_end_at_the_tick_cap_or_the_byte_cap_with_one_schedule_at_least() {
        let small: Vec<Planned> = (0..25).map(|_| planned(10, 100)).collect();
        assert_eq!(sizes(&small, 100, usize::MAX), [10, 10, 5]);
        // 1 200 bytes a schedule (definition, spec, ten records): three fit 4 000
        assert_eq!(sizes(&small[..7], usize::MAX, 4_000), [3, 3, 1]);
        // one larger than the cap still goes, alone
        let big = vec![planned(12, 5_000), planned(1, 10), planned(12, 5_000)];
        assert_eq!(sizes(&big, 1_000, 4_000), [1, 1, 1]);
        assert!(sizes(&[], 10, 10).is_empty());
    }

    #[tokio::test]
    async fn a_step_fires_every_large_schedule_it_read_in_calls_under_the_byte_cap() {
        let server = dueq_testkit::RedisServer::start();
        let client = Client::connect(&server.url()).await.unwrap();
        let q = client.queue("big").unwrap();
        // 40 schedules of 100 KiB: about 1.3 MB a schedule with its twelve ticks, so a step
        // fires them three to a call
        for i in 0..40 {
            let spec = ScheduleSpec::new(format!("s{i}"), vec![b'x'; 100 << 10]).every_ms(1_000);
            q.set_schedule(&spec).await.unwrap();
        }
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for (k, v) in [("slowlog-max-len", 100_000), ("slowlog-log-slower-than", 0)] {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(k)
                .arg(v)
                .exec_async(&mut conn)
                .await
                .unwrap();
        }
        let r = q.fire_due_schedules().await.unwrap();
        assert!(r.fired >= 40, "{r:?}");
        for i in 0..40 {
            let s = q.schedule(&format!("s{i}")).await.unwrap().unwrap();
            assert!(s.fired_total >= 1, "s{i} never fired: {s:?}");
        }
        // the fire calls: several, none writing more than the cap allows
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        // each entry: id, time, duration, [command, args...], ...
        let fires = log
            .iter()
            .filter(|e| {
                let redis::Value::Array(e) = e else {
                    return false;
                };
                let Some(redis::Value::Array(cmd)) = e.get(3) else {
                    return false;
                };
                matches!(cmd.get(1), Some(redis::Value::BulkString(f))
                    if f.ends_with(b"_schedule_fire"))
            })
            .count();
        assert!(
            fires >= 40 / 3,
            "{fires} fire calls for 40 schedules of 1.3 MB"
        );
    }
}
