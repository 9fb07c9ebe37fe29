//! Tick tasks made from each schedule's template: a fire call carries each schedule's task spec
//! once, with an empty key the script fills per tick, and a step fires every schedule it read
//! in calls of at most 1 000 ticks. The records of tick tasks equal the per-tick spec byte for
//! byte, across every field of the template; firers racing over hundreds of schedules (several
//! fire calls a step) fire each tick once, with and without changes to the schedules
//! meanwhile; a step whose every call is refused does not spin. Every test runs on a frozen
//! Redis clock (debug builds).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use dueq::protocol::record;
use dueq::schedule::{MAX_SCHEDULE_NAME_BYTES, MAX_TICKS_AHEAD};
use dueq::{CancelOutcome, Client, Misfire, Queue, ScheduleSpec, TaskRef, TaskState};
use dueq_testkit::wait_until_async;

use crate::support::{
    Ctx, DEADLINE, Rng, frozen_client, queue_firer, schedule_keys, script_calls, seed,
    set_first_tick, stop_firer,
};

// ---------------------------------------------------------------------------------------
// helpers

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The raw record of task `id` (None when it is gone).
fn raw_record(ctx: &Ctx, q: &Queue, id: &str) -> Option<Vec<u8>> {
    redis::cmd("HGET")
        .arg(&q.keys().tasks)
        .arg(id)
        .query(&mut ctx.raw())
        .unwrap()
}

/// Every record of the `tasks` hash whose business key starts with `schedule:`, as
/// `(id, decoded record)`.
fn schedule_records(ctx: &Ctx, q: &Queue) -> Vec<(String, record::Record)> {
    let all: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL")
        .arg(&q.keys().tasks)
        .query(&mut ctx.raw())
        .unwrap();
    all.into_iter()
        .filter_map(|(id, raw)| {
            let r = record::Record::decode(raw).expect("a record that decodes");
            r.key
                .as_deref()
                .is_some_and(|k| k.starts_with("schedule:"))
                .then_some((id, r))
        })
        .collect()
}

/// Tick → id of the tasks of schedule `name` in the `keys` hash.
fn ticks_of(ctx: &Ctx, q: &Queue, name: &str) -> BTreeMap<u64, String> {
    let prefix = format!("schedule:{name}:");
    schedule_keys(ctx, q)
        .into_iter()
        .filter_map(|(k, id)| Some((k.strip_prefix(&prefix)?.parse().ok()?, id)))
        .collect()
}

/// The record of tick `at` of `spec` as a client sending one spec per tick would build it (the
/// key inside), with the tick's misfire deadline and the tail the script appends.
fn expected_record(spec: &ScheduleSpec, at: u64, created: u64) -> Vec<u8> {
    let key = format!("schedule:{}:{at}", spec.name);
    let mut v = record::tick_spec(&spec.task, "", &spec.payload);
    // a tick's task carries its key and its misfire deadline (under `skip`, the tick +
    // misfire_grace_ms): bit 10 of the key field is set and the deadline's 6 bytes follow the
    // key, before the rest of the template (its headers, then the payload)
    assert_eq!(spec.misfire, Misfire::Skip, "{}", spec.name);
    let field = u16::from_le_bytes([v[10], v[11]]) | 0x0400 | key.len() as u16;
    v[10..12].copy_from_slice(&field.to_le_bytes());
    let deadline = at + spec.misfire_grace_ms;
    let inserted: Vec<u8> = key
        .bytes()
        .chain(deadline.to_le_bytes()[..6].iter().copied())
        .collect();
    v.splice(12..12, inserted);
    v.extend(&at.to_le_bytes()[..6]);
    v.extend(&created.to_le_bytes()[..6]);
    v
}

/// Checks every task of schedule `spec.name` fired at frozen time `created`: `n` ticks `every`
/// ms apart from `first`, each record byte-exact, and each read back by key with every field.
async fn check_ticks(
    ctx: &Ctx,
    q: &Queue,
    spec: &ScheduleSpec,
    first: u64,
    every: u64,
    n: usize,
    created: u64,
) {
    let ticks = ticks_of(ctx, q, &spec.name);
    let want: Vec<u64> = (0..n as u64).map(|k| first + k * every).collect();
    assert_eq!(
        ticks.keys().copied().collect::<Vec<_>>(),
        want,
        "ticks of {}",
        spec.name
    );
    for (&at, id) in &ticks {
        let raw = raw_record(ctx, q, id).expect("the task of a key");
        let decoded = record::Record::decode(raw.clone()).expect("a record that decodes");
        assert_eq!(
            decoded.misfire_deadline_ms,
            Some(at + spec.misfire_grace_ms),
            "misfire deadline of {} tick {at}",
            spec.name
        );
        let want = expected_record(spec, at, created);
        assert!(
            raw == want,
            "record of {} tick {at}: {} bytes, want {} (first difference at {:?})",
            spec.name,
            raw.len(),
            want.len(),
            raw.iter().zip(&want).position(|(a, b)| a != b)
        );
        let key = format!("schedule:{}:{at}", spec.name);
        let t = q
            .get(&TaskRef::key(key.clone()).unwrap())
            .await
            .unwrap()
            .expect("the task by its key");
        assert_eq!(t.id.to_string(), *id);
        assert_eq!(t.key.as_deref(), Some(key.as_str()));
        assert_eq!(t.state, TaskState::Scheduled);
        assert!(t.payload == spec.payload, "payload of {key}");
        assert_eq!(
            (t.due_at_ms, t.created_at_ms, t.attempt),
            (at, created, 0),
            "{key}"
        );
        assert_eq!(
            (t.max_attempts, t.lease_ms, t.priority),
            (
                spec.task.max_attempts.unwrap(),
                spec.task.lease_ms.unwrap(),
                spec.task.priority
            ),
            "{key}"
        );
        assert_eq!(t.group, spec.task.group, "{key}");
        assert_eq!(t.headers, spec.task.headers, "{key}");
    }
}

async fn wait_fired(q: &Queue, name: &str, n: u64) {
    wait_until_async(DEADLINE, "ticks fired", || async {
        q.schedule(name).await.unwrap().unwrap().fired_total == n
    })
    .await;
}

/// The template specs: names of 1 and of the most bytes, empty, binary and pattern-like and
/// limit-long payloads, priorities 0 and 9, default and extreme attempts and leases (the
/// shortest lease allowed is `MIN_LEASE_MS`), group set and unset.
fn template_specs(limit: usize) -> Vec<ScheduleSpec> {
    let every = |s: ScheduleSpec| s.every_ms(1000);
    let all_bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let pattern = b"%s%d%%%0%1.*[^%a]-+?()$^\0\xff\xfe%z%b()".to_vec();
    let long: Vec<u8> = (0..limit).map(|i| (i * 7 % 256) as u8).collect();
    vec![
        every(ScheduleSpec::new("a", Vec::new())),
        every(
            ScheduleSpec::new("z".repeat(MAX_SCHEDULE_NAME_BYTES), all_bytes.clone())
                .priority(9)
                .group("g".repeat(256)),
        ),
        every(
            ScheduleSpec::new("p.a-t_t", pattern.clone())
                .max_attempts(65_535)
                .lease_ms(4_294_967_295)
                .priority(9),
        ),
        every(
            ScheduleSpec::new("b", pattern)
                .max_attempts(1)
                .lease_ms(dueq::MIN_LEASE_MS)
                .group("%a\0-tenant"),
        ),
        every(ScheduleSpec::new("long", long).priority(3).group("tenant")),
        every(ScheduleSpec::new("Z9", b"\0".to_vec()).priority(0)),
        every(ScheduleSpec::new("ff", vec![0xff; 4097]).priority(5)),
        every(
            ScheduleSpec::new("traced", b"%a\0".to_vec())
                .priority(7)
                .group("tenant")
                .header("traceparent", TRACEPARENT)
                .header("x-big", "~".repeat(1024)),
        ),
    ]
}

// ---------------------------------------------------------------------------------------
// 1. the template

/// Every field of a tick task's record equals what the per-tick spec gave, byte for byte
/// (empty, binary, Lua-pattern-like and limit-long payloads, names of 1 and 128 bytes,
/// priorities 0 and 9, default and extreme attempts and leases, groups set and unset); the
/// library reads each back by key; a cancel by key, a pause and resume, a replace with a new
/// template and a delete take the ticks back and fire them again with the right record; a
/// claim hands out the template's fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_records_equal_the_per_tick_spec_for_every_field() {
    let ctx = Ctx::new().await;
    // 100 ms past a whole second, so the first tick is 900 ms ahead
    let now = ctx.redis_now_ms() / 1000 * 1000 + 100;
    let clock = dueq::FrozenClock::frozen_at(now);
    let limit = 64 * 1024;
    let client = Client::builder(&ctx.server.url())
        .frozen_clock(clock.clone())
        .payload_limit_bytes(limit)
        .connect()
        .await
        .unwrap();
    let q = client.queue("template").unwrap();
    let specs = template_specs(limit);
    let mut first = BTreeMap::new();
    for s in &specs {
        let t = q.set_schedule(s).await.unwrap().next_fire_at_ms.unwrap();
        first.insert(s.name.clone(), t);
    }
    // one byte over the limit is refused
    let mut over = specs[4].clone();
    over.payload.push(0);
    assert!(q.set_schedule(&over).await.is_err());
    let n = MAX_TICKS_AHEAD;
    let firer = queue_firer(&client, &q, 20);
    for s in &specs {
        wait_fired(&q, &s.name, n as u64).await;
    }
    stop_firer(firer).await;
    for s in &specs {
        check_ticks(&ctx, &q, s, first[&s.name], 1000, n, now).await;
    }

    // a cancel by key of each schedule's third tick, then a pause takes back the rest and a
    // resume fires all twelve again (the clock has not moved: the same ticks)
    for s in &specs {
        let key = format!("schedule:{}:{}", s.name, first[&s.name] + 2000);
        assert_eq!(
            q.cancel(&TaskRef::key(key.clone()).unwrap()).await.unwrap(),
            CancelOutcome::Cancelled,
            "{key}"
        );
        assert!(q.get(&TaskRef::key(key).unwrap()).await.unwrap().is_none());
        q.pause_schedule(&s.name).await.unwrap().unwrap();
        assert!(ticks_of(&ctx, &q, &s.name).is_empty(), "{} paused", s.name);
        assert_eq!(q.schedule(&s.name).await.unwrap().unwrap().fired_total, 0);
    }
    assert_eq!(q.stats().await.unwrap().scheduled, 0);
    let t2 = clock.advance_ms(1);
    for s in &specs {
        q.resume_schedule(&s.name).await.unwrap().unwrap();
    }
    let firer = queue_firer(&client, &q, 20);
    for s in &specs {
        wait_fired(&q, &s.name, n as u64).await;
    }
    stop_firer(firer).await;
    for s in &specs {
        check_ticks(&ctx, &q, s, first[&s.name], 1000, n, t2).await;
    }

    // a replace with a new template (same timing) fires the same ticks by it
    let t3 = clock.advance_ms(1);
    let mut replaced = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let mut r = s.clone();
        r.payload = if i % 2 == 0 {
            b"%1 new\0".to_vec()
        } else {
            Vec::new()
        };
        r.task.priority = 9 - s.task.priority;
        r.task.max_attempts = Some(7);
        r.task.group = if s.task.group.is_some() {
            None
        } else {
            Some(format!("new-{i}"))
        };
        q.set_schedule(&r).await.unwrap();
        replaced.push(r);
    }
    let firer = queue_firer(&client, &q, 20);
    for s in &replaced {
        wait_fired(&q, &s.name, n as u64).await;
    }
    stop_firer(firer).await;
    for s in &replaced {
        check_ticks(&ctx, &q, s, first[&s.name], 1000, n, t3).await;
    }
    let st = q.stats().await.unwrap();
    assert_eq!(st.scheduled, (specs.len() * n) as u64, "{st:?}");
    assert_eq!(
        st.enqueued_total - st.cancelled_total,
        st.scheduled,
        "{st:?}"
    );

    // the first tick comes: a claim hands out each template's fields
    let t1 = *first.values().max().unwrap();
    assert!(first.values().all(|&t| t == t1), "one grid: {first:?}");
    clock.set_ms(t1);
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(c.tasks.len(), replaced.len(), "one task per schedule due");
    for t in &c.tasks {
        let key = t.key.clone().unwrap();
        let s = replaced
            .iter()
            .find(|s| key == format!("schedule:{}:{t1}", s.name))
            .unwrap_or_else(|| panic!("a claimed task of another key {key}"));
        assert!(t.payload == s.payload, "{key}");
        assert_eq!(
            (
                t.priority,
                t.max_attempts,
                t.attempt,
                t.due_at_ms,
                t.created_at_ms
            ),
            (s.task.priority, s.task.max_attempts.unwrap(), 1, t1, t3),
            "{key}"
        );
        assert_eq!(t.group, s.task.group, "{key}");
        assert_eq!(t.headers, s.task.headers, "{key}");
        assert!(
            !t.continues_trace,
            "a tick's run is linked to its producer: {key}"
        );
        assert_eq!(
            t.lease_expires_at_ms - t.claimed_at_ms,
            s.task.lease_ms.unwrap(),
            "{key}"
        );
    }

    // a delete takes back the ticks still ahead, not the claimed one
    for s in &replaced {
        assert!(q.delete_schedule(&s.name).await.unwrap());
        let left: Vec<u64> = ticks_of(&ctx, &q, &s.name).into_keys().collect();
        assert_eq!(left, vec![t1], "{} after its delete", s.name);
    }
    let st = q.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.active),
        (0, replaced.len() as u64),
        "{st:?}"
    );
    assert_eq!(
        schedule_records(&ctx, &q).len(),
        replaced.len(),
        "records left"
    );
}

// ---------------------------------------------------------------------------------------
// 2. firers racing over hundreds of schedules (several fire calls a step)

/// Clients of the test's server on one frozen clock each, moved together.
struct Clocks(Vec<(dueq::FrozenClock, Client)>);

impl Clocks {
    async fn new(ctx: &Ctx, n: usize, at: u64) -> Self {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(frozen_client(ctx, at).await);
        }
        Self(v)
    }
    fn set(&self, at: u64) {
        for (c, _) in &self.0 {
            c.set_ms(at);
        }
    }
    fn queue(&self, i: usize, name: &str) -> Queue {
        self.0[i].1.queue(name).unwrap()
    }
}

/// Waits until no schedule of `q` is due at `at` by its index.
async fn wait_nothing_due(ctx: &Ctx, q: &Queue, at: u64) {
    let key = q.keys().schedule_next.clone();
    wait_until_async(DEADLINE, "every due schedule fired", || {
        let key = key.clone();
        async move {
            let n: u64 = redis::cmd("ZCOUNT")
                .arg(&key)
                .arg("-inf")
                .arg(at)
                .query(&mut ctx.raw())
                .unwrap();
            n == 0
        }
    })
    .await;
}

/// Logs every command from now on (`SLOWLOG` at threshold 0).
fn slowlog_all(ctx: &Ctx) {
    let mut raw = ctx.raw();
    for (k, v) in [("slowlog-log-slower-than", 0), ("slowlog-max-len", 100_000)] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .exec(&mut raw)
            .unwrap();
    }
    redis::cmd("SLOWLOG").arg("RESET").exec(&mut raw).unwrap();
}

/// `schedule_fire` calls in the `SLOWLOG`.
fn fire_calls_logged(ctx: &Ctx) -> usize {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(&mut ctx.raw())
        .unwrap();
    log.iter()
        .filter(|e| {
            let redis::Value::Array(fields) = e else {
                return false;
            };
            let Some(redis::Value::Array(args)) = fields.get(3) else {
                return false;
            };
            matches!(args.get(1), Some(redis::Value::BulkString(b)) if b.ends_with(b"_schedule_fire"))
        })
        .count()
}

/// Schedule name → its tasks' ticks.
type ByName = BTreeMap<String, BTreeSet<u64>>;

/// Every `schedule:` record: its key points back to it (no second task for a tick), it is
/// due at its tick, and it carries a payload `payload_ok(name, tick, payload)` accepts. Returns
/// name → ticks.
fn check_records(
    ctx: &Ctx,
    q: &Queue,
    payload_ok: impl Fn(&str, u64, &[u8]) -> bool,
) -> BTreeMap<String, BTreeSet<u64>> {
    let (out, bad) = records_by_name(ctx, q, payload_ok);
    assert!(
        bad.is_empty(),
        "{} ticks of a stale template: {bad:?}",
        bad.len()
    );
    out
}

/// As [`check_records`], but answers the ticks of a payload `payload_ok` refuses instead of
/// failing on them.
fn records_by_name(
    ctx: &Ctx,
    q: &Queue,
    payload_ok: impl Fn(&str, u64, &[u8]) -> bool,
) -> (ByName, Vec<(String, String)>) {
    let keys: BTreeMap<String, String> = schedule_keys(ctx, q).into_iter().collect();
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut bad = Vec::new();
    for (id, r) in schedule_records(ctx, q) {
        let key = r.key.clone().unwrap();
        let (name, tick) = key["schedule:".len()..].rsplit_once(':').unwrap();
        let tick: u64 = tick.parse().unwrap();
        assert_eq!(keys.get(&key), Some(&id), "a second task of {key}");
        assert_eq!(r.due_at_ms, tick, "{key}");
        if !payload_ok(name, tick, &r.payload) {
            bad.push((
                key.clone(),
                String::from_utf8_lossy(&r.payload).into_owned(),
            ));
        }
        assert!(
            out.entry(name.to_owned()).or_default().insert(tick),
            "{key} twice"
        );
    }
    assert_eq!(
        keys.len(),
        out.values().map(BTreeSet::len).sum::<usize>(),
        "keys without a task"
    );
    (out, bad)
}

/// Three firers (own clients) race over 450 schedules every second: each step reads 200
/// due schedules, 2 400 ticks on the first, so it fires them in three calls and its later
/// calls find schedules another firer fired meanwhile. Over 30 s of frozen time moved in
/// steps: each schedule's tasks are exactly its grid's ticks, one per tick, none lost, none
/// skipped; `fired_total` and `enqueued_total` agree with the tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_firers_over_many_schedules_fire_each_tick_once() {
    let ctx = Ctx::new().await;
    let t0 = ctx.redis_now_ms() / 1000 * 1000 + 500;
    let clocks = Clocks::new(&ctx, 4, t0).await;
    let q = clocks.queue(3, "race");
    let n = 450;
    // first tick per schedule (offered by the real clock, which may pass a second meanwhile)
    let mut first = BTreeMap::new();
    for i in 0..n {
        let spec = ScheduleSpec::new(format!("s{i}"), format!("s{i}").into_bytes())
            .every_ms(1000)
            .priority((i % 10) as u8);
        let t = set_first_tick(&q, &spec).await;
        first.insert(spec.name, t);
    }
    let calls0 = script_calls(&ctx);
    slowlog_all(&ctx);
    let firers: Vec<_> = (0..3)
        .map(|i| queue_firer(&clocks.0[i].1, &clocks.queue(i, "race"), 20))
        .collect();
    let mut at = t0;
    wait_nothing_due(&ctx, &q, at).await;
    for _ in 0..12 {
        at += 2500;
        clocks.set(at);
        wait_nothing_due(&ctx, &q, at).await;
    }
    // (a stop waits for the step in hand)
    for f in firers {
        stop_firer(f).await;
    }
    let fire_calls = fire_calls_logged(&ctx);
    eprintln!(
        "{} script calls, {fire_calls} fire calls",
        script_calls(&ctx) - calls0
    );
    // one firer alone would need 7 calls for the first ticks and 5 a refill (three refills)
    assert!(fire_calls >= 7 + 3 * 5, "{fire_calls} fire calls");
    let by_name = check_records(&ctx, &q, |name, _, p| p == name.as_bytes());
    assert_eq!(by_name.len(), n, "schedules with tasks");
    let mut total = 0;
    for s in q.schedules().await.unwrap() {
        let ticks: Vec<u64> = by_name[&s.spec.name].iter().copied().collect();
        let t1 = first[&s.spec.name];
        let want: Vec<u64> = (0..ticks.len() as u64).map(|k| t1 + k * 1000).collect();
        assert_eq!(ticks, want, "ticks of {}", s.spec.name);
        assert!(
            *ticks.last().unwrap() > at,
            "{} has no tick waiting",
            s.spec.name
        );
        assert_eq!(s.fired_total, ticks.len() as u64, "{}", s.spec.name);
        assert_eq!(s.skipped_total, 0, "{}", s.spec.name);
        total += ticks.len() as u64;
    }
    let st = q.stats().await.unwrap();
    assert_eq!((st.enqueued_total, st.scheduled), (total, total), "{st:?}");
}

/// What the mutator did to one schedule.
#[derive(Default)]
struct Story {
    /// Payload versions in order (the last is current).
    payloads: Vec<Vec<u8>>,
    /// Frozen time of the last replace with a new payload.
    replaced_at: Option<u64>,
    /// Spans (from, to]: paused or deleted; no tick in them may have a task.
    spans: Vec<(u64, u64)>,
    /// Paused or deleted since.
    off: Option<(u64, bool)>,
    deleted_ever: bool,
    /// Since when the schedule has fired without a break (creation, resume, re-create).
    on_since: u64,
}

/// Firers as above (schedules every second, the shortest `every_ms`; the frozen clocks moved to the
/// real time once a round), while a mutator (its own client) replaces schedules with a new payload
/// (same timing), pauses, resumes, deletes and re-creates them, during the firing of each step
/// (changes land between a firer's read and its later calls). Afterwards: one task per tick, none
/// in a paused or deleted span, every tick after the last replace carries the last payload, the
/// ticks since the last resume or re-create have no gap, `fired_total` of a schedule never deleted
/// equals its tasks, `enqueued - cancelled` equals the tasks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_firers_and_changes_keep_one_task_per_tick() {
    let ctx = Ctx::new().await;
    // the frozen clocks follow the real one, moved once a round: a (re-)create offers fire
    // times after the real `TIME` (the script takes the first after its frozen now)
    let t0 = ctx.redis_now_ms();
    let clocks = Clocks::new(&ctx, 4, t0).await;
    let q = clocks.queue(3, "mut");
    let n = 300;
    let name = |i: usize| format!("m{i}");
    let spec = |i: usize, p: &[u8]| ScheduleSpec::new(name(i), p.to_vec()).every_ms(1_000);
    let mut story: Vec<Story> = (0..n).map(|_| Story::default()).collect();
    for (i, st) in story.iter_mut().enumerate() {
        let p = format!("{}-v0", name(i)).into_bytes();
        q.set_schedule(&spec(i, &p)).await.unwrap();
        st.payloads.push(p);
        st.on_since = q
            .schedule(&name(i))
            .await
            .unwrap()
            .unwrap()
            .next_fire_at_ms
            .unwrap();
    }
    let firers: Vec<_> = (0..3)
        .map(|i| queue_firer(&clocks.0[i].1, &clocks.queue(i, "mut"), 20))
        .collect();
    let mut rng = Rng(seed());
    let mut at = t0;
    let (mut replaces, mut pauses, mut deletes) = (0, 0, 0);
    for round in 0..12 {
        if round > 0 {
            tokio::time::sleep(Duration::from_millis(300 + rng.next() % 500)).await;
            at = ctx.redis_now_ms();
            clocks.set(at);
        }
        // the firers are busy with this round's steps meanwhile
        for _ in 0..40 {
            let i = (rng.next() % n as u64) as usize;
            let st = &mut story[i];
            match (st.off, rng.next() % 4) {
                (Some((from, deleted)), _) => {
                    let next = if deleted {
                        let p = st.payloads.last().unwrap().clone();
                        q.set_schedule(&spec(i, &p)).await.unwrap().next_fire_at_ms
                    } else {
                        q.resume_schedule(&name(i)).await.unwrap().unwrap()
                    };
                    // (a re-create's first tick is after the real clock: none before it)
                    st.spans.push((from, next.unwrap() - 1));
                    st.off = None;
                    st.on_since = next.unwrap();
                }
                (None, 0 | 1) => {
                    let p = format!("{}-v{}", name(i), st.payloads.len()).into_bytes();
                    q.set_schedule(&spec(i, &p)).await.unwrap();
                    st.payloads.push(p);
                    st.replaced_at = Some(at);
                    replaces += 1;
                }
                (None, 2) => {
                    q.pause_schedule(&name(i)).await.unwrap().unwrap();
                    st.off = Some((at, false));
                    pauses += 1;
                }
                (None, _) => {
                    assert!(q.delete_schedule(&name(i)).await.unwrap());
                    st.off = Some((at, true));
                    st.deleted_ever = true;
                    deletes += 1;
                }
            }
        }
        wait_nothing_due(&ctx, &q, at).await;
    }
    for f in firers {
        stop_firer(f).await;
    }
    eprintln!("{replaces} replaces, {pauses} pauses, {deletes} deletes");
    let index: BTreeMap<String, usize> = (0..n).map(|i| (name(i), i)).collect();
    // any of the schedule's templates, and after its last replace the last one (a firer
    // between reading a schedule and firing it is refused by a replace meanwhile)
    let by_name = check_records(&ctx, &q, |nm, _, p| {
        story[index[nm]].payloads.iter().any(|v| v == p)
    });
    let (_, stale) = records_by_name(&ctx, &q, |nm, tick, p| {
        let st = &story[index[nm]];
        st.replaced_at.is_none_or(|r| tick <= r) || p == st.payloads.last().unwrap().as_slice()
    });
    assert!(
        stale.is_empty(),
        "{} ticks after a replace on the template before it",
        stale.len()
    );
    let schedules: BTreeMap<String, dueq::Schedule> = q
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.spec.name.clone(), s))
        .collect();
    let empty = BTreeSet::new();
    for (i, st) in story.iter().enumerate() {
        let nm = name(i);
        let ticks = by_name.get(&nm).unwrap_or(&empty);
        let within: Vec<u64> = ticks
            .iter()
            .copied()
            .filter(|&t| st.spans.iter().any(|&(a, b)| t > a && t <= b))
            .collect();
        assert!(
            within.is_empty(),
            "{nm}: ticks {within:?} in {:?}",
            st.spans
        );
        let s = schedules.get(&nm);
        assert_eq!(s.is_some(), !matches!(st.off, Some((_, true))), "{nm}");
        if let Some((from, _)) = st.off {
            assert!(
                ticks.iter().all(|&t| t <= from),
                "{nm}: a tick after {from}"
            );
            continue;
        }
        // since the last resume / re-create: no gap, and ticks wait ahead
        let since: Vec<u64> = ticks
            .iter()
            .copied()
            .filter(|&t| t >= st.on_since)
            .collect();
        let a = st.on_since;
        let want: Vec<u64> = (0..since.len() as u64).map(|k| a + k * 1_000).collect();
        assert_eq!(since, want, "{nm}: ticks since {a}");
        assert!(*since.last().unwrap() > at, "{nm}: no tick waiting");
        if !st.deleted_ever {
            assert_eq!(s.unwrap().fired_total, ticks.len() as u64, "{nm}");
        }
    }
    let st = q.stats().await.unwrap();
    let total = by_name.values().map(BTreeSet::len).sum::<usize>() as u64;
    assert_eq!(st.enqueued_total - st.cancelled_total, total, "{st:?}");
    assert_eq!(st.scheduled, total, "{st:?}");
}

// ---------------------------------------------------------------------------------------
// 3. a step whose every call is refused

/// 250 due schedules whose stored next fire time no plan can match (`0<ms>`: the planner
/// reads the number, the script compares the text), so every fire call of every step is
/// refused as stale: a step now makes three calls, and the firer must still back off (10 ms
/// doubling to 1 s) instead of looking again at once. Nothing is fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_every_call_is_refused_does_not_spin() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("refused");
    for i in 0..250 {
        q.set_schedule(&ScheduleSpec::new(format!("r{i}"), b"r".to_vec()).every_ms(1000))
            .await
            .unwrap();
    }
    let mut raw = ctx.raw();
    let states: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&q.keys().schedule_state)
        .query(&mut raw)
        .unwrap();
    for (name, st) in states {
        redis::cmd("HSET")
            .arg(&q.keys().schedule_state)
            .arg(name)
            .arg(format!("0{st}"))
            .exec(&mut raw)
            .unwrap();
    }
    slowlog_all(&ctx);
    let calls0 = script_calls(&ctx);
    let started = std::time::Instant::now();
    let firer = queue_firer(&ctx.client, &q, 5_000);
    wait_until_async(DEADLINE, "a refused fire call", || async {
        fire_calls_logged(&ctx) > 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop_firer(firer).await;
    let calls = script_calls(&ctx) - calls0;
    let fire_calls = fire_calls_logged(&ctx);
    eprintln!(
        "{calls} calls, {fire_calls} fire calls in {:?}",
        started.elapsed()
    );
    // backing off: about 8 steps of a due read and three fire calls in 1.5 s
    assert!(fire_calls >= 2, "a step fires in several calls");
    assert!(calls < 150, "{calls} calls in about 1.5 s: the firer spins");
    assert_eq!(q.stats().await.unwrap().enqueued_total, 0);
}
