//! Task options (docs/OPTIONS.md): priority, expiry (`ttl_ms` / `expires_at_ms`,
//! `on_expire`) and `on_conflict: debounce`, each through every operation that finds or
//! places a scheduled task. The cases C27 to C29 are in `cases_options.rs`.

use std::time::Duration;

use dueq::{
    AckOutcome, CancelOutcome, ClaimedTask, DeadRetryOutcome, EnqueueOutcome, ErrorKind,
    NackOutcome, OnConflict, OnExpire, Queue, QueueKeys, RescheduleOutcome, SettingsPatch, TaskRef,
    TaskSpec, TaskState,
};
use dueq_testkit::zcard;

use crate::support::{Ctx, DEADLINE};

fn zscore(ctx: &Ctx, key: &str, member: &str) -> Option<u64> {
    let mut c = ctx.raw();
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query(&mut c)
        .unwrap()
}

/// Claims until `n` tasks came out (or the deadline passes), `batch` at a time.
async fn claim_n(q: &Queue, n: usize, batch: usize) -> Vec<ClaimedTask> {
    let mut out = Vec::new();
    let start = std::time::Instant::now();
    while out.len() < n {
        assert!(
            start.elapsed() < DEADLINE,
            "only {} of {n} claimed",
            out.len()
        );
        let c = q.claim(batch, None).await.unwrap();
        out.extend(c.tasks);
    }
    out
}

/// Waits until the Redis clock has passed `at_ms`.
async fn redis_past(ctx: &Ctx, at_ms: u64) {
    let start = std::time::Instant::now();
    while ctx.redis_now_ms() <= at_ms {
        assert!(
            start.elapsed() < DEADLINE,
            "Redis clock never passed {at_ms}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A backlog of mixed priorities and past due times comes out in (priority, due time,
/// enqueue order) order, whatever the claim batch size, and nothing else comes out.
#[tokio::test]
async fn priority_orders_a_backlog() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("prio");
    let now = ctx.redis_now_ms();
    // 600 tasks: priority i*7 % 10, due at one of three past times, payload = enqueue index
    let specs: Vec<TaskSpec> = (0..600u64)
        .map(|i| {
            TaskSpec::new(i.to_string().into_bytes())
                .priority((i * 7 % 10) as u8)
                .due_at_ms(now - 1_000 + (i % 3) * 100)
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    // and some that are not due: never handed out here
    q.enqueue(
        TaskSpec::new(b"later".to_vec())
            .priority(0)
            .delay_ms(60_000),
    )
    .await
    .unwrap();
    let got = claim_n(&q, 600, 37).await;
    let idx: Vec<u64> = got
        .iter()
        .map(|t| {
            String::from_utf8(t.payload.clone())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let mut want = idx.clone();
    want.sort_by_key(|&i| (i * 7 % 10, i % 3, i));
    assert_eq!(idx, want, "claim order is not priority, due, enqueue");
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.active), (1, 600));
}

/// Priority never makes a task claimable early, and a queue that never used a priority keeps
/// every task in `sched` (no other key appears, no `prio` field in meta).
#[tokio::test]
async fn priority_never_breaks_the_due_time_and_costs_nothing_unused() {
    let ctx = Ctx::new().await;
    let plain = ctx.queue("plain");
    crate::support::due_tasks(&plain, 20, None).await;
    let keys = QueueKeys::new("plain").unwrap();
    let mut raw = ctx.raw();
    for k in keys.option_keys() {
        assert_eq!(
            zcard(&mut raw, k),
            0,
            "{k} used by a queue without priorities"
        );
    }
    let prio: Option<String> = redis::cmd("HGET")
        .arg(&keys.meta)
        .arg("prio")
        .query(&mut raw)
        .unwrap();
    assert_eq!(prio, None);
    assert_eq!(plain.claim(100, None).await.unwrap().tasks.len(), 20);

    let q = ctx.queue("early");
    let soon = q
        .enqueue(TaskSpec::new(b"p0-soon".to_vec()).delay_ms(3_000))
        .await
        .unwrap();
    q.enqueue_batch(&vec![TaskSpec::new(b"p9".to_vec()).priority(9); 5])
        .await
        .unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 5);
    assert!(c.tasks.iter().all(|t| t.payload == b"p9"));
    // the claim reports the priority-0 task's due time as the next one
    assert_eq!(c.next_due_at_ms, Some(soon.due_at_ms));
    let t = claim_n(&q, 1, 10).await;
    assert_eq!(t[0].payload, b"p0-soon");
    assert!(t[0].claimed_at_ms >= soon.due_at_ms);
}

/// A task keeps its priority (and its set) through get, reschedule, nack, lease recovery,
/// the dead-letter queue and cancel; a replace takes the new priority.
#[tokio::test]
async fn priority_survives_every_transition() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("keep");
    let keys = QueueKeys::new("keep").unwrap();
    let set5 = &keys.psched[4];
    let key = TaskRef::key("k").unwrap();
    let e = q
        .enqueue(
            TaskSpec::new(b"x".to_vec())
                .key("k")
                .priority(5)
                .delay_ms(60_000),
        )
        .await
        .unwrap();
    let id = e.id.as_str().to_owned();
    assert_eq!(zscore(&ctx, set5, &id), Some(e.due_at_ms));
    let t = q.get(&key).await.unwrap().unwrap();
    assert_eq!((t.state, t.priority), (TaskState::Scheduled, 5));
    assert_eq!(q.stats().await.unwrap().next_due_at_ms, Some(e.due_at_ms));

    let r = q.reschedule(&key, dueq::Due::DelayMs(0)).await.unwrap();
    let RescheduleOutcome::Rescheduled { due_at_ms } = r else {
        panic!("{r:?}")
    };
    assert_eq!(zscore(&ctx, set5, &id), Some(due_at_ms));
    assert_eq!(zcard(&mut ctx.raw(), &keys.sched), 0);

    // nack with a retry: back into priority 5's set
    let c = claim_n(&q, 1, 1).await;
    let n = q
        .nack(&c[0].id, &c[0].lease_token, "boom", Some(0), false)
        .await
        .unwrap();
    assert!(matches!(n, NackOutcome::Rescheduled { .. }), "{n:?}");
    assert!(zscore(&ctx, set5, &id).is_some());

    // an expired lease (the shortest allowed), recovered: back into its set
    let c = q.claim(1, Some(dueq::MIN_LEASE_MS)).await.unwrap().tasks;
    assert_eq!(c.len(), 1);
    redis_past(&ctx, c[0].lease_expires_at_ms).await;
    let r = q.recover().await.unwrap();
    assert_eq!(r.recovered, 1);
    assert!(zscore(&ctx, set5, &id).is_some());
    assert_eq!(q.get(&key).await.unwrap().unwrap().priority, 5);

    // dead, then retried: back into its set
    let c = claim_n(&q, 1, 1).await;
    q.nack(&c[0].id, &c[0].lease_token, "fatal", None, true)
        .await
        .unwrap();
    assert_eq!(
        q.dead_retry(&[c[0].id.clone()]).await.unwrap(),
        vec![DeadRetryOutcome::Retried]
    );
    assert!(zscore(&ctx, set5, &id).is_some());

    // a replace takes the new priority and moves the task
    let r = q
        .enqueue(
            TaskSpec::new(b"y".to_vec())
                .key("k")
                .priority(2)
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    assert_eq!(zscore(&ctx, set5, &id), None);
    assert!(zscore(&ctx, &keys.psched[1], &id).is_some());
    assert_eq!(q.get(&key).await.unwrap().unwrap().priority, 2);

    // cancel finds it there
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(zcard(&mut ctx.raw(), &keys.psched[1]), 0);
    assert_eq!(q.stats().await.unwrap().scheduled, 0);
}

/// Within one batch, a key enqueued twice with different priorities ends in the last one's
/// set only.
#[tokio::test]
async fn priority_moves_within_one_batch() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("batch");
    let keys = QueueKeys::new("batch").unwrap();
    let r = q
        .enqueue_batch(&[
            TaskSpec::new(b"a".to_vec()).key("k").priority(3),
            TaskSpec::new(b"b".to_vec())
                .key("k")
                .priority(0)
                .on_conflict(OnConflict::Replace),
            TaskSpec::new(b"c".to_vec())
                .key("k")
                .priority(7)
                .on_conflict(OnConflict::Replace),
        ])
        .await
        .unwrap();
    let id = r[0].id.as_str().to_owned();
    assert_eq!(r[2].outcome, EnqueueOutcome::Replaced);
    let mut raw = ctx.raw();
    assert_eq!(zcard(&mut raw, &keys.sched), 0);
    assert_eq!(zcard(&mut raw, &keys.psched[2]), 0);
    assert!(zscore(&ctx, &keys.psched[6], &id).is_some());
    let t = claim_n(&q, 1, 5).await;
    assert_eq!(t[0].payload, b"c");
}

/// Priority and groups: within a group, its due tasks come by priority, then due time;
/// groups are still served round-robin whatever their tasks' priorities (a group of
/// priority-9 tasks is not held back by another's priority-0 backlog); beside the groups,
/// the ungrouped lane hands out its tasks in priority order. A future priority-0 task of a
/// group is not handed out early.
#[tokio::test]
async fn priority_and_groups() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("pg");
    // group a: 30 priority-9 tasks, then 3 priority-0 ones (enqueued later) and one
    // priority-0 task due later; group b: 5 priority-9 tasks only
    let a9: Vec<_> = (0..30)
        .map(|i| {
            TaskSpec::new(format!("a9-{i}").into_bytes())
                .group("a")
                .priority(9)
        })
        .collect();
    q.enqueue_batch(&a9).await.unwrap();
    let a0: Vec<_> = (0..3)
        .map(|i| TaskSpec::new(format!("a0-{i}").into_bytes()).group("a"))
        .collect();
    q.enqueue_batch(&a0).await.unwrap();
    let later = q
        .enqueue(
            TaskSpec::new(b"a0-later".to_vec())
                .group("a")
                .delay_ms(60_000),
        )
        .await
        .unwrap();
    let b9: Vec<_> = (0..5)
        .map(|i| {
            TaskSpec::new(format!("b9-{i}").into_bytes())
                .group("b")
                .priority(9)
        })
        .collect();
    q.enqueue_batch(&b9).await.unwrap();
    q.enqueue_batch(&vec![TaskSpec::new(b"p9".to_vec()).priority(9); 10])
        .await
        .unwrap();
    q.enqueue_batch(&vec![TaskSpec::new(b"p0".to_vec()); 2])
        .await
        .unwrap();

    let first = q.claim(6, None).await.unwrap().tasks;
    let names: Vec<String> = first
        .iter()
        .map(|t| String::from_utf8(t.payload.clone()).unwrap())
        .collect();
    // round-robin: a, b and the ungrouped lane each get a share of the first claim
    assert!(names.iter().any(|n| n.starts_with("b9-")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("a")), "{names:?}");
    assert!(names.iter().any(|n| n == "p0"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "p9"),
        "ungrouped p9 before p0: {names:?}"
    );

    let rest = claim_n(&q, 50 - 6, 7).await;
    let all: Vec<String> = first
        .iter()
        .chain(&rest)
        .map(|t| String::from_utf8(t.payload.clone()).unwrap())
        .collect();
    assert!(
        !all.contains(&"a0-later".to_owned()),
        "handed out before its due time"
    );
    let of = |prefix: &str| -> Vec<String> {
        all.iter()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect()
    };
    let a = of("a");
    let mut want: Vec<String> = (0..3).map(|i| format!("a0-{i}")).collect();
    want.extend((0..30).map(|i| format!("a9-{i}")));
    assert_eq!(a, want, "group a not by priority, then enqueue order");
    let plain: Vec<String> = all.iter().filter(|n| n.starts_with('p')).cloned().collect();
    assert_eq!(plain[..2], ["p0", "p0"]);
    assert_eq!(plain.len(), 12);
    // b's 5 tasks all came out before a's backlog was through
    let last_b = all.iter().rposition(|n| n.starts_with("b9-")).unwrap();
    let last_a = all.iter().rposition(|n| n.starts_with("a9-")).unwrap();
    assert!(last_b < last_a, "{all:?}");
    assert_eq!(q.stats().await.unwrap().scheduled, 1);
    assert_eq!(
        q.get(&TaskRef::id(later.id.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap()
            .state,
        TaskState::Scheduled
    );
}

/// A grouped task keeps its priority through reschedule, nack, lease recovery, the
/// dead-letter queue, a replace that changes it, expiry and cancel: each finds it in its
/// group's range of that priority (a wrong range would leave it unclaimable or unfound).
#[tokio::test]
async fn grouped_priority_survives_every_transition() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("gkeep");
    let key = TaskRef::key("k").unwrap();
    q.enqueue(
        TaskSpec::new(b"x".to_vec())
            .key("k")
            .group("g")
            .priority(5)
            .delay_ms(60_000),
    )
    .await
    .unwrap();
    // a priority-9 task of the same group, due now: it comes before k only while k is not due
    q.enqueue(
        TaskSpec::new(b"nine".to_vec())
            .group("g")
            .priority(9)
            .delay_ms(0),
    )
    .await
    .unwrap();
    let c = claim_n(&q, 1, 5).await;
    assert_eq!(c[0].payload, b"nine");
    q.ack(&c[0].id, &c[0].lease_token).await.unwrap();
    let t = q.get(&key).await.unwrap().unwrap();
    assert_eq!((t.priority, t.group.as_deref()), (5, Some("g")));
    assert!(matches!(
        q.reschedule(&key, dueq::Due::DelayMs(0)).await.unwrap(),
        RescheduleOutcome::Rescheduled { .. }
    ));
    let c = claim_n(&q, 1, 5).await;
    assert_eq!(c[0].payload, b"x");
    q.nack(&c[0].id, &c[0].lease_token, "boom", Some(0), false)
        .await
        .unwrap();
    let c = q.claim(1, Some(dueq::MIN_LEASE_MS)).await.unwrap().tasks;
    assert_eq!(c.len(), 1);
    redis_past(&ctx, c[0].lease_expires_at_ms).await;
    assert_eq!(q.recover().await.unwrap().recovered, 1);
    let c = claim_n(&q, 1, 5).await;
    q.nack(&c[0].id, &c[0].lease_token, "fatal", None, true)
        .await
        .unwrap();
    assert_eq!(
        q.dead_retry(&[c[0].id.clone()]).await.unwrap(),
        vec![DeadRetryOutcome::Retried]
    );
    // a replace to priority 1, due later: found by cancel in its new range
    let r = q
        .enqueue(
            TaskSpec::new(b"y".to_vec())
                .key("k")
                .priority(1)
                .delay_ms(60_000)
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    let t = q.get(&key).await.unwrap().unwrap();
    assert_eq!((t.priority, t.group.as_deref()), (1, Some("g")));
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::Cancelled);
    let keys = QueueKeys::new("gkeep").unwrap();
    let mut raw = ctx.raw();
    assert_eq!(zcard(&mut raw, &keys.gsched), 0);
    assert_eq!(zcard(&mut raw, &keys.gready), 0);
    // expiry of a grouped priority task empties its range and the group's marker (an expiry
    // must come after the due time: the task is due now and expires unstarted)
    q.enqueue(
        TaskSpec::new(b"e".to_vec())
            .group("g")
            .priority(7)
            .ttl_ms(50),
    )
    .await
    .unwrap();
    redis_past(&ctx, ctx.redis_now_ms() + 100).await;
    assert_eq!(q.recover().await.unwrap().expired, 1);
    assert_eq!(zcard(&mut raw, &keys.gsched), 0);
    assert_eq!(zcard(&mut raw, &keys.gdue), 0);
    assert_eq!(zcard(&mut raw, &keys.gready), 0);
    assert_eq!(q.stats().await.unwrap().scheduled, 0);
}

/// An expired task is never handed out by a claim, is counted, frees its key, and leaves
/// no record; a task that started before its expiry is not interrupted.
#[tokio::test]
async fn expiry_in_the_claim() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("exp");
    let keys = QueueKeys::new("exp").unwrap();
    q.pause().await.unwrap();
    let now = ctx.redis_now_ms();
    let e = q
        .enqueue(TaskSpec::new(b"late".to_vec()).key("r").ttl_ms(150))
        .await
        .unwrap();
    let t = q.get(&TaskRef::key("r").unwrap()).await.unwrap().unwrap();
    let exp = t.expires_at_ms.unwrap();
    assert!(
        exp >= now + 150 && exp < now + 150 + 1_000,
        "{exp} vs {now}"
    );
    redis_past(&ctx, exp).await;
    q.resume().await.unwrap();
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    let s = q.stats().await.unwrap();
    assert_eq!((s.expired_total, s.scheduled, s.dead), (1, 0, 0));
    assert_eq!(
        q.get(&TaskRef::id(e.id.as_str()).unwrap()).await.unwrap(),
        None
    );
    assert_eq!(zcard(&mut ctx.raw(), &keys.expiry), 0);
    // the key is free again
    let again = q
        .enqueue(TaskSpec::new(b"again".to_vec()).key("r").ttl_ms(60_000))
        .await
        .unwrap();
    assert!(again.created());

    // started before its expiry: runs to the end
    let c = claim_n(&q, 1, 1).await;
    assert_eq!(c[0].payload, b"again");
    assert_eq!(
        zcard(&mut ctx.raw(), &keys.expiry),
        0,
        "a started task left the index"
    );
    let short = q
        .enqueue(TaskSpec::new(b"short".to_vec()).ttl_ms(2_000))
        .await
        .unwrap();
    let c2 = claim_n(&q, 1, 1).await;
    assert_eq!(c2[0].id, short.id);
    let exp = c2[0].claimed_at_ms.max(short.due_at_ms) + 2_000;
    redis_past(&ctx, exp).await;
    q.recover().await.unwrap();
    assert_eq!(
        q.ack(&c2[0].id, &c2[0].lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    assert_eq!(
        q.ack(&c[0].id, &c[0].lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.expired_total, s.succeeded_total), (1, 2));
}

/// Expired tasks that no claim hands out (due on a paused queue: an expiry must come after
/// the due time) are removed by the recovery duty, at most 100 per call (and by a claim,
/// likewise bounded), never by a scan; grouped ones leave their group.
#[tokio::test]
async fn expiry_in_recovery_is_bounded() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rexp");
    let keys = QueueKeys::new("rexp").unwrap();
    q.pause().await.unwrap();
    let specs: Vec<TaskSpec> = (0..230)
        .map(|i| {
            let s = TaskSpec::new(b"x".to_vec()).ttl_ms(100);
            if i % 2 == 0 {
                s.group(format!("g{}", i % 3))
            } else {
                s
            }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let keep = q
        .enqueue(
            TaskSpec::new(b"keep".to_vec())
                .delay_ms(3_600_000)
                .ttl_ms(7_200_000),
        )
        .await
        .unwrap();
    redis_past(&ctx, ctx.redis_now_ms() + 150).await;
    let r = q.recover().await.unwrap();
    assert_eq!((r.expired, r.expired_more), (100, true));
    // a claim expires the next batch even with nothing to hand out
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    assert_eq!(q.stats().await.unwrap().expired_total, 200);
    let r = q.recover().await.unwrap();
    assert_eq!((r.expired, r.expired_more), (30, false));
    let s = q.stats().await.unwrap();
    assert_eq!((s.expired_total, s.scheduled), (230, 1));
    let mut raw = ctx.raw();
    assert_eq!(zcard(&mut raw, &keys.expiry), 1);
    assert_eq!(zcard(&mut raw, &keys.gdue), 0);
    assert_eq!(zcard(&mut raw, &keys.gready), 0);
    assert_eq!(dueq_testkit::hlen(&mut raw, &keys.tasks), 1);
    assert!(
        q.get(&TaskRef::id(keep.id.as_str()).unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

/// `on_expire: dead` keeps an expired task in the dead-letter queue with the error
/// `expired`, frees its key, and counts it as expired (not dead); the setting is validated.
#[tokio::test]
async fn expiry_on_expire_dead() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("dexp");
    let s = q
        .update_settings(&SettingsPatch::default().on_expire(Some(OnExpire::Dead)))
        .await
        .unwrap();
    assert_eq!(s.on_expire, Some(OnExpire::Dead));
    let bad: Result<SettingsPatch, _> = serde_json::from_str(r#"{"on_expire": "keep"}"#);
    assert!(bad.is_err());
    let e = q
        .enqueue(
            TaskSpec::new(b"p".to_vec())
                .key("remind")
                .priority(4)
                .expires_at_ms(ctx.redis_now_ms() + 100),
        )
        .await
        .unwrap();
    q.pause().await.unwrap();
    redis_past(&ctx, ctx.redis_now_ms() + 150).await;
    q.resume().await.unwrap();
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    let page = q.dead_list(0, 10).await.unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.tasks[0].task.id, e.id);
    assert_eq!(page.tasks[0].task.last_error.as_deref(), Some("expired"));
    let st = q.stats().await.unwrap();
    assert_eq!((st.expired_total, st.dead_total, st.dead), (1, 0, 1));
    assert!(
        q.enqueue(TaskSpec::new(b"q".to_vec()).key("remind"))
            .await
            .unwrap()
            .created()
    );
}

/// Bad option values are refused naming the field, with nothing written.
#[tokio::test]
async fn bad_options_are_refused() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("bad");
    let cases = [
        (TaskSpec::new(b"x".to_vec()).priority(10), "priority"),
        (TaskSpec::new(b"x".to_vec()).ttl_ms(0), "ttl_ms"),
        (
            TaskSpec::new(b"x".to_vec()).expires_at_ms(dueq::MAX_DUE_AT_MS + 1),
            "expires_at_ms",
        ),
        (
            TaskSpec::new(b"x".to_vec())
                .key("k")
                .on_conflict(OnConflict::Debounce),
            "debounce_max_ms",
        ),
        (
            TaskSpec::new(b"x".to_vec()).key("k").debounce_max_ms(5),
            "debounce_max_ms",
        ),
        (
            TaskSpec::new(b"x".to_vec())
                .on_conflict(OnConflict::Debounce)
                .debounce_max_ms(5),
            "key",
        ),
    ];
    for (spec, field) in cases {
        let err = q
            .enqueue_batch(&[TaskSpec::new(b"ok".to_vec()), spec])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    let mut raw = ctx.raw();
    let n: u64 = redis::cmd("DBSIZE").query(&mut raw).unwrap();
    assert_eq!(n, 0, "a refused batch wrote something");
}

/// Debounce: a replace that never moves the due time past the first enqueue +
/// `debounce_max_ms`; earlier due times are taken as given; a running key answers
/// `in_progress`; priority and expiry come from the newest enqueue.
#[tokio::test]
async fn debounce_caps_the_due_time() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("deb");
    let d = |payload: &str, delay_ms: u64| {
        TaskSpec::new(payload.as_bytes().to_vec())
            .key("search-index:42")
            .delay_ms(delay_ms)
            .on_conflict(OnConflict::Debounce)
            .debounce_max_ms(3_000)
    };
    let first = q.enqueue(d("1", 1_000)).await.unwrap();
    assert!(first.created());
    let created = q
        .get(&TaskRef::key("search-index:42").unwrap())
        .await
        .unwrap()
        .unwrap()
        .created_at_ms;
    let r = q.enqueue(d("2", 60_000)).await.unwrap();
    assert_eq!(
        (r.outcome, r.due_at_ms),
        (EnqueueOutcome::Replaced, created + 3_000)
    );
    let r = q.enqueue(d("3", 500)).await.unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    assert!(r.due_at_ms < created + 3_000 && r.due_at_ms >= created + 500);
    let r = q
        .enqueue(d("4", 0).ttl_ms(60_000).priority(3))
        .await
        .unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    let t = q
        .get(&TaskRef::key("search-index:42").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.payload.as_slice(), t.priority), (&b"4"[..], 3));
    assert!(t.expires_at_ms.is_some());
    assert_eq!(
        t.created_at_ms, created,
        "a debounce keeps the first enqueue time"
    );
    // within one batch: the cap counts from this call
    let b = q
        .enqueue_batch(&[
            TaskSpec::new(b"a".to_vec()).key("other").delay_ms(100),
            TaskSpec::new(b"b".to_vec())
                .key("other")
                .delay_ms(60_000)
                .on_conflict(OnConflict::Debounce)
                .debounce_max_ms(2_000),
        ])
        .await
        .unwrap();
    assert_eq!(b[1].outcome, EnqueueOutcome::Replaced);
    assert!(b[1].due_at_ms <= b[0].due_at_ms - 100 + 2_000);
    // running: in_progress, nothing changed
    let c = claim_n(&q, 1, 1).await;
    assert_eq!(c[0].payload, b"4");
    let r = q.enqueue(d("5", 0)).await.unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::InProgress);
    assert_eq!(
        q.ack(&c[0].id, &c[0].lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    // after it ran, the next enqueue starts a new task (and a new cap)
    let r = q.enqueue(d("6", 1_000)).await.unwrap();
    assert!(r.created());
}

/// More expired due tasks than one expiry batch: the claim's own check on the tasks it is
/// about to hand out ends the rest, so not one of them is handed out.
#[tokio::test]
async fn expiry_checked_on_every_task_handed_out() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("many");
    q.pause().await.unwrap();
    let specs: Vec<TaskSpec> = (0..150)
        .map(|i| TaskSpec::new(format!("{i}").into_bytes()).ttl_ms(100))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    q.enqueue_batch(&vec![TaskSpec::new(b"fresh".to_vec()).ttl_ms(3_600_000); 3])
        .await
        .unwrap();
    redis_past(&ctx, ctx.redis_now_ms() + 150).await;
    q.resume().await.unwrap();
    let c = q.claim(1_000, None).await.unwrap().tasks;
    assert_eq!(c.len(), 3);
    assert!(
        c.iter().all(|t| t.payload == b"fresh"),
        "an expired task was handed out"
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.expired_total, s.scheduled), (150, 0));
    assert_eq!(
        zcard(&mut ctx.raw(), &QueueKeys::new("many").unwrap().expiry),
        0
    );
}
