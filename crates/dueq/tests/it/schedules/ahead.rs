//! Ticks fired ahead of their fire time (`FIRE_AHEAD_MS`, at most `MAX_TICKS_AHEAD` waiting):
//! a change before a tick takes its task back, a fire call creates at most a thousand ticks,
//! `overlap: skip` never fires ahead, the shortest intervals fire each tick once, an idle firer
//! does not spin, and the view agrees with the tasks after each change.

use std::collections::BTreeMap;
use std::time::Duration;

use dueq::schedule::{FIRE_AHEAD_MS, MAX_TICKS_AHEAD, REFILL_AT};
use dueq::{ErrorKind, Overlap, ScheduleSpec, SetOutcome, TaskRef};
use dueq_testkit::wait_until_async;

use super::check::{check_common, claim_none_early, scheduled, ticks_of, wait_view};
#[cfg(debug_assertions)]
use crate::support::frozen_client;
use crate::support::{Ctx, DEADLINE, queue_firer, script_calls, set_first_tick, stop_firer};

/// A tick fires ahead of its time (`FIRE_AHEAD_MS`): its task waits, due at the tick, and is
/// not handed out before it. A replace, a pause or a delete before the tick takes that task
/// back (counted as cancelled), and a firer fires the tick again by the new definition; once
/// the tick has come, a pause leaves its task alone. `overlap: skip` schedules fire at the
/// tick itself. On a frozen Redis clock, so every step is exact.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_fired_ahead_waits_and_is_taken_back_by_a_change_before_it() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("ahead").unwrap();
    let spec = |payload: &[u8]| ScheduleSpec::new("ahead", payload.to_vec()).every_ms(20_000);
    let t = set_first_tick(&q, &spec(b"a")).await;
    q.set_schedule(
        &ScheduleSpec::new("skipper", b"s".to_vec())
            .every_ms(20_000)
            .overlap(Overlap::Skip),
    )
    .await
    .unwrap();
    let key = |name: &str| TaskRef::key(format!("schedule:{name}:{t}")).unwrap();
    let task_of = |name: &'static str| {
        let q = q.clone();
        let k = key(name);
        async move { q.get(&k).await.unwrap() }
    };
    // before the firer starts, so the tick is fired at t - 500 (one tick in the look-ahead)
    clock.set_ms(t - 500);
    let firer = queue_firer(&client, &q, 20);
    let fired_ahead = |payload: &'static [u8]| async move {
        wait_until_async(DEADLINE, "the tick fired ahead", || async move {
            task_of("ahead").await.is_some_and(|t| t.payload == payload)
        })
        .await;
    };

    fired_ahead(b"a").await;
    let task = task_of("ahead").await.unwrap();
    assert_eq!((task.due_at_ms, task.created_at_ms), (t, t - 500));
    assert!(
        task_of("skipper").await.is_none(),
        "overlap skip fired ahead"
    );
    let s = q.schedule("ahead").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms, s.fired_total),
        (Some(t), None, 1)
    );
    assert!(
        q.claim(10, None).await.unwrap().tasks.is_empty(),
        "handed out early"
    );

    // a replace takes it back; the firer fires the same tick by the new definition
    let r = q.set_schedule(&spec(b"b")).await.unwrap();
    assert_eq!(
        (r.outcome, r.next_fire_at_ms),
        (SetOutcome::Replaced, Some(t))
    );
    fired_ahead(b"b").await;
    // a pause takes it back and nothing fires it again
    q.pause_schedule("ahead").await.unwrap().unwrap();
    assert!(task_of("ahead").await.is_none());
    assert_eq!(q.schedule("ahead").await.unwrap().unwrap().fired_total, 0);
    assert_eq!(q.resume_schedule("ahead").await.unwrap(), Some(Some(t)));
    fired_ahead(b"b").await;
    // a delete takes it back
    assert!(q.delete_schedule("ahead").await.unwrap());
    assert!(task_of("ahead").await.is_none());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.enqueued_total, stats.cancelled_total), (3, 3));

    // once the tick has come, its task is the tick's: a pause leaves it, and it is claimed
    q.set_schedule(&spec(b"c")).await.unwrap();
    fired_ahead(b"c").await;
    clock.set_ms(t);
    q.pause_schedule("ahead").await.unwrap().unwrap();
    let claimed = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(
        (claimed[0].payload.as_slice(), claimed[0].due_at_ms),
        (&b"c"[..], t)
    );
    let s = q.schedule("ahead").await.unwrap().unwrap();
    assert_eq!((s.last_fire_at_ms, s.fired_total), (Some(t), 1));
    // and the skip schedule fires at the tick
    wait_until_async(
        DEADLINE,
        "the skip schedule fired at its tick",
        || async move { task_of("skipper").await.is_some() },
    )
    .await;
    stop_firer(firer).await;
}

/// A schedule every second fires up to `MAX_TICKS_AHEAD` ticks ahead of their time (within
/// `FIRE_AHEAD_MS`), then waits until only `REFILL_AT` of them are left (halfway to the next
/// one) and fires the next ones in one step; a pause, resume and delete take back every tick
/// fired ahead whose task still waits, and only those. On a frozen Redis clock.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_ticks_fire_ahead_in_steps_and_a_change_takes_them_all_back() {
    use dueq::schedule::{MAX_TICKS_AHEAD, REFILL_AT};
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("steps").unwrap();
    let t = set_first_tick(
        &q,
        &ScheduleSpec::new("often", b"o".to_vec()).every_ms(1000),
    )
    .await;
    let firer = queue_firer(&client, &q, 20);
    let fired = |n: u64| {
        let q = q.clone();
        async move {
            wait_until_async(DEADLINE, "ticks fired", || async {
                q.schedule("often").await.unwrap().unwrap().fired_total == n
            })
            .await;
        }
    };
    let exists = |at: u64| {
        let q = q.clone();
        async move {
            let k = TaskRef::key(format!("schedule:often:{at}")).unwrap();
            q.get(&k).await.unwrap().is_some()
        }
    };
    let k = MAX_TICKS_AHEAD as u64;
    let left = REFILL_AT as u64;

    // all within the look-ahead, at most MAX_TICKS_AHEAD of them
    clock.set_ms(t - 1);
    fired(k).await;
    for i in 0..k {
        assert!(exists(t + i * 1000).await, "tick {i} not fired ahead");
    }
    assert!(
        !exists(t + k * 1000).await,
        "more than MAX_TICKS_AHEAD fired ahead"
    );
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!((s.next_fire_at_ms, s.last_fire_at_ms), (Some(t), None));
    assert!(
        q.claim(10, None).await.unwrap().tasks.is_empty(),
        "handed out early"
    );

    // once only REFILL_AT wait, halfway to the next tick, the next ones fire in one step
    let came = k - left; // ticks come when the refill is due
    let refill_at = t + (came - 1) * 1000 + 500;
    clock.set_ms(refill_at);
    fired(k + came).await;
    assert!(exists(t + (k + came - 1) * 1000).await);
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms),
        (Some(t + came * 1000), Some(t + (came - 1) * 1000))
    );

    // a pause takes back every tick still ahead, and none that came
    q.pause_schedule("often").await.unwrap().unwrap();
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.cancelled_total, k);
    assert_eq!(stats.scheduled, came);
    for i in 0..k + came {
        assert_eq!(exists(t + i * 1000).await, i < came, "tick {i}");
    }
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!(
        (s.fired_total, s.last_fire_at_ms),
        (came, Some(t + (came - 1) * 1000))
    );
    // a resume fires them again from the first tick after now; a delete takes them back
    assert_eq!(
        q.resume_schedule("often").await.unwrap(),
        Some(Some(t + came * 1000))
    );
    fired(came + k).await;
    assert!(q.delete_schedule("often").await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.cancelled_total, stats.scheduled),
        (2 * k, came),
        "{stats:?}"
    );
    stop_firer(firer).await;
}

/// One fire call creates at most 1 000 ticks (DESIGN 3, bounded work per call): 150 new
/// schedules every second, ten ticks each fired ahead at once, take several calls. Read from
/// `SLOWLOG` (threshold 0): each `schedule_fire` call's argument count gives its schedules.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_call_creates_at_most_a_thousand_ticks() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("bounded").unwrap();
    let n = 150;
    let mut t = 0;
    for i in 0..n {
        let spec = ScheduleSpec::new(format!("s{i}"), b"x".to_vec()).every_ms(1000);
        t = set_first_tick(&q, &spec).await;
    }
    let mut raw = ctx.raw();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .exec(&mut raw)
        .unwrap();
    redis::cmd("SLOWLOG").arg("RESET").exec(&mut raw).unwrap();
    clock.set_ms(t - 1);
    let firer = queue_firer(&client, &q, 20);
    // (a schedule set after the real clock passed a whole second has its first tick a second
    // later, so others may fire one tick more: the due one and ten ahead)
    let all = n * dueq::schedule::MAX_TICKS_AHEAD as u64;
    wait_until_async(DEADLINE, "every schedule fired ahead", || async {
        q.stats().await.unwrap().enqueued_total >= all
    })
    .await;
    stop_firer(firer).await;
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(&mut raw)
        .unwrap();
    // per entry: id, time, duration, args (the first 31, then "... (N more arguments)")
    let mut calls = 0;
    for entry in &log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let Some(redis::Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        if args.len() < 2 || !text(&args[1]).ends_with("_schedule_fire") {
            continue;
        }
        calls += 1;
        let more: usize = text(args.last().unwrap())
            .trim_start_matches("... (")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // FCALL, name, numkeys, the keys, 4 arguments, then 13 + 1 per tick per schedule: at
        // most 1 000 ticks, 84 schedules of 12 ticks, is under 2 100; all 1 800 ticks in one
        // call would be 3 750
        let numkeys: usize = text(&args[2]).parse().unwrap();
        let per_schedules = args.len() - 1 + more - (3 + numkeys + 4);
        assert!(
            per_schedules < 2_100,
            "a call of {per_schedules} schedule arguments"
        );
    }
    assert!(calls >= 2, "{all} ticks in {calls} fire calls");
}

/// An `every_ms` below 1 000 (`MIN_EVERY_MS`) is refused, naming the field, and writes
/// nothing. A schedule of the shortest allowed 1 000 ms: an offered fire time may pass before
/// the set or resume script runs; the client then offers newer ones, so the schedule never ends
/// up unpaused with no next fire time (found by the review with a 1 ms schedule: 2 of 18 HTTP
/// sets did).
#[tokio::test]
async fn a_one_ms_schedule_is_refused_and_a_one_second_one_always_gets_a_next_fire_time() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("tiny");
    for ms in [1, 999] {
        let e = q
            .set_schedule(&ScheduleSpec::new("t", b"x".to_vec()).every_ms(ms))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("every_ms"), "{e}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut ctx.raw()).unwrap();
    assert!(keys.is_empty(), "a refused schedule wrote {keys:?}");
    for i in 0..40 {
        let name = format!("t{i}");
        let r = q
            .set_schedule(
                &ScheduleSpec::new(&name, b"x".to_vec()).every_ms(dueq::schedule::MIN_EVERY_MS),
            )
            .await
            .unwrap();
        assert!(r.next_fire_at_ms.is_some(), "{name}: {r:?}");
        q.pause_schedule(&name).await.unwrap().unwrap();
        let resumed = q.resume_schedule(&name).await.unwrap().unwrap();
        assert!(
            resumed.is_some(),
            "{name}: resumed without a next fire time"
        );
    }
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

/// `every_ms` below 1 000 (1, 7, 150, 999) is refused. The shortest allowed ones, 1 000, 1 007
/// and 1 500, on a frozen clock moved forward in steps: every grid tick from the first on is
/// fired exactly once or counted skipped, at most MAX_TICKS_AHEAD wait, nothing is claimable
/// early, the view agrees. A tick's task claimed more than `misfire_grace_ms` after its tick
/// (the clock jumped past it) is dropped as missed, moving it from fired to skipped: such
/// ticks are counted with the rest and must all be past their deadline.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shortest_intervals_fire_each_tick_once_on_a_stepped_clock() {
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
async fn an_idle_firer_does_not_spin_on_the_real_clock() {
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

/// Same-timing replace, new-timing replace, pause, resume with ten ticks ahead: the view's
/// next / last / upcoming / fired_total agree with the tasks that exist.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_agrees_with_the_tasks_after_each_change() {
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
