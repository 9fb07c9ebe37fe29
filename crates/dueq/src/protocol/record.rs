//! The task record stored in the `tasks` hash, public for operators and benchmarks.
//!
//! Layout (little-endian): `u32 attempt | u16 max_attempts | u32 lease_ms | u16 key field |
//! key | [u48 misfire deadline] | [extension] | payload | u48 due_at_ms | u48 created_at_ms`.
//! The key field holds the key's length (low 10 bits; keys are at most 512 bytes), bit 10
//! when a misfire deadline follows the key, bit 11 when the tick's schedule fires once for a
//! missed span, and the priority (high 4 bits). The client builds
//! everything but the 12-byte tail ([`spec`]); the scripts append the two times only Redis
//! may decide. With 24 bytes of overhead a record with a 100-byte payload fits a 128-byte
//! allocation. Only the schedule firer writes a misfire deadline, on a tick's task: a task
//! that has not started by then is a missed tick (`claim.lua`).
//!
//! Priorities are 0 to 9, so the priority bits' value 15 marks an extension block after the
//! key and the misfire deadline: `u8 priority | u8 flags | u16 length | headers` (the
//! headers' stored form, [`Headers`]; flag 1: the task of a schedule's tick). A record
//! without headers has none and costs nothing more.

use crate::error::{Error, Result};
use crate::task::{Headers, TaskOptions};

const HDR_LEN: usize = 12;
const TAIL_LEN: usize = 12;
/// The key length takes the low 10 bits of its `u16`, the priority the high 4.
const KEY_LEN_MASK: u16 = 0x03ff;
/// Set when a misfire deadline follows the key.
const MISFIRE_BIT: u16 = 0x0400;
const PRIORITY_SHIFT: u16 = 12;
/// The priority bits' value that marks an extension block.
const EXT_MARK: u16 = 15;
/// The extension block's fixed part: priority, flags, length.
const EXT_LEN: usize = 4;
/// Extension flag: the task of a schedule's tick.
const EXT_TICK: u8 = 1;

/// A decoded task record (the last error text is kept apart, in the `errors` hash).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Attempts finished (failed) so far.
    pub attempt: u32,
    /// Attempts allowed (at most 65 535).
    pub max_attempts: u32,
    /// Lease a claim takes, ms.
    pub lease_ms: u64,
    /// Priority, 0 (first) to 9.
    pub priority: u8,
    /// Due time, epoch ms (Redis clock).
    pub due_at_ms: u64,
    /// Creation time, epoch ms (Redis clock).
    pub created_at_ms: u64,
    /// A schedule tick's misfire deadline, epoch ms: its task not started by then is a
    /// missed tick.
    pub misfire_deadline_ms: Option<u64>,
    /// Business key, if any.
    pub key: Option<String>,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// Its headers.
    pub headers: Headers,
    /// Whether a schedule's tick made it (its trace context is linked, never continued).
    pub tick: bool,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u48_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..6].copy_from_slice(&b[at..at + 6]);
    u64::from_le_bytes(a)
}

/// The record of a new task without its tail (attempt 0), with `options` ([`TaskOptions::check`]
/// passed: larger values would be clamped; an attempts or lease of `None` is stored as 0, the
/// queue's setting) and `key` (at most 512 bytes).
pub fn spec(options: &TaskOptions, key: &str, payload: &[u8]) -> Vec<u8> {
    build(options, key, payload, false)
}

/// The spec of a task made by a schedule ([`spec`], marked as a tick's when it carries
/// headers): the firer's has an empty key, which the script fills per tick.
pub fn tick_spec(options: &TaskOptions, key: &str, payload: &[u8]) -> Vec<u8> {
    build(options, key, payload, true)
}

fn build(options: &TaskOptions, key: &str, payload: &[u8], tick: bool) -> Vec<u8> {
    let max_attempts = options.max_attempts.unwrap_or(0);
    let lease_ms = options.lease_ms.unwrap_or(0);
    let priority = options.priority;
    let mut v = Vec::with_capacity(HDR_LEN + key.len() + payload.len());
    v.extend(0u32.to_le_bytes());
    v.extend(
        u16::try_from(max_attempts)
            .unwrap_or(u16::MAX)
            .to_le_bytes(),
    );
    v.extend(u32::try_from(lease_ms).unwrap_or(u32::MAX).to_le_bytes());
    let klen = u16::try_from(key.len())
        .unwrap_or(KEY_LEN_MASK)
        .min(KEY_LEN_MASK);
    let ext = !options.headers.is_empty();
    let prio = if ext {
        EXT_MARK
    } else {
        u16::from(priority.min(9))
    } << PRIORITY_SHIFT;
    v.extend((klen | prio).to_le_bytes());
    v.extend(key.as_bytes());
    if ext {
        v.push(priority.min(9));
        v.push(if tick { EXT_TICK } else { 0 });
        let at = v.len();
        v.extend([0, 0]);
        options.headers.encode_into(&mut v);
        // checked headers take at most 4 KiB plus 3 bytes per entry
        let len = u16::try_from(v.len() - at - 2).unwrap_or(u16::MAX);
        v[at..at + 2].copy_from_slice(&len.to_le_bytes());
    }
    v.extend(payload);
    v
}

impl Record {
    /// What a list shows of a record that does not decode: its bytes as the payload, every
    /// other field empty.
    pub fn unreadable(raw: Vec<u8>) -> Self {
        Self {
            attempt: 0,
            max_attempts: 0,
            lease_ms: 0,
            priority: 0,
            due_at_ms: 0,
            created_at_ms: 0,
            misfire_deadline_ms: None,
            key: None,
            payload: raw,
            headers: Headers::new(),
            tick: false,
        }
    }

    /// Decodes a record; takes ownership to move the payload out without a copy.
    ///
    /// # Errors
    /// [`ErrorKind::Protocol`](crate::ErrorKind) when the bytes are too short or the key
    /// length points past the end.
    pub fn decode(mut raw: Vec<u8>) -> Result<Self> {
        if raw.len() < HDR_LEN + TAIL_LEN {
            return Err(Error::protocol("task record is too short"));
        }
        let klen_prio = u16_at(&raw, 10);
        let klen = usize::from(klen_prio & KEY_LEN_MASK);
        let extra = if klen_prio & MISFIRE_BIT != 0 { 6 } else { 0 };
        let body_end = raw.len() - TAIL_LEN;
        let mut payload_at = HDR_LEN + klen + extra;
        if payload_at > body_end {
            return Err(Error::protocol("task record is truncated"));
        }
        let mut priority = (klen_prio >> PRIORITY_SHIFT) as u8;
        let mut headers = Headers::new();
        let mut tick = false;
        if klen_prio >> PRIORITY_SHIFT == EXT_MARK {
            let at = payload_at;
            if at + EXT_LEN > body_end {
                return Err(Error::protocol("task record's extension is truncated"));
            }
            priority = raw[at];
            tick = raw[at + 1] & EXT_TICK != 0;
            let len = usize::from(u16_at(&raw, at + 2));
            payload_at = at + EXT_LEN + len;
            headers = raw
                .get(at + EXT_LEN..payload_at)
                .filter(|_| payload_at <= body_end)
                .and_then(Headers::decode)
                .ok_or_else(|| Error::protocol("task record's headers are truncated"))?;
        }
        let key = &raw[HDR_LEN..HDR_LEN + klen];
        let key = if klen == 0 {
            None
        } else {
            // keys are checked UTF-8 at enqueue; lossy here so one odd record cannot fail a
            // whole claim
            Some(String::from_utf8_lossy(key).into_owned())
        };
        let rec = Self {
            attempt: u32_at(&raw, 0),
            max_attempts: u32::from(u16_at(&raw, 4)),
            lease_ms: u64::from(u32_at(&raw, 6)),
            priority,
            due_at_ms: u48_at(&raw, body_end),
            created_at_ms: u48_at(&raw, body_end + 6),
            misfire_deadline_ms: (extra > 0).then(|| u48_at(&raw, HDR_LEN + klen)),
            key,
            payload: Vec::new(),
            headers,
            tick,
        };
        raw.truncate(body_end);
        let payload = raw.split_off(payload_at);
        Ok(Self { payload, ..rec })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(key: &str, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(3u32.to_le_bytes());
        v.extend(5u16.to_le_bytes());
        v.extend(30_000u32.to_le_bytes());
        v.extend((key.len() as u16).to_le_bytes());
        v.extend(key.as_bytes());
        v.extend(payload);
        v.extend(&1_764_455_000_871u64.to_le_bytes()[..6]);
        v.extend(&1_764_455_000_000u64.to_le_bytes()[..6]);
        v
    }

    #[test]
    fn a_misfire_deadline_after_the_key_is_read_and_skipped() {
        let mut v = Vec::new();
        v.extend(0u32.to_le_bytes());
        v.extend(5u16.to_le_bytes());
        v.extend(30_000u32.to_le_bytes());
        // key of 3 bytes, a deadline follows, fire_once, priority 2
        v.extend((3u16 | 0x0400 | 0x0800 | (2 << 12)).to_le_bytes());
        v.extend(b"k:1");
        v.extend(&1_764_455_002_000u64.to_le_bytes()[..6]);
        v.extend(b"pay");
        v.extend(&1_764_455_000_000u64.to_le_bytes()[..6]);
        v.extend(&1_764_455_000_000u64.to_le_bytes()[..6]);
        let r = Record::decode(v).unwrap();
        assert_eq!(r.key.as_deref(), Some("k:1"));
        assert_eq!(r.misfire_deadline_ms, Some(1_764_455_002_000));
        assert_eq!(r.payload, b"pay");
        assert_eq!(r.priority, 2);
        assert_eq!(r.due_at_ms, 1_764_455_000_000);
    }

    #[test]
    fn decodes_all_fields() {
        let r = Record::decode(encode("日本語-✓", b"\0\xffpay")).unwrap();
        assert_eq!(r.attempt, 3);
        assert_eq!(r.max_attempts, 5);
        assert_eq!(r.lease_ms, 30_000);
        assert_eq!(r.due_at_ms, 1_764_455_000_871);
        assert_eq!(r.created_at_ms, 1_764_455_000_000);
        assert_eq!(r.key.as_deref(), Some("日本語-✓"));
        assert_eq!(r.payload, b"\0\xffpay");
    }

    #[test]
    fn spec_is_the_record_without_its_tail() {
        let options = TaskOptions::new()
            .max_attempts(5)
            .lease_ms(30_000)
            .priority(7);
        let mut s = spec(&options, "k", b"p");
        s.extend(&253_402_300_799_999u64.to_le_bytes()[..6]);
        s.extend(&9u64.to_le_bytes()[..6]);
        let r = Record::decode(s).unwrap();
        assert_eq!((r.attempt, r.max_attempts, r.lease_ms), (0, 5, 30_000));
        assert_eq!((r.due_at_ms, r.created_at_ms), (253_402_300_799_999, 9));
        assert_eq!(r.key.as_deref(), Some("k"));
        assert_eq!(r.payload, b"p");
        assert_eq!(r.priority, 7);
    }

    fn with_tail(mut s: Vec<u8>) -> Vec<u8> {
        s.extend(&1_764_455_000_871u64.to_le_bytes()[..6]);
        s.extend(&1_764_455_000_000u64.to_le_bytes()[..6]);
        s
    }

    #[test]
    fn headers_ride_in_an_extension_block_only_when_given() {
        let plain = TaskOptions::new().priority(3);
        assert_eq!(spec(&plain, "k", b"p").len(), HDR_LEN + 2);
        let options = plain
            .clone()
            .header("traceparent", "00-ab")
            .header("X", "y");
        let s = spec(&options, "k", b"pay");
        assert_eq!(u16_at(&s, 10) >> PRIORITY_SHIFT, EXT_MARK);
        let r = Record::decode(with_tail(s)).unwrap();
        assert_eq!(r.priority, 3);
        assert_eq!(r.key.as_deref(), Some("k"));
        assert_eq!(r.payload, b"pay");
        assert_eq!(r.headers, options.headers);
        assert!(!r.tick);
        assert_eq!(r.due_at_ms, 1_764_455_000_871);
        let t = Record::decode(with_tail(tick_spec(&options, "", b"pay"))).unwrap();
        assert!(t.tick);
        assert_eq!(t.key, None);
        assert!(
            !Record::decode(with_tail(tick_spec(&plain, "", b"")))
                .unwrap()
                .tick
        );
    }

    #[test]
    fn a_misfire_deadline_comes_before_the_extension() {
        let options = TaskOptions::new().priority(2).header("a", "b");
        let s = tick_spec(&options, "", b"pay");
        // as schedule_fire.lua writes a tick: key put in, deadline after it, the rest kept
        let mut v = s[..HDR_LEN - 2].to_vec();
        let kf = u16_at(&s, 10) | MISFIRE_BIT | 3;
        v.extend(kf.to_le_bytes());
        v.extend(b"s:1");
        v.extend(&1_764_455_002_000u64.to_le_bytes()[..6]);
        v.extend(&s[HDR_LEN..]);
        let r = Record::decode(with_tail(v)).unwrap();
        assert_eq!(r.misfire_deadline_ms, Some(1_764_455_002_000));
        assert_eq!((r.priority, r.tick), (2, true));
        assert_eq!(r.headers.get("a"), Some("b"));
        assert_eq!(r.payload, b"pay");
    }

    #[test]
    fn a_cut_extension_is_refused() {
        let s = spec(&TaskOptions::new().header("a", "b"), "", b"");
        for cut in [HDR_LEN + 1, s.len() - 1] {
            assert!(
                Record::decode(with_tail(s[..cut].to_vec())).is_err(),
                "{cut}"
            );
        }
    }

    #[test]
    fn old_records_read_as_priority_zero() {
        let r = Record::decode(encode("k", b"p")).unwrap();
        assert_eq!(r.priority, 0);
        assert_eq!(r.key.as_deref(), Some("k"));
    }

    #[test]
    fn refuses_garbage() {
        assert!(Record::decode(vec![1, 2, 3]).is_err());
        let mut v = encode("key", b"");
        v[10] = 200; // key length beyond the record
        assert!(Record::decode(v).is_err());
    }
}
