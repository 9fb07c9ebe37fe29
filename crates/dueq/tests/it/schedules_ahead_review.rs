//! Schedules firing several ticks ahead (`MAX_TICKS_AHEAD`), from the review that tried to
//! break them: races of firers against replace / pause / resume / delete (also on a cluster
//! and with workers running the ticks), DST on a frozen clock, misfire after downtime, tiny
//! and huge `every_ms`, the view, and a pause by a version that took back one tick only.

use std::collections::BTreeMap;
use std::time::Duration;

use dueq::schedule::{FIRE_AHEAD_MS, MAX_TICKS_AHEAD, REFILL_AT};
use dueq::{Client, Misfire, Overlap, Queue, ScheduleSpec, Task, TaskRef, TaskState};
use dueq_testkit::wait_until_async;

#[cfg(debug_assertions)]
use crate::support::frozen_client;
use crate::support::{
    Ctx, DEADLINE, Rng, queue_firer, schedule_keys, script_calls, seed, set_first_tick, stop_firer,
};

// ---------------------------------------------------------------------------------------
// helpers

/// Every scheduled task of the queue (browse, all pages).
async fn scheduled(q: &Queue) -> Vec<Task> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let p = q
            .browse(TaskState::Scheduled, after.as_deref(), 500)
            .await
            .unwrap();
        out.extend(p.tasks);
        match p.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

/// Tick ms → tasks of schedule `name` among `tasks`.
fn ticks_of(tasks: &[Task], name: &str) -> BTreeMap<u64, Vec<Task>> {
    let prefix = format!("schedule:{name}:");
    let mut m: BTreeMap<u64, Vec<Task>> = BTreeMap::new();
    for t in tasks {
        if let Some(k) = t.key.as_deref().and_then(|k| k.strip_prefix(&prefix)) {
            let tick: u64 = k.parse().unwrap();
            assert_eq!(t.due_at_ms, tick, "task of tick {tick} due at another time");
            m.entry(tick).or_default().push(t.clone());
        }
    }
    m
}

fn hget(ctx: &Ctx, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(&mut ctx.raw())
        .unwrap()
}

/// `schedule:` entries of the queue's `keys` hash whose task is missing from `tasks`.
fn orphan_keys(ctx: &Ctx, q: &Queue) -> Vec<(String, String)> {
    schedule_keys(ctx, q)
        .into_iter()
        .filter(|(_, id)| {
            let e: bool = redis::cmd("HEXISTS")
                .arg(&q.keys().tasks)
                .arg(id)
                .query(&mut ctx.raw())
                .unwrap();
            !e
        })
        .collect()
}

/// Asserts every invariant that must hold of schedule `name` with no worker running (every
/// task it made still scheduled): one task per tick, none in a forbidden span, counters add
/// up, no orphaned keys.
async fn check_common(ctx: &Ctx, q: &Queue, name: &str, spans: &[(u64, u64)]) -> Vec<u64> {
    let tasks = scheduled(q).await;
    let by_tick = ticks_of(&tasks, name);
    let dups: Vec<_> = by_tick
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(t, v)| (*t, v.iter().map(|x| x.payload.clone()).collect::<Vec<_>>()))
        .collect();
    assert!(dups.is_empty(), "ticks with several tasks: {dups:?}");
    let in_span: Vec<_> = by_tick
        .keys()
        .filter(|&&t| spans.iter().any(|&(a, b)| t > a && t <= b))
        .copied()
        .collect();
    assert!(
        in_span.is_empty(),
        "tasks of ticks inside a paused/deleted span: {in_span:?} spans {spans:?}"
    );
    let st = q.stats().await.unwrap();
    assert_eq!(
        st.enqueued_total - st.cancelled_total,
        tasks.len() as u64,
        "enqueued - cancelled != live tasks: {st:?}"
    );
    assert_eq!(st.scheduled, tasks.len() as u64, "{st:?}");
    let orphans = orphan_keys(ctx, q);
    assert!(
        orphans.is_empty(),
        "keys pointing to missing tasks: {orphans:?}"
    );
    by_tick.keys().copied().collect()
}

// ---------------------------------------------------------------------------------------
// 1. races

/// Three firers (own clients) fire a schedule every second (the shortest `every_ms`) while one
/// mutator replaces it (same timing new payload, new timing 1.5 s and back), pauses and resumes
/// it, and a second one replaces its payload. Afterwards: one task per tick, none for a tick of a
/// paused span, fired_total == enqueued - cancelled == live tasks, no orphaned keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_firers_vs_replace_pause_resume() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race1");
    let spec = |p: String, every: u64| ScheduleSpec::new("r", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let mut firers = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        let fq = c.queue("race1").unwrap();
        firers.push(queue_firer(&c, &fq, 50));
    }
    let mut rng = Rng(seed());
    let m2 = {
        let q = q.clone();
        let mut rng = Rng(rng.next() | 1);
        tokio::spawn(async move {
            for i in 0..400u64 {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("m2-{i}"), every))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10 + rng.next() % 30)).await;
            }
        })
    };
    let mut spans = Vec::new();
    let mut paused_from: Option<u64> = None;
    let mut ops = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(7) {
        ops += 1;
        match rng.next() % 5 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("m1-{ops}"), every))
                    .await
                    .unwrap();
            }
            2 if paused_from.is_none() => {
                q.pause_schedule("r").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            _ => {
                if let Some(from) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("r").await.unwrap().unwrap();
                    spans.push((from, to));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    m2.await.unwrap();
    for f in firers {
        stop_firer(f).await;
    }
    let ticks = check_common(&ctx, &q, "r", &spans).await;
    let s = q.schedule("r").await.unwrap().unwrap();
    eprintln!(
        "ops {ops}, spans {}, live ticks {}, fired_total {}, stats {:?}",
        spans.len(),
        ticks.len(),
        s.fired_total,
        q.stats().await.unwrap()
    );
    assert_eq!(s.fired_total, ticks.len() as u64, "fired_total off");
    // the fired list holds every waiting tick
    let now = ctx.redis_now_ms();
    let list = hget(&ctx, &q.keys().schedule_fired, "r").unwrap_or_default();
    let listed: Vec<u64> = list.split(' ').filter_map(|t| t.parse().ok()).collect();
    for t in ticks.iter().filter(|&&t| t > now + 50) {
        assert!(
            listed.contains(t),
            "waiting tick {t} not in schedule_fired {list:?}"
        );
    }
}

/// As above with deletes and re-creates: no task for a tick between a delete and the next
/// create, one per tick, counters add up, no orphaned keys; the last delete leaves no
/// `schedule_fired` entry and no task of a tick after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_firers_vs_delete_recreate() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race2");
    let spec = |p: String, every: u64| ScheduleSpec::new("d", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let mut firers = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        let fq = c.queue("race2").unwrap();
        firers.push(queue_firer(&c, &fq, 50));
    }
    let mut rng = Rng(seed());
    let mut spans = Vec::new();
    let mut gone_from: Option<u64> = None;
    let mut paused_from: Option<u64> = None;
    let start = std::time::Instant::now();
    let mut ops = 0;
    while start.elapsed() < Duration::from_secs(7) {
        ops += 1;
        let every = if rng.next().is_multiple_of(3) {
            1_500
        } else {
            1_000
        };
        match (rng.next() % 6, gone_from) {
            (_, Some(from)) => {
                let to = ctx.redis_now_ms();
                q.set_schedule(&spec(format!("c{ops}"), every))
                    .await
                    .unwrap();
                spans.push((from, to));
                gone_from = None;
                paused_from = None;
            }
            (0 | 1, None) => {
                assert!(q.delete_schedule("d").await.unwrap());
                let at = ctx.redis_now_ms();
                if let Some(p) = paused_from.take() {
                    spans.push((p, at));
                }
                gone_from = Some(at);
            }
            (2, None) if paused_from.is_none() => {
                q.pause_schedule("d").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            (3, None) => {
                if let Some(p) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("d").await.unwrap().unwrap();
                    spans.push((p, to));
                }
            }
            _ => {
                q.set_schedule(&spec(format!("r{ops}"), every))
                    .await
                    .unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    // end deleted
    if gone_from.is_none() {
        assert!(q.delete_schedule("d").await.unwrap());
        let at = ctx.redis_now_ms();
        if let Some(p) = paused_from.take() {
            spans.push((p, at));
        }
        gone_from = Some(at);
    }
    let deleted_at = gone_from.unwrap();
    // let the firers try for a while after the delete
    tokio::time::sleep(Duration::from_millis(300)).await;
    for f in firers {
        stop_firer(f).await;
    }
    spans.push((deleted_at, u64::MAX));
    let ticks = check_common(&ctx, &q, "d", &spans).await;
    eprintln!(
        "ops {ops}, spans {}, live ticks {}",
        spans.len(),
        ticks.len()
    );
    let k = q.keys();
    assert_eq!(
        hget(&ctx, &k.schedule_fired, "d"),
        None,
        "schedule_fired left"
    );
    assert_eq!(hget(&ctx, &k.schedule_state, "d"), None);
    let z: Option<f64> = redis::cmd("ZSCORE")
        .arg(&k.schedule_next)
        .arg("d")
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(z, None);
}

// ---------------------------------------------------------------------------------------
// 2. mixed versions

/// The pause of a process of a version from before several ticks fired ahead (it takes back
/// only the newest tick fired ahead and sets `last` to the tick before it), then a resume
/// from an upgraded process: the resume takes back the ticks the old pause left and the
/// schedule goes on firing (before the fix, the next fire time was at or before that `last`
/// and every fire step was refused as stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_old_version_pause_then_resume_keeps_firing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("mixed");
    q.set_schedule(&ScheduleSpec::new("m", b"m".to_vec()).every_ms(1000))
        .await
        .unwrap();
    let f = queue_firer(&ctx.client, &q, 200);
    wait_until_async(DEADLINE, "ticks fired ahead", || async {
        q.schedule("m").await.unwrap().unwrap().fired_total >= MAX_TICKS_AHEAD as u64
    })
    .await;
    old_version_pause(&ctx, &q, "m").await;
    let next = q.resume_schedule("m").await.unwrap().unwrap().unwrap();
    let resumed_at = ctx.redis_now_ms();
    eprintln!(
        "resume -> next {next} (now {resumed_at}); state {:?}",
        hget(&ctx, &q.keys().schedule_state, "m")
    );
    // some tick 12 s or more after the resume must get its task (the look-ahead is FIRE_AHEAD_MS,
    // so every tick fired before the pause is earlier than that)
    let target = (resumed_at / 1000 + 12) * 1000;
    let c0 = script_calls(&ctx);
    let k = TaskRef::key(format!("schedule:m:{target}")).unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            if q.get(&k).await.unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .is_ok();
    let calls = script_calls(&ctx) - c0;
    let s = q.schedule("m").await.unwrap().unwrap();
    stop_firer(f).await;
    assert!(
        fired,
        "schedule stopped firing after an old-version pause and a resume: view next {:?} last {:?}, \
         state {:?}, {calls} script calls meanwhile",
        s.next_fire_at_ms,
        s.last_fire_at_ms,
        hget(&ctx, &q.keys().schedule_state, "m")
    );
}

/// Does what the pause of a version from before several ticks fired ahead (2469255) does to
/// a schedule with ticks fired ahead: it takes back the newest tick only (cancels its task,
/// `fired` one less), sets `last` to the tick before it and `prev` to none, marks the state
/// paused and leaves the index, and writes no `schedule_fired`.
async fn old_version_pause(ctx: &Ctx, q: &Queue, name: &str) {
    let k = q.keys();
    let st = hget(ctx, &k.schedule_state, name).unwrap();
    let f: Vec<&str> = st.split(' ').collect();
    let (fp, prev) = f[5].split_once('/').unwrap();
    let key = TaskRef::key(format!("schedule:{name}:{}", f[1])).unwrap();
    q.cancel(&key).await.unwrap();
    let fired: u64 = f[4].parse().unwrap();
    let text = format!("{} {} {} 1 {} {fp}/-1", f[0], prev, f[2], fired - 1);
    let mut c = ctx.raw();
    redis::cmd("HSET")
        .arg(&k.schedule_state)
        .arg(name)
        .arg(text)
        .exec(&mut c)
        .unwrap();
    redis::cmd("ZREM")
        .arg(&k.schedule_next)
        .arg(name)
        .exec(&mut c)
        .unwrap();
}

/// Points schedule `name`'s state at next fire time `next` (nothing fired), by hand: a set
/// takes its offered times from the real Redis TIME, not the test clock, so a schedule cannot
/// be created on a frozen date far from now.
fn force_next(ctx: &Ctx, q: &Queue, name: &str, next: u64) {
    let k = q.keys();
    let st = hget(ctx, &k.schedule_state, name).unwrap();
    let fp = st
        .split(' ')
        .nth(5)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let _: () = redis::cmd("HSET")
        .arg(&k.schedule_state)
        .arg(name)
        .arg(format!("{next} -1 0 0 0 {fp}/-1"))
        .query(&mut ctx.raw())
        .unwrap();
    let _: () = redis::cmd("HDEL")
        .arg(&k.schedule_fired)
        .arg(name)
        .query(&mut ctx.raw())
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(&k.schedule_next)
        .arg(next - FIRE_AHEAD_MS)
        .arg(name)
        .query(&mut ctx.raw())
        .unwrap();
}

/// Waits until the schedule's view satisfies `f`.
async fn wait_view(q: &Queue, name: &str, what: &str, f: impl Fn(&dueq::Schedule) -> bool) {
    let start = std::time::Instant::now();
    loop {
        let s = q.schedule(name).await.unwrap().unwrap();
        if f(&s) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: never; last view {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Nothing claimable before its due time at frozen `now`.
async fn claim_none_early(q: &Queue, now: u64) {
    let c = q.claim(1000, None).await.unwrap().tasks;
    for t in &c {
        assert!(
            t.due_at_ms <= now,
            "handed out early: due {} now {now}",
            t.due_at_ms
        );
    }
    // hand them back so they stay countable
    let items: Vec<_> = c
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    if !items.is_empty() {
        q.release(&items).await.unwrap();
    }
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dst_berlin_0230_spring_forward_fired_ahead() {
    const TICK: u64 = 1_743_296_400_000; // 2025-03-30 01:00 UTC = 03:00 CEST (02:30 in the gap)
    const NEXT: u64 = 1_743_381_000_000; // 2025-03-31 00:30 UTC = 02:30 CEST
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, TICK - 60_000).await;
    let q = client.queue("dst1").unwrap();
    q.set_schedule(
        &ScheduleSpec::new("c", b"c".to_vec())
            .cron("30 2 * * *")
            .tz("Europe/Berlin"),
    )
    .await
    .unwrap();
    force_next(&ctx, &q, "c", TICK);
    let f = queue_firer(&client, &q, 20);
    clock.set_ms(TICK - FIRE_AHEAD_MS - 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(q.schedule("c").await.unwrap().unwrap().fired_total, 0);
    clock.set_ms(TICK - FIRE_AHEAD_MS);
    wait_view(&q, "c", "fired ahead", |s| s.fired_total == 1).await;
    let s = q.schedule("c").await.unwrap().unwrap();
    assert_eq!((s.next_fire_at_ms, s.last_fire_at_ms), (Some(TICK), None));
    assert_eq!(s.upcoming_ms.first(), Some(&TICK));
    assert_eq!(s.upcoming_ms.get(1), Some(&NEXT));
    clock.set_ms(TICK - 1);
    claim_none_early(&q, TICK - 1).await;
    clock.set_ms(TICK + 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = q.schedule("c").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms, s.fired_total),
        (Some(NEXT), Some(TICK), 1)
    );
    let ticks = check_common(&ctx, &q, "c", &[]).await;
    assert_eq!(ticks, vec![TICK]);
    stop_firer(f).await;
}

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dst_berlin_0230_fall_back_fires_first_occurrence_only() {
    const FIRST: u64 = 1_761_438_600_000; // 2025-10-26 00:30 UTC = 02:30 CEST
    const SECOND: u64 = 1_761_442_200_000; // 01:30 UTC = 02:30 CET (no tick)
    const NEXT: u64 = 1_761_528_600_000; // 2025-10-27 01:30 UTC = 02:30 CET
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, FIRST - 60_000).await;
    let q = client.queue("dst2").unwrap();
    q.set_schedule(
        &ScheduleSpec::new("c", b"c".to_vec())
            .cron("30 2 * * *")
            .tz("Europe/Berlin"),
    )
    .await
    .unwrap();
    force_next(&ctx, &q, "c", FIRST);
    let f = queue_firer(&client, &q, 20);
    clock.set_ms(FIRST - 5_000);
    wait_view(&q, "c", "fired ahead", |s| s.fired_total == 1).await;
    clock.set_ms(SECOND - 5_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    clock.set_ms(SECOND + 5_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = q.schedule("c").await.unwrap().unwrap();
    assert_eq!(
        (
            s.next_fire_at_ms,
            s.last_fire_at_ms,
            s.fired_total,
            s.skipped_total
        ),
        (Some(NEXT), Some(FIRST), 1, 0)
    );
    let ticks = check_common(&ctx, &q, "c", &[]).await;
    assert_eq!(ticks, vec![FIRST]);
    stop_firer(f).await;
}

/// A per-second cron over hour 2 in Berlin: on the spring-forward day every tick lies in the
/// gap and collapses into one (01:00 UTC); on the fall-back day the repeated hour has none.
/// The ticks fired ahead right before the transition must obey that.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dst_berlin_per_second_cron_across_both_transitions() {
    const GAP: u64 = 1_743_296_400_000; // 2025-03-30 01:00 UTC
    const GAP_NEXT: u64 = 1_743_379_200_000; // 2025-03-31 00:00 UTC = 02:00 CEST
    const FOLD: u64 = 1_761_440_400_000; // 2025-10-26 01:00 UTC: 02:00 CET, second pass
    const FOLD_NEXT: u64 = 1_761_526_800_000; // 2025-10-27 01:00 UTC = 02:00 CET
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, GAP - 15_000).await;
    let q = client.queue("dst3").unwrap();
    // the claims below (at most 15 s after a tick) stay within the misfire grace, so every
    // tick's task is handed out and back rather than dropped as missed
    let spec = ScheduleSpec::new("s", b"s".to_vec())
        .cron("* * 2 * * *")
        .tz("Europe/Berlin")
        .misfire_grace_ms(60_000);
    q.set_schedule(&spec).await.unwrap();
    force_next(&ctx, &q, "s", GAP);
    let f = queue_firer(&client, &q, 20);
    clock.set_ms(GAP - 9_000);
    wait_view(&q, "s", "gap tick fired", |s| s.fired_total == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = q.schedule("s").await.unwrap().unwrap();
    assert_eq!((s.next_fire_at_ms, s.fired_total), (Some(GAP), 1));
    assert_eq!(s.upcoming_ms.get(1), Some(&GAP_NEXT), "{s:?}");
    clock.set_ms(GAP + 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(check_common(&ctx, &q, "s", &[]).await, vec![GAP]);

    // fall back: first pass of hour 2 is 00:00..00:59:59 UTC; nothing in the second pass
    q.delete_schedule("s").await.unwrap();
    clock.set_ms(FOLD - 15_000);
    q.set_schedule(&spec).await.unwrap();
    force_next(&ctx, &q, "s", FOLD - 14_000);
    clock.set_ms(FOLD - 14_000);
    wait_view(&q, "s", "first ticks", |s| s.fired_total >= 10).await;
    for at in [
        FOLD - 9_400,
        FOLD - 4_400,
        FOLD - 1,
        FOLD + 5_000,
        FOLD + 10_000,
    ] {
        clock.set_ms(at);
        tokio::time::sleep(Duration::from_millis(300)).await;
        claim_none_early(&q, at).await;
    }
    let s = q.schedule("s").await.unwrap().unwrap();
    let ticks = check_common(&ctx, &q, "s", &[(FOLD - 1_000, FOLD_NEXT - 1)]).await;
    assert_eq!(
        ticks.iter().filter(|&&t| t >= FOLD - 14_000).count(),
        14,
        "{ticks:?}"
    );
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms),
        (Some(FOLD_NEXT), Some(FOLD - 1_000))
    );
    stop_firer(f).await;
}

/// `overlap: skip` never fires ahead: nothing before the tick, only the tick at it.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_never_fires_ahead() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("skip").unwrap();
    let t = set_first_tick(
        &q,
        &ScheduleSpec::new("k", b"k".to_vec())
            .every_ms(1000)
            .overlap(Overlap::Skip),
    )
    .await;
    let f = queue_firer(&client, &q, 20);
    clock.set_ms(t - 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(q.schedule("k").await.unwrap().unwrap().fired_total, 0);
    clock.set_ms(t);
    wait_view(&q, "k", "fired at the tick", |s| s.fired_total == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(check_common(&ctx, &q, "k", &[]).await, vec![t]);
    // the next ticks are skipped while the task waits, and none is fired ahead
    clock.set_ms(t + 2_000);
    wait_view(&q, "k", "skips", |s| s.skipped_total == 2).await;
    let s = q.schedule("k").await.unwrap().unwrap();
    assert_eq!(
        (s.fired_total, s.next_fire_at_ms, s.last_fire_at_ms),
        (1, Some(t + 3_000), Some(t))
    );
    stop_firer(f).await;
}

/// Downtime after ten ticks were fired ahead: shorter than the look-ahead (nothing missed,
/// nothing twice), then longer (misfire fire_once: one task for the missed span carrying
/// its latest tick, then the ticks within the grace and ahead).
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_fire_once_after_downtime_shorter_and_longer_than_look_ahead() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("misfire").unwrap();
    let t = set_first_tick(
        &q,
        &ScheduleSpec::new("f", b"f".to_vec())
            .every_ms(1000)
            .misfire(Misfire::FireOnce),
    )
    .await;
    let (k, r) = (MAX_TICKS_AHEAD as u64, REFILL_AT as u64);
    let f = queue_firer(&client, &q, 20);
    clock.set_ms(t - 1);
    wait_view(&q, "f", "all ahead", |s| s.fired_total == k).await;
    stop_firer(f).await;
    // down until only REFILL_AT wait: the ticks up to then had their tasks already
    let came = k - r; // ticks that came meanwhile
    clock.set_ms(t + (came - 1) * 1000 + 500);
    let f = queue_firer(&client, &q, 20);
    wait_view(&q, "f", "refilled", |s| s.fired_total == k + came).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = q.schedule("f").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms, s.skipped_total),
        (Some(t + came * 1000), Some(t + (came - 1) * 1000), 0)
    );
    let ticks = check_common(&ctx, &q, "f", &[]).await;
    assert_eq!(
        ticks,
        (0..k + came).map(|i| t + i * 1000).collect::<Vec<_>>()
    );
    stop_firer(f).await;
    // down for long: now t+40500 (grace 1000: t+40000 within it)
    let last_fired = t + (k + came - 1) * 1000;
    assert!(last_fired < t + 39_000);
    clock.set_ms(t + 40_500);
    let f = queue_firer(&client, &q, 20);
    wait_view(&q, "f", "after long downtime", |s| {
        s.next_fire_at_ms.is_some_and(|n| n > t + 40_500)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    claim_none_early(&q, t + 40_500).await;
    let s = q.schedule("f").await.unwrap().unwrap();
    let ticks = check_common(&ctx, &q, "f", &[(last_fired, t + 38_999)]).await;
    let after: Vec<u64> = ticks.iter().copied().filter(|&x| x > last_fired).collect();
    eprintln!("after downtime: {after:?} view {s:?}");
    // one for the missed span (latest t+39000), t+40000, then ahead
    assert_eq!(after[0], t + 39_000, "{after:?}");
    assert_eq!(after[1], t + 40_000, "{after:?}");
    assert_eq!(
        after[2..].to_vec(),
        (1..=k).map(|i| t + 40_000 + i * 1000).collect::<Vec<_>>()
    );
    assert_eq!(s.skipped_total, 0);
    assert_eq!(s.fired_total, ticks.len() as u64);
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms),
        (Some(t + 41_000), Some(t + 40_000))
    );
    stop_firer(f).await;
}

/// `every_ms` below 1 000 (1, 7, 150, 999) is refused. The shortest allowed ones, 1 000, 1 007
/// and 1 500, on a frozen clock moved forward in steps: every grid tick from the first on is
/// fired exactly once or counted skipped, at most MAX_TICKS_AHEAD wait, nothing is claimable
/// early, the view agrees. A tick's task claimed more than `misfire_grace_ms` after its tick
/// (the clock jumped past it) is dropped as missed, moving it from fired to skipped: such
/// ticks are counted with the rest and must all be past their deadline.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_every_ms_frozen_clock_steps() {
    let ctx = Ctx::new().await;
    let t0 = ctx.redis_now_ms();
    let (clock, client) = frozen_client(&ctx, t0).await;
    let q = client.queue("tiny").unwrap();
    for e in [1u64, 7, 150, 999] {
        let err = q
            .set_schedule(&ScheduleSpec::new(format!("e{e}"), b"x".to_vec()).every_ms(e))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), dueq::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("every_ms"), "{err}");
    }
    let grace = dueq::schedule::DEFAULT_MISFIRE_GRACE_MS;
    let everys = [1_000u64, 1_007, 1_500];
    for e in everys {
        q.set_schedule(&ScheduleSpec::new(format!("e{e}"), b"x".to_vec()).every_ms(e))
            .await
            .unwrap();
    }
    // per schedule, the ticks whose task a claim dropped as missed
    let mut dropped: BTreeMap<u64, std::collections::BTreeSet<u64>> = BTreeMap::new();
    let f = queue_firer(&client, &q, 20);
    let mut now = t0;
    for step in [0u64, 30, 400, 4_000, 10, 25_000, 100_000, 70] {
        now += step;
        clock.set_ms(now);
        for e in everys {
            let name = format!("e{e}");
            // settled: the step is done once the ticks after now reach the look-ahead or
            // MAX_TICKS_AHEAD, or a refill is not due yet
            wait_view(&q, &name, "settled", |s| {
                s.next_fire_at_ms.is_some_and(|n| n > now)
                    && s.upcoming_ms.first() == s.next_fire_at_ms.as_ref()
            })
            .await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let before = scheduled(&q).await;
        claim_none_early(&q, now).await;
        let tasks = scheduled(&q).await;
        for e in everys {
            let name = format!("e{e}");
            let kept = ticks_of(&tasks, &name);
            let gone = dropped.entry(e).or_default();
            for t in ticks_of(&before, &name).into_keys() {
                if !kept.contains_key(&t) {
                    assert!(
                        t + grace < now,
                        "{name}: tick {t} dropped within its grace (now {now})"
                    );
                    gone.insert(t);
                }
            }
        }
        for e in everys {
            let name = format!("e{e}");
            let s = q.schedule(&name).await.unwrap().unwrap();
            let by = ticks_of(&tasks, &name);
            let dups: Vec<_> = by
                .iter()
                .filter(|(_, v)| v.len() > 1)
                .map(|(t, _)| *t)
                .collect();
            assert!(dups.is_empty(), "{name}: dup ticks {dups:?}");
            let ticks: Vec<u64> = by.keys().copied().collect();
            let gone = &dropped[&e];
            assert!(
                ticks.iter().all(|t| !gone.contains(t)),
                "{name}: a dropped tick came back"
            );
            // every tick that got a task: still waiting, or dropped as missed
            let mut all: Vec<u64> = ticks.iter().chain(gone.iter()).copied().collect();
            all.sort_unstable();
            let waiting = ticks.iter().filter(|&&t| t > now).count();
            assert!(waiting <= MAX_TICKS_AHEAD, "{name}: {waiting} waiting");
            assert!(
                all.iter()
                    .all(|&t| t <= now + FIRE_AHEAD_MS && t.is_multiple_of(e)),
                "{name}: off-grid or beyond the look-ahead"
            );
            let first = *all.first().unwrap();
            let last = *all.last().unwrap();
            let span = (last - first) / e + 1;
            assert_eq!(
                s.fired_total + s.skipped_total,
                span,
                "{name} at +{}: fired {} skipped {} over {span} grid ticks {first}..{last}",
                now - t0,
                s.fired_total,
                s.skipped_total
            );
            // a dropped tick's task counts as skipped, no longer as fired
            assert_eq!(s.fired_total, ticks.len() as u64, "{name}");
            assert_eq!(
                s.next_fire_at_ms,
                ticks.iter().copied().find(|&t| t > now).or(Some(last + e)),
                "{name}: view next"
            );
            assert_eq!(
                s.last_fire_at_ms,
                all.iter().copied().rfind(|&t| t <= now),
                "{name}: view last"
            );
            // a refill is never missed: at least REFILL_AT wait unless fewer fit the look-ahead
            let fit = (FIRE_AHEAD_MS / e) as usize;
            assert!(
                waiting >= REFILL_AT.min(fit),
                "{name}: only {waiting} waiting at +{}",
                now - t0
            );
        }
    }
    let total: usize = dropped.values().map(|d| d.len()).sum();
    eprintln!("ticks dropped as missed: {total}");
    stop_firer(f).await;
}

/// On the real clock an idle-ish firer does not spin: schedules every second (the shortest
/// `every_ms`), every 1.5 s and every MAX_DELAY_MS cost a few script calls per second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firer_does_not_spin_real_clock() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("spin");
    for (n, e) in [
        ("a", dueq::schedule::MIN_EVERY_MS),
        ("b", 1_500),
        ("c", 100 * 365 * 24 * 3_600_000),
    ] {
        q.set_schedule(&ScheduleSpec::new(n, b"x".to_vec()).every_ms(e))
            .await
            .unwrap();
    }
    let f = queue_firer(&ctx.client, &q, 5_000);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c0 = script_calls(&ctx);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = script_calls(&ctx) - c0;
    eprintln!("script calls in 4 s: {calls}");
    let huge = q.schedule("c").await.unwrap().unwrap();
    assert_eq!(huge.fired_total, 0);
    stop_firer(f).await;
    // every second: a step per MAX_TICKS_AHEAD - REFILL_AT ticks (10 s), every 1.5 s: one per
    // 15 s; two calls a step
    assert!(calls < 60, "firer spins: {calls} calls in 4 s");
    check_common(&ctx, &q, "a", &[]).await;
}

// ---------------------------------------------------------------------------------------
// 4. view after changes (frozen clock)

/// Same-timing replace, new-timing replace, pause, resume with ten ticks ahead: the view's
/// next / last / upcoming / fired_total agree with the tasks that exist.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_after_each_change() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("view").unwrap();
    let spec = |p: &[u8], e: u64| ScheduleSpec::new("v", p.to_vec()).every_ms(e);
    let t = set_first_tick(&q, &spec(b"a", 1000)).await;
    let f = queue_firer(&client, &q, 20);
    let check = |label: &'static str, now: u64| {
        let q = q.clone();
        let ctx = &ctx;
        async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let s = q.schedule("v").await.unwrap().unwrap();
            let ticks = check_common(ctx, &q, "v", &[]).await;
            eprintln!("{label}: {s:?}\n  ticks {ticks:?}");
            assert_eq!(s.fired_total, ticks.len() as u64, "{label}");
            let ahead = ticks.iter().copied().find(|&x| x > now);
            if !s.paused {
                if let Some(a) = ahead {
                    assert_eq!(s.next_fire_at_ms, Some(a), "{label}: next");
                }
                assert_eq!(s.upcoming_ms.first(), s.next_fire_at_ms.as_ref(), "{label}");
            } else {
                assert_eq!(ahead, None, "{label}: a task waits ahead while paused");
            }
            assert_eq!(
                s.last_fire_at_ms,
                ticks.iter().copied().rfind(|&x| x <= now),
                "{label}: last"
            );
            s
        }
    };
    clock.set_ms(t + 2_500);
    check("fired", t + 2_500).await;
    q.set_schedule(&spec(b"b", 1000)).await.unwrap();
    let s = check("same timing replace", t + 2_500).await;
    assert_eq!(s.next_fire_at_ms, Some(t + 3_000));
    // a set offers fire times from the real Redis TIME (not the test clock): let real time
    // catch up with the frozen one first
    while ctx.redis_now_ms() < t + 2_600 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    q.set_schedule(&spec(b"c", 1_500)).await.unwrap();
    let s = check("new timing replace", t + 2_500).await;
    let n = s.next_fire_at_ms.unwrap();
    assert!(n > t + 2_500 && n % 1_500 == 0);
    q.pause_schedule("v").await.unwrap().unwrap();
    check("paused", t + 2_500).await;
    clock.set_ms(t + 4_000);
    let r = q.resume_schedule("v").await.unwrap().unwrap();
    let s = check("resumed", t + 4_000).await;
    assert_eq!(r, Some((t + 4_000) / 1_500 * 1_500 + 1_500));
    assert!(s.upcoming_ms.windows(2).all(|w| w[1] - w[0] == 1_500));
    stop_firer(f).await;
}

// ---------------------------------------------------------------------------------------
// 5. workers running the tasks while the schedule changes; cluster; act times

type RunLog = std::sync::Arc<std::sync::Mutex<Vec<(String, String, u64, u64, Vec<u8>)>>>;

fn run_worker(client: &Client, queue: &str, log: &RunLog) -> dueq::WorkerHandle {
    let log = log.clone();
    dueq::Worker::builder(client.clone())
        .handle(queue, move |t: dueq::ClaimedTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((
                    t.key.clone().unwrap_or_default(),
                    t.id.as_str().to_owned(),
                    t.due_at_ms,
                    t.started_at_ms,
                    t.payload.clone(),
                ));
                dueq::Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start()
}

/// Two workers (each firing schedules, DESIGN's default) run a schedule every second (the
/// shortest `every_ms`) while a mutator replaces (same timing, new payload / new timing 1.5 s),
/// pauses and resumes it. Every
/// tick gets at most one task, none starts before its tick, none of a paused span runs, and
/// fired_total == enqueued - cancelled == tasks that ran + tasks still waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_workers_run_ticks_while_changed() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race3");
    let spec = |p: String, every: u64| ScheduleSpec::new("w", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let log: RunLog = Default::default();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        workers.push(run_worker(&c, "race3", &log));
    }
    let mut rng = Rng(seed());
    let mut spans = Vec::new();
    let mut paused_from: Option<u64> = None;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        match rng.next() % 4 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("x{}", rng.next() % 1000), every))
                    .await
                    .unwrap();
            }
            2 if paused_from.is_none() => {
                q.pause_schedule("w").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            _ => {
                if let Some(from) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("w").await.unwrap().unwrap();
                    spans.push((from, to));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 150)).await;
    }
    // stop firing: pause (takes back what waits ahead), then let the workers drain
    q.pause_schedule("w").await.unwrap().unwrap();
    let paused_at = ctx.redis_now_ms();
    if let Some(from) = paused_from.take() {
        spans.push((from, u64::MAX));
    } else {
        spans.push((paused_at, u64::MAX));
    }
    let s = q.schedule("w").await.unwrap().unwrap();
    wait_stats(&q, |st| st.scheduled == 0 && st.active == 0).await;
    for w in workers {
        w.shutdown().await.unwrap();
    }
    let st = q.stats().await.unwrap();
    let log = log.lock().unwrap().clone();
    let mut ids_of: BTreeMap<u64, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (key, id, due, started, _) in &log {
        let tick: u64 = key.strip_prefix("schedule:w:").unwrap().parse().unwrap();
        assert_eq!(*due, tick);
        assert!(started >= due, "started early: {key} at {started}");
        ids_of.entry(tick).or_default().insert(id.clone());
    }
    let dups: Vec<_> = ids_of.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(dups.is_empty(), "several tasks for one tick: {dups:?}");
    let in_span: Vec<u64> = ids_of
        .keys()
        .filter(|&&t| spans.iter().any(|&(a, b)| t > a && t <= b))
        .copied()
        .collect();
    assert!(
        in_span.is_empty(),
        "ran ticks of paused spans: {in_span:?} {spans:?}"
    );
    let distinct = ids_of.len() as u64;
    eprintln!(
        "ran {distinct} ticks, fired_total {}, {st:?}",
        s.fired_total
    );
    assert_eq!(st.enqueued_total - st.cancelled_total, distinct, "{st:?}");
    assert_eq!(s.fired_total, distinct);
}

use crate::support::wait_stats;

/// The first race on a 3-master Redis Cluster: two clients fire, one mutates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_cluster_firers_vs_replace_pause_resume() {
    let cluster = dueq_testkit::RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let a = Client::connect(&url).await.unwrap();
    let b = Client::connect(&url).await.unwrap();
    let q = a.queue("crace").unwrap();
    let spec = |p: String, every: u64| ScheduleSpec::new("c", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let fa = queue_firer(&a, &q, 50);
    let qb = b.queue("crace").unwrap();
    let fb = queue_firer(&b, &qb, 50);
    let mut rng = Rng(seed());
    let mut paused = false;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        match rng.next() % 4 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("x{}", rng.next() % 1000), every))
                    .await
                    .unwrap();
            }
            2 if !paused => {
                q.pause_schedule("c").await.unwrap().unwrap();
                paused = true;
            }
            _ => {
                if paused {
                    q.resume_schedule("c").await.unwrap().unwrap();
                    paused = false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    stop_firer(fa).await;
    stop_firer(fb).await;
    let tasks = scheduled(&q).await;
    let by = ticks_of(&tasks, "c");
    let dups: Vec<_> = by
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(t, _)| *t)
        .collect();
    assert!(dups.is_empty(), "dup ticks {dups:?}");
    let st = q.stats().await.unwrap();
    let s = q.schedule("c").await.unwrap().unwrap();
    assert_eq!(
        st.enqueued_total - st.cancelled_total,
        tasks.len() as u64,
        "{st:?}"
    );
    assert_eq!(s.fired_total, tasks.len() as u64);
    assert!(q.delete_schedule("c").await.unwrap());
    let now_tasks = scheduled(&q).await.len();
    eprintln!("cluster: {} tasks, {now_tasks} after delete", tasks.len());
}
