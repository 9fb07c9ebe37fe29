//! Cron schedules in a time zone with daylight saving time, fired ahead across the spring-forward
//! gap and the repeated hour of the fall back, on a frozen Redis clock.

use std::time::Duration;

use dueq::schedule::FIRE_AHEAD_MS;
use dueq::{Queue, ScheduleSpec};

use super::check::{check_common, claim_none_early, hget, wait_view};
use crate::support::{Ctx, frozen_client, queue_firer, stop_firer};

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

#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berlin_0230_daily_fired_ahead_across_the_spring_forward_gap() {
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
async fn berlin_0230_daily_fires_the_first_occurrence_at_the_fall_back() {
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
async fn berlin_per_second_cron_fired_ahead_across_both_transitions() {
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
