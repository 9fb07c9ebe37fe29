//! The rules of a partitioned queue on one server: settings split over the partitions, a
//! change refused while the queue holds tasks, workers that take every partition's work once
//! and idle at one round of calls per poll, priorities and schedules, split limits, and
//! partitions used again.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dueq::{
    ErrorKind, Outcome, RateLimit, SettingsPatch, TaskSpec, Worker, partition_of_id,
    partition_of_key,
};
use tokio::sync::mpsc;

use super::partitioned;
use crate::support::{Ctx, DEADLINE, script_calls};

/// Limits are split over the partitions (so together they hold the queue's limit), a limit
/// below the partition count and a change of partitions on a queue with tasks are refused
/// naming the field, and nothing is written.
#[tokio::test]
async fn settings_are_split_and_partitions_change_only_on_an_empty_queue() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    q.update_settings(
        &SettingsPatch::default()
            .concurrency(Some(8))
            .rate_limit(Some(RateLimit::new(100, 1_000)))
            .max_attempts(Some(3)),
    )
    .await
    .unwrap();
    let s = partitioned(&ctx.client, "orders", 3).await;
    drop(s);
    let s = q.settings().await.unwrap();
    assert_eq!(
        s.concurrency,
        Some(8),
        "the queue's limit is the sum of the shares"
    );
    assert_eq!(s.rate_limit, Some(RateLimit::new(100, 1_000)));
    assert_eq!(s.max_attempts, Some(3));
    let shares: Vec<u64> = q
        .partition_stats()
        .await
        .unwrap()
        .iter()
        .map(|p| p.concurrency_limit.unwrap())
        .collect();
    assert_eq!(shares, vec![3, 3, 2]);
    assert_eq!(q.stats().await.unwrap().concurrency_limit, Some(8));

    // a limit below the partition count
    let e = q
        .update_settings(&SettingsPatch::default().group_concurrency(Some(2)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("group_concurrency"), "{e}");
    assert_eq!(q.settings().await.unwrap().group_concurrency, None);

    // out of range
    for bad in [0u16, 1025] {
        let e = q
            .update_settings(&SettingsPatch::default().partitions(Some(bad)))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("partitions"), "{e}");
    }

    // with a task in the queue, partitions stay
    q.enqueue(TaskSpec::new(b"1".to_vec()).key("k1"))
        .await
        .unwrap();
    let e = q
        .update_settings(&SettingsPatch::default().partitions(Some(6)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string().contains("partitions: the queue holds 1"),
        "{e}"
    );
    assert_eq!(q.settings().await.unwrap().partitions, Some(3));

    // the concurrency limit holds over all partitions together
    let specs: Vec<TaskSpec> = (0..60)
        .map(|i| TaskSpec::new(vec![]).key(format!("c{i}")))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let mut active = 0;
    for _ in 0..10 {
        active += q.claim(100, None).await.unwrap().tasks.len();
    }
    assert_eq!(active, 8);
    assert_eq!(q.stats().await.unwrap().active, 8);

    // pause and resume reach every partition
    q.pause().await.unwrap();
    assert!(q.partition_stats().await.unwrap().iter().all(|p| p.paused));
    q.resume().await.unwrap();
    assert!(q.partition_stats().await.unwrap().iter().all(|p| !p.paused));
}

/// A worker on a partitioned queue runs every task once, wakes for a task enqueued into any
/// partition of an idle queue, and idles at one round of calls per poll.
#[tokio::test]
async fn a_worker_takes_every_partition_once_and_idles_cheaply() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 6).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(50)
        .handle("orders", move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((t.id, t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let specs: Vec<TaskSpec> = (0..3_000)
        .map(|i| {
            let s = TaskSpec::new(vec![]).delay_ms(i % 300);
            if i % 2 == 0 {
                s.key(format!("k{i}"))
            } else {
                s
            }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let mut seen = BTreeSet::new();
    let mut per_part = [0u32; 6];
    let start = Instant::now();
    while seen.len() < 3_000 {
        let left = DEADLINE.saturating_sub(start.elapsed());
        let (id, due, started) = tokio::time::timeout(left, rx.recv())
            .await
            .expect("every task runs")
            .unwrap();
        assert!(started >= due, "{id} early");
        per_part[usize::from(partition_of_id(id.as_str(), 6))] += 1;
        assert!(seen.insert(id), "a task ran twice");
    }
    assert!(per_part.iter().all(|&c| c > 300), "{per_part:?}");
    crate::support::wait_stats(&q, |s| s.active == 0 && s.succeeded_total == 3_000).await;

    // idle: the partitions' fallback polls go out together
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let before = script_calls(&ctx);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = script_calls(&ctx) - before;
    // 6 partitions polled about once a second for 4 s, plus the worker's own duties
    assert!(calls <= 6 * 5 + 6, "{calls} script calls in 4 s idle");

    // a task into an idle queue, whatever its partition, starts at once
    for i in 0..6 {
        let sent = Instant::now();
        q.enqueue(TaskSpec::new(vec![]).key(format!("late{i}")))
            .await
            .unwrap();
        let got = tokio::time::timeout(DEADLINE, rx.recv()).await.unwrap();
        assert!(got.is_some());
        assert!(
            sent.elapsed() < Duration::from_millis(500),
            "woken after {:?}",
            sent.elapsed()
        );
    }
    worker.shutdown().await.unwrap();
}

/// The fallback polls of an idle partitioned queue's partitions (with tasks due in an hour)
/// go out together: one round of calls per poll, also after wake-ups of each partition at
/// other times put them out of step.
#[tokio::test]
async fn idle_partitions_poll_in_one_round() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 6).await;
    // a key of each partition
    let keys: Vec<String> = (0..6)
        .map(|p| {
            (0..)
                .map(|i| format!("k{i}"))
                .find(|k| partition_of_key(k, 6) == p)
                .unwrap()
        })
        .collect();
    // every partition holds work due in an hour, as an idle delay queue does
    let future: Vec<TaskSpec> = (0..60)
        .map(|i| {
            TaskSpec::new(vec![])
                .key(format!("f{i}"))
                .delay_ms(3_600_000)
        })
        .collect();
    q.enqueue_batch(&future).await.unwrap();
    assert!(
        q.partition_stats()
            .await
            .unwrap()
            .iter()
            .all(|p| p.scheduled > 0)
    );
    let mut claimer = q.due_claimer();
    claimer.claim(10).await.unwrap();
    let start = Instant::now();
    let mut woken = 0;
    // wake each partition in turn, 150 ms apart
    while woken < 6 {
        if start.elapsed() > Duration::from_millis(300 + 150 * woken as u64) {
            q.enqueue(TaskSpec::new(vec![]).key(keys[woken].as_str()))
                .await
                .unwrap();
            woken += 1;
        }
        tokio::select! {
            () = claimer.ready() => {
                let got = claimer.claim(10).await.unwrap();
                crate::support::ack_all(&q, &got).await;
            }
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    let mut rounds = 0;
    let idle = Instant::now();
    while idle.elapsed() < Duration::from_secs(4) {
        claimer.ready().await;
        assert!(claimer.claim(10).await.unwrap().is_empty());
        rounds += 1;
    }
    // 4 s of 1 s polls (and one more round while they come back in step); partitions
    // polling out of step would make about 24
    assert!(rounds <= 7, "{rounds} rounds of claims in 4 s idle");
    claimer.close();
}

/// Priorities and schedules keep their meaning on a partitioned queue: a claim takes an even
/// share from each partition, priority 0 first in each; a schedule's ticks are placed in
/// partition 0 (beside the schedule, where their `schedule:` keys route) and run once each.
#[tokio::test]
async fn priorities_and_schedules_on_a_partitioned_queue() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "orders", 4).await;
    let key_in = |p: u16, tag: &str| {
        (0..)
            .map(|i| format!("{tag}{i}"))
            .filter(|k| partition_of_key(k, 4) == p)
            .take(if tag == "low" { 50 } else { 5 })
            .collect::<Vec<_>>()
    };
    let mut specs = Vec::new();
    for p in 0..4 {
        for k in key_in(p, "low") {
            specs.push(TaskSpec::new(b"9".to_vec()).key(k).priority(9));
        }
    }
    for p in 0..4 {
        for k in key_in(p, "high") {
            specs.push(TaskSpec::new(b"0".to_vec()).key(k));
        }
    }
    q.enqueue_batch(&specs).await.unwrap();
    let c = q.claim(40, None).await.unwrap();
    assert_eq!(c.tasks.len(), 40);
    let high = c.tasks.iter().filter(|t| t.priority == 0).count();
    assert_eq!(
        high, 20,
        "every partition's priority-0 tasks come in its share"
    );
    for p in 0..4 {
        let mine: Vec<u8> = c
            .tasks
            .iter()
            .filter(|t| partition_of_id(t.id.as_str(), 4) == p)
            .map(|t| t.priority)
            .collect();
        assert_eq!(mine, [0, 0, 0, 0, 0, 9, 9, 9, 9, 9], "partition {p}");
    }
    crate::support::ack_all(&q, &c.tasks).await;

    // a schedule every second (the shortest allowed); a worker fires and runs its ticks
    let (tx, mut rx) = mpsc::unbounded_channel();
    q.set_schedule(&dueq::ScheduleSpec::new("tick", b"t".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(50)
        .handle("orders", move |t| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((t.id, t.key));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let mut ticks = BTreeSet::new();
    while ticks.len() < 4 {
        let (id, key) = tokio::time::timeout(DEADLINE, rx.recv())
            .await
            .expect("ticks run")
            .unwrap();
        let Some(key) = key.filter(|k| k.starts_with("schedule:tick:")) else {
            continue;
        };
        assert_eq!(
            partition_of_id(id.as_str(), 4),
            0,
            "{key} outside partition 0"
        );
        assert!(ticks.insert(key), "a tick ran twice");
    }
    worker.shutdown().await.unwrap();
}

/// A rate limit split over the partitions holds for the queue as a whole, with several
/// claimers at once; and the bound of the split: due work in one partition gets only that
/// partition's share of a concurrency limit.
#[tokio::test]
async fn split_limits_hold_for_the_whole_queue_and_their_bound() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rated");
    q.update_settings(
        &SettingsPatch::default()
            .partitions(Some(3))
            .rate_limit(Some(RateLimit::new(30, 600_000))),
    )
    .await
    .unwrap();
    let specs: Vec<TaskSpec> = (0..300)
        .map(|i| TaskSpec::new(vec![]).key(format!("r{i}")))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    // four claimers, as four processes would, each asking until the limit stops them all
    let claims = (0..4).map(|_| {
        let q = q.clone();
        async move {
            let mut c = q.due_claimer();
            let mut got = 0;
            for _ in 0..20 {
                got += c.claim(7).await.unwrap().len();
            }
            got
        }
    });
    let total: usize = futures_util::future::join_all(claims).await.iter().sum();
    assert_eq!(
        total, 30,
        "the queue's rate limit over all partitions and claimers"
    );
    let s = q.stats().await.unwrap();
    assert_eq!(s.active, 30);
    assert_eq!(s.rate_limit, Some(RateLimit::new(30, 600_000)));

    // the bound: a concurrency limit of 6 over 3 partitions, all due work in partition 1
    let q = ctx.queue("skewed");
    q.update_settings(
        &SettingsPatch::default()
            .partitions(Some(3))
            .concurrency(Some(6)),
    )
    .await
    .unwrap();
    let specs: Vec<TaskSpec> = (0..)
        .map(|i| format!("s{i}"))
        .filter(|k| partition_of_key(k, 3) == 1)
        .take(20)
        .map(|k| TaskSpec::new(vec![]).key(k))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let got = q.claim(20, None).await.unwrap().tasks.len();
    assert_eq!(got, 2, "partition 1's share of 6 over 3");
}

/// Partitions left from an earlier count take the queue's state when they are used again: a
/// queue paused at 4 partitions, set to 1, resumed and set to 4 again is not paused anywhere.
#[tokio::test]
async fn partitions_used_again_take_the_queue_state() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "again", 4).await;
    q.pause().await.unwrap();
    partitioned(&ctx.client, "again", 1).await;
    q.resume().await.unwrap();
    partitioned(&ctx.client, "again", 4).await;
    let parts = q.partition_stats().await.unwrap();
    assert_eq!(parts.len(), 4);
    assert!(parts.iter().all(|p| !p.paused), "{parts:?}");
    q.enqueue_batch(
        &(0..20)
            .map(|i| TaskSpec::new(vec![]).key(format!("a{i}")))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert_eq!(q.claim(20, None).await.unwrap().tasks.len(), 20);
}
