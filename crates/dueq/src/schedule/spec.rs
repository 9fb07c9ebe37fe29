//! What a schedule is: [`ScheduleSpec`] (timing, misfire and overlap policy, the task
//! template), its checks and its stored form.

use serde::{Deserialize, Serialize};

use super::FIRE_AHEAD_MS;
use super::timing::{self, Grid};
use crate::error::{Error, Result};
use crate::task::{DEFAULT_LEASE_MS, DEFAULT_MAX_ATTEMPTS, MAX_DELAY_MS, TaskOptions};

/// Longest schedule name, in bytes.
pub const MAX_SCHEDULE_NAME_BYTES: usize = 128;
/// Longest cron pattern, in bytes.
pub const MAX_CRON_BYTES: usize = 256;
/// Default `misfire_grace_ms`: a tick unfired this long after its fire time is missed.
pub const DEFAULT_MISFIRE_GRACE_MS: u64 = 1_000;
/// Longest `misfire_grace_ms` (one day).
pub const MAX_MISFIRE_GRACE_MS: u64 = 86_400_000;
/// Shortest `misfire_grace_ms`: a tick's task is handed out a few ms after its fire time,
/// so a shorter grace would count ticks that ran on time as missed.
pub const MIN_MISFIRE_GRACE_MS: u64 = 100;
/// Shortest `every_ms`: ticks are tasks, each claimed, run and acknowledged;
/// for work more often than once a second, run a loop in a worker.
pub const MIN_EVERY_MS: u64 = 1_000;

/// What happens to ticks missed while no process ran (more than `misfire_grace_ms` late).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Misfire {
    /// Fire none of them; count each in `skipped_total`. The default.
    #[default]
    Skip,
    /// Fire one task for the whole missed span, carrying the latest missed fire time.
    FireOnce,
}

/// What happens to a tick while the previous tick's task is still live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Overlap {
    /// Fire it anyway. The default.
    #[default]
    Allow,
    /// Skip it (counted in `skipped_total`) while the previous tick's task is scheduled or
    /// active.
    Skip,
}

/// A schedule to store with [`Queue::set_schedule`](crate::Queue::set_schedule): exactly one
/// of `cron` and `every_ms`, and the task each tick enqueues (business key
/// `schedule:{name}:{fire_at_ms}`, due at the fire time).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleSpec {
    /// Unique in its queue: `[A-Za-z0-9_.-]{1,128}`, not `.` or `..`.
    pub name: String,
    /// Cron pattern, 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
    /// first), as croner reads them; wall-clock times in `tz`.
    pub cron: Option<String>,
    /// Fixed interval, ms (1 to 100 years): fire times are whole multiples of it since the
    /// Unix epoch.
    pub every_ms: Option<u64>,
    /// IANA time zone of a cron pattern (`Europe/Berlin`); `None` = UTC, never the host's.
    pub tz: Option<String>,
    /// Payload of every task (at most the client's payload limit).
    pub payload: Vec<u8>,
    /// Missed ticks: default [`Misfire::Skip`].
    pub misfire: Misfire,
    /// How late a tick may fire before it counts as missed, ms (0 to one day). Default 1 000.
    pub misfire_grace_ms: u64,
    /// Ticks while the previous task is live: default [`Overlap::Allow`].
    pub overlap: Overlap,
    /// The options of each tick's task. Default: 5 attempts, a lease of 30 000 ms, priority
    /// 0, no group; an attempts or lease of `None` is stored as that default.
    pub task: TaskOptions,
}

impl ScheduleSpec {
    /// A schedule named `name` with `payload` and the defaults; give it
    /// [`cron`](Self::cron) or [`every_ms`](Self::every_ms).
    pub fn new(name: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            name: name.into(),
            cron: None,
            every_ms: None,
            tz: None,
            payload: payload.into(),
            misfire: Misfire::Skip,
            misfire_grace_ms: DEFAULT_MISFIRE_GRACE_MS,
            overlap: Overlap::Allow,
            task: TaskOptions::new()
                .max_attempts(DEFAULT_MAX_ATTEMPTS)
                .lease_ms(DEFAULT_LEASE_MS),
        }
    }

    crate::task_option_setters!(task);

    /// Fires on a cron pattern (5 or 6 fields).
    pub fn cron(mut self, pattern: impl Into<String>) -> Self {
        self.cron = Some(pattern.into());
        self
    }

    /// Fires every `ms` milliseconds, on the epoch-anchored grid.
    pub fn every_ms(mut self, ms: u64) -> Self {
        self.every_ms = Some(ms);
        self
    }

    /// The cron pattern's IANA time zone.
    pub fn tz(mut self, zone: impl Into<String>) -> Self {
        self.tz = Some(zone.into());
        self
    }

    /// The misfire policy.
    pub fn misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// How late a tick may still fire, ms.
    pub fn misfire_grace_ms(mut self, ms: u64) -> Self {
        self.misfire_grace_ms = ms;
        self
    }

    /// The overlap policy.
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// Checks every field (the payload size is checked by the queue, against its client's
    /// limit).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) with a message that starts with the
    /// field's name (`cron: ...`, `every_ms: ...`, `tz: ...`, `name: ...`, `priority: ...`,
    /// `group ...`).
    pub fn validate(&self) -> Result<()> {
        self.grid().map(|_| ())
    }

    /// The compiled grid (validating every field).
    pub(crate) fn grid(&self) -> Result<Grid> {
        validate_schedule_name(&self.name)?;
        let grid = match (&self.cron, self.every_ms) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid("cron, every_ms: give exactly one, not both"));
            }
            (None, None) => return Err(Error::invalid("cron, every_ms: give exactly one")),
            (None, Some(ms)) => {
                if !(MIN_EVERY_MS..=MAX_DELAY_MS).contains(&ms) {
                    return Err(Error::invalid(format!(
                        "every_ms: must be {MIN_EVERY_MS} to {MAX_DELAY_MS}, got {ms}"
                    )));
                }
                if self.tz.is_some() {
                    return Err(Error::invalid(
                        "tz: applies to cron only (every_ms is anchored at the Unix epoch)",
                    ));
                }
                Grid::Every(ms)
            }
            (Some(pattern), None) => {
                if pattern.len() > MAX_CRON_BYTES {
                    return Err(Error::invalid(format!(
                        "cron: at most {MAX_CRON_BYTES} bytes"
                    )));
                }
                let cron = timing::parse_cron(pattern)
                    .map_err(|e| Error::invalid(format!("cron: {pattern:?} is invalid: {e}")))?;
                let tz = timing::zone(self.tz.as_deref()).map_err(|e| {
                    Error::invalid(format!(
                        "tz: {:?} is not a known IANA time zone: {e}",
                        self.tz.as_deref().unwrap_or("")
                    ))
                })?;
                Grid::Cron {
                    cron: Box::new(cron),
                    tz,
                }
            }
        };
        if !(MIN_MISFIRE_GRACE_MS..=MAX_MISFIRE_GRACE_MS).contains(&self.misfire_grace_ms) {
            return Err(Error::invalid(format!(
                "misfire_grace_ms: must be {MIN_MISFIRE_GRACE_MS} to {MAX_MISFIRE_GRACE_MS}, got {}",
                self.misfire_grace_ms
            )));
        }
        self.task.check()?;
        Ok(grid)
    }

    /// How far ahead of its tick this schedule's tick fires, ms ([`FIRE_AHEAD_MS`]).
    pub(crate) fn lead_ms(&self) -> u64 {
        match self.overlap {
            Overlap::Skip => 0,
            Overlap::Allow => FIRE_AHEAD_MS,
        }
    }

    /// What identifies the timing: a replace with the same one keeps the next fire time.
    pub(crate) fn fingerprint(&self) -> String {
        // FNV-1a 64 over the timing fields: stable across builds
        let text = format!(
            "{}|{}|{}",
            self.cron.as_deref().unwrap_or(""),
            self.every_ms.map(|m| m.to_string()).unwrap_or_default(),
            self.tz.as_deref().unwrap_or("")
        );
        format!("{:016x}", crate::hash::fnv1a64(text.as_bytes()))
    }

    /// The stored form: one JSON line of the settings, `\n`, the payload bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let head = Stored {
            cron: self.cron.clone(),
            every_ms: self.every_ms,
            tz: self.tz.clone(),
            misfire: self.misfire,
            misfire_grace_ms: self.misfire_grace_ms,
            overlap: self.overlap,
            task: self.tick_options(),
        };
        // serializing plain strings, numbers and enums cannot fail
        let mut v = serde_json::to_vec(&head).unwrap_or_default();
        v.push(b'\n');
        v.extend_from_slice(&self.payload);
        v
    }

    /// Reads the stored form back.
    pub(crate) fn decode(name: &str, raw: &[u8]) -> Result<Self> {
        let bad = || Error::protocol(format!("schedule {name}: unreadable definition"));
        let split = raw.iter().position(|&b| b == b'\n').ok_or_else(bad)?;
        let head: Stored = serde_json::from_slice(&raw[..split]).map_err(|_| bad())?;
        Ok(Self {
            name: name.to_owned(),
            cron: head.cron,
            every_ms: head.every_ms,
            tz: head.tz,
            payload: raw[split + 1..].to_vec(),
            misfire: head.misfire,
            misfire_grace_ms: head.misfire_grace_ms,
            overlap: head.overlap,
            task: head.task,
        })
    }

    /// The options each tick's task gets: [`ScheduleSpec::task`] with the schedule defaults
    /// (5 attempts, a lease of 30 000 ms) where it has none.
    pub fn tick_options(&self) -> TaskOptions {
        let mut t = self.task.clone();
        t.max_attempts = t.max_attempts.or(Some(DEFAULT_MAX_ATTEMPTS));
        t.lease_ms = t.lease_ms.or(Some(DEFAULT_LEASE_MS));
        t
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    cron: Option<String>,
    every_ms: Option<u64>,
    tz: Option<String>,
    misfire: Misfire,
    misfire_grace_ms: u64,
    overlap: Overlap,
    // last, and leaving out options at their defaults, so the stored form of a schedule
    // stays the same as options are added (an unchanged re-registration stays `unchanged`)
    #[serde(flatten)]
    task: TaskOptions,
}

/// Checks a schedule name: `[A-Za-z0-9_.-]{1,128}`, not `.` or `..` (it is a URL path segment
/// and part of its tasks' business keys).
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind), message starting `name: `.
pub fn validate_schedule_name(name: &str) -> Result<()> {
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if name.is_empty()
        || name.len() > MAX_SCHEDULE_NAME_BYTES
        || !name.bytes().all(ok_char)
        || name == "."
        || name == ".."
    {
        return Err(Error::invalid(format!(
            "name: schedule name {name:?} is invalid: use 1 to {MAX_SCHEDULE_NAME_BYTES} characters from A-Z a-z 0-9 _ . - (not . or ..)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c34_bad_specs_name_their_field() {
        let cases = [
            (
                ScheduleSpec::new("a", b"".to_vec()).cron("61 * * * *"),
                "cron:",
            ),
            (
                ScheduleSpec::new("a", b"".to_vec()).every_ms(0),
                "every_ms:",
            ),
            (
                ScheduleSpec::new("a", b"".to_vec())
                    .cron("* * * * *")
                    .tz("Mars/Olympus"),
                "tz:",
            ),
            (
                ScheduleSpec::new("a", b"".to_vec())
                    .cron("* * * * *")
                    .every_ms(1000),
                "cron, every_ms:",
            ),
            (ScheduleSpec::new("a", b"".to_vec()), "cron, every_ms:"),
            (
                ScheduleSpec::new("a b", b"".to_vec()).every_ms(1000),
                "name:",
            ),
        ];
        for (spec, field) in cases {
            let e = spec.validate().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(field), "{e} should name {field}");
        }
    }

    #[test]
    fn encode_round_trips_with_any_payload() {
        let s = ScheduleSpec::new("n", b"{\"x\":\n1}".to_vec())
            .cron("0 30 2 * * *")
            .tz("Europe/Berlin")
            .misfire(Misfire::FireOnce)
            .overlap(Overlap::Skip);
        assert_eq!(ScheduleSpec::decode("n", &s.encode()).unwrap(), s);
        let other = s.clone().misfire(Misfire::Skip);
        assert_eq!(s.fingerprint(), other.fingerprint());
        assert_ne!(
            s.fingerprint(),
            s.clone().cron("0 30 3 * * *").fingerprint()
        );
    }
}
