//! Durations and times as people write and read them (DESIGN 4.3): every duration flag takes
//! `30m`, `7d`, `1h30m`, `250ms`, `2s` or plain milliseconds; a time flag takes an RFC 3339
//! time or Unix epoch milliseconds; text output shows a time as a local date-time with how far
//! it is from now (`2026-12-05 09:00:00 +01:00 (in 29m 58s)`). `--json` output keeps integer
//! milliseconds, as the HTTP API does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use jiff::Timestamp;
use jiff::tz::TimeZone;

pub use dueq::written::{UNITS, parse_duration_ms, parse_time_ms};

/// A duration, exactly, in its largest units: `30m`, `1h 30m`, `2s 500ms`, `0ms`.
pub fn duration(ms: u64) -> String {
    if ms == 0 {
        return "0ms".to_owned();
    }
    let mut left = ms;
    let mut parts = Vec::new();
    for (unit, size) in UNITS {
        let n = left / size;
        if n > 0 {
            parts.push(format!("{n}{unit}"));
            left %= size;
        }
    }
    parts.join(" ")
}

/// A duration rounded down to its two largest units, at least seconds: `29m 58s`, `3d 4h`,
/// `42s`; under a second `0s`.
pub fn approx(ms: u64) -> String {
    let mut left = ms / 1000 * 1000;
    let mut parts = Vec::new();
    for (unit, size) in &UNITS[..4] {
        let n = left / size;
        if parts.is_empty() {
            if n > 0 {
                parts.push(format!("{n}{unit}"));
                left %= size;
            }
        } else {
            // only the unit right below the first one
            if n > 0 {
                parts.push(format!("{n}{unit}"));
            }
            break;
        }
    }
    if parts.is_empty() {
        return "0s".to_owned();
    }
    parts.join(" ")
}

/// How far `at_ms` is from `now_ms`: `in 29m 58s`, `3m ago`, `now` (within a second).
pub fn relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms.abs_diff(now_ms) < 1000 {
        "now".to_owned()
    } else if at_ms > now_ms {
        format!("in {}", approx(at_ms - now_ms))
    } else {
        format!("{} ago", approx(now_ms - at_ms))
    }
}

/// `at_ms` as a date-time in the local time zone (`TZ`, else the system's):
/// `2026-12-05 09:00:00 +01:00`.
pub fn datetime(at_ms: u64) -> String {
    let Ok(t) = i64::try_from(at_ms)
        .map_err(|_| ())
        .and_then(|ms| Timestamp::from_millisecond(ms).map_err(|_| ()))
    else {
        return format!("{at_ms} ms");
    };
    t.to_zoned_datetime(TimeZone::system())
        .strftime("%Y-%m-%d %H:%M:%S %:z")
        .to_string()
}

/// `at_ms` for text output: local date-time and how far from `now_ms`:
/// `2026-12-05 09:00:00 +01:00 (in 29m 58s)`.
pub fn when_from(at_ms: u64, now_ms: u64) -> String {
    format!("{} ({})", datetime(at_ms), relative(at_ms, now_ms))
}

/// [`when_from`] this machine's clock.
pub fn when(at_ms: u64) -> String {
    when_from(at_ms, now_ms())
}

/// [`when`], or `-` for none.
pub fn when_opt(at_ms: Option<u64>) -> String {
    at_ms.map_or_else(|| "-".to_owned(), when)
}

/// How far the test clock of the Redis in use is ahead of real time, ms (0: no test clock).
static TEST_CLOCK_OFFSET_MS: AtomicU64 = AtomicU64::new(0);

/// Counts "now" from a test clock that is `offset_ms` ahead of real time.
pub fn follow_test_clock(offset_ms: u64) {
    TEST_CLOCK_OFFSET_MS.store(offset_ms, Ordering::Relaxed);
}

/// This machine's clock, Unix epoch ms, moved as the test clock is when the Redis runs one.
pub fn now_ms() -> u64 {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    real.saturating_add(TEST_CLOCK_OFFSET_MS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_print_back_readably() {
        assert_eq!(duration(0), "0ms");
        assert_eq!(duration(30_000), "30s");
        assert_eq!(duration(5_400_000), "1h 30m");
        assert_eq!(duration(2_500), "2s 500ms");
        assert_eq!(duration(3_600_000), "1h");
        for ms in [1, 999, 1_000, 93_784_005, 604_800_000] {
            assert_eq!(parse_duration_ms(&duration(ms)), Ok(ms));
        }
        assert_eq!(approx(1_798_500), "29m 58s");
        assert_eq!(approx(180_000), "3m");
        assert_eq!(approx(3_600_000 + 5_000), "1h");
        assert_eq!(approx(90_061_000), "1d 1h");
        assert_eq!(approx(500), "0s");
        assert_eq!(relative(10_000, 5_000), "in 5s");
        assert_eq!(relative(5_000, 185_000), "3m ago");
        assert_eq!(relative(5_000, 5_400), "now");
    }

    #[test]
    fn a_time_shows_date_offset_and_distance() {
        let s = when_from(1_796_457_600_000, 1_796_457_600_000 - 1_798_000);
        // the local zone decides the digits; the shape is fixed
        let (date, rest) = s.split_once(" (").unwrap();
        assert_eq!(date.len(), "2026-12-05 09:00:00 +01:00".len(), "{s}");
        assert_eq!(rest, "in 29m 58s)");
    }
}
