//! The sweep of owned queues (`RelayConfig::owned_queue`) against what a restored database,
//! foreign tasks, concurrent relays and a `FLUSHALL` leave in Redis; a failing reconciler pass
//! retried with backoff; and the relay after a partitioned queue was wiped, after a failed
//! commit, and with a key enqueued again right after its timer ran.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Outcome, TaskRef, TaskSpec, Worker};
use dueq_outbox::{
    OutboxDue, OutboxTask, Relay, RelayConfig, cancel_in_tx, enqueue_in_tx, reschedule_in_tx,
};
use dueq_testkit::wait_until_async;

use crate::support::Env;

async fn key_task(env: &Env, key: &str) -> Option<dueq::Task> {
    let q = env.client.queue("orders").unwrap();
    q.get(&TaskRef::key(key).unwrap()).await.unwrap()
}

/// Enqueues one orphan (payload `old`) per key straight into Redis, due in `delay_ms`.
async fn enqueue_orphans(orders: &dueq::Queue, keys: &[String], delay_ms: u64) {
    let specs: Vec<TaskSpec> = keys
        .iter()
        .map(|k| {
            TaskSpec::new(b"old".to_vec())
                .key(k.clone())
                .delay_ms(delay_ms)
        })
        .collect();
    orders.enqueue_batch(&specs).await.unwrap();
}

/// Waits until the sweep has cancelled a first task: fewer than `above` scheduled.
async fn sweep_started(watched: &dueq::Queue, above: u64) {
    let t0 = Instant::now();
    while watched.stats().await.unwrap().scheduled >= above {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the sweep never cancelled"
        );
        // a short pause: a tight loop of stats calls would compete with the sweep
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The database restored from an older backup re-creates order 42 (its id sequence went back
/// too), whose new cancel timer is due in 30 min; Redis still holds the old order 42's timer
/// under the same key, due in 2 s with the old payload. In an owned queue the row is the
/// truth: after a relay round and a reconciler pass, the key's Redis task must be the row's
/// (its due time and payload), else the new order is cancelled 30 min early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_under_a_new_rows_key_does_not_keep_its_own_due_time() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().owned_queue("orders").unwrap());
    let orders = env.client.queue("orders").unwrap();
    orders
        .enqueue(
            TaskSpec::new(b"old".to_vec())
                .key("order:42:cancel")
                .delay_ms(2_000),
        )
        .await
        .unwrap();

    let mut tx = env.db.pool.begin().await.unwrap();
    let t = OutboxTask::new("order:42:cancel", b"new".to_vec()).delay_ms(30 * 60_000);
    let row_due = enqueue_in_tx(&mut tx, "orders", &t)
        .await
        .unwrap()
        .due_at_ms;
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let rep = relay.reconcile().await.unwrap();

    let t = key_task(&env, "order:42:cancel")
        .await
        .expect("the key has a task in Redis");
    assert_eq!(
        (t.due_at_ms, t.payload.as_slice()),
        (row_due, b"new".as_slice()),
        "the key's Redis task is the old orphan, not the row's (reconciler: {rep:?})"
    );
}

/// dueq keys may hold any UTF-8, NUL included; PostgreSQL text cannot. A foreign task with
/// such a key in an owned queue is an orphan like any other (no row can hold its key), and
/// must not make the reconciler pass fail: it would fail at the same page on every pass, so
/// no orphan after it is ever removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_key_with_a_nul_byte_does_not_wedge_the_sweep() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().owned_queue("orders").unwrap());
    let orders = env.client.queue("orders").unwrap();
    for k in ["foreign\0key", "foreign-plain"] {
        orders
            .enqueue(TaskSpec::new(b"x".to_vec()).key(k).delay_ms(60_000))
            .await
            .unwrap();
    }

    let rep = relay
        .reconcile()
        .await
        .expect("a reconciler pass over an owned queue with a NUL in a task's key");
    assert_eq!(rep.orphans_removed, 2, "{rep:?}");
    assert!(key_task(&env, "foreign-plain").await.is_none());
}

/// The sweep's repair of its race with a row committed meanwhile enqueues the live rows it
/// finds for the keys it cancelled, `pending` ones included, straight into Redis, leaving the
/// row `pending`. A cancel of a `pending` row in the table alone would leave the task the
/// sweep put into Redis to run if it is due before the next sweep (`cancel_in_tx` once did
/// that; it now sends every cancel through the relay). Here the window is opened on purpose: 1 000 orphans in one
/// page, and the rows for their keys commit while the sweep is cancelling them (watched from
/// a second connection). Up to 5 rounds, until one hits the window (the sweep reports
/// restored rows); every round's timers are then cancelled and must leave no Redis task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_row_restored_by_the_sweep_and_then_cancelled_leaves_no_task() {
    const N: usize = 1_000;
    let env = Env::new().await;
    let relay = env.relay(
        RelayConfig::default()
            .batch(N)
            .owned_queue("orders")
            .unwrap(),
    );
    let orders = env.client.queue("orders").unwrap();
    // a second connection, so the watch does not queue behind the sweep's cancels
    let watch = dueq::Client::connect(&env.redis.url()).await.unwrap();
    let watched = watch.queue("orders").unwrap();
    for round in 1..=5 {
        let keys: Vec<String> = (0..N).map(|i| format!("r{round}:k{i}")).collect();
        enqueue_orphans(&orders, &keys, 60_000).await;
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            let t = OutboxTask::new(k.clone(), b"new".to_vec()).delay_ms(60_000);
            enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
        }
        let pass = {
            let relay = relay.clone();
            tokio::spawn(async move { relay.reconcile().await.unwrap() })
        };
        // commit once the sweep has started cancelling this round's orphans
        sweep_started(&watched, N as u64).await;
        tx.commit().await.unwrap();
        let rep = pass.await.unwrap();

        // the application cancels every timer of the round, and the relay catches up
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            cancel_in_tx(&mut tx, "orders", k).await.unwrap();
        }
        tx.commit().await.unwrap();
        env.relay_all(&relay).await;
        let mut left = Vec::new();
        for k in &keys {
            if let Some(t) = key_task(&env, k).await {
                let state = env.state(k).await;
                left.push(format!("{k} (row {state:?}, task due {})", t.due_at_ms));
            }
        }
        assert!(
            left.is_empty(),
            "{} timers cancelled in the table still have a Redis task (round {round}, \
             sweep {rep:?}), e.g. {:?}",
            left.len(),
            &left[..left.len().min(3)]
        );
        if rep.restored > 0 {
            break;
        }
    }
}

/// The same window, with a relay (its own connection) carrying the rows into Redis while the
/// sweep cancels the orphans: the relay's enqueue, idempotent by key, takes the orphans not
/// yet cancelled for its rows' tasks and records their ids; the sweep then cancels them and
/// enqueues the rows again, under new ids the rows never learn. When such a task runs and is
/// acknowledged, it is no longer found by key, and its row's `task_id` names the cancelled
/// orphan, so the relay takes it for lost and the reconciler runs it a second time: a
/// double run after an ack that no documented bound allows (the succeeded retention, 10 000,
/// is not exceeded: 1 000 tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_orphan_the_sweep_replaced_runs_once() {
    const N: usize = 1_000;
    let env = Env::new().await;
    let sweeper = env.relay(
        RelayConfig::default()
            .batch(N)
            .recheck_ms(0)
            .owned_queue("orders")
            .unwrap(),
    );
    let orders = env.client.queue("orders").unwrap();
    let other = dueq::Client::connect(&env.redis.url()).await.unwrap();
    let relay = Relay::new(
        env.db.pool.clone(),
        other.clone(),
        RelayConfig::default().batch(N).recheck_ms(0),
    );
    let watched = other.queue("orders").unwrap();
    let mut all_keys: Vec<String> = Vec::new();
    let mut stale = 0;
    // three rounds, each opening the window (the helper that wrote this saw it hit in round 1
    // or 2 before the fix: some row then named a task that was not its key's live task)
    for round in 1..=3 {
        let keys: Vec<String> = (0..N).map(|i| format!("r{round}:k{i}")).collect();
        let before = watched.stats().await.unwrap().scheduled;
        enqueue_orphans(&orders, &keys, 600_000).await;
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            let t = OutboxTask::new(k.clone(), b"new".to_vec()).delay_ms(5_000);
            enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
        }
        let pass = {
            let sweeper = sweeper.clone();
            tokio::spawn(async move { sweeper.reconcile().await.unwrap() })
        };
        sweep_started(&watched, before + N as u64).await;
        tx.commit().await.unwrap();
        env.relay_all(&relay).await;
        let rep = pass.await.unwrap();
        for k in &keys {
            let id: Option<String> =
                sqlx::query_scalar("SELECT task_id FROM dueq_outbox WHERE key = $1")
                    .bind(k)
                    .fetch_one(&env.db.pool)
                    .await
                    .unwrap();
            let live = key_task(&env, k).await.map(|t| t.id.to_string());
            if id != live {
                stale += 1;
            }
        }
        eprintln!(
            "round {round}: {stale} rows name a task that is not their key's live task; {rep:?}"
        );
        all_keys.extend(keys);
    }
    // rows a relay still held when the sweep cancelled their orphan name it until the next
    // reconciler pass restores them (below): a late run, never a second one
    eprintln!("{stale} rows named a cancelled orphan after their round");
    let keys = all_keys;

    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let worker = {
        let runs = runs.clone();
        Worker::builder(env.client.clone())
            .concurrency(64)
            .handle("orders", move |t| {
                let runs = runs.clone();
                async move {
                    *runs
                        .lock()
                        .unwrap()
                        .entry(t.key.clone().unwrap_or_default())
                        .or_default() += 1;
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start()
    };
    // the tasks fall due and run; the relay tracks them (its next reconciler pass, 5 min away
    // by default, comes after)
    wait_until_async(
        Duration::from_secs(60),
        "every task of the round ran",
        || async {
            relay.relay_once().await.unwrap();
            let r = runs.lock().unwrap();
            keys.iter().all(|k| r.contains_key(k))
        },
    )
    .await;
    // then reconciler passes until every row is written back
    wait_until_async(
        Duration::from_secs(60),
        "every row of the round is written back",
        || async {
            relay.relay_once().await.unwrap();
            sweeper.reconcile().await.unwrap();
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM dueq_outbox WHERE state NOT IN ('succeeded', 'cancelled')",
            )
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
            open == 0
        },
    )
    .await;
    worker.shutdown().await.unwrap();
    let runs = runs.lock().unwrap();
    let twice: Vec<_> = keys
        .iter()
        .filter(|k| runs.get(*k).copied().unwrap_or(0) > 1)
        .collect();
    assert!(
        twice.is_empty(),
        "{} of {N} tasks ran more than once ({stale} rows had a stale task_id), e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(3)]
    );
}

/// FCALL calls (dueq operations) Redis has served so far.
fn evalsha_calls(env: &Env) -> u64 {
    let mut c = env.redis.conn();
    dueq_testkit::info_field(&mut c, "commandstats", "cmdstat_fcall")
        .and_then(|v| {
            v.split(',')
                .find_map(|f| f.strip_prefix("calls=").map(str::to_owned))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A reconciler pass that fails is retried "with backoff (100 ms doubling to 10 s)" (README),
/// but `run_until` takes the delay from the relay's failure count, which a healthy relay
/// round resets to 0: a pass that fails every time (here: the NUL key above) is run again
/// every 100 ms for ever, the whole pass each time (every relayed row within the horizon
/// looked up in Redis, each queue's settings written). Measured over 3 s of a relay with no
/// rows: with the documented backoff, passes start at 0, 0.1, 0.3, 0.7, 1.5 s (5); the
/// pass here makes 2 Redis script calls (the queue's retention, one browse page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reconciler_pass_is_retried_with_backoff() {
    let env = Env::new().await;
    let orders = env.client.queue("orders").unwrap();
    orders
        .enqueue(
            TaskSpec::new(b"x".to_vec())
                .key("foreign\0key")
                .delay_ms(60_000),
        )
        .await
        .unwrap();
    let before = evalsha_calls(&env);
    let relay = env.spawn_relay(RelayConfig::default().owned_queue("orders").unwrap());
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    relay.stop().await;
    let calls = evalsha_calls(&env) - before;
    assert!(
        calls <= 2 * 6,
        "{calls} Redis script calls in {window:?}: about {} reconciler passes, not backing off",
        calls / 2
    );
}

/// The sweep cancels the orphans of a page by **id**, but after a `FLUSHALL` Redis hands out
/// the same ids again (`tombstones.rs` and `OutRow::key_ref` say so): a wipe while the sweep
/// is cancelling, and rows relayed right after it, and the sweep's remaining cancels remove
/// the new rows' tasks, which took the orphans' ids. Its re-read looks up the orphans' keys,
/// so nothing puts them back before the next reconciler pass (5 min later by default); a row
/// due sooner runs late. 5 rounds, each from a clean slate; most hit the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushall_during_the_sweep_does_not_remove_live_rows_tasks() {
    const N: usize = 1_000;
    let env = Env::new().await;
    let sweeper = env.relay(
        RelayConfig::default()
            .batch(N)
            .owned_queue("orders")
            .unwrap(),
    );
    let other = dueq::Client::connect(&env.redis.url()).await.unwrap();
    let relay = Relay::new(
        env.db.pool.clone(),
        other.clone(),
        RelayConfig::default().batch(N),
    );
    let watched = other.queue("orders").unwrap();
    for round in 1..=5 {
        // a clean slate (no rows, an empty Redis), then the orphans first, so that after
        // the wipe the rows' tasks get their ids
        let mut tx = env.db.pool.begin().await.unwrap();
        sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("DELETE FROM dueq_outbox")
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let mut c = env.redis.conn();
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        let orphans: Vec<TaskSpec> = (0..N)
            .map(|i| {
                TaskSpec::new(b"old".to_vec())
                    .key(format!("r{round}:orphan{i}"))
                    .delay_ms(60_000)
            })
            .collect();
        env.client
            .queue("orders")
            .unwrap()
            .enqueue_batch(&orphans)
            .await
            .unwrap();
        let keys: Vec<String> = (0..N).map(|i| format!("r{round}:live{i}")).collect();
        let mut tx = env.db.pool.begin().await.unwrap();
        for k in &keys {
            let t = OutboxTask::new(k.clone(), b"new".to_vec()).delay_ms(120_000);
            enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
        }
        tx.commit().await.unwrap();
        let pass = {
            let sweeper = sweeper.clone();
            tokio::spawn(async move { sweeper.reconcile().await.unwrap() })
        };
        sweep_started(&watched, N as u64).await;
        let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
        env.relay_all(&relay).await;
        let rep = pass.await.unwrap();
        let mut lost = Vec::new();
        for k in &keys {
            if key_task(&env, k).await.is_none() {
                lost.push(k.clone());
            }
        }
        assert!(
            lost.is_empty(),
            "{} of {N} relayed rows have no Redis task after the sweep (round {round}, \
             {rep:?}), e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(3)]
        );
    }
}

/// A partitioned queue loses its `partitions` setting in a `FLUSHALL` like everything else,
/// but the relay's client keeps its cached layout (3 partitions) for up to `LAYOUT_TTL`
/// (5 s; `forget_queues` drops the queue handles, not the client's layout cache). Rows
/// relayed in that time once went to partitions 1 and 2, which every client that reads the
/// layout afresh (workers, the relay itself 5 s later) no longer knows, so those tasks were
/// neither claimed nor found by key. Now those partitions refuse an enqueue routed by a
/// count they do not hold, and the client routes it again by the layout Redis has. Here:
/// rows relayed right after the wipe, looked up by a fresh client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_relayed_right_after_a_flushall_of_a_partitioned_queue_are_found() {
    const N: usize = 30;
    let env = Env::new().await;
    let orders = env.client.queue("orders").unwrap();
    orders
        .update_settings(&dueq::SettingsPatch::default().partitions(Some(3)))
        .await
        .unwrap();
    let relay = env.relay(RelayConfig::default());
    commit(&env, "before-", N).await;
    env.relay_all(&relay).await;
    let mut c = env.redis.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    commit(&env, "after-", N).await;
    env.relay_all(&relay).await;

    let fresh = dueq::Client::connect(&env.redis.url()).await.unwrap();
    let q = fresh.queue("orders").unwrap();
    let mut missing = Vec::new();
    for i in 0..N {
        let k = format!("after-{i}");
        if q.get(&TaskRef::key(k.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(k);
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {N} rows relayed after the wipe are in Redis where no fresh client looks \
         (partitions now {:?}), e.g. {:?}",
        missing.len(),
        q.settings().await.unwrap().partitions,
        &missing[..missing.len().min(3)]
    );
}

/// Commits `n` rows `{prefix}{i}`, due in 60 s.
async fn commit(env: &Env, prefix: &str, n: usize) {
    let mut tx = env.db.pool.begin().await.unwrap();
    for i in 0..n {
        let t = OutboxTask::new(format!("{prefix}{i}"), b"x".to_vec()).delay_ms(60_000);
        enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    }
    tx.commit().await.unwrap();
}

/// A timer that has run and been acknowledged is finished in Redis (its key free again for
/// dueq), but its row stays `relayed` until the relay looks it up (at most once per
/// `recheck_ms`, 1 s, after its due time; later behind a backlog). An `enqueue_in_tx` of the
/// same key in that gap (the handler's follow-up: the next reminder, a retry of the business
/// step) hits the live-key index and is dropped (`created: false`, the finished row
/// returned): the new timer never runs. With dueq alone, the same enqueue after the ack
/// creates the task.
#[ignore = "known limit, not fixed: until the relay has recorded a run (recheck_ms), the row is live and enqueue_in_tx of its key keeps it; see the outbox README"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_enqueued_again_right_after_its_run_is_not_dropped() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    let runs = Arc::new(Mutex::new(0usize));
    let worker = {
        let runs = runs.clone();
        Worker::builder(env.client.clone())
            .handle("orders", move |_| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap() += 1;
                    Outcome::Success
                }
            })
            .build()
            .unwrap()
            .start()
    };
    let pool = env.db.pool.clone();
    let enqueue = |delay_ms: u64| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let t = OutboxTask::new("customer:7:remind", b"x".to_vec()).delay_ms(delay_ms);
            let e = enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
            tx.commit().await.unwrap();
            e
        }
    };
    // due once the relay round is over, so the relay has not looked it up yet
    assert!(enqueue(1_000).await.created);
    env.relay_all(&relay).await;
    let orders = env.client.queue("orders").unwrap();
    wait_until_async(
        Duration::from_secs(10),
        "the first timer ran and was acknowledged",
        || async { orders.stats().await.unwrap().succeeded_total == 1 },
    )
    .await;

    // the follow-up timer, before the relay has looked the first one up
    let second = enqueue(0).await;
    let what = format!("the follow-up timer ran (enqueue_in_tx answered {second:?})");
    wait_until_async(Duration::from_secs(10), &what, || async {
        relay.relay_once().await.unwrap();
        *runs.lock().unwrap() >= 2
    })
    .await;
    worker.shutdown().await.unwrap();
    assert!(second.created, "{second:?}");
}

/// "A relay that dies after Redis answered and before its commit leaves the rows pending; the
/// next one enqueues them again and gets the same tasks back" (README), and the application
/// may cancel such a row first. The row holds no `task_id`, yet its task is in Redis: a
/// cancel in the table alone would leave it to run (in a queue not owned, nothing else ever
/// removes it), so `cancel_in_tx` sends every cancel through the relay, which cancels by key.
/// The relay's failure between its Redis call and its commit is a PostgreSQL error in its
/// `UPDATE` (a test trigger), which the relay rolls back and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_row_cancelled_after_a_failed_relay_commit_never_runs() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    fail_relay_commits(&env).await;
    let mut tx = env.db.pool.begin().await.unwrap();
    let t = OutboxTask::new("order:9:cancel", b"9".to_vec()).delay_ms(30 * 60_000);
    enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    tx.commit().await.unwrap();
    let err = relay.relay_once().await.unwrap_err();
    assert_eq!(
        env.state("order:9:cancel").await.as_deref(),
        Some("pending")
    );
    sqlx::query("UPDATE fail_relay SET on_ = false")
        .execute(&env.db.pool)
        .await
        .unwrap();

    // payment arrives before the relay's retry
    let mut tx = env.db.pool.begin().await.unwrap();
    let c = cancel_in_tx(&mut tx, "orders", "order:9:cancel")
        .await
        .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let rep = relay.reconcile().await.unwrap();
    let left = key_task(&env, "order:9:cancel").await;
    assert!(
        left.is_none(),
        "cancel_in_tx answered {c:?}, the row is {:?}, yet its task is in Redis (relay error: \
         {err}; reconciler: {rep:?})",
        env.state("order:9:cancel").await
    );
}

/// Makes the relay's write-back of enqueued rows fail (a PostgreSQL error after Redis
/// answered) until `fail_relay` is set off.
async fn fail_relay_commits(env: &Env) {
    for sql in [
        "CREATE TABLE fail_relay (on_ boolean NOT NULL)",
        "INSERT INTO fail_relay VALUES (true)",
        "CREATE FUNCTION fail_relay() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF OLD.state = 'pending' AND NEW.state = 'relayed'
                AND (SELECT on_ FROM fail_relay) THEN
                 RAISE EXCEPTION 'PostgreSQL fails after Redis answered';
             END IF;
             RETURN NEW;
         END $$",
        "CREATE TRIGGER fail_relay BEFORE UPDATE ON dueq_outbox
         FOR EACH ROW EXECUTE FUNCTION fail_relay()",
    ] {
        sqlx::query(sql).execute(&env.db.pool).await.unwrap();
    }
}

/// The same failed relay commit, then a `reschedule_in_tx` of the still `pending` row to a
/// later time: the row is due 30 min from now and goes to the relay as an `enqueue`, which,
/// idempotent by key, finds the task the failed round left (due in 60 s) and keeps it. The
/// timer runs 29 minutes before the time the application set, and nothing corrects it (the
/// reconciler finds the key live, in sync).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_row_rescheduled_after_a_failed_relay_commit_is_not_early() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default());
    fail_relay_commits(&env).await;
    let mut tx = env.db.pool.begin().await.unwrap();
    let t = OutboxTask::new("order:9:cancel", b"9".to_vec()).delay_ms(60_000);
    enqueue_in_tx(&mut tx, "orders", &t).await.unwrap();
    tx.commit().await.unwrap();
    relay.relay_once().await.unwrap_err();
    sqlx::query("UPDATE fail_relay SET on_ = false")
        .execute(&env.db.pool)
        .await
        .unwrap();

    let mut tx = env.db.pool.begin().await.unwrap();
    let due = reschedule_in_tx(
        &mut tx,
        "orders",
        "order:9:cancel",
        OutboxDue::DelayMs(30 * 60_000),
    )
    .await
    .unwrap()
    .unwrap();
    tx.commit().await.unwrap();
    env.relay_all(&relay).await;
    let rep = relay.reconcile().await.unwrap();
    let t = key_task(&env, "order:9:cancel").await.unwrap();
    assert_eq!(
        t.due_at_ms,
        due,
        "the Redis task is due {} ms before the row (reconciler: {rep:?})",
        due.saturating_sub(t.due_at_ms)
    );
}

/// A partition above 0 that lost its `partitions` field while partition 0 kept the count (on
/// a Redis Cluster: that partition's node flushed or restarted without persistence; here the
/// partition's meta is deleted by hand) refuses an enqueue routed by the count; the client
/// reads the same count again and sends the share there unchecked, so the relay's rounds go
/// on (a lasting refusal would fail every round, and rows of every queue would wait).
#[tokio::test]
async fn a_partition_that_lost_its_count_does_not_wedge_the_relay() {
    let env = Env::new().await;
    let relay = env.relay(RelayConfig::default().succeeded_retention(0));
    env.client
        .queue("parts")
        .unwrap()
        .update_settings(&dueq::SettingsPatch::default().partitions(Some(3)))
        .await
        .unwrap();
    let meta2 = dueq::QueueKeys::partition("parts", 2, 3).unwrap().meta;
    // what a flush of the node holding partition 2 leaves of it (it held no task)
    let _: () = redis::cmd("DEL")
        .arg(&meta2)
        .query(&mut env.redis.conn())
        .unwrap();
    let bad = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| dueq::partition_of_key(k, 3) == 2)
        .unwrap();
    let mut tx = env.db.pool.begin().await.unwrap();
    enqueue_in_tx(&mut tx, "parts", &OutboxTask::new(bad, b"x".to_vec()))
        .await
        .unwrap();
    enqueue_in_tx(&mut tx, "other", &OutboxTask::new("fine", b"x".to_vec()))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut errors = Vec::new();
    for _ in 0..5 {
        if let Err(e) = relay.relay_once().await {
            errors.push(e.to_string());
        }
    }
    assert_eq!(
        env.state("fine").await.as_deref(),
        Some("relayed"),
        "a row of another queue is never relayed; relay errors: {errors:#?}"
    );
}
