//! Small synchronous inspection helpers.
//!
//! They take any [`redis::ConnectionLike`] (a plain [`redis::Connection`] or a
//! sync cluster connection) and panic if the command fails.

use redis::{ConnectionLike, Value};

/// `ZCARD key`.
pub fn zcard(conn: &mut impl ConnectionLike, key: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(key)
        .query(conn)
        .unwrap_or_else(|e| panic!("ZCARD {key} failed: {e}"))
}

/// `HLEN key`.
pub fn hlen(conn: &mut impl ConnectionLike, key: &str) -> u64 {
    redis::cmd("HLEN")
        .arg(key)
        .query(conn)
        .unwrap_or_else(|e| panic!("HLEN {key} failed: {e}"))
}

/// The entry dueq keeps in a queue's `active` and `leases` while tasks are active, so that
/// Redis keeps them as hash tables (see `lib/active.lua`).
pub const LEASES_PIN: &str =
    "dueq pin: an entry too long for a listpack keeps this set a hash table";

/// The number of active tasks in a queue's `active` sorted set: `ZCARD` without the pin
/// (both read in one `MULTI`, so a claim between them cannot be counted half).
pub fn active_len(conn: &mut impl ConnectionLike, key: &str) -> u64 {
    let (n, pinned): (u64, Option<f64>) = redis::pipe()
        .atomic()
        .zcard(key)
        .zscore(key, LEASES_PIN)
        .query(conn)
        .unwrap_or_else(|e| panic!("ZCARD/ZSCORE {key} failed: {e}"));
    n - u64::from(pinned.is_some())
}

/// The number of leases in a queue's `leases` hash: `HLEN` without the pin (read as
/// [`active_len`]).
pub fn leases_len(conn: &mut impl ConnectionLike, key: &str) -> u64 {
    let (n, pinned): (u64, bool) = redis::pipe()
        .atomic()
        .hlen(key)
        .hexists(key, LEASES_PIN)
        .query(conn)
        .unwrap_or_else(|e| panic!("HLEN/HEXISTS {key} failed: {e}"));
    n - u64::from(pinned)
}

/// All keys matching the glob `pattern`, collected with `SCAN` (never
/// `KEYS`), deduplicated and sorted.
///
/// On a cluster connection `SCAN` is answered by a single node, so use a
/// per-node connection to enumerate a whole cluster.
pub fn keys_matching(conn: &mut impl ConnectionLike, pattern: &str) -> Vec<String> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)
            .unwrap_or_else(|e| panic!("SCAN MATCH {pattern} failed: {e}"));
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

/// The largest execution time, in microseconds, among the entries returned by
/// `SLOWLOG GET 128` (0 if the slow log is empty).
pub fn slowlog_max_us(conn: &mut impl ConnectionLike) -> u64 {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query(conn)
        .unwrap_or_else(|e| panic!("SLOWLOG GET 128 failed: {e}"));
    entries
        .iter()
        .map(|entry| match entry {
            // Entry layout: [id, unix time, duration µs, args, client addr, client name].
            Value::Array(fields) => match fields.get(2) {
                Some(Value::Int(us)) => u64::try_from(*us)
                    .unwrap_or_else(|_| panic!("negative SLOWLOG duration in {entry:?}")),
                _ => panic!("unexpected SLOWLOG entry: {entry:?}"),
            },
            _ => panic!("unexpected SLOWLOG entry: {entry:?}"),
        })
        .max()
        .unwrap_or(0)
}

/// The value of `field` in the output of `INFO section`, or `None` if the
/// field is absent.
pub fn info_field(conn: &mut impl ConnectionLike, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(conn)
        .unwrap_or_else(|e| panic!("INFO {section} failed: {e}"));
    parse_info_field(&info, field)
}

/// Extracts `field` from the text of an `INFO` reply (`field:value` lines).
pub(crate) fn parse_info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|line| {
        let (name, value) = line.trim_end_matches('\r').split_once(':')?;
        (name == field).then(|| value.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nprocess_id:42\r\n\r\n# Other\r\nx:a:b\r\n";
        assert_eq!(
            parse_info_field(info, "redis_version").as_deref(),
            Some("7.0.15")
        );
        assert_eq!(parse_info_field(info, "process_id").as_deref(), Some("42"));
        assert_eq!(parse_info_field(info, "x").as_deref(), Some("a:b"));
        assert_eq!(parse_info_field(info, "missing"), None);
        assert_eq!(parse_info_field(info, "process"), None);
    }
}
