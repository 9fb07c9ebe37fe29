//! Recurring schedules on a [`Queue`]: set (create or replace), get, list, delete, pause,
//! resume, trigger and backfill. The firing step is `schedule_fire.rs`.
//!
//! Fire times are computed here from the schedule's grid and a Redis time
//! ([`crate::schedule`]); the scripts decide with their own `TIME` which of the offered times
//! is next, and `schedule_fire.lua` claims each tick atomically.

use super::Queue;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::clock;
use crate::protocol::schedules::{self, Paused, Raw};
use crate::schedule::{
    Schedule, ScheduleSpec, SetOutcome, SetReport, State, UPCOMING, validate_schedule_name,
};
use crate::task::{Enqueued, TaskSpec};

/// Fire times offered to a set or resume script (it takes the first after its own now).
const OFFERED: usize = 4;
/// How often a set or resume is offered newer fire times when all offered ones had passed
/// by the script's clock (a schedule of a few ms), before it gives up.
const STALE_TRIES: usize = 5;

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
    /// Ticks whose task was still scheduled or running (kept), or finished inside the
    /// unique window of the schedule's template.
    pub existing: u64,
}

/// A task due now with `spec`'s template (payload and task options).
fn template(spec: &ScheduleSpec) -> TaskSpec {
    let mut t = TaskSpec::new(spec.payload.clone()).options(spec.tick_options());
    t.from_schedule = true;
    t
}

pub(super) fn decode(raw: &Raw) -> Result<(ScheduleSpec, State)> {
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
        let mut offered = grid.upcoming(clock::now_ms(&mut conn).await?, OFFERED);
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
                offered = grid.upcoming(clock::now_ms(&mut conn).await?, OFFERED);
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
                Paused::Stale => now = clock::now_ms(&mut conn).await?,
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
        let now = clock::now_ms(&mut self.client().conn()).await?;
        let task = template(&s.spec).key(format!("schedule:{name}:manual:{now}"));
        self.enqueue(task).await.map(Some)
    }

    /// Enqueues one task per tick of schedule `name` in `[from_ms, to_ms)` (epoch ms, a past
    /// range: `to_ms` at most the Redis time now), each due now with the schedule's template
    /// and the business key the tick would have had (`schedule:{name}:{tick_ms}`), so a tick
    /// whose task is still scheduled or running keeps it and a backfill run twice adds
    /// nothing while those tasks wait. Without a unique window on the template dueq cannot
    /// tell a tick whose task ran and finished from one that never fired: backfill a range
    /// where the schedule did not run (before it existed, while it was paused, ticks counted
    /// as skipped). With one, a tick whose task finished inside the window is kept too.
    /// `None` when there is no such schedule.
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
        let now = clock::now_ms(&mut self.client().conn()).await?;
        if to_ms > now.saturating_add(1) {
            return Err(Error::invalid(format!(
                "to_ms ({to_ms}) is in the future (now is {now}): backfill past ticks only"
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
}
