//! Missed ticks follow their schedule's misfire policy also when their tasks were fired
//! ahead (DESIGN 2.16): a tick's task that has not started by its fire time +
//! `misfire_grace_ms` is not run under `skip` (counted in `skipped_total`), and under
//! `fire_once` only the newest missed tick of the span runs. On a frozen Redis clock, so
//! each claim is judged at a known time; `dueq-cli`'s `c31_*` process test checks the same
//! with real processes stopped and killed.

use std::collections::BTreeSet;
use std::time::Duration;

use dueq::schedule::{MAX_TICKS_AHEAD, REFILL_AT};
use dueq::{Claim, Client, Misfire, Queue, ScheduleSpec, TaskRef};
use dueq_testkit::wait_until_async;

use super::check::{check_common, claim_none_early, wait_view};
use crate::support::{Ctx, DEADLINE, frozen_client, queue_firer, set_first_tick, stop_firer};

/// The business keys a claim handed out, by schedule name and fire time offset from `t`.
fn handed(c: &Claim, t: u64) -> BTreeSet<(String, i64)> {
    c.tasks
        .iter()
        .map(|task| {
            let key = task.key.clone().unwrap();
            let mut parts = key.rsplitn(2, ':');
            let at: u64 = parts.next().unwrap().parse().unwrap();
            let name = parts.next().unwrap().trim_start_matches("schedule:");
            (name.to_owned(), at as i64 - t as i64)
        })
        .collect()
}

fn set(names: &[(&str, i64)]) -> BTreeSet<(String, i64)> {
    names.iter().map(|(n, o)| ((*n).to_owned(), *o)).collect()
}

async fn counts(q: &Queue, name: &str) -> (u64, u64) {
    let s = q.schedule(name).await.unwrap().unwrap();
    (s.skipped_total, s.fired_total)
}

/// Sets `skip`, `once` (fire_once) and `grp` (skip, with a group and a priority) every second,
/// fires twelve ticks of each ahead at `t - 500` and stops firing. Returns `t`, the first tick.
async fn fired_ahead(ctx: &Ctx) -> (dueq::FrozenClock, Client, Queue, u64) {
    let (clock, client) = frozen_client(ctx, ctx.redis_now_ms()).await;
    let q = client.queue("mis").unwrap();
    let t = set_first_tick(&q, &ScheduleSpec::new("skip", b"s".to_vec()).every_ms(1000)).await;
    for spec in [
        ScheduleSpec::new("once", b"o".to_vec())
            .every_ms(1000)
            .misfire(Misfire::FireOnce),
        ScheduleSpec::new("grp", b"g".to_vec())
            .every_ms(1000)
            .group("tenant")
            .priority(3),
    ] {
        assert_eq!(set_first_tick(&q, &spec).await, t);
    }
    clock.set_ms(t - 500);
    let firer = queue_firer(&client, &q, 20);
    wait_until_async(DEADLINE, "twelve ticks of each fired ahead", || async {
        let mut all = true;
        for name in ["skip", "once", "grp"] {
            all &= counts(&q, name).await.1 == 12;
        }
        all
    })
    .await;
    stop_firer(firer).await;
    (clock, client, q, t)
}

#[tokio::test]
async fn ticks_fired_ahead_and_missed_follow_the_misfire_policy() {
    let ctx = Ctx::new().await;
    let (clock, _client, q, t) = fired_ahead(&ctx).await;
    let enqueued = q.stats().await.unwrap().enqueued_total;
    assert_eq!(enqueued, 36);

    // nothing ran for 5.5 s: ticks t .. t+4 s are more than the grace (1 s) late, t+5 s is
    // within it
    clock.set_ms(t + 5_500);
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(
        handed(&c, t),
        set(&[
            ("skip", 5_000),
            ("once", 4_000),
            ("once", 5_000),
            ("grp", 5_000)
        ]),
        "under skip only the tick within the grace runs; under fire_once also the newest \
         missed one, for the whole span"
    );
    let mut missed = c.missed_ticks.clone();
    missed.sort();
    assert_eq!(missed, [vec!["grp"; 5], vec!["skip"; 5]].concat());
    // skip counts each missed tick once; fire_once's collapsed ticks count nowhere but are
    // no longer fired
    assert_eq!(counts(&q, "skip").await, (5, 7));
    assert_eq!(counts(&q, "grp").await, (5, 7));
    assert_eq!(counts(&q, "once").await, (0, 8));
    // the missed ticks' tasks are gone: not found by key, counted as cancelled
    for name in ["skip", "once", "grp"] {
        let key = format!("schedule:{name}:{t}");
        assert!(q.get(&TaskRef::key(key).unwrap()).await.unwrap().is_none());
    }
    let s = q.stats().await.unwrap();
    assert_eq!(s.cancelled_total, 5 + 4 + 5);
    assert_eq!(s.active, 4);

    // a tick that started within the grace is not judged again: retried and claimed 10 s
    // later it runs (attempt 2)
    let skip_task = c
        .tasks
        .iter()
        .find(|x| x.key.as_deref() == Some(&format!("schedule:skip:{}", t + 5_000)))
        .unwrap();
    q.nack(
        &skip_task.id,
        &skip_task.lease_token,
        "boom",
        Some(0),
        false,
    )
    .await
    .unwrap();
    // a tick handed back at a graceful stop had started too
    let grp_task = c
        .tasks
        .iter()
        .find(|x| x.key.as_deref() == Some(&format!("schedule:grp:{}", t + 5_000)))
        .unwrap();
    assert_eq!(
        q.release(&[(grp_task.id.clone(), grp_task.lease_token.clone())])
            .await
            .unwrap(),
        [true]
    );
    clock.set_ms(t + 6_400);
    let c = q.claim(100, None).await.unwrap();
    // t+6 s is within the grace for all three; the retried and the handed-back tasks come too
    assert_eq!(
        handed(&c, t),
        set(&[
            ("skip", 5_000),
            ("skip", 6_000),
            ("once", 6_000),
            ("grp", 5_000),
            ("grp", 6_000)
        ])
    );
    let retried = c
        .tasks
        .iter()
        .find(|x| x.key.as_deref() == Some(&format!("schedule:skip:{}", t + 5_000)))
        .unwrap();
    assert_eq!(retried.attempt, 2);
    assert!(c.missed_ticks.is_empty());

    // the queue paused over ticks t+7 s .. t+9 s, resumed at t+9.5 s: the same rules
    q.pause().await.unwrap();
    clock.set_ms(t + 9_500);
    assert!(q.claim(100, None).await.unwrap().tasks.is_empty());
    q.resume().await.unwrap();
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(
        handed(&c, t),
        set(&[
            ("skip", 9_000),
            ("once", 8_000),
            ("once", 9_000),
            ("grp", 9_000)
        ])
    );
    assert_eq!(counts(&q, "skip").await, (7, 5));
    assert_eq!(counts(&q, "once").await, (0, 7));
}

#[tokio::test]
async fn a_rescheduled_or_retried_tick_is_not_a_misfire() {
    let ctx = Ctx::new().await;
    let (clock, client, q, t) = fired_ahead(&ctx).await;
    // moved by hand: the task no longer carries its tick's deadline
    let key = TaskRef::key(format!("schedule:skip:{}", t + 1_000)).unwrap();
    assert!(matches!(
        q.reschedule(&key, dueq::Due::AtMs(t + 2_000))
            .await
            .unwrap(),
        dueq::RescheduleOutcome::Rescheduled { .. }
    ));
    // a claim far past every grace: only the task that no longer carries a deadline runs
    // (fire_once's newest fired tick is missed too: its next tick, t+12 s, is more than the
    // grace late, and is the firer's to fire once for the span)
    clock.set_ms(t + 30_000);
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(
        handed(&c, t),
        set(&[("skip", 1_000)]),
        "{:?}",
        c.tasks.iter().map(|x| &x.key).collect::<Vec<_>>()
    );
    assert_eq!(counts(&q, "skip").await, (11, 1));
    assert_eq!(counts(&q, "grp").await, (12, 0));
    assert_eq!(counts(&q, "once").await, (0, 0));
    // the firer then fires one task for fire_once's missed span, at its newest missed tick,
    // and the tick within the grace; skip counts what it never fired
    let firer = queue_firer(&client, &q, 20);
    wait_until_async(DEADLINE, "the firers' step", || async {
        counts(&q, "once").await.1 >= 2 && counts(&q, "skip").await.0 >= 28
    })
    .await;
    stop_firer(firer).await;
    let c = q.claim(100, None).await.unwrap();
    let h = handed(&c, t);
    assert!(h.contains(&("once".to_owned(), 28_000)), "{h:?}");
    assert!(h.contains(&("once".to_owned(), 29_000)), "{h:?}");
    assert!(!h.iter().any(|(n, o)| n == "once" && *o < 28_000), "{h:?}");
    assert!(c.missed_ticks.is_empty());
}

/// Downtime after ten ticks were fired ahead: shorter than the look-ahead (nothing missed,
/// nothing twice), then longer (misfire fire_once: one task for the missed span carrying
/// its latest tick, then the ticks within the grace and ahead).
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_once_after_downtime_shorter_and_longer_than_the_look_ahead() {
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
