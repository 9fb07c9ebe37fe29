//! Queue names and the Redis key names of a queue.
//!
//! This is the only place key names are built (DESIGN section 3): scripts receive them all in
//! `KEYS`, and business keys and ids are never spliced into a key name.

use crate::error::{Error, Result};

/// Longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;

/// The set of all queue names ever used (outside any hash tag, so never touched by a script).
pub const QUEUES_KEY: &str = "dueq:queues";

/// Names of queues whose webhook was ever set (outside any hash tag; only added to, so a
/// queue with a webhook is always listed; its `webhook` hash says whether it still has one).
pub const WEBHOOKS_KEY: &str = "dueq:webhooks";

/// Names of queues that ever had a schedule (outside any hash tag; only added to, so every
/// queue with a schedule is listed; its `schedules` hash says which it still has). `dueq
/// serve` fires the schedules of every queue named here.
pub const SCHEDULES_KEY: &str = "dueq:schedules";
/// Channel told when a queue joins [`SCHEDULES_KEY`], so a firer of every queue (`dueq serve`)
/// starts firing its schedules at once instead of at its next look at the registry.
pub const SCHEDULES_WAKE: &str = "dueq:schedules:wake";

/// Live worker processes and servers (outside any hash tag, so each script touching it
/// touches one key): hash worker id → heartbeat entry (see `protocol/workers`).
pub const WORKERS_KEY: &str = "dueq:workers";

/// Checks a queue name: `[A-Za-z0-9_.-]{1,128}`, not `.` or `..`. Any other character could
/// change the hash tag (`{`, `}`) or the key separator (`:`), and `.` / `..` are path segments
/// that HTTP clients and browsers rewrite in `/v1/queues/{queue}` URLs, so they are refused.
///
/// # Errors
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), naming the rule.
pub fn validate_queue_name(name: &str) -> Result<()> {
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if name.is_empty() || name.len() > MAX_QUEUE_NAME_BYTES || !name.bytes().all(ok_char) {
        return Err(Error::invalid(format!(
            "queue name {name:?} is invalid: use 1 to {MAX_QUEUE_NAME_BYTES} characters from A-Z a-z 0-9 _ . -"
        )));
    }
    if name == "." || name == ".." {
        return Err(Error::invalid(format!(
            "queue name {name:?} is invalid: . and .. are path segments in URLs"
        )));
    }
    Ok(())
}

/// Every Redis key (and the wake-up channel) of one queue; all share the hash tag `{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueKeys {
    /// The queue name.
    pub name: String,
    /// Scheduled tasks: sorted set, score = due time.
    pub sched: String,
    /// Active tasks: sorted set, score = lease deadline.
    pub active: String,
    /// Lease tokens of active tasks: hash.
    pub leases: String,
    /// Task records: hash.
    pub tasks: String,
    /// Business key index: hash key → id.
    pub keys: String,
    /// Dead-letter queue: sorted set, score = time of death.
    pub dead: String,
    /// Retained succeeded tasks: sorted set, score = finish time.
    pub done: String,
    /// Settings and sequences: hash.
    pub meta: String,
    /// Counters: hash.
    pub stats: String,
    /// What recent tracked claims handed out, so a lost reply can be recovered: hash.
    pub claims: String,
    /// Last error text of tasks that failed an attempt: hash id → text.
    pub errors: String,
    /// Push delivery target of the queue: hash `url`, `secret`, `concurrency`, `timeout_ms`,
    /// `updated_at_ms` (absent when the queue has no webhook).
    pub webhook: String,
    /// Per-minute activity of about the last hour: hash `"<minute>:<counter>"` → count
    /// (minute = Redis time in ms / 60 000; see `history.lua`).
    pub hist: String,
    /// Schedule definitions: hash name → definition (JSON line, `\n`, payload bytes).
    pub schedules: String,
    /// Schedule state: hash name → `"next last skipped paused fired fingerprint"` (ms times,
    /// -1 for none).
    pub schedule_state: String,
    /// Next fire time of every unpaused schedule: sorted set name → epoch ms, the one index
    /// a firing process sleeps on.
    pub schedule_next: String,
    /// Scheduled tasks of groups: sorted set, every score 0, member = group prefix, due time,
    /// id (see `lib.lua`).
    pub gsched: String,
    /// Scheduled tasks of groups by due time: sorted set id → due time.
    pub gdue: String,
    /// Group of each task that has one: hash id → group.
    pub groups: String,
    /// Groups with scheduled tasks: sorted set group → when it may next be served.
    pub gready: String,
    /// Active tasks per group: hash group → count.
    pub gactive: String,
    /// Groups at their concurrency limit: hash group → since (ms).
    pub gparked: String,
    /// Rate-limit logs: sorted set, every score 0 (see `lib.lua`).
    pub rate: String,
    /// Rate-limit totals: hash owner → "total floor".
    pub rate_n: String,
    /// Rate-limit logs by newest entry: sorted set owner prefix → ms.
    pub rate_idle: String,
    /// Scheduled ungrouped tasks of priorities 1 to 9 (index 0 is priority 1): sorted sets
    /// like `sched` (which holds priority 0); a set exists only while it holds tasks.
    pub psched: [String; 9],
    /// Expiry times of scheduled tasks that have one and have not started: sorted set id →
    /// `expires_at_ms`.
    pub expiry: String,
    /// Pub/sub channel that wakes idle workers.
    pub wake: String,
    /// Pub/sub channel that wakes schedule firers when a schedule changes (message: its next
    /// fire time, ms).
    pub schedule_wake: String,
}

impl QueueKeys {
    /// The keys of queue `name`.
    ///
    /// # Errors
    /// As [`validate_queue_name`].
    pub fn new(name: &str) -> Result<Self> {
        validate_queue_name(name)?;
        let k = |suffix: &str| format!("dueq:{{{name}}}:{suffix}");
        Ok(Self {
            name: name.to_owned(),
            sched: k("sched"),
            active: k("active"),
            leases: k("leases"),
            tasks: k("tasks"),
            keys: k("keys"),
            dead: k("dead"),
            done: k("done"),
            meta: k("meta"),
            stats: k("stats"),
            claims: k("claims"),
            errors: k("errors"),
            webhook: k("webhook"),
            hist: k("hist"),
            schedules: k("schedules"),
            schedule_state: k("schedule_state"),
            schedule_next: k("schedule_next"),
            gsched: k("gsched"),
            gdue: k("gdue"),
            groups: k("groups"),
            gready: k("gready"),
            gactive: k("gactive"),
            gparked: k("gparked"),
            rate: k("rate"),
            rate_n: k("rate_n"),
            rate_idle: k("rate_idle"),
            psched: std::array::from_fn(|i| k(&format!("sched:{}", i + 1))),
            expiry: k("expiry"),
            wake: k("wake"),
            schedule_wake: k("schedule_wake"),
        })
    }

    /// The nine group and rate-limit keys, in the order scripts take them (`group_keys` in
    /// `lib.lua`).
    pub fn group_keys(&self) -> [&str; 9] {
        [
            &self.gsched,
            &self.gdue,
            &self.groups,
            &self.gready,
            &self.gactive,
            &self.gparked,
            &self.rate,
            &self.rate_n,
            &self.rate_idle,
        ]
    }

    /// `keys` followed by the nine group keys: the KEYS of a script that touches groups.
    pub(crate) fn with_group_keys<'a>(&'a self, keys: &[&'a String]) -> Vec<&'a str> {
        let mut v: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        v.extend(self.group_keys());
        v
    }

    /// The ten task-option keys, in the order scripts take them (`option_keys` in `lib.lua`):
    /// the scheduled sets of priorities 1 to 9, then `expiry`.
    pub fn option_keys(&self) -> [&str; 10] {
        let mut v = [self.expiry.as_str(); 10];
        for (slot, key) in v.iter_mut().zip(&self.psched) {
            *slot = key;
        }
        v
    }

    /// `keys` (`sched` first: it is priority 0's set), the nine group keys, then the ten
    /// option keys: the KEYS of a script that finds or places scheduled tasks.
    pub(crate) fn with_lane_keys<'a>(&'a self, keys: &[&'a String]) -> Vec<&'a str> {
        let mut v = self.with_group_keys(keys);
        v.extend(self.option_keys());
        v
    }

    /// Every key and channel of the queue, for inspection and tests.
    pub fn all(&self) -> Vec<&str> {
        let mut v: Vec<&str> = [
            &self.sched,
            &self.active,
            &self.leases,
            &self.tasks,
            &self.keys,
            &self.dead,
            &self.done,
            &self.meta,
            &self.stats,
            &self.claims,
            &self.errors,
            &self.webhook,
            &self.hist,
            &self.schedules,
            &self.schedule_state,
            &self.schedule_next,
            &self.wake,
            &self.schedule_wake,
        ]
        .map(String::as_str)
        .to_vec();
        v.extend(self.group_keys());
        v.extend(self.option_keys());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for bad in [
            "",
            "a{b}c",
            "x}y{",
            "billing:v2",
            "a b",
            "ü",
            ".",
            "..",
            &"x".repeat(129),
        ] {
            assert!(validate_queue_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["orders", "a.b-c_1", "...", ".hidden", &"x".repeat(128)] {
            assert!(validate_queue_name(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn keys_share_one_tag_and_differ_between_queues() {
        let a = QueueKeys::new("billing").unwrap();
        let b = QueueKeys::new("billing.v2").unwrap();
        for k in a.all() {
            assert!(k.starts_with("dueq:{billing}:"), "{k}");
            assert!(!b.all().contains(&k));
        }
    }
}
