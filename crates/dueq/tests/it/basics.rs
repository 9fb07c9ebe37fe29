//! The life of a task through every operation, on one real server.

use dueq::{
    AckOutcome, CancelOutcome, DeadRetryOutcome, EnqueueOutcome, LeaseToken, NackOutcome,
    OnConflict, RescheduleOutcome, SettingsPatch, TaskRef, TaskSpec, TaskState,
};

use crate::support::{Ctx, DEADLINE};

#[tokio::test]
async fn enqueue_get_claim_ack() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    let e = q
        .enqueue(TaskSpec::new(b"hello".to_vec()).key("order:1:cancel"))
        .await
        .unwrap();
    assert!(e.created());
    let t = q
        .get(&TaskRef::key("order:1:cancel").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.id, e.id);
    assert_eq!(t.state, TaskState::Scheduled);
    assert_eq!(t.payload, b"hello");
    assert_eq!(t.attempt, 0);
    assert_eq!(t.max_attempts, 5);
    assert_eq!(t.due_at_ms, e.due_at_ms);

    let again = q
        .enqueue(TaskSpec::new(b"other".to_vec()).key("order:1:cancel"))
        .await
        .unwrap();
    assert_eq!(again.outcome, EnqueueOutcome::Existing);
    assert_eq!(again.id, e.id);

    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    let task = &c.tasks[0];
    assert_eq!(task.payload, b"hello");
    assert_eq!(task.key.as_deref(), Some("order:1:cancel"));
    assert_eq!(task.attempt, 1);
    assert!(task.claimed_at_ms >= task.due_at_ms);
    let t = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Active);
    assert_eq!(t.attempt, 1);

    assert_eq!(
        q.ack(&task.id, &LeaseToken::new("bogus")).await.unwrap(),
        AckOutcome::LeaseLost
    );
    assert_eq!(
        q.ack(&task.id, &task.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    assert!(q.get(&e.id.clone().into()).await.unwrap().is_none());
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.active, s.dead), (0, 0, 0));
    assert_eq!(s.enqueued_total, 1);
    assert_eq!(s.succeeded_total, 1);
    // the key is free again
    let e2 = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("order:1:cancel"))
        .await
        .unwrap();
    assert!(e2.created());
    assert_ne!(e2.id, e.id);
}

#[tokio::test]
async fn nack_retry_then_dead_then_retry_from_dlq() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("payouts");
    let e = q
        .enqueue(TaskSpec::new(b"p".to_vec()).key("payout:9").max_attempts(2))
        .await
        .unwrap();
    let t = q.claim(1, None).await.unwrap().tasks.remove(0);
    let o = q
        .nack(&t.id, &t.lease_token, "boom", Some(0), false)
        .await
        .unwrap();
    assert!(matches!(o, NackOutcome::Rescheduled { .. }));
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Scheduled);
    assert_eq!(got.attempt, 1);
    assert_eq!(got.last_error.as_deref(), Some("boom"));

    let t = q.claim(1, None).await.unwrap().tasks.remove(0);
    assert_eq!(t.attempt, 2);
    assert_eq!(t.last_error.as_deref(), Some("boom"));
    let o = q
        .nack(&t.id, &t.lease_token, "boom again", Some(0), false)
        .await
        .unwrap();
    assert_eq!(o, NackOutcome::Dead);
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Dead);
    assert_eq!(got.attempt, 2);
    // get by key answers the newest dead task under the key (no live one holds it) ...
    let by_key = q
        .get(&TaskRef::key("payout:9").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((&by_key.id, by_key.state), (&e.id, TaskState::Dead));
    // ... while the key is free for live work: cancel by key acts on live tasks only
    assert_eq!(
        q.cancel(&TaskRef::key("payout:9").unwrap()).await.unwrap(),
        CancelOutcome::NotFound
    );

    let page = q.dead_list(0, 10).await.unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(page.tasks[0].task.last_error.as_deref(), Some("boom again"));
    assert_eq!(
        q.dead_retry(std::slice::from_ref(&e.id)).await.unwrap(),
        vec![DeadRetryOutcome::Retried]
    );
    let t = q.claim(1, None).await.unwrap().tasks.remove(0);
    assert_eq!(t.attempt, 1);
    let o = q
        .nack(&t.id, &t.lease_token, "fatal", None, true)
        .await
        .unwrap();
    assert_eq!(o, NackOutcome::Dead);
    assert_eq!(
        q.dead_delete(std::slice::from_ref(&e.id)).await.unwrap(),
        vec![true]
    );
    assert!(q.get(&e.id.clone().into()).await.unwrap().is_none());
    // a deleted dead task is gone by key as well
    assert!(
        q.get(&TaskRef::key("payout:9").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let s = q.stats().await.unwrap();
    assert_eq!(s.dead_total, 2);
    assert_eq!(s.failed_total, 3);
}

#[tokio::test]
async fn replace_reschedule_cancel() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("reminders");
    let k = TaskRef::key("r:1").unwrap();
    let e = q
        .enqueue(TaskSpec::new(b"a".to_vec()).key("r:1").delay_ms(60_000))
        .await
        .unwrap();
    let r = q
        .enqueue(
            TaskSpec::new(b"b".to_vec())
                .key("r:1")
                .delay_ms(120_000)
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(r.outcome, EnqueueOutcome::Replaced);
    assert_eq!(r.id, e.id);
    assert!(r.due_at_ms >= e.due_at_ms + 59_000);
    assert_eq!(q.get(&k).await.unwrap().unwrap().payload, b"b");
    let o = q.reschedule(&k, dueq::Due::DelayMs(0)).await.unwrap();
    let RescheduleOutcome::Rescheduled { due_at_ms } = o else {
        panic!("{o:?}")
    };
    assert_eq!(q.get(&k).await.unwrap().unwrap().due_at_ms, due_at_ms);
    let t = q.claim(1, None).await.unwrap().tasks.remove(0);
    assert_eq!(q.cancel(&k).await.unwrap(), CancelOutcome::InProgress);
    assert_eq!(
        q.reschedule(&k, dueq::Due::DelayMs(5)).await.unwrap(),
        RescheduleOutcome::InProgress
    );
    let rr = q
        .enqueue(
            TaskSpec::new(b"c".to_vec())
                .key("r:1")
                .on_conflict(OnConflict::Replace),
        )
        .await
        .unwrap();
    assert_eq!(rr.outcome, EnqueueOutcome::InProgress);
    q.ack(&t.id, &t.lease_token).await.unwrap();
    assert_eq!(q.cancel(&k).await.unwrap(), CancelOutcome::NotFound);

    let e = q
        .enqueue(TaskSpec::new(b"d".to_vec()).key("r:2").delay_ms(60_000))
        .await
        .unwrap();
    assert_eq!(
        q.cancel(&e.id.clone().into()).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(q.stats().await.unwrap().cancelled_total, 1);
}

#[tokio::test]
async fn retention_keeps_succeeded_records() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("kept");
    q.update_settings(&SettingsPatch::default().succeeded_max(Some(2)))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(q.enqueue(TaskSpec::new(vec![i])).await.unwrap().id);
    }
    for t in q.claim(10, None).await.unwrap().tasks {
        q.ack(&t.id, &t.lease_token).await.unwrap();
    }
    assert!(q.get(&ids[0].clone().into()).await.unwrap().is_none());
    let t = q.get(&ids[2].clone().into()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Succeeded);
    assert_eq!(t.attempt, 1);
}

/// A succeeded task kept by retention still shows its group (as a dead one does), and the
/// group entry goes when retention drops the task. Found by the protocol model test: `get`
/// of a kept grouped task answered `group: None`.
#[tokio::test]
async fn retention_keeps_a_succeeded_tasks_group() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("kept-group");
    q.update_settings(&SettingsPatch::default().succeeded_max(Some(1)))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..2 {
        let e = q
            .enqueue(TaskSpec::new(vec![i]).group("tenant-1"))
            .await
            .unwrap();
        ids.push(e.id);
        for t in q.claim(10, None).await.unwrap().tasks {
            assert_eq!(
                q.ack(&t.id, &t.lease_token).await.unwrap(),
                AckOutcome::Acked
            );
        }
    }
    assert!(
        q.get(&ids[0].clone().into()).await.unwrap().is_none(),
        "dropped"
    );
    let t = q.get(&ids[1].clone().into()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Succeeded);
    assert_eq!(t.group.as_deref(), Some("tenant-1"));
    let mut raw = ctx.raw();
    assert_eq!(
        dueq_testkit::hlen(&mut raw, &q.keys().groups),
        1,
        "only the kept task has a group entry"
    );
    // retention turned off: the next ack lets the kept task go, group entry included
    q.update_settings(&SettingsPatch::default().succeeded_max(None))
        .await
        .unwrap();
    q.enqueue(TaskSpec::new(vec![9]).group("tenant-1"))
        .await
        .unwrap();
    for t in q.claim(10, None).await.unwrap().tasks {
        q.ack(&t.id, &t.lease_token).await.unwrap();
    }
    assert!(q.get(&ids[1].clone().into()).await.unwrap().is_none());
    assert_eq!(dueq_testkit::hlen(&mut raw, &q.keys().groups), 0);
}

/// A record that cannot be read (hand edits, a future layout) goes to the dead-letter queue;
/// it never stops a script half-way (Redis does not roll scripts back), so the other tasks of
/// the same batch still run and nothing is lost.
#[tokio::test]
async fn unreadable_records_are_quarantined_not_lost() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("poison");
    let specs: Vec<_> = (0..5u8).map(|i| TaskSpec::new(vec![i])).collect();
    let ids: Vec<_> = q
        .enqueue_batch(&specs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    let mut raw = ctx.raw();
    let set = |raw: &mut redis::Connection, id: &dueq::TaskId, v: &[u8]| {
        let _: () = redis::cmd("HSET")
            .arg(&q.keys().tasks)
            .arg(id.as_str())
            .arg(v)
            .query(raw)
            .unwrap();
    };
    set(&mut raw, &ids[1], b"garbage-record");
    let mut long_key = vec![0u8; 40];
    long_key[10] = 200; // key length past the end
    set(&mut raw, &ids[2], &long_key);

    let c = q.claim(10, None).await.unwrap();
    let got: Vec<_> = c.tasks.iter().map(|t| t.id.clone()).collect();
    assert_eq!(got, vec![ids[0].clone(), ids[3].clone(), ids[4].clone()]);
    let page = q.dead_list(0, 10).await.unwrap();
    assert_eq!(page.total, 2);
    assert!(
        q.get(&ids[1].clone().into()).await.is_err(),
        "an unreadable record is reported, not shown"
    );

    // corrupted while active: the nack quarantines it instead of failing half-way
    let t = &c.tasks[0];
    set(&mut raw, &t.id, b"x");
    let o = q
        .nack(&t.id, &t.lease_token, "boom", None, false)
        .await
        .unwrap();
    assert_eq!(o, NackOutcome::Dead);
    for t in &c.tasks[1..] {
        assert_eq!(
            q.ack(&t.id, &t.lease_token).await.unwrap(),
            AckOutcome::Acked
        );
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.active, s.dead), (0, 0, 3));
}

#[tokio::test]
async fn history_counts_each_minute_and_forgets_the_old_hour() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("hist");
    // a counter from long ago, as if left by a claim two hours back
    let old_minute = ctx.redis_now_ms() / 60_000 - 120;
    let mut raw = ctx.raw();
    let _: () = redis::cmd("HSET")
        .arg(&q.keys().hist)
        .arg(format!("{old_minute}:c"))
        .arg(7)
        .query(&mut raw)
        .unwrap();

    // three tasks due 5 s ago: claimed at once, so each is at least 5 000 ms late
    let due = ctx.redis_now_ms() - 5_000;
    for i in 0..3 {
        q.enqueue(TaskSpec::new(vec![i]).due_at_ms(due).max_attempts(2))
            .await
            .unwrap();
    }
    let mut c = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(c.len(), 3);
    let last = c.pop().unwrap();
    let acks: Vec<_> = c.into_iter().map(|t| (t.id, t.lease_token)).collect();
    q.ack_batch(&acks).await.unwrap();
    q.nack(&last.id, &last.lease_token, "once", Some(0), false)
        .await
        .unwrap();
    let again = q.claim(1, None).await.unwrap().tasks.remove(0);
    q.nack(&again.id, &again.lease_token, "twice", Some(0), false)
        .await
        .unwrap();

    let h = q.history().await.unwrap();
    assert_eq!(h.len(), 60);
    let now_minute = ctx.redis_now_ms() / 60_000;
    assert_eq!(h[59].minute_start_ms, now_minute * 60_000);
    assert!(
        h.windows(2)
            .all(|w| w[1].minute_start_ms == w[0].minute_start_ms + 60_000)
    );
    // the test may straddle a minute boundary, so sum over the hour
    let sum = |f: fn(&dueq::MinuteStats) -> u64| h.iter().map(f).sum::<u64>();
    assert_eq!(sum(|m| m.claimed), 4);
    assert_eq!(sum(|m| m.succeeded), 2);
    assert_eq!(sum(|m| m.retried), 1);
    assert_eq!(sum(|m| m.dead), 1);
    let max = h.iter().map(|m| m.lateness_max_ms).max().unwrap();
    assert!((5_000..60_000).contains(&max), "lateness max {max}");
    assert!(sum(|m| m.lateness_sum_ms) >= 3 * 5_000);
    // the first claim of the minute dropped the two-hour-old field
    let old: Option<u64> = redis::cmd("HGET")
        .arg(&q.keys().hist)
        .arg(format!("{old_minute}:c"))
        .query(&mut raw)
        .unwrap();
    assert_eq!(old, None);
}

/// Writes Redis counts since its last save (`rdb_changes_since_last_save`).
fn dirty(raw: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(raw).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn recovering_and_polling_an_idle_queue_write_nothing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("idle");
    q.enqueue(TaskSpec::new(b"later".to_vec()).delay_ms(3_600_000))
        .await
        .unwrap();
    // a task that was claimed and acknowledged leaves the sweep cursors where they stop
    q.enqueue(TaskSpec::new(b"now".to_vec())).await.unwrap();
    let t = q.claim(1, None).await.unwrap().tasks.remove(0);
    q.ack(&t.id, &t.lease_token).await.unwrap();
    q.recover().await.unwrap();
    let mut raw = ctx.raw();
    let before = dirty(&mut raw);
    for _ in 0..3 {
        q.recover().await.unwrap();
        assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    }
    assert_eq!(
        dirty(&mut raw),
        before,
        "an idle recover or claim wrote to Redis"
    );
}

#[tokio::test]
async fn a_queue_paused_before_its_first_task_is_listed() {
    let ctx = Ctx::new().await;
    ctx.queue("ghost").pause().await.unwrap();
    assert_eq!(ctx.client.queues().await.unwrap(), vec!["ghost".to_owned()]);
    assert!(ctx.queue("ghost").stats().await.unwrap().paused);
}

#[tokio::test]
async fn readiness_answers_in_bounded_time_when_redis_hangs() {
    let ctx = Ctx::new().await;
    assert!(ctx.client.readiness().await.ready());
    let pid = ctx.server.pid().to_string();
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let t = std::time::Instant::now();
    let r = ctx.client.readiness().await;
    let took = t.elapsed();
    signal("-CONT");
    assert!(!r.ready() && !r.redis, "{r:?}");
    // the bound is READINESS_TIMEOUT_MS; the margin only absorbs scheduling on a busy machine
    let bound = std::time::Duration::from_millis(dueq::READINESS_TIMEOUT_MS + 3_000);
    assert!(took < bound, "readiness took {took:?}");
    dueq_testkit::wait_until_async(DEADLINE, "ready again after SIGCONT", || async {
        ctx.client.readiness().await.ready()
    })
    .await;
}

#[tokio::test]
async fn keys_dot_and_dot_dot_are_refused_at_enqueue() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("dots");
    for key in [".", ".."] {
        let e = q
            .enqueue(TaskSpec::new(b"x".to_vec()).key(key))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), dueq::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("key"), "{e}");
    }
    assert_eq!(q.stats().await.unwrap().enqueued_total, 0);
    // keys that merely contain dots are fine
    assert!(
        q.enqueue(TaskSpec::new(b"x".to_vec()).key("..."))
            .await
            .unwrap()
            .created()
    );
}

/// Active tasks sit in two small sets (`active`, `leases`) that Redis would keep as listpacks,
/// where every insert and delete scans the list. Each holds a pin entry that keeps it a hash
/// table while tasks are active; counts, browsing and the concurrency limit leave it out, and
/// it goes with the last task.
#[tokio::test]
async fn active_tasks_live_in_hash_tables_and_the_pin_is_never_counted() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("pinned");
    let k = q.keys().clone();
    let mut raw = ctx.raw();
    let encoding = |raw: &mut redis::Connection, key: &str| -> Option<String> {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(key)
            .query(raw)
            .unwrap()
    };
    for i in 0..3 {
        q.enqueue(TaskSpec::new(vec![i])).await.unwrap();
    }
    q.update_settings(&SettingsPatch::default().concurrency(Some(3)))
        .await
        .unwrap();
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 3);
    assert_eq!(encoding(&mut raw, &k.active).as_deref(), Some("skiplist"));
    assert_eq!(encoding(&mut raw, &k.leases).as_deref(), Some("hashtable"));
    assert_eq!(q.stats().await.unwrap().active, 3);
    let page = q.browse(TaskState::Active, None, 10).await.unwrap();
    assert_eq!(page.tasks.len(), 3);
    assert!(!c.orphans, "the pins are not orphaned leases");

    // the concurrency limit counts the three tasks, not the pin: one more task is held back
    // now, and can be claimed once one of the three is acked
    q.enqueue(TaskSpec::new(vec![9])).await.unwrap();
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    let (a, b, last) = (&c.tasks[0], &c.tasks[1], &c.tasks[2]);
    assert_eq!(
        q.ack(&a.id, &a.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let d = q.claim(10, None).await.unwrap();
    assert_eq!(d.tasks.len(), 1);
    let fourth = &d.tasks[0];
    q.nack(&b.id, &b.lease_token, "boom", None, false)
        .await
        .unwrap();
    assert_eq!(
        q.release(&[(fourth.id.clone(), fourth.lease_token.clone())])
            .await
            .unwrap(),
        vec![true]
    );
    assert_eq!(q.stats().await.unwrap().active, 1);
    assert_eq!(encoding(&mut raw, &k.active).as_deref(), Some("skiplist"));

    // the last one leaves: neither set is kept
    assert_eq!(
        q.ack(&last.id, &last.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    assert_eq!(q.stats().await.unwrap().active, 0);
    assert_eq!(encoding(&mut raw, &k.active), None);
    assert_eq!(encoding(&mut raw, &k.leases), None);

    // a pin left alone (an older dueq's ack, during an upgrade, does not remove it) is not
    // counted, and the next claim drops it
    let stale = ctx.queue("pinned-stale");
    let sk = stale.keys().clone();
    let _: () = redis::pipe()
        .zadd(
            &sk.active,
            dueq_testkit::LEASES_PIN,
            9_007_199_254_740_992u64,
        )
        .hset(&sk.leases, dueq_testkit::LEASES_PIN, "")
        .query(&mut raw)
        .unwrap();
    assert_eq!(stale.stats().await.unwrap().active, 0);
    assert!(stale.claim(10, None).await.unwrap().tasks.is_empty());
    assert_eq!(encoding(&mut raw, &sk.active), None);
    assert_eq!(encoding(&mut raw, &sk.leases), None);
}
