//! Partition faults that reviews found, each test named by what must hold: a wake-up of one
//! partition keeps the timers of the others, a saturated worker claims as soon as a slot
//! frees, and a pause right after a partition change pauses every partition.

use std::time::{Duration, Instant};

use dueq::{Client, Outcome, TaskSpec, Worker, partition_of_key};
use tokio::sync::mpsc;

use super::partitioned;
use crate::support::{Ctx, DEADLINE};

/// A partition with a task due soon keeps its timer when another partition's wake-up makes
/// the claimer look: it is not asked early for nothing (which would push its next look to
/// the fallback poll, a second away), so its task is claimed on time.
#[tokio::test]
async fn a_wake_up_of_one_partition_keeps_the_timers_of_the_others() {
    let ctx = Ctx::new().await;
    let q = partitioned(&ctx.client, "timers", 2).await;
    let key_of = |p: u16| {
        (0..)
            .map(|i| format!("t{i}"))
            .find(|k| partition_of_key(k, 2) == p)
            .unwrap()
    };
    let mut claimer = q.due_claimer();
    assert!(claimer.claim(10).await.unwrap().is_empty());
    let later = q
        .enqueue(TaskSpec::new(vec![]).key(key_of(1)).delay_ms(700))
        .await
        .unwrap();
    let start = Instant::now();
    let mut woke = false;
    loop {
        assert!(
            start.elapsed() < DEADLINE,
            "the task due in 700 ms never came"
        );
        if !woke && start.elapsed() > Duration::from_millis(300) {
            q.enqueue(TaskSpec::new(vec![]).key(key_of(0)))
                .await
                .unwrap();
            woke = true;
        }
        tokio::select! {
            () = claimer.ready() => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => continue,
        }
        let got = claimer.claim(10).await.unwrap();
        crate::support::ack_all(&q, &got).await;
        if let Some(t) = got.iter().find(|t| t.id == later.id) {
            let late = t.claimed_at_ms - t.due_at_ms;
            assert!(late < 200, "claimed {late} ms after its due time");
            break;
        }
    }
    assert!(woke);
    claimer.close();
}

/// A saturated worker (every slot busy while tasks keep coming due) claims as soon as a slot
/// frees on a partitioned queue, as with one partition: partitions held back for want of a
/// slot take what a short claim of another left (before, freed slots stayed idle for up to a
/// fallback poll while due tasks waited; found by review). Same run, same load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_worker_claims_as_soon_as_a_slot_frees() {
    let ctx = Ctx::new().await;
    let producer = Client::connect(&ctx.server.url()).await.unwrap();
    let mut makespan = Vec::new();
    for (name, n) in [("sat1", 1u16), ("sat6", 6)] {
        partitioned(&ctx.client, name, n).await;
        let q = producer.queue(name).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let worker = Worker::builder(ctx.client.clone())
            .concurrency(4)
            .handle(name, move |_t| {
                let tx = tx.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let _ = tx.send(Instant::now());
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start();
        // idle a while first, as a worker waiting for work does
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let start = Instant::now();
        // one batch, due 50 ms apart from 0.5 s on (keyless: the partitions in turn)
        let specs: Vec<TaskSpec> = (0..12u64)
            .map(|i| TaskSpec::new(vec![]).delay_ms(500 + i * 50))
            .collect();
        q.enqueue_batch(&specs).await.unwrap();
        let mut last = start;
        for _ in 0..12 {
            last = tokio::time::timeout(DEADLINE, rx.recv())
                .await
                .unwrap()
                .unwrap();
        }
        makespan.push(last - start);
        worker.shutdown().await.unwrap();
    }
    // 12 tasks of 200 ms on 4 slots, the first due at 0.5 s: about 1.26 s either way (seen:
    // 1 partition 1.26 s, 6 partitions 1.81 to 1.91 s, slots idle up to a poll while tasks wait)
    assert!(
        makespan[1] < makespan[0] + Duration::from_millis(300),
        "1 partition: {:?}, 6 partitions: {:?}",
        makespan[0],
        makespan[1]
    );
}

/// A pause through a client whose partition count is up to `LAYOUT_TTL` old (read just
/// before another process partitioned the empty queue) pauses every partition (before, only
/// partition 0, while stats said the queue was paused; found by review).
#[tokio::test]
async fn a_pause_right_after_a_partition_change_pauses_every_partition() {
    let ctx = Ctx::new().await;
    let other = Client::connect(&ctx.server.url()).await.unwrap();
    let stale = other.queue("sp").unwrap();
    stale.stats().await.unwrap(); // caches the count: 1
    let q = partitioned(&ctx.client, "sp", 6).await;
    stale.pause().await.unwrap();
    let parts = q.partition_stats().await.unwrap();
    assert!(
        parts.iter().all(|p| p.paused),
        "paused: {:?}",
        parts.iter().map(|p| p.paused).collect::<Vec<_>>()
    );
}
