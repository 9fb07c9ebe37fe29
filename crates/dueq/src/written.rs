//! Durations and times as people write them, read the same way by the CLI's flags and the
//! dashboard's forms: a duration is `30m`, `7d`, `1h30m`, `250ms`, `2s` or plain
//! milliseconds; a time is an RFC 3339 time with its offset or Unix epoch milliseconds.

use jiff::Timestamp;

/// The units of a duration, largest first: (suffix, milliseconds).
pub const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// What a duration flag accepts, for error messages and help.
pub const DURATION_FORMS: &str = "30m, 7d, 1h30m, 250ms, 2s or plain milliseconds";

/// Reads a duration: plain milliseconds (`60000`), or numbers each followed by a unit, largest
/// unit first (`7d`, `1h30m`, `2s`, `250ms`, `1m 30s`), units `d`, `h`, `m`, `s`, `ms`. As a
/// clap value parser, clap names the flag in the error.
///
/// # Errors
/// Anything else, or more than `u64::MAX` ms, with a message giving the accepted forms.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration: use {DURATION_FORMS}");
    let s = text.trim();
    if s.is_empty() {
        return Err(bad());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map_err(|_| bad());
    }
    let mut total: u64 = 0;
    // index in UNITS of the last unit read: each next one must be smaller
    let mut last: Option<usize> = None;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &rest[..letters];
        rest = rest[letters..].trim_start();
        let Some(i) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(bad());
        };
        if last.is_some_and(|l| i <= l) {
            return Err(format!(
                "{text:?} is not a duration: give each unit once, largest first (1h30m)"
            ));
        }
        last = Some(i);
        total = n
            .checked_mul(UNITS[i].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| format!("{text:?} is too long a duration"))?;
    }
    Ok(total)
}

/// Reads a point in time: an RFC 3339 time with its offset (`2026-12-05T09:00:00+01:00`,
/// `2026-12-05T08:00:00Z`) or Unix epoch milliseconds.
///
/// # Errors
/// Anything else, or a time before 1970.
pub fn parse_time_ms(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map_err(|_| format!("{text:?} is too large a time"));
    }
    let t: Timestamp = s.parse().map_err(|e| {
        format!(
            "{text:?} is not a time: use RFC 3339 with an offset (2026-12-05T09:00:00+01:00 or \
             ...Z) or Unix epoch milliseconds ({e})"
        )
    })?;
    u64::try_from(t.as_millisecond()).map_err(|_| format!("{text:?} is before 1970"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_duration_form_reads() {
        for (text, ms) in [
            ("60000", 60_000),
            ("0", 0),
            ("250ms", 250),
            ("2s", 2_000),
            ("30m", 1_800_000),
            ("1h30m", 5_400_000),
            ("1h 30m", 5_400_000),
            ("7d", 604_800_000),
            ("1d2h3m4s5ms", 93_784_005),
            (" 5s ", 5_000),
        ] {
            assert_eq!(parse_duration_ms(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn bad_durations_are_refused_with_the_forms() {
        for text in [
            "30x", "", "m", "1.5h", "-5", "30m1h", "1m1m", "5 ms s", "1h-2m",
        ] {
            let e = parse_duration_ms(text).unwrap_err();
            assert!(e.contains(&format!("{text:?}")), "{text}: {e}");
        }
        assert!(
            parse_duration_ms("30x")
                .unwrap_err()
                .contains(DURATION_FORMS)
        );
        assert!(parse_duration_ms("99999999999999999d").is_err());
    }

    #[test]
    fn times_read_as_rfc3339_or_epoch_ms() {
        assert_eq!(
            parse_time_ms("2026-12-05T09:00:00+01:00"),
            Ok(1_796_457_600_000)
        );
        assert_eq!(parse_time_ms("2026-12-05T08:00:00Z"), Ok(1_796_457_600_000));
        assert_eq!(parse_time_ms("1796457600000"), Ok(1_796_457_600_000));
        for bad in [
            "2026-12-05T09:00:00",
            "tomorrow",
            "1969-12-31T00:00:00Z",
            "",
        ] {
            assert!(parse_time_ms(bad).is_err(), "{bad}");
        }
    }
}
