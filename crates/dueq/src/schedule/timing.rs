//! Fire times of a schedule: pure functions of the schedule's grid and a Redis time, no I/O
//! (tests use plain timestamps as a fake clock).
//!
//! * `every_ms`: the grid is anchored at the Unix epoch, fire times are whole multiples of
//!   `every_ms` (every process computes the same ticks; no time zone is involved).
//! * `cron`: croner matches wall-clock times (`jiff::civil::DateTime`, no zone), and dueq maps
//!   each matching wall-clock time to an instant in the schedule's IANA zone (none = UTC,
//!   never the host's `TZ`) by DESIGN 2.11:
//!   - unambiguous: that instant;
//!   - in a DST gap (the wall-clock time does not exist): the first instant after the gap
//!     (the transition itself); several gap times that land there fire once;
//!   - in a DST overlap (the wall-clock time happens twice): its first occurrence only. This
//!     holds for every field, so `* * * * *` has no ticks in the repeated hour's second pass:
//!     a schedule that must fire at a fixed real-time spacing uses `every_ms`.
//!
//! Rejected alternative: croner's own zoned search (via chrono, or jiff 0.2), which fires
//! wildcard fields twice in an overlap and skips them in a gap, against DESIGN 2.11.

use std::cmp::Ordering;

use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use croner::time::{CivilDate, CivilDateTime, CivilTime, CronDateTime, Resolution, Weekday};
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Most matching wall-clock times looked at to find one next fire time (a per-second cron
/// walks at most 3 600 of them through a repeated hour).
const MAX_STEPS: usize = 100_000;

/// Most missed cron ticks counted one by one after a downtime; past this the count stops
/// and the grid resumes after the missed span (every_ms counts exactly, by arithmetic).
pub(crate) const MAX_MISSED_COUNTED: u64 = 1_000_000;

/// A schedule's grid, compiled once.
#[derive(Clone)]
pub(crate) enum Grid {
    Every(u64),
    Cron { cron: Box<Cron>, tz: TimeZone },
}

impl std::fmt::Debug for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Every(ms) => write!(f, "every {ms} ms"),
            Self::Cron { cron, tz } => {
                write!(
                    f,
                    "cron {:?} in {:?}",
                    cron.pattern.to_string(),
                    tz.iana_name()
                )
            }
        }
    }
}

/// Names of a 6-field pattern's fields (a 5-field one starts at the minute).
const CRON_FIELDS: [(&str, &str); 6] = [
    ("second", "0 to 59"),
    ("minute", "0 to 59"),
    ("hour", "0 to 23"),
    ("day of month", "1 to 31"),
    ("month", "1 to 12 or JAN to DEC"),
    ("day of week", "0 to 7 or SUN to SAT"),
];

fn cron_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Parses a cron pattern: 5 fields (minute first) or 6 (seconds first); no year field. A
/// refused pattern's message names the first field croner refuses on its own (every other
/// field `*`), with that field's range, and croner's own words.
pub(crate) fn parse_cron(pattern: &str) -> Result<Cron, String> {
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    if !(5..=6).contains(&fields.len()) {
        return Err(format!("expected 5 or 6 fields, got {}", fields.len()));
    }
    cron_parser().parse(pattern).map_err(|e| {
        let names = &CRON_FIELDS[6 - fields.len()..];
        for (i, (field, (name, range))) in fields.iter().zip(names).enumerate() {
            let alone: Vec<&str> = (0..fields.len())
                .map(|j| if j == i { *field } else { "*" })
                .collect();
            if let Err(e) = cron_parser().parse(&alone.join(" ")) {
                return format!("{name} field {field:?} (values {range}): {e}");
            }
        }
        e.to_string()
    })
}

/// The zone named `tz` (IANA name), or UTC for `None`.
pub(crate) fn zone(tz: Option<&str>) -> Result<TimeZone, String> {
    match tz {
        None => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|e| e.to_string()),
    }
}

impl Grid {
    /// The first fire time strictly after `t_ms` (epoch ms), or `None` when the grid has no
    /// further tick (a cron that never matches again before year 9999).
    pub(crate) fn next_after(&self, t_ms: u64) -> Option<u64> {
        match self {
            Self::Every(every) => {
                let every = (*every).max(1);
                (t_ms / every).checked_add(1)?.checked_mul(every)
            }
            Self::Cron { cron, tz } => next_cron(cron, tz, t_ms),
        }
    }

    /// The next `n` fire times strictly after `t_ms`.
    pub(crate) fn upcoming(&self, t_ms: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n);
        let mut t = t_ms;
        while out.len() < n {
            match self.next_after(t) {
                Some(next) => {
                    out.push(next);
                    t = next;
                }
                None => break,
            }
        }
        out
    }
}

fn next_cron(cron: &Cron, tz: &TimeZone, t_ms: u64) -> Option<u64> {
    let t = Timestamp::from_millisecond(i64::try_from(t_ms).ok()?).ok()?;
    let mut start = Civil(tz.to_datetime(t).with().subsec_nanosecond(0).build().ok()?);
    let mut inclusive = true;
    for _ in 0..MAX_STEPS {
        let c = cron.find_next_occurrence(&start, inclusive).ok()?;
        let at = instant_of(tz, c.0)?;
        if at > t_ms {
            return Some(at);
        }
        start = c;
        inclusive = false;
    }
    None
}

/// The instant (epoch ms) a wall-clock time stands for under the rules of the module docs.
fn instant_of(tz: &TimeZone, dt: DateTime) -> Option<u64> {
    let ts = match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok()?,
        // the earlier of the two instants: before the fold the offset is the larger one
        AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).ok()?,
        // `after.to_timestamp` lands before the transition, so the first transition
        // following it is the gap's end
        AmbiguousOffset::Gap { after, .. } => {
            let probe = after.to_timestamp(dt).ok()?;
            tz.following(probe).next()?.timestamp()
        }
    };
    u64::try_from(ts.as_millisecond()).ok()
}

/// What one firing step of a schedule does, planned from its stored next fire time and a
/// Redis time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    /// Missed ticks to count in `skipped_total` (misfire `skip`).
    pub skipped: u64,
    /// The latest missed tick, fired once for the whole missed span (misfire `fire_once`).
    pub once_at: Option<u64>,
    /// The tick to fire now (due and within the grace).
    pub fire_at: Option<u64>,
    /// The next fire time after this step, `None` when the grid has no further tick.
    pub next: Option<u64>,
}

/// Plans the step of a schedule whose next fire time is `next` at Redis time `now_ms`, or
/// `None` when nothing is due yet. A tick `t` is missed when `t + grace_ms < now_ms`; the
/// first tick that is not missed fires when it is due (`t <= now_ms`).
pub(crate) fn plan(
    grid: &Grid,
    next: u64,
    now_ms: u64,
    grace_ms: u64,
    fire_once: bool,
) -> Option<Step> {
    if next > now_ms {
        return None;
    }
    let horizon = now_ms.saturating_sub(grace_ms); // ticks before this are missed
    let (mut missed, mut latest_missed, mut t) = (0u64, None, Some(next));
    match grid {
        Grid::Every(every) => {
            let every = (*every).max(1);
            if next < horizon {
                // the first multiple of `every` at or after the horizon
                let first_ok = horizon.div_ceil(every).saturating_mul(every).max(next);
                missed = (first_ok - next).div_ceil(every);
                latest_missed = Some(first_ok - every);
                t = Some(first_ok);
            }
        }
        Grid::Cron { .. } => {
            while let Some(tick) = t.filter(|&x| x < horizon) {
                missed += 1;
                latest_missed = Some(tick);
                t = if missed >= MAX_MISSED_COUNTED {
                    grid.next_after(horizon.saturating_sub(1))
                } else {
                    grid.next_after(tick)
                };
            }
        }
    }
    let (fire_at, next) = match t {
        Some(x) if x <= now_ms => (Some(x), grid.next_after(x)),
        other => (None, other),
    };
    Some(if fire_once {
        Step {
            skipped: 0,
            once_at: latest_missed,
            fire_at,
            next,
        }
    } else {
        Step {
            skipped: missed,
            once_at: None,
            fire_at,
            next,
        }
    })
}

/// Most ticks one firing step fires for one schedule (due ones and ones fired ahead), so a
/// schedule of a few ms behind its grid catches up in bounded steps.
pub(crate) const MAX_STEP_TICKS: usize = 32;

/// The ticks one firing step of a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ticks {
    /// Missed ticks to count in `skipped_total` (misfire `skip`).
    pub skipped: u64,
    /// The ticks to fire, ascending: the `fire_once` tick of a missed span, the due tick(s),
    /// then ticks fired ahead of their time.
    pub fire: Vec<u64>,
    /// The next fire time after them, `None` when the grid has no further tick.
    pub next: Option<u64>,
}

/// Plans the step of a schedule whose next fire time is `next` at Redis time `now_ms`:
/// [`plan`]'s missed and due ticks, then the grid's following ticks that have not come, up
/// to `ahead_until` (the caller's look-ahead, `now_ms` when none is allowed) and at most
/// `room` of them (besides at most [`MAX_STEP_TICKS`] in all). `None` when there is nothing
/// to do yet.
pub(crate) fn plan_ticks(
    grid: &Grid,
    next: u64,
    now_ms: u64,
    grace_ms: u64,
    fire_once: bool,
    ahead_until: u64,
    mut room: usize,
) -> Option<Ticks> {
    let step = plan(grid, next, now_ms, grace_ms, fire_once);
    let mut out = Ticks {
        skipped: 0,
        fire: Vec::new(),
        next: Some(next),
    };
    if let Some(s) = &step {
        out.skipped = s.skipped;
        out.fire.extend(s.once_at);
        out.fire.extend(s.fire_at);
        out.next = s.next;
    }
    while let Some(t) = out.next {
        if t > ahead_until || out.fire.len() >= MAX_STEP_TICKS {
            break;
        }
        if t > now_ms {
            if room == 0 {
                break;
            }
            room -= 1;
        }
        out.fire.push(t);
        out.next = grid.next_after(t);
    }
    (step.is_some() || !out.fire.is_empty()).then_some(out)
}

/// A wall-clock time for croner (no zone: every time exists once).
#[derive(Clone, Copy, Debug)]
struct Civil(DateTime);

impl CronDateTime for Civil {
    fn to_civil(&self) -> CivilDateTime {
        let d = self.0;
        // jiff keeps every part in range, so these are real dates and times
        CivilDateTime::new(
            CivilDate::from_parts_unchecked(i32::from(d.year()), d.month() as u32, d.day() as u32),
            CivilTime::from_parts_unchecked(d.hour() as u32, d.minute() as u32, d.second() as u32),
        )
    }

    fn civil_weekday(&self) -> Weekday {
        Weekday::from_days_from_sunday(self.0.weekday().to_sunday_zero_offset() as u32)
    }

    fn resolve_civil(&self, c: CivilDateTime) -> Result<Resolution<Self>, CronError> {
        let year = i16::try_from(c.year()).map_err(|_| CronError::InvalidDate)?;
        let dt = DateTime::new(
            year,
            c.month() as i8,
            c.day() as i8,
            c.hour() as i8,
            c.minute() as i8,
            c.second() as i8,
            0,
        )
        .map_err(|_| CronError::InvalidDate)?;
        Ok(Resolution::Single(Civil(dt)))
    }

    fn checked_add_seconds(&self, seconds: i64) -> Option<Self> {
        self.0
            .checked_add(SignedDuration::from_secs(seconds))
            .ok()
            .map(Civil)
    }

    fn cmp_instant(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

#[cfg(test)]
#[path = "timing_tests.rs"]
mod tests;
