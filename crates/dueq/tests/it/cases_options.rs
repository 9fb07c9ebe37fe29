//! Cases C27 to C29 of `shared/cases/CASES.md`: priorities, expiry, debounce.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, EnqueueOutcome, OnConflict, OnExpire, Outcome, SettingsPatch, TaskRef, TaskSpec,
    Worker,
};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE};

/// Case C27 in shared/cases/CASES.md: priorities.
///
/// 1 000 due tasks of priority 9, then 10 of priority 0, all due, one claimer: the 10 come
/// out first, in enqueue order (FIFO within one priority and due time), then the 1 000 in
/// theirs; a priority-0 task due in 5 s is not handed out before its due time while the
/// priority-9 tasks are due (it comes out after them, at or after its due time).
#[tokio::test]
async fn c27_priorities() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c27");
    let nines: Vec<TaskSpec> = (0..1_000)
        .map(|i| TaskSpec::new(format!("p9-{i}").into_bytes()).priority(9))
        .collect();
    q.enqueue_batch(&nines).await.unwrap();
    let zeros: Vec<TaskSpec> = (0..10)
        .map(|i| TaskSpec::new(format!("p0-{i}").into_bytes()))
        .collect();
    q.enqueue_batch(&zeros).await.unwrap();
    let later = q
        .enqueue(TaskSpec::new(b"p0-later".to_vec()).delay_ms(5_000))
        .await
        .unwrap();

    let first = q.claim(10, None).await.unwrap().tasks;
    let got: Vec<String> = first
        .iter()
        .map(|t| String::from_utf8(t.payload.clone()).unwrap())
        .collect();
    let want: Vec<String> = (0..10).map(|i| format!("p0-{i}")).collect();
    assert_eq!(got, want);

    // the priority-9 backlog, claimed 100 at a time; the later priority-0 task comes out
    // only at or after its due time (on a machine slow enough to take 5 s for this loop,
    // among them; else after them)
    let mut nine = Vec::new();
    let mut later_claimed = None;
    let start = Instant::now();
    while nine.len() < 1_000 || later_claimed.is_none() {
        assert!(start.elapsed() < DEADLINE, "tasks stopped coming");
        let c = q.claim(100, None).await.unwrap();
        if c.tasks.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for t in c.tasks {
            if t.payload == b"p0-later" {
                assert!(
                    t.claimed_at_ms >= later.due_at_ms,
                    "handed out before its due time"
                );
                later_claimed = Some(nine.len());
            } else {
                nine.push(String::from_utf8(t.payload).unwrap());
            }
        }
    }
    let want: Vec<String> = (0..1_000).map(|i| format!("p9-{i}")).collect();
    assert_eq!(nine, want, "FIFO within priority 9");
}

/// Case C28 in shared/cases/CASES.md: expiry.
///
/// A task with `ttl_ms` 2 000 on a queue paused for 3 s, then resumed, with a worker running
/// all along: it is never handed out, it ends `expired` (no record; with `on_expire: dead`,
/// in the dead-letter queue with reason `expired`), it is counted in `expired_total` (the
/// source of `dueq_tasks_finished_total{outcome="expired"}`, checked over HTTP in the server
/// tests), and its key is free again. A task that started before its expiry is not
/// interrupted by it.
#[tokio::test]
async fn c28_expiry() {
    let ctx = Ctx::new().await;
    for (name, on_expire) in [("c28", OnExpire::Drop), ("c28-dead", OnExpire::Dead)] {
        let q = ctx.queue(name);
        q.update_settings(&SettingsPatch::default().on_expire(Some(on_expire)))
            .await
            .unwrap();
        let ran = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let r2 = ran.clone();
        let worker = Worker::builder(ctx.client.clone())
            .handle(name, move |t| {
                let r2 = r2.clone();
                async move {
                    r2.lock().unwrap().push(t.payload.clone());
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start();
        q.pause().await.unwrap();
        let e = q
            .enqueue(
                TaskSpec::new(b"reminder".to_vec())
                    .key("remind:1")
                    .ttl_ms(2_000),
            )
            .await
            .unwrap();
        let paused_at = ctx.redis_now_ms();
        while ctx.redis_now_ms() < paused_at + 3_000 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        q.resume().await.unwrap();
        // the worker's claims (or its recovery) end it as expired
        wait_until_async(DEADLINE, "the task expired", || {
            let q = q.clone();
            async move { q.stats().await.unwrap().expired_total == 1 }
        })
        .await;
        // a task enqueued after it is run: the worker was claiming, and skipped the expired one
        q.enqueue(TaskSpec::new(b"next".to_vec())).await.unwrap();
        wait_until_async(DEADLINE, "the next task ran", || {
            let ran = ran.clone();
            async move { ran.lock().unwrap().contains(&b"next".to_vec()) }
        })
        .await;
        worker.shutdown().await.unwrap();
        assert!(
            !ran.lock().unwrap().contains(&b"reminder".to_vec()),
            "an expired task was handed out"
        );
        let s = q.stats().await.unwrap();
        assert_eq!(s.expired_total, 1);
        let by_id = q.get(&TaskRef::id(e.id.as_str()).unwrap()).await.unwrap();
        match on_expire {
            OnExpire::Dead => {
                let page = q.dead_list(0, 10).await.unwrap();
                assert_eq!(page.tasks.len(), 1);
                assert_eq!(page.tasks[0].task.last_error.as_deref(), Some("expired"));
                assert!(by_id.is_some());
            }
            _ => {
                assert_eq!(s.dead, 0);
                assert!(by_id.is_none(), "an expired task left its record");
            }
        }
        let again = q
            .enqueue(
                TaskSpec::new(b"again".to_vec())
                    .key("remind:1")
                    .delay_ms(60_000),
            )
            .await
            .unwrap();
        assert!(again.created(), "the key was not freed");
    }

    // started before its expiry: not interrupted
    let q = ctx.queue("c28-started");
    let slow = q
        .enqueue(TaskSpec::new(b"slow".to_vec()).ttl_ms(2_000))
        .await
        .unwrap();
    let c = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(c.len(), 1);
    while ctx.redis_now_ms() < slow.due_at_ms + 2_500 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    q.recover().await.unwrap();
    assert_eq!(
        q.ack(&c[0].id, &c[0].lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.expired_total, s.succeeded_total), (0, 1));
}

/// Case C29 in shared/cases/CASES.md: debounce.
///
/// Key `search-index:42`, `on_conflict: debounce`, delay 1 s, `debounce_max_ms` 3 000,
/// re-enqueued every 300 ms for 10 s with a worker running: it runs (not never), at most
/// about every 3 s (not on every call: 2 to 5 runs in the 10 s, each due no later than its
/// first enqueue + 3 s), and each run carries the payload of the latest enqueue before it
/// (the last one that replaced or created its task).
#[tokio::test]
async fn c29_debounce() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c29");
    // (payload, due_at_ms, claimed_at_ms, id) per run
    let runs = Arc::new(Mutex::new(Vec::<(u64, u64, u64, String)>::new()));
    let r2 = runs.clone();
    let worker = Worker::builder(ctx.client.clone())
        .handle("c29", move |t| {
            let r2 = r2.clone();
            async move {
                let n = String::from_utf8(t.payload.clone())
                    .unwrap()
                    .parse()
                    .unwrap();
                r2.lock().unwrap().push((
                    n,
                    t.due_at_ms,
                    t.claimed_at_ms,
                    t.id.as_str().to_owned(),
                ));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    // outcome of each enqueue, by its payload number
    let mut outcomes = Vec::new();
    let mut created_at = std::collections::HashMap::new();
    let start = Instant::now();
    let mut n = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(300));
    while start.elapsed() < Duration::from_secs(10) {
        tick.tick().await;
        let e = q
            .enqueue(
                TaskSpec::new(n.to_string().into_bytes())
                    .key("search-index:42")
                    .delay_ms(1_000)
                    .on_conflict(OnConflict::Debounce)
                    .debounce_max_ms(3_000),
            )
            .await
            .unwrap();
        if e.created() {
            created_at.insert(
                e.id.clone(),
                q.get(&TaskRef::id(e.id.as_str()).unwrap())
                    .await
                    .unwrap()
                    .map(|t| t.created_at_ms),
            );
        }
        outcomes.push(e.outcome);
        n += 1;
    }
    let in_loop = runs.lock().unwrap().len();
    // the last task runs 1 s after the last enqueue (its due time)
    wait_until_async(DEADLINE, "the last enqueue ran", || {
        let runs = runs.clone();
        async move { runs.lock().unwrap().last().map(|r| r.0) == Some(n - 1) }
    })
    .await;
    worker.shutdown().await.unwrap();
    let runs = runs.lock().unwrap().clone();
    assert!(
        (2..=5).contains(&in_loop),
        "{in_loop} runs in 10 s of enqueues every 300 ms: {runs:?}"
    );
    for (payload, due, claimed, _) in &runs {
        let i = *payload as usize;
        assert!(
            matches!(
                outcomes[i],
                EnqueueOutcome::Created | EnqueueOutcome::Replaced
            ),
            "run of payload {i}, whose enqueue was {:?}",
            outcomes[i]
        );
        // the latest enqueue before the run: the next one found it running or gone
        if let Some(next) = outcomes.get(i + 1) {
            assert!(
                matches!(next, EnqueueOutcome::InProgress | EnqueueOutcome::Created),
                "payload {i} ran, but enqueue {} replaced its task ({next:?})",
                i + 1
            );
        }
        assert!(claimed >= due);
    }
    // while changes kept coming, runs follow one another by about 3 s: the cap, not every
    // 300 ms, not 1 s after the last change (the final run, after the enqueues stopped, is
    // due 1 s after the last one)
    for w in runs[..runs.len() - 1].windows(2) {
        assert!(
            w[1].2 - w[0].2 >= 2_500,
            "runs {} ms apart",
            w[1].2 - w[0].2
        );
    }
    for (id, created) in &created_at {
        let c = created.unwrap();
        let run = runs.iter().find(|r| r.3 == id.as_str()).unwrap();
        assert!(
            run.1 <= c + 3_000,
            "task created at {c} was due at {}",
            run.1
        );
    }
}
