//! Formatting for the dashboard: times, durations and payload previews. Everything here
//! returns plain text; the templates escape it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Epoch ms now by this server's clock (display only: "3 s ago"; nothing is decided by it).
pub(super) fn local_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Epoch ms now as the queues see it (display only): the test clock's time on a Redis that
/// runs it, else this server's clock.
pub(super) async fn now_ms(client: &dueq::Client) -> u64 {
    if let Some(clock) = client.test_clock()
        && let Ok(r) = clock.now().await
    {
        return r.now_ms;
    }
    local_now_ms()
}

/// `2026-05-01 12:34:56 UTC` for an epoch time in ms.
pub(super) fn time(at_ms: u64) -> String {
    match i64::try_from(at_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => format!("{at_ms} ms"),
    }
}

/// `12:34` (UTC) for an epoch time in ms.
pub(super) fn clock(at_ms: u64) -> String {
    match i64::try_from(at_ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
    {
        Some(t) => t.strftime("%H:%M").to_string(),
        None => String::new(),
    }
}

/// A duration in ms for people: `850 ms`, `12.3 s`, `4.5 min`, `2.0 h`, `3.1 d`.
pub(super) fn duration(ms: u64) -> String {
    let f = ms as f64;
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", f / 1e3)
    } else if ms < 3_600_000 {
        format!("{:.1} min", f / 6e4)
    } else if ms < 86_400_000 {
        format!("{:.1} h", f / 3.6e6)
    } else {
        format!("{:.1} d", f / 8.64e7)
    }
}

/// `in 4.5 min` / `12.0 s ago` / `now` for `at_ms` seen from `now_ms`.
pub(super) fn relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms > now_ms {
        format!("in {}", duration(at_ms - now_ms))
    } else if now_ms - at_ms < 1_000 {
        "now".to_owned()
    } else {
        format!("{} ago", duration(now_ms - at_ms))
    }
}

/// At most `max` bytes of `bytes` as text (invalid UTF-8 shown as U+FFFD), and how many bytes
/// were left out.
pub(super) fn preview(bytes: &[u8], max: usize) -> (String, usize) {
    let mut cut = bytes.len().min(max);
    // Do not split a UTF-8 sequence: back up to a char boundary (at most 3 bytes).
    if let Err(e) = std::str::from_utf8(&bytes[..cut])
        && e.error_len().is_none()
        && cut < bytes.len()
    {
        cut = e.valid_up_to();
    }
    (
        String::from_utf8_lossy(&bytes[..cut]).into_owned(),
        bytes.len() - cut,
    )
}

/// `text` cut to at most `max` chars, with `…` when cut.
pub(super) fn short(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// `1 task` / `3 tasks`.
pub(super) fn tasks(n: u64) -> String {
    if n == 1 {
        "1 task".to_owned()
    } else {
        format!("{n} tasks")
    }
}

/// Every byte outside the unreserved set (`A-Z a-z 0-9 - . _ ~`) as `%XX`, for a value put
/// into a URL this code builds (a redirect's query).
pub(super) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(super) use dueq::written::parse_duration_ms;

/// Reads a point in time as epoch ms: as the CLI does ([`dueq::written::parse_time_ms`]), or a
/// date-time without an offset, taken as UTC like every time the dashboard shows
/// (`2026-05-01 12:00`, `2026-05-01T12:00:30`, `2026-05-01 12:00:30 UTC`).
///
/// # Errors
/// A message naming the text when it is none of these or before 1970.
pub(super) fn parse_time_ms(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("{text:?} is not a time: use 2026-05-01 12:00 (UTC), an RFC 3339 time or epoch ms")
    };
    if let Ok(ms) = dueq::written::parse_time_ms(text) {
        return Ok(ms);
    }
    // a date-time without an offset, as the dashboard shows them: UTC
    let s = text.trim();
    let civil = s.strip_suffix("UTC").unwrap_or(s).trim_end();
    let ts = civil
        .parse::<jiff::civil::DateTime>()
        .ok()
        .and_then(|dt| jiff::tz::Offset::UTC.to_timestamp(dt).ok())
        .ok_or_else(bad)?;
    u64::try_from(ts.as_millisecond()).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(clock(90 * 60_000), "01:30");
        assert_eq!(duration(999), "999 ms");
        assert_eq!(duration(12_340), "12.3 s");
        assert_eq!(duration(270_000), "4.5 min");
        assert_eq!(duration(7_200_000), "2.0 h");
        assert_eq!(relative(10_000, 4_000), "in 6.0 s");
        assert_eq!(relative(4_000, 4_500), "now");
        assert_eq!(relative(1_000, 61_000), "1.0 min ago");
        assert!(time(u64::MAX).ends_with(" ms"));
    }

    #[test]
    fn previews() {
        assert_eq!(preview(b"hello", 10), ("hello".into(), 0));
        assert_eq!(preview(b"hello", 2), ("he".into(), 3));
        // "é" is 2 bytes: not split
        assert_eq!(preview("aé".as_bytes(), 2), ("a".into(), 2));
        assert_eq!(preview(&[0xff, b'a'], 10), ("\u{fffd}a".into(), 0));
        assert_eq!(short("abcdef", 3), "abc…");
        assert_eq!(short("abc", 3), "abc");
    }
    #[test]
    fn parses_times_shown_in_utc() {
        assert_eq!(parse_time_ms("0"), Ok(0));
        assert_eq!(parse_time_ms("1970-01-01 00:01"), Ok(60_000));
        assert_eq!(parse_time_ms("1970-01-01T00:01:30"), Ok(90_000));
        assert_eq!(parse_time_ms("1970-01-01 00:00:02 UTC"), Ok(2_000));
        assert_eq!(parse_time_ms("1970-01-01T01:00:00+01:00"), Ok(0));
        assert_eq!(
            parse_time_ms(&time(1_777_000_000_123)),
            Ok(1_777_000_000_000)
        );
        for bad in ["", "yesterday", "1969-12-31 23:59", "2026-13-01 00:00"] {
            assert!(parse_time_ms(bad).is_err(), "{bad:?}");
        }
        assert_eq!(url_encode("a b/ä"), "a%20b%2F%C3%A4");
        assert_eq!(tasks(1), "1 task");
        assert_eq!(tasks(0), "0 tasks");
    }
}
