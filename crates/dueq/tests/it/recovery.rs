//! The background recoverer (`LeaseRecoverer`, run by `dueq serve`): leases of a process that
//! died and expired tasks are recovered within about a second of expiry on every queue, and
//! idle queues cost it nothing: it visits the queues the recovery index says are due, plus a
//! slow sweep of the registry.

use std::time::Duration;

use dueq::{BackoffSettings, LeaseRecoverer, Queue, SettingsPatch, TaskRef, TaskSpec, TaskState};
use dueq_testkit::wait_until_async;
use tokio::sync::oneshot;

use crate::support::{Ctx, DEADLINE};

/// Runs `r` until the returned sender is used.
fn start(r: LeaseRecoverer) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = oneshot::channel::<()>();
    let join = tokio::spawn(r.run(async move {
        let _ = rx.await;
    }));
    (tx, join)
}

/// Calls of the commands named (`INFO commandstats` counts, which also count commands run
/// inside functions: only name commands clients send).
fn calls(ctx: &Ctx, names: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut ctx.raw())
        .unwrap();
    info.lines()
        .filter(|l| {
            names
                .iter()
                .any(|n| l.starts_with(&format!("cmdstat_{n}:")))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `dueq` function calls (`FCALL`) the server has run so far.
fn fcalls(ctx: &Ctx) -> u64 {
    calls(ctx, &["fcall"])
}

/// What a recoverer sends: function calls and the registry's `SCARD` and `SSCAN`.
fn recoverer_calls(ctx: &Ctx) -> u64 {
    calls(ctx, &["fcall", "scard", "sscan"])
}

/// A queue whose retries come back at once, so a recovered task's due time is its recovery.
async fn quick_retries(q: &Queue) {
    q.update_settings(&SettingsPatch::default().backoff(Some(BackoffSettings::new(1, 1.0, 1))))
        .await
        .unwrap();
}

/// Claims the one task of `q` under a 1 s lease and leaves it: the claimer "died".
async fn claim_and_die(q: &Queue, key: &str) -> u64 {
    q.enqueue(TaskSpec::new(b"x".to_vec()).key(key))
        .await
        .unwrap();
    let c = q.claim(1, Some(1_000)).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    c.tasks[0].lease_expires_at_ms
}

/// Waits until the task under `key` is scheduled again, and returns how long after its
/// lease deadline it was recovered (its due time, with retries at once).
async fn recovered_after(q: &Queue, key: &str, deadline: u64) -> u64 {
    let target = TaskRef::key(key).unwrap();
    wait_until_async(DEADLINE, "the expired lease is recovered", || async {
        q.get(&target)
            .await
            .unwrap()
            .is_some_and(|t| t.state == TaskState::Scheduled && t.attempt == 1)
    })
    .await;
    let t = q.get(&target).await.unwrap().unwrap();
    t.due_at_ms.saturating_sub(deadline)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_queues_cost_the_recoverer_nothing_and_a_dead_claimers_lease_comes_back_in_a_second() {
    const QUEUES: usize = 3_000;
    let ctx = Ctx::new().await;
    // many queues, one future task each: nothing to recover anywhere
    for i in 0..QUEUES {
        ctx.queue(&format!("idle-{i:05}"))
            .enqueue(TaskSpec::new(b"later".to_vec()).delay_ms(3_600_000))
            .await
            .unwrap();
    }
    let r = start(LeaseRecoverer::new(ctx.client.clone()));
    // the first pass sweeps every queue once
    let before = fcalls(&ctx);
    wait_until_async(Duration::from_secs(60), "the first sweep", || async {
        fcalls(&ctx) >= before + QUEUES as u64
    })
    .await;
    // then a second of passes costs a few calls: the index has nothing due and the sweep
    // takes 3 000 / 600 = 5 queues a pass
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let c0 = recoverer_calls(&ctx);
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    let per_s = (recoverer_calls(&ctx) - c0) as f64 / window.as_secs_f64();
    assert!(per_s <= 20.0, "{per_s} calls/s for {QUEUES} idle queues");

    // a claimer that dies leaves a lease: it is recovered within about a second of its expiry
    let q = ctx.queue("idle-01234");
    quick_retries(&q).await;
    let deadline = claim_and_die(&q, "order:1").await;
    let late = recovered_after(&q, "order:1", deadline).await;
    assert!(late <= 1_500, "recovered {late} ms after the lease expired");

    // a task with an expiry in a paused queue nobody claims from is expired through the
    // index too (the sweep would take ten minutes to come by)
    let p = ctx.queue("idle-02345");
    p.pause().await.unwrap();
    p.enqueue(TaskSpec::new(b"x".to_vec()).key("e").ttl_ms(1_000))
        .await
        .unwrap();
    wait_until_async(Duration::from_secs(3), "the task expired", || async {
        p.stats().await.unwrap().expired_total == 1
    })
    .await;
    let _ = r.0.send(());
    r.1.await.unwrap();
}

/// A lease whose note in the recovery index never landed (its process died between the claim
/// and the note), or that was taken before the index existed, is found by the sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_finds_leases_the_index_lost() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("lost");
    quick_retries(&q).await;
    for i in 0..50 {
        ctx.queue(&format!("other-{i}"))
            .enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(3_600_000))
            .await
            .unwrap();
    }
    let deadline = claim_and_die(&q, "order:2").await;
    // the note is gone: as if the process died right after its claim
    let _: () = redis::cmd("DEL")
        .arg("dueq:recovery")
        .query(&mut ctx.raw())
        .unwrap();
    // the first pass sweeps everything (the lease has not expired yet then); later passes
    // sweep 51 queues in 2 s, a slice a pass
    let r = start(
        LeaseRecoverer::new(ctx.client.clone())
            .interval_ms(200)
            .sweep_ms(2_000),
    );
    let late = recovered_after(&q, "order:2", deadline).await;
    assert!(late <= 3_000, "recovered {late} ms after the lease expired");
    let _ = r.0.send(());
    r.1.await.unwrap();
}
