//! The test clock (`ClientBuilder::test_clock`) on a real `redis-server`: an advance makes a
//! task due and a waiting worker runs it at once, never before its time; leases, schedules
//! and rate windows follow the virtual clock; every client of the Redis agrees; a Redis with
//! real queues refuses it; a Redis that never started it runs the plain library only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, BackoffSettings, Client, ErrorKind, LeaseRecoverer, Misfire, NackOutcome, Outcome,
    RateLimit, ScheduleSpec, SettingsPatch, TaskRef, TaskSpec, TaskState, Worker,
};
use dueq_testkit::{RedisServer, wait_until_async};

use crate::support::{DEADLINE, queue_firer, stop_firer};

const MINUTE: u64 = 60_000;

async fn clock_client(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .test_clock()
        .connect()
        .await
        .unwrap()
}

/// Subscribers of `channel` on the server.
fn subscribers(server: &RedisServer, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut server.conn())
        .unwrap();
    n
}

/// A task run: its key, when it ran here, its due time and its start by the virtual clock.
type Run = (String, Instant, u64, u64);

/// The order-cancel flow: a worker waits (polling only every minute, so only the clock's
/// wake-up can make it run), a task is due in 30 minutes; 29:59 later it has not run, and a
/// second later it runs at once, at or after its due time on the virtual clock.
#[tokio::test]
async fn an_advance_runs_a_waiting_task_at_once_and_never_early() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let q = client.queue("orders").unwrap();
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let r2 = runs.clone();
    let worker = Worker::builder(client.clone())
        .poll_ms(60_000)
        .handle("orders", move |t| {
            let r2 = r2.clone();
            async move {
                let key = t.key.clone().unwrap_or_default();
                r2.lock()
                    .unwrap()
                    .push((key, Instant::now(), t.due_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    let wake = q.keys().wake.clone();
    wait_until_async(DEADLINE, "the worker listens", || async {
        subscribers(&server, &wake) >= 1 && subscribers(&server, "dueq:test_clock") >= 1
    })
    .await;
    let clock = client.test_clock().expect("the Redis runs the test clock");
    let mut latencies = Vec::new();
    for round in 0..3 {
        let before = runs.lock().unwrap().len();
        let marker = format!("marker:{round}");
        let order = format!("order:{round}:cancel");
        q.enqueue(
            TaskSpec::new(b"m".to_vec())
                .key(&marker)
                .delay_ms(30 * MINUTE - 1_000),
        )
        .await
        .unwrap();
        let due = q
            .enqueue(
                TaskSpec::new(b"o".to_vec())
                    .key(&order)
                    .delay_ms(30 * MINUTE),
            )
            .await
            .unwrap()
            .due_at_ms;
        clock
            .advance(Duration::from_millis(30 * MINUTE - 1_000))
            .await
            .unwrap();
        // the marker runs, so the worker has looked after the advance: the order is not due
        wait_until_async(DEADLINE, "the marker ran", || async {
            runs.lock().unwrap().len() == before + 1
        })
        .await;
        let task = q
            .get(&TaskRef::key(&order).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(task.state, TaskState::Scheduled, "round {round}: ran early");
        let at = Instant::now();
        let moved = clock.advance(Duration::from_secs(1)).await.unwrap();
        assert!(moved.now_ms >= due);
        wait_until_async(DEADLINE, "the order ran", || async {
            runs.lock().unwrap().len() == before + 2
        })
        .await;
        let (key, ran, due_at, started_at) = runs.lock().unwrap()[before + 1].clone();
        assert_eq!(key, order);
        assert_eq!(due_at, due);
        assert!(
            started_at >= due,
            "started {started_at} before its due time {due}"
        );
        latencies.push(ran.duration_since(at));
    }
    worker.shutdown().await.unwrap();
    // the worker polls once a minute: every run came from the clock's wake-up; the best of
    // three rounds shows the wake-up's own delay, without a loaded machine's worst pause
    latencies.sort();
    assert!(latencies[2] < Duration::from_secs(1), "{latencies:?}");
    assert!(latencies[0] < Duration::from_millis(50), "{latencies:?}");
}

/// A lease the clock jumps past ends: `dueq serve`'s recoverer (which otherwise looks once a
/// minute here) hands the task out again at once, and the old lease's ack is refused.
#[tokio::test]
async fn a_lease_ends_when_the_clock_passes_it() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let q = client.queue("leases").unwrap();
    q.enqueue(TaskSpec::new(b"t".to_vec()).key("t"))
        .await
        .unwrap();
    let claim = q.claim(1, Some(30_000)).await.unwrap();
    let held = &claim.tasks[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let recoverer = tokio::spawn(LeaseRecoverer::new(client.clone()).interval_ms(60_000).run(
        async move {
            let _ = stopped.await;
        },
    ));
    wait_until_async(DEADLINE, "the recoverer listens", || async {
        subscribers(&server, "dueq:test_clock") >= 1
    })
    .await;
    // within the lease: still held
    let clock = client.test_clock().unwrap();
    clock.advance(Duration::from_secs(20)).await.unwrap();
    let t = q.get(&TaskRef::key("t").unwrap()).await.unwrap().unwrap();
    assert_eq!(t.state, TaskState::Active);
    clock.advance(Duration::from_secs(11)).await.unwrap();
    wait_until_async(DEADLINE, "the lease is recovered", || async {
        let t = q.get(&TaskRef::key("t").unwrap()).await.unwrap().unwrap();
        t.state == TaskState::Scheduled
    })
    .await;
    assert_eq!(
        q.ack(&held.id, &held.lease_token).await.unwrap(),
        AckOutcome::LeaseLost
    );
    let _ = stop.send(());
    recoverer.await.unwrap();
}

/// An hourly schedule crossed three times by one advance: within its misfire grace every
/// tick fires; beyond it, `skip` fires none and `fire_once` one task carrying the last tick.
#[tokio::test]
async fn a_schedule_fires_the_ticks_an_advance_crosses_by_its_policy() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let q = client.queue("reports").unwrap();
    let hour = 60 * MINUTE;
    for spec in [
        ScheduleSpec::new("each", b"e".to_vec())
            .cron("0 * * * *")
            .misfire_grace_ms(4 * hour),
        ScheduleSpec::new("skip", b"s".to_vec()).cron("0 * * * *"),
        ScheduleSpec::new("once", b"o".to_vec())
            .cron("0 * * * *")
            .misfire(Misfire::FireOnce),
    ] {
        q.set_schedule(&spec).await.unwrap();
    }
    let firer = queue_firer(&client, &q, 60_000);
    // the firer polls once a minute: move only once it hears the clock's moves
    let wake = q.keys().schedule_wake.clone();
    wait_until_async(DEADLINE, "the firer listens", || async {
        subscribers(&server, &wake) >= 1 && subscribers(&server, "dueq:test_clock") >= 1
    })
    .await;
    let clock = client.test_clock().unwrap();
    let now = clock.now().await.unwrap().now_ms;
    // the third full hour from now
    let first = (now / hour + 1) * hour;
    let third = first + 2 * hour;
    // 5 s past it: beyond the default grace of 1 s, so `skip` skips it too
    clock.set_ms(third + 5_000).await.unwrap();
    wait_until_async(DEADLINE, "the ticks are fired", || async {
        let each = q.schedule("each").await.unwrap().unwrap();
        let skip = q.schedule("skip").await.unwrap().unwrap();
        let once = q.schedule("once").await.unwrap().unwrap();
        each.fired_total == 3 && skip.skipped_total == 3 && once.fired_total == 1
    })
    .await;
    stop_firer(firer).await;
    let claimed = q.claim(100, None).await.unwrap();
    let mut got: Vec<(Vec<u8>, u64)> = claimed
        .tasks
        .iter()
        .map(|t| (t.payload.clone(), t.due_at_ms))
        .collect();
    got.sort();
    let e = |t| (b"e".to_vec(), t);
    assert_eq!(
        got,
        vec![e(first), e(first + hour), e(third), (b"o".to_vec(), third)]
    );
    assert_eq!(q.schedule("skip").await.unwrap().unwrap().fired_total, 0);
}

/// A rate window moves with the clock: two per minute are handed out, the third only after
/// the clock passes the minute.
#[tokio::test]
async fn a_rate_window_moves_with_the_clock() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let q = client.queue("provider").unwrap();
    q.update_settings(&SettingsPatch::default().rate_limit(Some(RateLimit::new(2, MINUTE))))
        .await
        .unwrap();
    let specs: Vec<TaskSpec> = (0..3).map(|i| TaskSpec::new(vec![i])).collect();
    q.enqueue_batch(&specs).await.unwrap();
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 2);
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 0);
    let clock = client.test_clock().unwrap();
    clock.advance(Duration::from_secs(30)).await.unwrap();
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 0);
    clock.advance(Duration::from_secs(31)).await.unwrap();
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 1);
}

/// A second process on the Redis follows the clock without asking for it: its worker runs
/// what the first process's advance made due, and both read the same time.
#[tokio::test]
async fn every_client_of_the_redis_agrees() {
    let server = RedisServer::start();
    let first = clock_client(&server).await;
    let second = Client::connect(&server.url()).await.unwrap();
    let joined = clock_client(&server).await;
    let clock = second
        .test_clock()
        .expect("a plain client follows the clock");
    let q = first.queue("shared").unwrap();
    let ran = Arc::new(Mutex::new(0));
    let r2 = ran.clone();
    let worker = Worker::builder(second.clone())
        .poll_ms(60_000)
        .handle("shared", move |_| {
            let r2 = r2.clone();
            async move {
                *r2.lock().unwrap() += 1;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    q.enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(7 * 24 * 60 * MINUTE))
        .await
        .unwrap();
    // a marker due now: once it ran, the worker has seen the week-long task and sleeps
    q.enqueue(TaskSpec::new(b"m".to_vec())).await.unwrap();
    wait_until_async(DEADLINE, "the marker ran", || async {
        *ran.lock().unwrap() == 1 && subscribers(&server, "dueq:test_clock") >= 1
    })
    .await;
    let moved = first
        .test_clock()
        .unwrap()
        .advance(Duration::from_secs(7 * 24 * 3600))
        .await
        .unwrap();
    wait_until_async(DEADLINE, "the second process's worker runs it", || async {
        *ran.lock().unwrap() == 2
    })
    .await;
    worker.shutdown().await.unwrap();
    for c in [&clock, &joined.test_clock().unwrap()] {
        let r = c.now().await.unwrap();
        assert_eq!(r.offset_ms, moved.offset_ms);
        assert!(r.now_ms >= moved.now_ms);
    }
}

/// The clock is never started beside real queues, nor on by default; moves are checked and
/// a refused move changes nothing.
#[tokio::test]
async fn refused_beside_real_queues_and_off_by_default() {
    let server = RedisServer::start();
    let plain = Client::connect(&server.url()).await.unwrap();
    assert!(plain.test_clock().is_none());
    plain
        .queue("real")
        .unwrap()
        .enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(30 * MINUTE))
        .await
        .unwrap();
    let e = Client::builder(&server.url())
        .test_clock()
        .connect()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        e.to_string()
            .contains("1 queue(s) made without the test clock"),
        "{e}"
    );
    let mut raw = server.conn();
    let exists: u64 = redis::cmd("EXISTS")
        .arg("dueq:test_clock")
        .query(&mut raw)
        .unwrap();
    assert_eq!(exists, 0);
    // only the plain library was loaded: nothing of the test clock runs on this Redis
    let libs: Vec<redis::Value> = redis::cmd("FUNCTION").arg("LIST").query(&mut raw).unwrap();
    assert_eq!(libs.len(), 1);
    assert!(plain.readiness().await.test_clock.is_none());

    let fresh = RedisServer::start();
    let client = clock_client(&fresh).await;
    let clock = client.test_clock().unwrap();
    let start = clock.now().await.unwrap();
    assert_eq!(start.offset_ms, 0);
    for (moved, field) in [
        (clock.advance(Duration::ZERO).await, "advance_ms"),
        (
            clock
                .advance(Duration::from_secs(200 * 365 * 24 * 3600))
                .await,
            "advance_ms",
        ),
        (clock.set_ms(start.now_ms - 60_000).await, "set_ms"),
        (clock.set_ms(dueq::MAX_TEST_CLOCK_MS + 1).await, "set_ms"),
    ] {
        let e = moved.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().starts_with(field), "{e}");
    }
    assert_eq!(clock.now().await.unwrap().offset_ms, 0);
    let r = client.readiness().await.test_clock.unwrap();
    assert_eq!(r.offset_ms, 0);
}

/// A worker connected before the clock would stay on Redis time: the start is refused while
/// one is live. The live workers list keeps Redis time, so an advance hides no worker.
#[tokio::test]
async fn refused_beside_live_workers_and_workers_stay_listed() {
    let server = RedisServer::start();
    let plain = Client::connect(&server.url()).await.unwrap();
    let worker = Worker::builder(plain.clone())
        .handle("early", |_| async { Outcome::Success })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the worker is listed", || async {
        !plain.workers().await.unwrap().is_empty()
    })
    .await;
    let e = Client::builder(&server.url())
        .test_clock()
        .connect()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("1 live worker(s)"), "{e}");
    worker.shutdown().await.unwrap();
    assert!(plain.workers().await.unwrap().is_empty());

    let client = clock_client(&server).await;
    let worker = Worker::builder(client.clone())
        .handle("later", |_| async { Outcome::Success })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "the worker is listed", || async {
        !client.workers().await.unwrap().is_empty()
    })
    .await;
    client
        .test_clock()
        .unwrap()
        .advance(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(client.workers().await.unwrap().len(), 1);
    worker.shutdown().await.unwrap();
}

/// A `FLUSHALL` between tests puts the clock back at Redis time; the clients stay on the test
/// clock and the next move works.
#[tokio::test]
async fn a_flushall_puts_the_clock_back_at_redis_time() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let clock = client.test_clock().unwrap();
    clock.advance(Duration::from_secs(3600)).await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    // a process that connects right after the flush, before anyone reads the clock, follows it
    let right_after = Client::connect(&server.url()).await.unwrap();
    assert!(right_after.test_clock().is_some());
    assert_eq!(clock.now().await.unwrap().offset_ms, 0);
    // the reading wrote the clock back: a process that connects now follows it
    let later = Client::connect(&server.url()).await.unwrap();
    assert!(later.test_clock().is_some());
    let q = client.queue("after").unwrap();
    q.enqueue(TaskSpec::new(b"x".to_vec()).delay_ms(30 * MINUTE))
        .await
        .unwrap();
    assert!(q.claim(1, None).await.unwrap().tasks.is_empty());
    let moved = clock.advance(Duration::from_secs(1800)).await.unwrap();
    assert_eq!(moved.offset_ms, 1_800_000);
    assert_eq!(q.claim(1, None).await.unwrap().tasks.len(), 1);
    assert_eq!(
        client.readiness().await.test_clock.map(|r| r.offset_ms),
        Some(1_800_000)
    );
}

/// A retry waits out its backoff on the virtual clock, and a task not started before its
/// expiry expires when the clock passes it.
#[tokio::test]
async fn retries_back_off_and_tasks_expire_on_the_virtual_clock() {
    let server = RedisServer::start();
    let client = clock_client(&server).await;
    let clock = client.test_clock().unwrap();
    let q = client.queue("payouts").unwrap();
    let backoff = BackoffSettings::new(60_000, 2.0, 3_600_000);
    q.update_settings(&SettingsPatch::default().backoff(Some(backoff)))
        .await
        .unwrap();
    q.enqueue(TaskSpec::new(b"p".to_vec())).await.unwrap();
    let held = q.claim(1, None).await.unwrap().tasks.remove(0);
    let due = match q
        .nack(&held.id, &held.lease_token, "provider down", None, false)
        .await
        .unwrap()
    {
        NackOutcome::Rescheduled { due_at_ms } => due_at_ms,
        other => panic!("{other:?}"),
    };
    clock.set_ms(due - 1_000).await.unwrap();
    assert!(
        q.claim(1, None).await.unwrap().tasks.is_empty(),
        "retried early"
    );
    clock.advance(Duration::from_secs(1)).await.unwrap();
    let again = q.claim(1, None).await.unwrap().tasks;
    assert_eq!(again.iter().map(|t| t.attempt).collect::<Vec<_>>(), [2]);

    let q = client.queue("offers").unwrap();
    q.enqueue(
        TaskSpec::new(b"o".to_vec())
            .delay_ms(MINUTE)
            .ttl_ms(2 * MINUTE),
    )
    .await
    .unwrap();
    clock.advance(Duration::from_secs(4 * 60)).await.unwrap();
    assert!(q.claim(1, None).await.unwrap().tasks.is_empty());
    assert_eq!(q.stats().await.unwrap().expired_total, 1);
}
