//! Cleanup in bulk (DESIGN 4.2): retry or delete the dead tasks a filter matches, with a dry
//! run and a spread, purge a state, delete a queue; run a schedule now and backfill its past
//! ticks. Every Redis call looks at a bounded number of tasks however many there are.

use std::time::Duration;

use dueq::{
    DeadBulk, DeadFilter, ErrorKind, Purge, Queue, ScheduleSpec, SettingsPatch, TaskRef, TaskSpec,
    TaskState,
};
use dueq_testkit::keys_matching;

use crate::support::Ctx;

const BIG: Duration = Duration::from_secs(60);
/// Most dead tasks one Redis call of a bulk run may look at: a bound far below the 100 000 of
/// the large test, so a call whose work grows with the queue fails it.
const MOST_LOOKED_AT_PER_CALL: u64 = 1_000;

/// Enqueues `n` tasks due now (keys `{prefix}{i}`, every third in group `g1`), claims them
/// and fails them for good, alternating the errors "card declined" and "gateway timeout".
async fn dead_tasks(q: &Queue, prefix: &str, n: usize) {
    let specs: Vec<TaskSpec> = (0..n)
        .map(|i| {
            let s = TaskSpec::new(b"x".to_vec()).key(format!("{prefix}{i}"));
            if i % 3 == 0 { s.group("g1") } else { s }
        })
        .collect();
    for chunk in specs.chunks(1_000) {
        q.enqueue_batch(chunk).await.unwrap();
    }
    let mut left = n;
    while left > 0 {
        let c = q.claim(1_000, None).await.unwrap();
        assert!(!c.tasks.is_empty(), "{left} tasks not claimed");
        let items: Vec<_> = c
            .tasks
            .iter()
            .map(|t| {
                let i: usize = t.key.as_deref().unwrap()[prefix.len()..].parse().unwrap();
                let error = if i.is_multiple_of(2) {
                    "card declined"
                } else {
                    "gateway timeout"
                };
                (&t.id, &t.lease_token, error, None, true)
            })
            .collect();
        q.nack_batch(&items).await.unwrap();
        left -= c.tasks.len();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_dead_tasks_are_counted_and_retried_by_filter_in_bounded_calls() {
    const N: usize = 100_000;
    let ctx = Ctx::new().await;
    let q = ctx.queue("pay");
    q.update_settings(&SettingsPatch::default().dead_max(Some(1_000_000)))
        .await
        .unwrap();
    dead_tasks(&q, "order:", N).await;
    assert_eq!(q.stats().await.unwrap().dead, N as u64);

    // a dry run counts exactly and changes nothing
    let declined = DeadBulk::new(DeadFilter::new().error_contains("declined")).dry_run(true);
    let r = q.dead_retry_where(&declined, None, BIG).await.unwrap();
    assert_eq!(
        (r.looked_at, r.matched, r.done, r.cursor),
        (N as u64, N as u64 / 2, 0, None)
    );
    let grouped = DeadBulk::new(DeadFilter::new().group("g1")).dry_run(true);
    let r = q.dead_delete_where(&grouped, None, BIG).await.unwrap();
    assert_eq!(r.matched, (N as u64).div_ceil(3));
    let both = DeadBulk::new(
        DeadFilter::new()
            .error_contains("declined")
            .key_prefix("order:1"),
    )
    .dry_run(true);
    let want = (0..N)
        .filter(|i| i % 2 == 0 && i.to_string().starts_with('1'))
        .count() as u64;
    assert_eq!(
        q.dead_retry_where(&both, None, BIG).await.unwrap().matched,
        want
    );
    assert_eq!(q.stats().await.unwrap().dead, N as u64);

    // the retry, spread over a minute, in calls resumed by cursor; with no time budget each
    // call is one Redis call, and each looks at a bounded slice of the dead tasks
    let run = DeadBulk::new(DeadFilter::new().error_contains("declined")).spread_ms(60_000);
    let (mut done, mut cursor, mut calls) = (0, None, 0);
    loop {
        let r = q
            .dead_retry_where(&run, cursor.as_deref(), Duration::ZERO)
            .await
            .unwrap();
        assert!(
            r.looked_at <= MOST_LOOKED_AT_PER_CALL,
            "one call looked at {}",
            r.looked_at
        );
        done += r.done;
        calls += 1;
        match r.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(done, N as u64 / 2);
    assert!(calls > 1, "the budget did not cut the run");
    let s = q.stats().await.unwrap();
    assert_eq!((s.dead, s.scheduled), (N as u64 / 2, N as u64 / 2));
    // spread: none due all at once, all within the minute
    let now = ctx.redis_now_ms();
    let t = q
        .get(&TaskRef::key("order:0").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.state, t.attempt), (TaskState::Scheduled, 0));
    assert!(s.due < N as u64 / 4, "{} due at once", s.due);
    assert!(s.next_due_at_ms.is_some_and(|d| d <= now + 60_000));
}

#[tokio::test]
async fn bulk_delete_keeps_to_its_limit_and_a_retry_refuses_a_key_that_is_live_again() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("pay");
    dead_tasks(&q, "k", 30).await;
    // a new live task under a dead one's key: that retry is refused, counted as a conflict
    q.enqueue(TaskSpec::new(b"new".to_vec()).key("k4").delay_ms(60_000))
        .await
        .unwrap();
    let r = q
        .dead_retry_where(
            &DeadBulk::new(DeadFilter::new().key_prefix("k4")),
            None,
            BIG,
        )
        .await
        .unwrap();
    assert_eq!((r.matched, r.done, r.conflicts), (1, 0, 1));
    let r = q
        .dead_delete_where(
            &DeadBulk::new(DeadFilter::new().error_contains("timeout")).limit(5),
            None,
            BIG,
        )
        .await
        .unwrap();
    assert_eq!(r.done, 5);
    assert_eq!(q.stats().await.unwrap().dead, 25);
    // a death-time window: every task died before the run's start
    let now = ctx.redis_now_ms();
    let r = q
        .dead_delete_where(
            &DeadBulk::new(DeadFilter::new().died_after_ms(now + 1)).dry_run(true),
            None,
            BIG,
        )
        .await
        .unwrap();
    assert_eq!(r.matched, 0);
    // bad input: refused, nothing done
    for (f, field) in [
        (DeadFilter::new().error_contains(""), "error_contains"),
        (DeadFilter::new().group(""), "group"),
        (
            DeadFilter::new().died_after_ms(5).died_before_ms(5),
            "died_after_ms",
        ),
    ] {
        let e = q
            .dead_delete_where(&DeadBulk::new(f), None, BIG)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = q
        .dead_delete_where(&DeadBulk::new(DeadFilter::new()), Some("x:y"), BIG)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cursor"), "{e}");
    assert_eq!(q.stats().await.unwrap().dead, 25);
}

#[tokio::test]
async fn purge_drops_one_state_and_delete_removes_the_queue() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("old");
    q.update_settings(&SettingsPatch::default().succeeded_max(Some(10)))
        .await
        .unwrap();
    // scheduled: plain, with a priority, grouped, with an expiry; dead; succeeded kept
    let specs = vec![
        TaskSpec::new(b"a".to_vec()).key("a").delay_ms(60_000),
        TaskSpec::new(b"b".to_vec()).priority(3).delay_ms(60_000),
        TaskSpec::new(b"c".to_vec()).group("g").delay_ms(60_000),
        TaskSpec::new(b"d".to_vec())
            .delay_ms(60_000)
            .ttl_ms(120_000),
    ];
    q.enqueue_batch(&specs).await.unwrap();
    dead_tasks(&q, "dead", 3).await;
    q.enqueue(TaskSpec::new(b"ok".to_vec())).await.unwrap();
    let c = q.claim(1, None).await.unwrap();
    q.ack(&c.tasks[0].id, &c.tasks[0].lease_token)
        .await
        .unwrap();

    let r = q.purge(Purge::Scheduled, BIG).await.unwrap();
    assert_eq!((r.dropped, r.left), (4, 0));
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.dead, s.cancelled_total), (0, 3, 4));
    assert!(q.get(&TaskRef::key("a").unwrap()).await.unwrap().is_none());
    assert_eq!(q.purge(Purge::Dead, BIG).await.unwrap().dropped, 3);
    assert_eq!(q.purge(Purge::Succeeded, BIG).await.unwrap().dropped, 1);
    let mut raw = ctx.raw();
    for key in [&q.keys().expiry, &q.keys().gdue, &q.keys().dead_keys] {
        assert!(keys_matching(&mut raw, key).is_empty(), "{key} left");
    }

    // delete: refused while a task waits or runs, then forced
    q.enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(60_000))
        .await
        .unwrap();
    assert!(!q.delete_queue(false).await.unwrap());
    assert_eq!(q.stats().await.unwrap().scheduled, 1);
    q.set_schedule(&ScheduleSpec::new("s", b"x".to_vec()).every_ms(60_000))
        .await
        .unwrap();
    assert!(q.delete_queue(true).await.unwrap());
    assert!(keys_matching(&mut raw, "dueq:{old}:*").is_empty());
    assert!(!ctx.client.has_queue("old").await.unwrap());
    assert!(
        !ctx.client
            .schedule_queues()
            .await
            .unwrap()
            .contains(&"old".to_owned())
    );
    // an empty queue goes without force
    let e = ctx.queue("empty");
    e.pause().await.unwrap();
    assert!(e.delete_queue(false).await.unwrap());
    assert!(!ctx.client.has_queue("empty").await.unwrap());
}

#[tokio::test]
async fn a_partitioned_queue_is_purged_and_deleted_in_every_partition() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("parts");
    q.update_settings(&SettingsPatch::default().partitions(Some(4)))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..100)
        .map(|i| {
            TaskSpec::new(b"x".to_vec())
                .key(format!("k{i}"))
                .delay_ms(60_000)
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let r = q.purge(Purge::Scheduled, BIG).await.unwrap();
    assert_eq!((r.dropped, r.left), (100, 0));
    assert!(q.delete_queue(false).await.unwrap());
    let mut raw = ctx.raw();
    assert!(keys_matching(&mut raw, "dueq:{parts*").is_empty());
}

#[tokio::test]
async fn a_schedule_runs_now_without_moving_its_grid_and_backfills_past_ticks_once() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rep");
    let spec = ScheduleSpec::new("nightly", b"report".to_vec())
        .every_ms(60_000)
        .priority(2)
        .max_attempts(3);
    q.set_schedule(&spec).await.unwrap();
    let before = q.schedule("nightly").await.unwrap().unwrap();

    let e = q.trigger_schedule("nightly").await.unwrap().unwrap();
    let t = q.get(&TaskRef::Id(e.id.clone())).await.unwrap().unwrap();
    let key = t.key.clone().unwrap();
    assert!(key.starts_with("schedule:nightly:manual:"), "{key}");
    assert_eq!(
        (t.payload.as_slice(), t.priority, t.max_attempts),
        (&b"report"[..], 2, 3)
    );
    assert!(t.due_at_ms <= ctx.redis_now_ms());
    let after = q.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(
        after.next_fire_at_ms, before.next_fire_at_ms,
        "the grid moved"
    );
    assert!(q.trigger_schedule("nope").await.unwrap().is_none());

    // the ticks of the last ten minutes, keyed as they would have been
    let now = ctx.redis_now_ms();
    let from = now - 600_000;
    let r = q
        .backfill_schedule("nightly", from, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.ticks, 10);
    assert_eq!((r.created, r.existing), (10, 0));
    let first = from.div_ceil(60_000) * 60_000;
    let t = q
        .get(&TaskRef::key(format!("schedule:nightly:{first}")).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(t.due_at_ms <= ctx.redis_now_ms());
    // twice is once
    let r = q
        .backfill_schedule("nightly", from, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.created, r.existing), (0, 10));
    // a future range, an empty one, too many ticks: refused, nothing written
    let n = q.stats().await.unwrap().enqueued_total;
    for (a, b) in [(now, now + 120_000), (now, now), (0, now)] {
        let e = q.backfill_schedule("nightly", a, b).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    assert_eq!(q.stats().await.unwrap().enqueued_total, n);
}
