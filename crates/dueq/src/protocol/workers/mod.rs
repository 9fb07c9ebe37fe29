//! Redis operations on the registry of live worker processes (`dueq:workers`): one heartbeat
//! entry per [`Worker`](crate::Worker) and `dueq serve` process.
//!
//! One hash, outside any hash tag (like `dueq:queues`), so every script touches one key (one
//! slot on a cluster): field = worker id, value = `"<last_seen_ms> <expires_at_ms>
//! <started_at_ms> <in_hand>\n<info JSON>"`. The scripts write the times from the Redis
//! clock; the info JSON (host, pid, version, queues, concurrency) is the caller's and opaque
//! to them. An entry is live while `expires_at_ms` is in the future; a process that dies
//! stops beating, readers skip it at once after its expiry and later beats delete it
//! (`worker_beat.lua`), so the registry stays within its cap.

use super::call::{Args, run_global};
use super::conn::Conn;
use super::keys::WORKERS_KEY;
use super::scripts;
use crate::error::{Error, Result};

/// What one beat did.
pub(crate) struct BeatReply {
    pub now_ms: u64,
    /// `false`: the registry is full of live workers, so this one is not listed.
    pub registered: bool,
    /// Expired entries deleted by this beat.
    pub removed: u64,
}

/// Expired entries a beat checks (besides a full sweep when the registry is at its cap).
const SAMPLE: u32 = 16;

/// Registers or refreshes worker `id` until `ttl_ms` from now (Redis clock).
pub(crate) async fn beat(
    conn: &mut Conn,
    id: &str,
    ttl_ms: u64,
    in_hand: u64,
    info_json: &str,
    cap: usize,
) -> Result<BeatReply> {
    let mut a = Args::default();
    a.s(id).n(ttl_ms).n(in_hand).s(info_json).n(cap).n(SAMPLE);
    let mut r = run_global(conn, &scripts::WORKER_BEAT, a.take()).await?;
    let now_ms = r.u64()?;
    let registered = r.i64()? == 1;
    let _started_at_ms = r.opt_u64()?;
    Ok(BeatReply {
        now_ms,
        registered,
        removed: r.u64()?,
    })
}

/// Removes worker `id`; whether it was listed.
pub(crate) async fn remove(conn: &mut Conn, id: &str) -> Result<bool> {
    let mut a = Args::default();
    a.s(id);
    let mut r = run_global(conn, &scripts::WORKER_REMOVE, a.take()).await?;
    r.u64()?;
    Ok(r.i64()? == 1)
}

/// One live entry as stored.
pub(crate) struct Entry {
    pub id: String,
    pub last_seen_ms: u64,
    pub expires_at_ms: u64,
    pub started_at_ms: u64,
    pub in_hand: u64,
    pub info_json: String,
}

/// The Redis time and every live entry (unsorted); malformed entries are skipped.
pub(crate) async fn list(conn: &mut Conn) -> Result<(u64, Vec<Entry>)> {
    let mut r = run_global(conn, &scripts::WORKER_LIST, Vec::new()).await?;
    let now_ms = r.u64()?;
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let id = r.string()?;
        let value = r.string()?;
        // an entry changed by hand must not hide every other worker: skipped, logged
        match parse(id, &value) {
            Ok(e) => out.push(e),
            Err(e) => tracing::warn!(error = %e, "unreadable workers entry skipped"),
        }
    }
    Ok((now_ms, out))
}

fn parse(id: String, value: &str) -> Result<Entry> {
    let bad = || Error::protocol(format!("{WORKERS_KEY}: entry {id:?} is malformed"));
    let (head, info) = value.split_once('\n').ok_or_else(bad)?;
    let mut nums = head.split(' ').map(|s| s.parse::<u64>());
    let mut next = || nums.next().and_then(|n| n.ok()).ok_or_else(bad);
    Ok(Entry {
        last_seen_ms: next()?,
        expires_at_ms: next()?,
        started_at_ms: next()?,
        in_hand: next()?,
        info_json: info.to_owned(),
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn entries_parse() {
        let e = parse("w1".into(), "10 25 5 3\n{\"host\":\"h\"}").unwrap();
        assert_eq!(
            (e.last_seen_ms, e.expires_at_ms, e.started_at_ms, e.in_hand),
            (10, 25, 5, 3)
        );
        assert_eq!(e.info_json, "{\"host\":\"h\"}");
        for bad in ["10 25 5 3", "10 x 5 3\n{}", "10 25\n{}"] {
            assert!(parse("w".into(), bad).is_err(), "{bad:?}");
        }
    }
}
