//! Flow control on a real Redis: queue settings, rate and concurrency limits, groups
//! (round-robin, per-group limits) and what every other operation does with grouped tasks.
//! The multi-process cases (C24 to C26) are in `crates/dueq-cli/tests/it/flow.rs`.

use std::collections::HashMap;

use dueq::{
    BackoffSettings, CancelOutcome, ClaimedTask, ErrorKind, NackOutcome, RateLimit,
    RescheduleOutcome, SettingsPatch, TaskRef, TaskSpec, TaskState, Throttle,
};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, ack_all, due_tasks, script_calls, wait_stats};

#[tokio::test]
async fn settings_round_trip_and_bad_values_write_nothing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("s");
    assert_eq!(q.settings().await.unwrap(), Default::default());
    let s = q
        .update_settings(
            &SettingsPatch::default()
                .rate_limit(Some(RateLimit::new(100, 1_000)))
                .concurrency(Some(7))
                .backoff(Some(BackoffSettings::new(10, 2.0, 1_000))),
        )
        .await
        .unwrap();
    assert_eq!(s.rate_limit, Some(RateLimit::new(100, 1_000)));
    assert_eq!(s.concurrency, Some(7));
    assert_eq!(s.backoff, Some(BackoffSettings::new(10, 2.0, 1_000)));

    let before: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&q.keys().meta)
        .query(&mut ctx.raw())
        .unwrap();
    let bad = SettingsPatch::default()
        .concurrency(Some(9))
        .rate_limit(Some(RateLimit::new(5, 0)));
    let e = q.update_settings(&bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("rate_limit.per_ms"), "{e}");
    let after: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&q.keys().meta)
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(before, after, "a refused patch wrote something");

    // clearing goes back to the default
    let s = q
        .update_settings(&SettingsPatch::default().rate_limit(None).concurrency(None))
        .await
        .unwrap();
    assert_eq!((s.rate_limit, s.concurrency), (None, None));
}

#[tokio::test]
async fn queue_defaults_apply_to_tasks_without_their_own() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("d");
    let plain = q.enqueue(TaskSpec::new(b"a".to_vec())).await.unwrap();
    let own = q
        .enqueue(TaskSpec::new(b"b".to_vec()).max_attempts(9).lease_ms(9_000))
        .await
        .unwrap();
    let t = q
        .get(&TaskRef::id(plain.id.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.max_attempts, t.lease_ms), (5, 30_000));
    q.update_settings(
        &SettingsPatch::default()
            .max_attempts(Some(2))
            .lease_ms(Some(4_000))
            .backoff(Some(BackoffSettings::new(60_000, 1.0, 60_000))),
    )
    .await
    .unwrap();
    // read where used: a task already waiting follows the new setting
    let t = q
        .get(&TaskRef::id(plain.id.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.max_attempts, t.lease_ms), (2, 4_000));
    let t = q
        .get(&TaskRef::id(own.id.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.max_attempts, t.lease_ms), (9, 9_000));

    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 2);
    let mine = c.tasks.iter().find(|t| t.id == plain.id).unwrap();
    assert_eq!(mine.max_attempts, 2);
    assert_eq!(mine.lease_expires_at_ms - c.now_ms, 4_000);
    let theirs = c.tasks.iter().find(|t| t.id == own.id).unwrap();
    assert_eq!(theirs.lease_expires_at_ms - c.now_ms, 9_000);
    // the queue's backoff (60 s, no growth, up to 20 % jitter) decides the retry delay
    match q
        .nack(&mine.id, &mine.lease_token, "x", None, false)
        .await
        .unwrap()
    {
        NackOutcome::Rescheduled { due_at_ms } => {
            let d = due_at_ms - c.now_ms;
            assert!((47_000..=61_000).contains(&d), "retry in {d} ms");
        }
        o => panic!("{o:?}"),
    }
}

#[tokio::test]
async fn rate_limit_caps_claims_per_window_and_says_when_the_next_slot_opens() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("r");
    q.update_settings(&SettingsPatch::default().rate_limit(Some(RateLimit::new(10, 400))))
        .await
        .unwrap();
    due_tasks(&q, 35, None).await;
    let mut claims: Vec<u64> = Vec::new();
    let mut saw_opens = false;
    let start = std::time::Instant::now();
    while claims.len() < 35 {
        assert!(start.elapsed() < DEADLINE, "35 tasks not claimed in time");
        let c = q.claim(7, None).await.unwrap();
        for _ in &c.tasks {
            claims.push(c.now_ms);
        }
        if let Some(Throttle::Rate { opens_at_ms }) = c.throttle {
            assert!(c.tasks.is_empty());
            assert!(opens_at_ms > c.now_ms && opens_at_ms <= c.now_ms + 400);
            saw_opens = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(saw_opens, "never throttled");
    for (i, &t) in claims.iter().enumerate() {
        let in_window = claims[..=i].iter().filter(|&&c| c + 400 > t).count();
        assert!(
            in_window <= 10,
            "{in_window} claims in the 400 ms before {t}"
        );
    }
    // 35 tasks at 10 per 400 ms need at least 3 full windows
    assert!(claims[34] - claims[0] >= 1_200, "{claims:?}");
}

#[tokio::test]
async fn concurrency_limit_counts_active_tasks_and_frees_slots_on_ack_and_expiry() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c");
    q.update_settings(&SettingsPatch::default().concurrency(Some(3)))
        .await
        .unwrap();
    due_tasks(&q, 10, None).await;
    let a = q.claim(10, None).await.unwrap();
    assert_eq!(a.tasks.len(), 3);
    let b = q.claim(10, None).await.unwrap();
    assert!(b.tasks.is_empty());
    assert_eq!(b.throttle, Some(Throttle::Concurrency));
    ack_all(&q, &a.tasks[..1]).await;
    let c = q.claim(10, Some(dueq::MIN_LEASE_MS)).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    // a crashed holder's slot comes back when its lease expires and is recovered
    wait_until_async(DEADLINE, "expired lease recovered", || async {
        q.recover().await.unwrap().recovered == 1
    })
    .await;
    let d = q.claim(10, None).await.unwrap();
    assert_eq!(d.tasks.len(), 1);
    let s = q.stats().await.unwrap();
    assert_eq!((s.active, s.concurrency_limit), (3, Some(3)));
}

#[tokio::test]
async fn groups_are_served_round_robin() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("g");
    due_tasks(&q, 1_000, Some("big")).await;
    due_tasks(&q, 10, Some("small")).await;
    due_tasks(&q, 5, None).await;
    let mut order: Vec<Option<String>> = Vec::new();
    for _ in 0..4 {
        let c = q.claim(10, None).await.unwrap();
        order.extend(c.tasks.into_iter().map(|t| t.group));
    }
    let small = order
        .iter()
        .filter(|g| g.as_deref() == Some("small"))
        .count();
    let plain = order.iter().filter(|g| g.is_none()).count();
    assert_eq!(small, 10, "small's tasks within the first 40: {order:?}");
    assert_eq!(plain, 5, "ungrouped tasks within the first 40: {order:?}");
    assert_eq!(order.len(), 40, "every claim filled");
    let s = q.stats().await.unwrap();
    assert_eq!(s.scheduled, 1_015 - 40);
    assert_eq!(s.due, 1_015 - 40);
    assert_eq!(s.groups_waiting, 1);
}

#[tokio::test]
async fn group_concurrency_parks_a_group_until_its_tasks_end() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("gc");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap();
    due_tasks(&q, 100, Some("a")).await;
    due_tasks(&q, 5, Some("b")).await;
    let c = q.claim(50, None).await.unwrap();
    let n = |c: &[ClaimedTask], g: &str| c.iter().filter(|t| t.group.as_deref() == Some(g)).count();
    assert_eq!((n(&c.tasks, "a"), n(&c.tasks, "b")), (2, 2));
    assert!(q.claim(50, None).await.unwrap().tasks.is_empty());
    // one of a's tasks fails: its slot frees, the task goes back into its group
    let a1 = c
        .tasks
        .iter()
        .find(|t| t.group.as_deref() == Some("a"))
        .unwrap();
    let out = q
        .nack(&a1.id, &a1.lease_token, "x", Some(0), false)
        .await
        .unwrap();
    assert!(matches!(out, NackOutcome::Rescheduled { .. }));
    let d = q.claim(50, None).await.unwrap();
    assert_eq!((n(&d.tasks, "a"), n(&d.tasks, "b")), (1, 0));
    // b's tasks end: b gets its next two
    let bs: Vec<_> = c
        .tasks
        .iter()
        .filter(|t| t.group.as_deref() == Some("b"))
        .cloned()
        .collect();
    ack_all(&q, &bs).await;
    let e = q.claim(50, None).await.unwrap();
    assert_eq!((n(&e.tasks, "a"), n(&e.tasks, "b")), (0, 2));
    // raising the limit lets parked groups go at once
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(4)))
        .await
        .unwrap();
    let f = q.claim(50, None).await.unwrap();
    assert_eq!((n(&f.tasks, "a"), n(&f.tasks, "b")), (2, 1));
    let s = q.stats().await.unwrap();
    assert!(s.throttled_ms.group_concurrency > 0 || s.now_ms > 0);
}

/// Redis commands run so far, those inside scripts included.
fn commands(ctx: &Ctx) -> u64 {
    dueq_testkit::info_field(&mut ctx.raw(), "stats", "total_commands_processed")
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_claim_fills_its_slots_across_many_groups_at_a_few_commands_each() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("tenants");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(10)))
        .await
        .unwrap();
    for g in 0..200 {
        due_tasks(&q, 20, Some(&format!("t{g:03}"))).await;
    }
    let per_group = |c: &[ClaimedTask]| {
        let mut m: HashMap<String, usize> = HashMap::new();
        for t in c {
            *m.entry(t.group.clone().unwrap_or_default()).or_default() += 1;
        }
        m
    };
    let before = commands(&ctx);
    let first = q.claim(1_000, None).await.unwrap().tasks;
    let used = commands(&ctx) - before;
    let served = per_group(&first);
    assert_eq!(first.len(), 1_000, "one claim fills every slot");
    assert_eq!(
        served.len(),
        100,
        "each group visited takes its ten free slots"
    );
    assert!(served.values().all(|&n| n == 10), "{served:?}");
    // a visit costs a few commands whatever it takes (the claim's own bookkeeping aside):
    // a claim that visited each of the 200 groups for five tasks ran some 1 600
    assert!(
        used <= 100 * 4 + 100,
        "{used} commands for one claim of 100 groups"
    );
    // the groups served wait behind those not served yet, even once their slots are free
    ack_all(&q, &first).await;
    let second = per_group(&q.claim(1_000, None).await.unwrap().tasks);
    assert_eq!(second.len(), 100);
    assert!(
        second.keys().all(|g| !served.contains_key(g)),
        "the second claim served a group of the first before one never served"
    );
}

#[tokio::test]
async fn group_rate_limit_holds_one_group_and_not_the_others() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("gr");
    q.update_settings(&SettingsPatch::default().group_rate_limit(Some(RateLimit::new(3, 60_000))))
        .await
        .unwrap();
    due_tasks(&q, 20, Some("a")).await;
    due_tasks(&q, 20, Some("b")).await;
    let c = q.claim(100, None).await.unwrap();
    assert_eq!(c.tasks.len(), 6, "3 per group");
    let c2 = q.claim(100, None).await.unwrap();
    assert!(c2.tasks.is_empty());
    // the held groups wake when their window opens, a minute on
    let next = c2.next_due_at_ms.unwrap();
    assert!(
        next >= c.now_ms + 59_000,
        "next look {next} vs now {}",
        c.now_ms
    );
    due_tasks(&q, 2, Some("c")).await;
    let c3 = q.claim(100, None).await.unwrap();
    assert_eq!(c3.tasks.len(), 2);
}

#[tokio::test]
async fn grouped_tasks_cancel_reschedule_get_and_retry_like_any_other() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("go");
    let e = q
        .enqueue(
            TaskSpec::new(b"p".to_vec())
                .key("k1")
                .group("t1")
                .delay_ms(60_000),
        )
        .await
        .unwrap();
    q.enqueue(
        TaskSpec::new(b"p".to_vec())
            .key("k2")
            .group("t1")
            .max_attempts(1),
    )
    .await
    .unwrap();
    let t = q.get(&TaskRef::key("k1").unwrap()).await.unwrap().unwrap();
    assert_eq!(
        (t.state, t.group.as_deref()),
        (TaskState::Scheduled, Some("t1"))
    );
    let r = q
        .reschedule(&TaskRef::key("k1").unwrap(), dueq::Due::DelayMs(0))
        .await
        .unwrap();
    assert!(matches!(r, RescheduleOutcome::Rescheduled { .. }));
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 2);
    assert!(c.tasks.iter().any(|t| t.id == e.id));
    ack_all(&q, &c.tasks[..1]).await;
    let second = &c.tasks[1];
    // out of attempts: dead, keeping its group; a retry brings it back into the group
    let out = q
        .nack(&second.id, &second.lease_token, "x", None, true)
        .await
        .unwrap();
    assert_eq!(out, NackOutcome::Dead);
    q.dead_retry(std::slice::from_ref(&second.id))
        .await
        .unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    assert_eq!(c.tasks[0].group.as_deref(), Some("t1"));
    ack_all(&q, &c.tasks).await;
    let k3 = q
        .enqueue(
            TaskSpec::new(b"p".to_vec())
                .key("k3")
                .group("t2")
                .delay_ms(60_000),
        )
        .await
        .unwrap();
    assert_eq!(
        q.cancel(&TaskRef::key("k3").unwrap()).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert!(
        q.get(&TaskRef::id(k3.id.as_str()).unwrap())
            .await
            .unwrap()
            .is_none()
    );
    // nothing of the groups is left behind
    let mut raw = ctx.raw();
    for key in [
        &q.keys().gsched,
        &q.keys().gdue,
        &q.keys().groups,
        &q.keys().gready,
        &q.keys().gactive,
    ] {
        let exists: u64 = redis::cmd("EXISTS").arg(key).query(&mut raw).unwrap();
        assert_eq!(exists, 0, "{key} left behind");
    }
    let e = q
        .enqueue(TaskSpec::new(b"p".to_vec()).group(""))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("group"), "{e}");
}

#[tokio::test]
async fn a_queue_over_its_alert_threshold_is_behind_until_it_catches_up() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("late");
    q.update_settings(
        &SettingsPatch::default()
            .alert_due_count(Some(3))
            .alert_due_age_ms(Some(60_000)),
    )
    .await
    .unwrap();
    due_tasks(&q, 2, None).await;
    assert!(!q.stats().await.unwrap().behind, "2 due < 3");
    due_tasks(&q, 1, Some("g")).await;
    assert!(q.stats().await.unwrap().behind, "3 due (one grouped) >= 3");
    let c = q.claim(1, None).await.unwrap();
    ack_all(&q, &c.tasks).await;
    assert!(!q.stats().await.unwrap().behind, "back under: cleared");
    // the age threshold alone: a task due a minute ago
    let now = ctx.redis_now_ms();
    q.enqueue(TaskSpec::new(b"old".to_vec()).due_at_ms(now - 61_000))
        .await
        .unwrap();
    let s = q.stats().await.unwrap();
    assert!(s.behind && s.oldest_due_age_ms >= 61_000, "{s:?}");
}

#[tokio::test]
async fn a_grouped_key_replaced_within_its_own_batch_is_one_task() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("gb");
    let out = q
        .enqueue_batch(&[
            TaskSpec::new(b"old".to_vec())
                .key("k")
                .group("g")
                .delay_ms(60_000),
            TaskSpec::new(b"new".to_vec())
                .key("k")
                .group("g")
                .on_conflict(dueq::OnConflict::Replace),
        ])
        .await
        .unwrap();
    assert_eq!(out[0].id, out[1].id);
    let gsched: u64 = redis::cmd("ZCARD")
        .arg(&q.keys().gsched)
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(gsched, 1, "one index entry");
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    assert_eq!(c.tasks[0].payload, b"new");
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
}

/// A worker whose due work waits for group slots claims right behind its own acks (one round
/// trip, no wake-up needed): with wake-ups off and a 1 s fallback poll, 40 tasks of a group
/// limited to 2 at a time drain well within the deadline, where waiting for the poll after
/// every pair would take about 20 s.
#[tokio::test]
async fn worker_claims_freed_group_slots_right_behind_its_acks() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("refill");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap();
    due_tasks(&q, 40, Some("a")).await;
    let worker = dueq::Worker::builder(ctx.client.clone())
        .concurrency(8)
        .notifications(false)
        .poll_ms(1_000)
        .handle("refill", |_t| async { dueq::Outcome::Success })
        .build()
        .unwrap()
        .start();
    wait_stats(&q, |s| s.succeeded_total == 40).await;
    worker.shutdown().await.unwrap();
}

/// A worker whose due work waits behind a parked group (its one slot held by a handler that
/// does not end) makes no claim storm: over a 2 s window it calls Redis about once per
/// fallback poll, not in a loop.
#[tokio::test]
async fn a_parked_group_with_a_stuck_handler_does_not_make_the_worker_spin() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("parked");
    q.update_settings(&SettingsPatch::default().group_concurrency(Some(1)))
        .await
        .unwrap();
    due_tasks(&q, 5, Some("a")).await;
    let worker = dueq::Worker::builder(ctx.client.clone())
        .concurrency(8)
        .handle("parked", |_t| async {
            std::future::pending::<()>().await;
            dueq::Outcome::Success
        })
        .build()
        .unwrap()
        .start();
    wait_stats(&q, |s| s.active == 1).await;
    let before = script_calls(&ctx);
    let window = std::time::Instant::now();
    while window.elapsed() < std::time::Duration::from_secs(2) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let calls = script_calls(&ctx) - before;
    assert!(
        calls < 40,
        "{calls} script calls in 2 s with one parked group"
    );
    assert_eq!(q.stats().await.unwrap().active, 1);
    worker.shutdown().await.unwrap();
}

/// Several workers claiming right behind their own acks never run more tasks at once than
/// the queue's `concurrency`, nor more of one group than `group_concurrency`, and run every
/// task exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refills_behind_acks_keep_queue_and_group_limits_across_workers() {
    use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};
    let ctx = Ctx::new().await;
    let q = ctx.queue("limits");
    q.update_settings(
        &SettingsPatch::default()
            .concurrency(Some(3))
            .group_concurrency(Some(1)),
    )
    .await
    .unwrap();
    let groups = ["a", "b", "c", "d"];
    for g in groups {
        due_tasks(&q, 30, Some(g)).await;
    }
    due_tasks(&q, 30, None).await;
    let running = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let per_group: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let group_most = Arc::new(AtomicI64::new(0));
    let seen: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (running, most, per_group, group_most, seen) = (
            running.clone(),
            most.clone(),
            per_group.clone(),
            group_most.clone(),
            seen.clone(),
        );
        workers.push(
            dueq::Worker::builder(ctx.client.clone())
                .concurrency(4)
                .handle("limits", move |t| {
                    let (running, most, per_group, group_most, seen) = (
                        running.clone(),
                        most.clone(),
                        per_group.clone(),
                        group_most.clone(),
                        seen.clone(),
                    );
                    async move {
                        *seen.lock().unwrap().entry(t.id.to_string()).or_default() += 1;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(now, SeqCst);
                        if let Some(g) = &t.group {
                            let n = {
                                let mut m = per_group.lock().unwrap();
                                let e = m.entry(g.clone()).or_default();
                                *e += 1;
                                *e
                            };
                            group_most.fetch_max(n, SeqCst);
                        }
                        tokio::task::yield_now().await;
                        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                        if let Some(g) = &t.group {
                            *per_group.lock().unwrap().get_mut(g).unwrap() -= 1;
                        }
                        running.fetch_sub(1, SeqCst);
                        dueq::Outcome::Success
                    }
                })
                .build()
                .unwrap()
                .start(),
        );
    }
    let start = std::time::Instant::now();
    loop {
        let s = q.stats().await.unwrap();
        if s.succeeded_total == 150 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "not drained: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for w in workers {
        w.shutdown().await.unwrap();
    }
    assert!(most.load(SeqCst) <= 3, "{} at once", most.load(SeqCst));
    assert!(
        group_most.load(SeqCst) <= 1,
        "{} of a group",
        group_most.load(SeqCst)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 150);
    assert!(seen.values().all(|n| *n == 1), "a task ran twice");
}
