//! Queue weights of a worker that serves several queues: weighted sharing
//! of the slots while several queues have due work, and strict order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dueq::{ErrorKind, Outcome, QueueOrder, TaskSpec, Worker, WorkerBuilder};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, due_tasks, script_calls, wait_stats};

/// The order in which handlers started: (queue, payload).
type Starts = Arc<Mutex<Vec<(String, String)>>>;

/// A handler for `queue` that records its start and then takes `ms`.
fn recording(b: WorkerBuilder, queue: &str, starts: &Starts, ms: u64) -> WorkerBuilder {
    let starts = starts.clone();
    let name = queue.to_owned();
    b.handle(queue, move |t| {
        starts.lock().unwrap().push((
            name.clone(),
            String::from_utf8_lossy(&t.payload).into_owned(),
        ));
        async move {
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Outcome::Success
        }
    })
}

async fn wait_starts(starts: &Starts, n: usize) {
    wait_until_async(DEADLINE, "enough handlers started", || async {
        starts.lock().unwrap().len() >= n
    })
    .await;
}

/// The share of `queue` among the first `n` starts.
fn share_of(starts: &Starts, queue: &str, n: usize) -> f64 {
    let s = starts.lock().unwrap();
    s[..n].iter().filter(|(q, _)| q == queue).count() as f64 / n as f64
}

/// Two queues with a large backlog each, a worker with two slots: weights 3:1 give the first
/// queue about three quarters of the claims; equal weights give each about half (the control:
/// the band for 3:1 is not met by chance).
#[tokio::test]
async fn weighted_shares_the_slots_in_proportion_while_both_have_due_work() {
    const N: usize = 200;
    let ctx = Ctx::new().await;
    for (queue, weight, low, high) in [("w3", 3, 0.65, 0.85), ("e1", 1, 0.35, 0.65)] {
        let (a, b) = (format!("{queue}-a"), format!("{queue}-b"));
        due_tasks(&ctx.queue(&a), 600, None).await;
        due_tasks(&ctx.queue(&b), 600, None).await;
        let starts: Starts = Arc::default();
        let w = Worker::builder(ctx.client.clone()).concurrency(2);
        // b first: the order of `handle` calls must not decide
        let w = recording(w, &b, &starts, 1);
        let w = recording(w, &a, &starts, 1)
            .weight(&a, weight)
            .weight(&b, 1);
        let worker = w.build().unwrap().start();
        wait_starts(&starts, N).await;
        worker.shutdown().await.unwrap();
        let share = share_of(&starts, &a, N);
        assert!(
            (low..=high).contains(&share),
            "weight {weight}:1: {a} got {:.0} % of the first {N} claims, not {:.0} to {:.0} %",
            share * 100.0,
            low * 100.0,
            high * 100.0
        );
    }
}

/// A heavy queue with nothing due takes nothing: the light queue's backlog gets every slot.
#[tokio::test]
async fn an_idle_heavy_queue_leaves_every_slot_to_the_others() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ctx = Ctx::new().await;
    let light = ctx.queue("light");
    due_tasks(&light, 100, None).await;
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r2, m2) = (running.clone(), most.clone());
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(4)
        .handle("heavy", |_| async { Outcome::Success })
        .handle("light", move |_| {
            let (r, m) = (r2.clone(), m2.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Outcome::Success
            }
        })
        .weight("heavy", 1_000)
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the light queue drained", || {
        let light = light.clone();
        async move { light.stats().await.unwrap().succeeded_total == 100 }
    })
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(
        most.load(Ordering::SeqCst),
        4,
        "the light queue ran 4 at once"
    );
}

/// Strict order: while the heavier queue has due work no task of the lighter one starts;
/// once it is empty the lighter one drains; and work that becomes due on the heavier queue
/// meanwhile goes first again, all of it before the lighter queue's next task.
#[tokio::test]
async fn strict_serves_a_lower_queue_only_while_the_higher_has_nothing_due() {
    let ctx = Ctx::new().await;
    let (high, low) = (ctx.queue("high"), ctx.queue("low"));
    due_tasks(&high, 50, None).await;
    due_tasks(&low, 200, None).await;
    let starts: Starts = Arc::default();
    let w = Worker::builder(ctx.client.clone())
        .concurrency(3)
        .queue_order(QueueOrder::Strict);
    let w = recording(w, "low", &starts, 2);
    let w = recording(w, "high", &starts, 2).weight("high", 2);
    let worker = w.build().unwrap().start();
    wait_starts(&starts, 60).await;
    {
        let s = starts.lock().unwrap();
        let first_low = s.iter().position(|(q, _)| q == "low").unwrap();
        let last_high = s.iter().rposition(|(q, _)| q == "high").unwrap();
        assert_eq!(last_high, 49, "all 50 high tasks started first: {s:?}");
        assert!(
            first_low > last_high,
            "a low task started while high had due work"
        );
    }
    // high work again, while low still has a backlog: it all goes before the next low task
    let specs: Vec<_> = (0..10)
        .map(|i| TaskSpec::new(format!("again-{i}")))
        .collect();
    high.enqueue_batch(&specs).await.unwrap();
    wait_until_async(DEADLINE, "every task ran", || {
        let (high, low) = (high.clone(), low.clone());
        async move {
            high.stats().await.unwrap().succeeded_total == 60
                && low.stats().await.unwrap().succeeded_total == 200
        }
    })
    .await;
    worker.shutdown().await.unwrap();
    let s = starts.lock().unwrap();
    assert_eq!(s.len(), 260);
    let again: Vec<usize> = (0..s.len())
        .filter(|&i| s[i].1.starts_with("again-"))
        .collect();
    assert_eq!(again.len(), 10);
    assert_eq!(
        again[9] - again[0],
        9,
        "the late high tasks started one after another, no low task between: {again:?}"
    );
    assert!(
        again[0] < 250,
        "the late high tasks waited for low to drain: {again:?}"
    );
}

/// An idle queue beside a busy one still hears its wake-ups: a task enqueued on it while
/// the other queue's backlog keeps every slot turning starts well before the fallback poll.
#[tokio::test]
async fn an_idle_queue_beside_a_busy_one_wakes_for_a_new_task() {
    let ctx = Ctx::new().await;
    let busy = ctx.queue("busy");
    due_tasks(&busy, 3_000, None).await;
    let lateness = Arc::new(Mutex::new(None::<u64>));
    let l2 = lateness.clone();
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(4)
        .handle("busy", |_| async { Outcome::Success })
        .handle("quiet", move |t| {
            *l2.lock().unwrap() = Some(t.started_at_ms.saturating_sub(t.due_at_ms));
            async { Outcome::Success }
        })
        .build()
        .unwrap()
        .start();
    wait_stats(&busy, |s| s.succeeded_total >= 200).await;
    ctx.queue("quiet")
        .enqueue(TaskSpec::new(b"now".to_vec()))
        .await
        .unwrap();
    wait_until_async(DEADLINE, "the quiet queue's task ran", || async {
        lateness.lock().unwrap().is_some()
    })
    .await;
    let busy_left = busy.stats().await.unwrap().due;
    worker.shutdown().await.unwrap();
    assert!(
        busy_left > 0,
        "the busy queue ran dry before the test was done"
    );
    let late = lateness.lock().unwrap().unwrap();
    assert!(
        late < 400,
        "ran {late} ms late: no wake-up (the fallback poll is 1 s)"
    );
}

/// Queues held back behind busy slots wait without a claim storm: with every slot held by a
/// handler that does not end, due work on two queues and a third one idle, the worker calls
/// Redis about once per fallback poll per queue (in both orders).
#[tokio::test]
async fn held_back_queues_wait_without_calls() {
    for order in [QueueOrder::Weighted, QueueOrder::Strict] {
        let ctx = Ctx::new().await;
        let (a, b) = (ctx.queue("a"), ctx.queue("b"));
        due_tasks(&a, 10, None).await;
        due_tasks(&b, 10, None).await;
        let stuck = |_| async {
            std::future::pending::<()>().await;
            Outcome::Success
        };
        let worker = Worker::builder(ctx.client.clone())
            .concurrency(2)
            .queue_order(order)
            .handle("a", stuck)
            .handle("b", stuck)
            .handle("idle", |_| async { Outcome::Success })
            .weight("b", 2)
            .build()
            .unwrap()
            .start();
        // weighted: a slot each (1:2 over two slots); strict: both to b
        let (a_active, b_active) = match order {
            QueueOrder::Strict => (0, 2),
            _ => (1, 1),
        };
        wait_stats(&b, |s| s.active == b_active).await;
        wait_stats(&a, |s| s.active == a_active).await;
        let before = script_calls(&ctx);
        // a measurement window, not a wait for an outcome
        let window = std::time::Instant::now();
        while window.elapsed() < Duration::from_secs(2) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let calls = script_calls(&ctx) - before;
        assert!(
            calls < 40,
            "{order:?}: {calls} script calls in 2 s with every slot busy"
        );
        assert_eq!(a.stats().await.unwrap().active, a_active, "{order:?}");
        assert_eq!(b.stats().await.unwrap().active, b_active, "{order:?}");
        worker.shutdown().await.unwrap();
    }
}

/// A queue held back still recovers its expired leases: here a task leased by a claimer that
/// went away, on a queue whose due work waits behind a higher queue's stuck handlers, goes back
/// to scheduled when its lease ends, not at the next fallback poll.
#[tokio::test]
async fn a_held_back_queue_still_recovers_expired_leases() {
    let ctx = Ctx::new().await;
    let (top, low) = (ctx.queue("top"), ctx.queue("low"));
    due_tasks(&top, 10, None).await;
    due_tasks(&low, 5, None).await;
    // a claimer that goes away with one task under a 1.2 s lease (its deadline falls between
    // two fallback polls of the held queue)
    let gone = low.claim(1, Some(1_200)).await.unwrap().tasks;
    assert_eq!(gone.len(), 1);
    let deadline_ms = gone[0].lease_expires_at_ms;
    let stuck = |_| async {
        std::future::pending::<()>().await;
        Outcome::Success
    };
    let worker = Worker::builder(ctx.client.clone())
        .concurrency(2)
        .queue_order(QueueOrder::Strict)
        .handle("top", stuck)
        .handle("low", stuck)
        .weight("top", 2)
        .build()
        .unwrap()
        .start();
    wait_stats(&top, |s| s.active == 2).await;
    wait_stats(&low, |s| s.active == 0).await;
    let late = ctx.redis_now_ms().saturating_sub(deadline_ms);
    worker.shutdown().await.unwrap();
    assert!(
        late < 500,
        "recovered {late} ms after the deadline: at the next poll, not at the deadline"
    );
}

/// A worker with one queue ignores the order; a weight must be in range and for a queue the
/// worker handles.
#[tokio::test]
async fn bad_weights_are_refused_at_build() {
    let ctx = Ctx::new().await;
    let w = || {
        Worker::builder(ctx.client.clone())
            .handle("a", |_| async { Outcome::Success })
            .handle("b", |_| async { Outcome::Success })
    };
    for (b, field) in [
        (w().weight("a", 0), "weight of queue a: 0 is out of range"),
        (
            w().weight("b", 1_001),
            "weight of queue b: 1001 is out of range",
        ),
        (
            w().weight("c", 2),
            "weight of queue c: the worker has no handler",
        ),
    ] {
        let e = b.build().err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains(field), "{e}");
    }
    assert!(w().weight("a", 1_000).weight("b", 1).build().is_ok());
}
