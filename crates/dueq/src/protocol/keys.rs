//! Queue names and the Redis key names of a queue.
//!
//! This is the only place key names are built (DESIGN section 3): scripts receive them all in
//! `KEYS`, and business keys and ids are never spliced into a key name. `SCRIPT_KEYS` is the
//! one order in which every operation on a queue takes them.

use crate::error::{Error, Result};
use crate::hash::fnv1a64;

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

/// The recovery index (outside any hash tag, so each call on it touches one key): sorted set
/// queue name → when a recoverer should next look at the queue, ms: its earliest lease
/// deadline or task expiry. Written after the claims that hand out tasks and the enqueues of
/// tasks with an expiry; `dueq serve`'s recoverer visits only what falls due in it, so idle
/// queues cost it nothing (see `due/recovery.rs`).
pub const RECOVERY_KEY: &str = "dueq:recovery";

/// Live worker processes and servers (outside any hash tag, so each script touching it
/// touches one key): hash worker id → heartbeat entry (see `protocol/workers`).
pub const WORKERS_KEY: &str = "dueq:workers";

/// The test clock (`dueq serve --test-clock`): its offset from Redis `TIME`, ms, as a string,
/// present only on a Redis that runs it; also the channel that tells every process the clock
/// moved. Outside any hash tag; the test clock runs on a single Redis, not a Cluster.
pub const TEST_CLOCK_KEY: &str = "dueq:test_clock";

/// A queue's keys in the order every operation on a queue takes them in `KEYS`, by the name
/// scripts read each under (`K.<name>`, `queue_keys` in `lib/keys.lua`); `sched:1` ..
/// `sched:9` are `K.s[1]` .. `K.s[9]`. Each name is also its key's suffix. The keys the small,
/// frequent operations need come first, so they take a short prefix ([`Span`]).
pub(crate) const SCRIPT_KEYS: [&str; 39] = [
    "active",
    "leases",
    "tasks",
    "keys",
    "meta",
    "stats",
    "errors",
    "hist",
    "done",
    "gsched",
    "gdue",
    "groups",
    "gready",
    "gactive",
    "gparked",
    "rate",
    "rate_n",
    "rate_idle",
    "uniq",
    "uniq_at",
    "sched",
    "sched:1",
    "sched:2",
    "sched:3",
    "sched:4",
    "sched:5",
    "sched:6",
    "sched:7",
    "sched:8",
    "sched:9",
    "expiry",
    "dead",
    "dead_keys",
    "claims",
    "schedule_state",
    "schedule_next",
    "schedule_fired",
    "schedules",
    "webhook",
];

/// How many of [`SCRIPT_KEYS`] an operation takes: always a prefix, so every operation reads
/// a key at the same place. Each extra key costs a call a little (Redis parses it and the
/// script gets it as a string), so extend and ack, the most frequent calls after claim, take
/// only what they touch; the registry in `scripts.rs` gives each operation its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Span {
    /// `active`, `leases`: extend.
    Leases = 2,
    /// Through the group and rate-limit keys and the unique windows: ack, settings, history.
    Finish = 20,
    /// Through `sched`, the sets of priorities 1 to 9 and `expiry`: the operations that place
    /// or find scheduled tasks.
    Scheduled = 31,
    /// Through `dead` and `dead_keys`: the operations that may find or make a dead task.
    Dead = 33,
    /// Through `claims` and `schedule_state`: claim and recover.
    Claims = 35,
    /// Every key: schedules, webhook, queue delete.
    All = SCRIPT_KEYS.len() as isize,
}

impl Span {
    /// How many keys the span holds.
    pub(crate) const fn len(self) -> usize {
        self as usize
    }
}

/// A key outside any hash tag, the one key of the operations on it: the name scripts read it
/// under (`global_key` in `lib/keys.lua`) and the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GlobalKey {
    /// Its name in scripts (read by the registry's test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) name: &'static str,
    /// The key.
    pub(crate) key: &'static str,
}

impl GlobalKey {
    /// [`RECOVERY_KEY`].
    pub(crate) const RECOVERY: Self = Self {
        name: "recovery",
        key: RECOVERY_KEY,
    };
    /// [`WORKERS_KEY`].
    pub(crate) const WORKERS: Self = Self {
        name: "workers",
        key: WORKERS_KEY,
    };
    /// [`TEST_CLOCK_KEY`].
    pub(crate) const TEST_CLOCK: Self = Self {
        name: "test_clock",
        key: TEST_CLOCK_KEY,
    };
}

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

pub use crate::settings::MAX_PARTITIONS;

/// Bits of a task id's sequence number below its partition number: partition `p` numbers its
/// tasks from `p << 40`, so an id names its partition (about 10^12 ids per partition).
pub const ID_PARTITION_SHIFT: u32 = 40;

/// Redis Cluster hash slots.
const SLOTS: u32 = 16_384;

/// Keys whose tasks live in partition 0 whatever their hash: the tasks a schedule fires
/// (`schedule:{name}:{fire_at_ms}`), which its firing script places beside the schedule.
const PARTITION_ZERO_PREFIX: &str = "schedule:";

/// The Redis Cluster hash slot of `key` (CRC16 as Redis and redis-rs compute it; a key with a
/// hash tag hashes its tag).
pub fn slot_of(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let close = b[open + 1..].iter().position(|&c| c == b'}')?;
            (close > 0).then(|| &b[open + 1..open + 1 + close])
        })
        .unwrap_or(b);
    (u32::from(crc16::State::<crc16::XMODEM>::calculate(tagged)) % SLOTS) as u16
}

/// The partition that holds the task with business key `key` in a queue of `n` partitions:
/// FNV-1a (64 bit) of the key's bytes modulo `n`; keys starting `schedule:` (the tasks
/// schedules fire) are in partition 0. Stable: it is how every process finds a key's task.
pub fn partition_of_key(key: &str, n: u16) -> u16 {
    if n <= 1 || key.starts_with(PARTITION_ZERO_PREFIX) {
        return 0;
    }
    (fnv1a64(key.as_bytes()) % u64::from(n)) as u16
}

/// The partition that holds task `id` in a queue of `n` partitions: the number above the low
/// 40 bits of its (hexadecimal) sequence number; 0 for an id that is not one dueq made.
pub fn partition_of_id(id: &str, n: u16) -> u16 {
    if n <= 1 {
        return 0;
    }
    match u64::from_str_radix(id, 16) {
        Ok(v) if (v >> ID_PARTITION_SHIFT) < u64::from(n) => (v >> ID_PARTITION_SHIFT) as u16,
        _ => 0,
    }
}

/// First slot of the `i`-th of `n` equal slot ranges (`i` may be `n`: the end).
fn range_start(i: u32, n: u32) -> u32 {
    i * SLOTS / n
}

/// Which of `n` equal slot ranges holds `slot`.
fn range_of(slot: u16, n: u32) -> u32 {
    (0..n)
        .rev()
        .find(|&i| range_start(i, n) <= u32::from(slot))
        .unwrap_or(0)
}

/// The hash tag of partition `p` of `n` of queue `name`: `name` for partition 0 (so a queue of
/// one partition has the plain layout `{name}`), else `name#p`, or `name#p.k` with the
/// smallest `k` whose slot is in the `(r0 + p) % n`-th of `n` equal slot ranges from slot 0,
/// `r0` being the range of partition 0's slot. The partitions so take one range each; a
/// cluster whose masters own equal slot ranges (as `redis-cli --cluster create` splits them)
/// gets them spread evenly when the partition count is a multiple of the master count (6 on
/// 3 masters: 2 each), where plain `name#p` tags would land wherever CRC16 puts them. (`#` is
/// not allowed in queue names, so no queue's tag collides.)
fn partition_tag(name: &str, p: u16, n: u16) -> String {
    if p == 0 {
        return name.to_owned();
    }
    let n = u32::from(n.max(1));
    let r = (range_of(slot_of(name), n) + u32::from(p)) % n;
    let (lo, hi) = (range_start(r, n), range_start(r + 1, n));
    let fits = |tag: &str| (lo..hi).contains(&u32::from(slot_of(tag)));
    let plain = format!("{name}#{p}");
    if fits(&plain) {
        return plain;
    }
    // one try in n fits; 100 000 tries miss with a chance of about e^-97 at n = 1 024
    (1..100_000u32)
        .map(|k| format!("{plain}.{k}"))
        .find(|t| fits(t))
        .unwrap_or(plain)
}

/// Every Redis key (and the wake-up channel) of one queue, or of one partition of a
/// partitioned queue; all share one hash tag (`{name}`, or the partition's).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueKeys {
    /// The queue name.
    pub name: String,
    /// Which partition these keys are (0 for a queue of one partition).
    pub partition: u16,
    /// For a partition above 0, the count its keys were built for (its keys depend on it);
    /// 1 for partition 0, whose keys are the same whatever the count.
    pub partitions: u16,
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
    /// The newest dead task under each business key: hash key → id, so a lookup by key
    /// finds a task that died (written only when a keyed task dies).
    pub dead_keys: String,
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
    /// The newest fired ticks of each schedule: hash name → `"t1 t2 …"` (ms, ascending): every
    /// tick fired ahead, whose task a change takes back, and the one before them.
    pub schedule_fired: String,
    /// Scheduled tasks of groups: sorted set, every score 0, member = group prefix, due time,
    /// id (see `lib/groups.lua`).
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
    /// Rate-limit logs: sorted set, every score 0 (see `lib/limits.lua`).
    pub rate: String,
    /// Rate-limit totals: hash owner → "total floor".
    pub rate_n: String,
    /// Rate-limit logs by newest entry: sorted set owner prefix → ms.
    pub rate_idle: String,
    /// Business keys in their unique window after their task finished: hash key →
    /// `"state id due_at_ms window_ms"` (see `lib/windows.lua`).
    pub uniq: String,
    /// When each unique window ends: sorted set key → epoch ms.
    pub uniq_at: String,
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
        Self::partition(name, 0, 1)
    }

    /// The keys of partition `p` of queue `name` split into `n` partitions (see
    /// [`partition_tag`]); partition 0 is [`QueueKeys::new`] whatever `n`.
    ///
    /// # Errors
    /// As [`validate_queue_name`], or when `p` is not below `n` or `n` is over
    /// [`MAX_PARTITIONS`].
    pub fn partition(name: &str, p: u16, n: u16) -> Result<Self> {
        validate_queue_name(name)?;
        if p >= n || n > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "partition {p} of {n}: partitions must be 1 to {MAX_PARTITIONS}"
            )));
        }
        let tag = partition_tag(name, p, n);
        let k = |suffix: &str| format!("dueq:{{{tag}}}:{suffix}");
        Ok(Self {
            name: name.to_owned(),
            partition: p,
            partitions: if p == 0 { 1 } else { n },
            sched: k("sched"),
            active: k("active"),
            leases: k("leases"),
            tasks: k("tasks"),
            keys: k("keys"),
            dead: k("dead"),
            dead_keys: k("dead_keys"),
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
            schedule_fired: k("schedule_fired"),
            gsched: k("gsched"),
            gdue: k("gdue"),
            groups: k("groups"),
            gready: k("gready"),
            gactive: k("gactive"),
            gparked: k("gparked"),
            rate: k("rate"),
            rate_n: k("rate_n"),
            rate_idle: k("rate_idle"),
            uniq: k("uniq"),
            uniq_at: k("uniq_at"),
            psched: std::array::from_fn(|i| k(&format!("sched:{}", i + 1))),
            expiry: k("expiry"),
            wake: k("wake"),
            schedule_wake: k("schedule_wake"),
        })
    }

    /// The nine group and rate-limit keys, in the order scripts take them (`SCRIPT_KEYS`).
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

    /// The ten task-option keys, in the order scripts take them (`SCRIPT_KEYS`): the sets of
    /// priorities 1 to 9, then `expiry`.
    pub fn option_keys(&self) -> [&str; 10] {
        let mut v = [self.expiry.as_str(); 10];
        for (slot, key) in v.iter_mut().zip(&self.psched) {
            *slot = key;
        }
        v
    }

    /// The keys of [`SCRIPT_KEYS`], in its order.
    pub(crate) fn script_keys(&self) -> [&str; 39] {
        let p = &self.psched;
        [
            &self.active,
            &self.leases,
            &self.tasks,
            &self.keys,
            &self.meta,
            &self.stats,
            &self.errors,
            &self.hist,
            &self.done,
            &self.gsched,
            &self.gdue,
            &self.groups,
            &self.gready,
            &self.gactive,
            &self.gparked,
            &self.rate,
            &self.rate_n,
            &self.rate_idle,
            &self.uniq,
            &self.uniq_at,
            &self.sched,
            &p[0],
            &p[1],
            &p[2],
            &p[3],
            &p[4],
            &p[5],
            &p[6],
            &p[7],
            &p[8],
            &self.expiry,
            &self.dead,
            &self.dead_keys,
            &self.claims,
            &self.schedule_state,
            &self.schedule_next,
            &self.schedule_fired,
            &self.schedules,
            &self.webhook,
        ]
        .map(String::as_str)
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
            &self.dead_keys,
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
            &self.schedule_fired,
            &self.uniq,
            &self.uniq_at,
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
    fn partitions_spread_over_the_slot_ranges() {
        for n in [2u16, 3, 6, 7, 64, 1024] {
            let nn = u32::from(n);
            let r0 = range_of(slot_of("orders"), nn);
            let mut seen = std::collections::HashSet::new();
            for p in 0..n {
                let k = QueueKeys::partition("orders", p, n).unwrap();
                let slots: std::collections::HashSet<u16> =
                    k.all().iter().map(|key| slot_of(key)).collect();
                assert_eq!(slots.len(), 1, "partition {p} of {n} spans slots {slots:?}");
                let slot = slot_of(&k.sched);
                assert_eq!(range_of(slot, nn), (r0 + u32::from(p)) % nn, "{p} of {n}");
                assert!(seen.insert(k.sched.clone()));
            }
        }
        // 6 partitions on 3 masters owning equal thirds (as redis-cli splits 16384): 2 each
        let mut per_master = [0; 3];
        for p in 0..6 {
            let slot = usize::from(slot_of(
                &QueueKeys::partition("orders", p, 6).unwrap().sched,
            ));
            per_master[slot * 3 / 16_384] += 1;
        }
        assert_eq!(per_master, [2, 2, 2]);
        // and for other names, on the ranges `redis-cli --cluster create` gives 3 masters
        let master = |slot: u16| match slot {
            0..=5460 => 0,
            5461..=10922 => 1,
            _ => 2,
        };
        let uneven = (0..2_000)
            .filter(|i| {
                let mut per = [0; 3];
                for p in 0..6 {
                    let k = QueueKeys::partition(&format!("q{i}"), p, 6).unwrap();
                    per[master(slot_of(&k.sched))] += 1;
                }
                per != [2, 2, 2]
            })
            .count();
        // (a slot on a range edge the masters' split puts one slot off: about 1 in 2 700)
        assert!(uneven <= 10, "{uneven} of 2 000 names placed unevenly");
        assert_eq!(
            QueueKeys::partition("orders", 0, 6).unwrap(),
            QueueKeys::new("orders").unwrap()
        );
        assert!(QueueKeys::partition("orders", 6, 6).is_err());
        assert!(QueueKeys::partition("orders", 0, 1025).is_err());
    }

    #[test]
    fn slots_match_redis() {
        // CLUSTER KEYSLOT answers, from redis-server 7
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("dueq:{orders}:sched"), slot_of("orders"));
        // an empty tag does not count: the whole key is hashed
        assert_eq!(slot_of("{}foo"), 9500);
        assert_eq!(slot_of("a{foo}b"), 12182);
    }

    #[test]
    fn keys_and_ids_route_to_partitions() {
        let mut count = [0u32; 6];
        for i in 0..60_000 {
            let p = partition_of_key(&format!("order:{i}:cancel"), 6);
            count[usize::from(p)] += 1;
        }
        assert!(
            count.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{count:?}"
        );
        assert_eq!(partition_of_key("order:1", 1), 0);
        assert_eq!(partition_of_key("schedule:nightly:1700000000000", 6), 0);
        assert_eq!(partition_of_id("00000000002a", 6), 0);
        assert_eq!(partition_of_id(&format!("{:012x}", (5u64 << 40) + 7), 6), 5);
        // an id past the partitions, or not dueq's, is looked for in partition 0
        assert_eq!(partition_of_id(&format!("{:012x}", 9u64 << 40), 6), 0);
        assert_eq!(partition_of_id("not-hex", 6), 0);
    }

    #[test]
    fn script_keys_follow_their_names() {
        let k = QueueKeys::partition("orders", 3, 6).unwrap();
        let keys = k.script_keys();
        for (key, name) in keys.iter().zip(SCRIPT_KEYS) {
            assert!(key.ends_with(&format!("}}:{name}")), "{key} is not {name}");
        }
        // every key of the queue, its channels aside, is one of them once
        let mut all: Vec<&str> = k
            .all()
            .into_iter()
            .filter(|key| *key != k.wake && *key != k.schedule_wake)
            .collect();
        let mut listed = keys.to_vec();
        all.sort_unstable();
        listed.sort_unstable();
        assert_eq!(all, listed);
        let spans = [
            Span::Leases,
            Span::Finish,
            Span::Scheduled,
            Span::Dead,
            Span::Claims,
            Span::All,
        ];
        assert!(spans.windows(2).all(|w| w[0].len() < w[1].len()));
        assert_eq!(Span::All.len(), SCRIPT_KEYS.len());
        assert_eq!(SCRIPT_KEYS[Span::Leases.len() - 1], "leases");
        assert_eq!(SCRIPT_KEYS[Span::Finish.len() - 1], "uniq_at");
        assert_eq!(SCRIPT_KEYS[Span::Scheduled.len() - 1], "expiry");
        assert_eq!(SCRIPT_KEYS[Span::Dead.len() - 1], "dead_keys");
        assert_eq!(SCRIPT_KEYS[Span::Claims.len() - 1], "schedule_state");
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
