//! Flow-control faults that reviews found, each test named by what must hold: settings changes
//! free held groups at the next claim, throttled time is counted honestly, a backlog of
//! ungrouped tasks does not starve a group (nor do claims of one slot), and rate logs do not outlive their window.

use std::time::Duration;

use dueq::{RateLimit, SettingsPatch, TaskSpec};

use crate::support::{Ctx, ack_all, due_tasks};

/// Problem 1: a group held by its rate limit keeps its `gready` score at the instant the old
/// window would have opened (up to a day away): clearing the limit does not let it go.
#[tokio::test]
async fn clearing_a_group_rate_limit_lets_a_held_group_go_at_the_next_claim() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_clear");
    q.update_settings(
        &SettingsPatch::default().group_rate_limit(Some(RateLimit::new(1, 3_600_000))),
    )
    .await
    .unwrap();
    due_tasks(&q, 3, Some("a")).await;
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 1);
    assert_eq!(
        q.claim(10, None).await.unwrap().tasks.len(),
        0,
        "held by its limit"
    );
    q.update_settings(&SettingsPatch::default().group_rate_limit(None))
        .await
        .unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(
        c.tasks.len(),
        2,
        "no limit left, yet the group waits until {:?} (now {})",
        c.next_due_at_ms,
        c.now_ms
    );
}

/// Problem 1 (variant): shortening the window (1 h -> 100 ms) leaves the group held for the
/// old hour.
#[tokio::test]
async fn shortening_a_group_rate_window_applies_to_a_held_group() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_short");
    q.update_settings(
        &SettingsPatch::default().group_rate_limit(Some(RateLimit::new(1, 3_600_000))),
    )
    .await
    .unwrap();
    due_tasks(&q, 2, Some("a")).await;
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 1);
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 0);
    q.update_settings(&SettingsPatch::default().group_rate_limit(Some(RateLimit::new(1, 100))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(
        c.tasks.len(),
        1,
        "window is 100 ms now, yet the group waits until {:?} (now {})",
        c.next_due_at_ms,
        c.now_ms
    );
}

/// Problem 2: `throttled_ms.group_rate` is added in advance (the whole time until the slot
/// opens) and again each time an enqueue (or nack, release, retry) into the held group pulls
/// its marker back: after ~0.3 s of real time it reports ~60 s.
#[tokio::test]
async fn group_rate_throttled_time_is_not_counted_ahead_or_twice() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_thr");
    q.update_settings(&SettingsPatch::default().group_rate_limit(Some(RateLimit::new(1, 10_000))))
        .await
        .unwrap();
    due_tasks(&q, 2, Some("a")).await;
    let start = ctx.redis_now_ms();
    q.claim(10, None).await.unwrap();
    q.claim(10, None).await.unwrap();
    for _ in 0..5 {
        due_tasks(&q, 1, Some("a")).await;
        q.claim(10, None).await.unwrap();
    }
    let s = q.stats().await.unwrap();
    let elapsed = s.now_ms - start;
    assert!(
        s.throttled_ms.group_rate <= elapsed + 100,
        "group_rate throttled {} ms after {} ms of real time",
        s.throttled_ms.group_rate,
        elapsed
    );
}

/// Problem 3: a group parks at its concurrency limit even when its remaining tasks are not
/// due (an hour away); it is then counted in `groups_waiting` and its parked time is added
/// to `throttled_ms.group_concurrency`, though no due work was held back.
#[tokio::test]
async fn a_parked_group_with_nothing_due_is_not_counted_as_throttled() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_park");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(1)))
        .await
        .unwrap();
    q.enqueue_batch(&[
        TaskSpec::new(b"now".to_vec()).group("a"),
        TaskSpec::new(b"later".to_vec())
            .group("a")
            .delay_ms(3_600_000),
    ])
    .await
    .unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ack_all(&q, &c.tasks).await;
    let s = q.stats().await.unwrap();
    assert!(
        s.throttled_ms.group_concurrency < 200,
        "nothing due was held, yet group_concurrency throttled {} ms",
        s.throttled_ms.group_concurrency
    );
}

/// Problem 4: after its first turn a group is scored at the claim time, behind every
/// ungrouped task due before it, so a backlog of ungrouped tasks (enqueued after the group's
/// tasks, due later) starves the group until the whole backlog is drained.
#[tokio::test]
async fn a_group_is_not_starved_by_a_backlog_of_ungrouped_tasks() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_plain");
    due_tasks(&q, 10, Some("b")).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    due_tasks(&q, 3_000, None).await;
    let mut claims_to_finish_b = None;
    let mut seen_b = 0;
    for i in 0..400 {
        let c = q.claim(10, None).await.unwrap();
        seen_b += c.tasks.iter().filter(|t| t.group.is_some()).count();
        ack_all(&q, &c.tasks).await;
        if seen_b == 10 {
            claims_to_finish_b = Some(i + 1);
            break;
        }
    }
    let n = claims_to_finish_b.unwrap();
    assert!(
        n <= 20,
        "group b's 10 tasks (due before every ungrouped one) took {n} claims of 10"
    );
}

/// A claim with room for fewer tasks than there are contenders (a worker of concurrency 1)
/// gave its slot to the ungrouped tasks every time, so a backlog of them held a group back
/// until it was drained. Now the ungrouped tasks take turns with the groups.
#[tokio::test]
async fn claims_of_one_slot_take_turns_between_groups_and_ungrouped_tasks() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_one_slot");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap();
    due_tasks(&q, 10, Some("g")).await;
    due_tasks(&q, 10, Some("h")).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    due_tasks(&q, 100, None).await;
    // one claim per millisecond (turns are kept to the millisecond)
    let mut order = String::new();
    for _ in 0..33 {
        let c = q.claim(1, None).await.unwrap();
        assert_eq!(c.tasks.len(), 1, "every claim of one finds a task: {order}");
        order.push_str(c.tasks[0].group.as_deref().unwrap_or("."));
        ack_all(&q, &c.tasks).await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // three contenders in turn (g and h due first), then the ungrouped tasks alone
    assert_eq!(order, format!("{}...", "gh.".repeat(10)));
}

/// Problem 5: group rate logs are dropped only by claims that find due work, so once the
/// queue is idle the logs of every group served stay in Redis for good (~270 bytes a group:
/// 2.7 MB after 10 000 tenants).
#[tokio::test]
async fn idle_groups_leave_no_rate_logs_once_the_queue_is_idle() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_logs");
    q.update_settings(&SettingsPatch::default().group_rate_limit(Some(RateLimit::new(5, 100))))
        .await
        .unwrap();
    for g in 0..50 {
        due_tasks(&q, 1, Some(&format!("t{g}"))).await;
    }
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(c.tasks.len(), 50);
    ack_all(&q, &c.tasks).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..10 {
        q.claim(10, None).await.unwrap();
    }
    let mut raw = ctx.raw();
    let left: u64 = redis::cmd("ZCARD")
        .arg("dueq:{brk_logs}:rate_idle")
        .query(&mut raw)
        .unwrap();
    assert_eq!(
        left, 0,
        "{left} idle group logs left after the windows closed"
    );
}

/// Problem 8 (minor): the `throttled` flag and the running `throttled_ms.rate` clock are
/// only settled by the next claim: after the rate limit is removed, a queue nobody claims
/// from still reads "throttled: rate" and its throttled time keeps growing.
#[tokio::test]
async fn removing_the_rate_limit_ends_the_throttled_state() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("brk_flag");
    q.update_settings(&SettingsPatch::default().rate_limit(Some(RateLimit::new(1, 60_000))))
        .await
        .unwrap();
    due_tasks(&q, 3, None).await;
    assert_eq!(q.claim(1, None).await.unwrap().tasks.len(), 1);
    assert_eq!(q.claim(1, None).await.unwrap().tasks.len(), 0);
    assert_eq!(q.stats().await.unwrap().throttled, Some("rate"));
    q.update_settings(&SettingsPatch::default().rate_limit(None))
        .await
        .unwrap();
    let before = q.stats().await.unwrap().throttled_ms.rate;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = q.stats().await.unwrap();
    assert_eq!(s.throttled, None, "no rate limit, yet throttled");
    assert_eq!(s.throttled_ms.rate, before, "throttled time still running");
}
