//! Formatting for the dashboard: times, durations and payload previews. Everything here
//! returns plain text; the templates escape it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Epoch ms now by this server's clock (display only: "3 s ago"; nothing is decided by it).
pub(super) fn local_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
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
}
