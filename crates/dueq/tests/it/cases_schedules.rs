//! Recurring schedules: cases C30, C31, C33 and C34 of `shared/cases/CASES.md` (C32 is a
//! unit test of the fire-time rules, `schedule/timing_tests.rs`), and the schedule API, each
//! against a real `redis-server`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dueq::{
    ClaimedTask, Client, ErrorKind, Misfire, Outcome, Overlap, Queue, ScheduleFirer, ScheduleSpec,
    SetOutcome, TaskRef, Worker, WorkerHandle,
};
use dueq_testkit::wait_until_async;

#[cfg(debug_assertions)]
use crate::support::frozen_client;
use crate::support::{Ctx, DEADLINE, Firer, queue_firer, set_first_tick, spawn_firer, stop_firer};

/// key → (due_at_ms, started_at_ms) of every task a handler ran.
type Log = Arc<Mutex<Vec<(String, u64, u64)>>>;

fn worker(client: &Client, queue: &str, log: &Log, work: Duration) -> WorkerHandle {
    let log = log.clone();
    Worker::builder(client.clone())
        .handle(queue, move |t: ClaimedTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((
                    t.key.clone().unwrap_or_default(),
                    t.due_at_ms,
                    t.started_at_ms,
                ));
                tokio::time::sleep(work).await;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start()
}

/// Runs a firer of every queue with schedules (as `dueq serve` does) until the sender is used.
fn server_firer(client: &Client) -> Firer {
    spawn_firer(ScheduleFirer::all_queues(client.clone()).poll_ms(200))
}

/// Runs a firer of `q` on the test's client, with the default fallback poll.
fn default_firer(ctx: &Ctx, q: &Queue) -> Firer {
    spawn_firer(ScheduleFirer::for_queues(
        ctx.client.clone(),
        vec![q.clone()],
    ))
}

/// Fire times (ms) of schedule `name`'s tasks that ran, from their keys, with duplicates.
fn fire_times(log: &Log, name: &str) -> Vec<u64> {
    let prefix = format!("schedule:{name}:");
    let mut v: Vec<u64> = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(k, _, _)| k.strip_prefix(&prefix).map(|t| t.parse().unwrap()))
        .collect();
    v.sort_unstable();
    v
}

async fn wait_redis_time(ctx: &Ctx, at_ms: u64) {
    wait_until_async(DEADLINE * 3, &format!("Redis time {at_ms}"), || async {
        ctx.redis_now_ms() >= at_ms
    })
    .await;
}

/// [C30](../../../../shared/cases/CASES.md): an `every_ms` 1 000 and a cron `* * * * * *`
/// schedule, three workers on independent clients plus a server-style firer, one worker
/// stopped and restarted midway: exactly one task per fire time, none early, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn c30_one_tick_many_schedulers() {
    let ctx = Ctx::new().await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Client::connect(&ctx.server.url()).await.unwrap());
    }
    let q = clients[0].queue("ticks").unwrap();
    let every = ScheduleSpec::new("every", b"e".to_vec()).every_ms(1000);
    let cron = ScheduleSpec::new("cron", b"c".to_vec()).cron("* * * * * *");
    // registering at every start-up is the expected use: each client registers both
    for c in &clients {
        let q = c.queue("ticks").unwrap();
        q.set_schedule(&every).await.unwrap();
        q.set_schedule(&cron).await.unwrap();
    }
    let log: Log = Arc::default();
    let (stop_server, server) = server_firer(&clients[3]);
    let mut workers: Vec<_> = (0..3)
        .map(|i| worker(&clients[i], "ticks", &log, Duration::ZERO))
        .collect();
    let start = ctx.redis_now_ms();
    wait_redis_time(&ctx, start + 3_000).await;
    workers.remove(0).shutdown().await.unwrap();
    wait_redis_time(&ctx, start + 5_000).await;
    workers.push(worker(&clients[0], "ticks", &log, Duration::ZERO));
    wait_redis_time(&ctx, start + 8_000).await;
    // stop firing first, then let the workers run what was fired
    let _ = stop_server.send(());
    server.await.unwrap();
    for w in workers.drain(..) {
        w.shutdown().await.unwrap();
    }
    // no more ticks from here on (the runner below is a worker, and workers fire too)
    q.pause_schedule("every").await.unwrap().unwrap();
    q.pause_schedule("cron").await.unwrap().unwrap();
    let (every_s, cron_s) = (
        q.schedule("every").await.unwrap().unwrap(),
        q.schedule("cron").await.unwrap().unwrap(),
    );
    let runner = worker(&clients[1], "ticks", &log, Duration::ZERO);
    for s in [&every_s, &cron_s] {
        let name = s.spec.name.clone();
        let fired = s.fired_total as usize;
        wait_until_async(DEADLINE, "every fired task ran", || {
            let log = log.clone();
            let name = name.clone();
            async move { fire_times(&log, &name).len() >= fired }
        })
        .await;
    }
    let _ = runner.shutdown().await.unwrap();
    // a task handed back at a worker's shutdown may run twice (at-least-once); what must be
    // exact is the tasks enqueued: one per tick. Ticks fired ahead whose tasks still waited
    // were taken back by the pause (counted as cancelled), at most MAX_TICKS_AHEAD per
    // schedule.
    let stats = q.stats().await.unwrap();
    assert!(
        stats.cancelled_total <= 2 * dueq::schedule::MAX_TICKS_AHEAD as u64,
        "{stats:?}"
    );
    assert_eq!(
        stats.enqueued_total - stats.cancelled_total,
        every_s.fired_total + cron_s.fired_total
    );
    for s in [&every_s, &cron_s] {
        let name = &s.spec.name;
        let mut times = fire_times(&log, name);
        times.dedup();
        assert_eq!(
            s.skipped_total, 0,
            "{name}: nothing skipped while firers ran"
        );
        assert!(times.len() >= 7, "{name}: {times:?}");
        assert_eq!(
            times.len() as u64,
            s.fired_total,
            "{name}: one task per tick"
        );
        for w in times.windows(2) {
            assert_eq!(
                w[1] - w[0],
                1000,
                "{name}: a tick missing or doubled: {times:?}"
            );
        }
        assert_eq!(Some(*times.last().unwrap()), s.last_fire_at_ms);
    }
    for (key, due, started) in log.lock().unwrap().iter() {
        assert!(
            started >= due,
            "{key} ran early: due {due}, started {started}"
        );
        assert!(
            key.ends_with(&format!(":{due}")),
            "{key} is due at its fire time"
        );
    }
}

/// [C31](../../../../shared/cases/CASES.md): every firer stopped for 5 ticks of a 1 s
/// schedule, then restarted: `skip` fires none of them and counts 5; `fire_once` fires one
/// task carrying the latest missed fire time; both go on on their own grid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c31_misfire_skip_and_fire_once() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("mis");
    for (name, misfire) in [("skip", Misfire::Skip), ("once", Misfire::FireOnce)] {
        let spec = ScheduleSpec::new(name, b"x".to_vec())
            .every_ms(1000)
            .misfire(misfire);
        assert_eq!(
            q.set_schedule(&spec).await.unwrap().outcome,
            SetOutcome::Created
        );
    }
    let firer = default_firer(&ctx, &q);
    wait_until_async(DEADLINE, "two ticks fired", || async {
        q.schedule("skip").await.unwrap().unwrap().fired_total >= 2
    })
    .await;
    stop_firer(firer).await;
    // the first tick nobody fires: the next one, or the first after those fired ahead (their
    // tasks wait for them)
    let exists = |name: &str, t: u64| {
        let q = q.clone();
        let key = format!("schedule:{name}:{t}");
        async move { q.get(&TaskRef::key(&key).unwrap()).await.unwrap().is_some() }
    };
    let mut first_unfired = Vec::new();
    for name in ["skip", "once"] {
        let mut n = q
            .schedule(name)
            .await
            .unwrap()
            .unwrap()
            .next_fire_at_ms
            .unwrap();
        while exists(name, n).await {
            n += 1000;
        }
        first_unfired.push(n);
    }
    assert_eq!(first_unfired[0], first_unfired[1]);
    let n = first_unfired[0];
    // ticks n .. n+4 s are missed once Redis time passes n+5 s (grace 1 s); n+5 s is on time
    wait_redis_time(&ctx, n + 5_300).await;
    let firer = default_firer(&ctx, &q);
    wait_until_async(DEADLINE, "both back on the grid", || async {
        let a = q.schedule("skip").await.unwrap().unwrap();
        let b = q.schedule("once").await.unwrap().unwrap();
        a.last_fire_at_ms >= Some(n + 7_000) && b.last_fire_at_ms >= Some(n + 7_000)
    })
    .await;
    stop_firer(firer).await;
    let skip = q.schedule("skip").await.unwrap().unwrap();
    assert_eq!(skip.skipped_total, 5);
    for i in 0..5 {
        assert!(
            !exists("skip", n + i * 1000).await,
            "skip fired missed tick {i}"
        );
    }
    for i in 5..8 {
        assert!(exists("skip", n + i * 1000).await, "skip lost tick {i}");
    }
    let once = q.schedule("once").await.unwrap().unwrap();
    assert_eq!(once.skipped_total, 0);
    for i in 0..4 {
        assert!(
            !exists("once", n + i * 1000).await,
            "fire_once fired tick {i}"
        );
    }
    // one task for the missed span, carrying the latest missed fire time, then the grid
    for i in 4..8 {
        assert!(
            exists("once", n + i * 1000).await,
            "fire_once lost tick {i}"
        );
    }
    let task = q
        .get(&TaskRef::key(format!("schedule:once:{}", n + 4000)).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(task.due_at_ms, n + 4000);
}

/// [C33](../../../../shared/cases/CASES.md): every 1 s, each task taking 2.5 s, `overlap:
/// skip`: no tick fires while the previous tick's task is live; skipped ticks are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c33_overlap_skip() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("slow");
    let spec = ScheduleSpec::new("slow", b"s".to_vec())
        .every_ms(1000)
        .overlap(Overlap::Skip);
    q.set_schedule(&spec).await.unwrap();
    let log: Log = Arc::default();
    let w = worker(&ctx.client, "slow", &log, Duration::from_millis(2500));
    wait_until_async(DEADLINE * 2, "three tasks started", || async {
        log.lock().unwrap().len() >= 3
    })
    .await;
    let before = q.schedule("slow").await.unwrap().unwrap();
    w.shutdown().await.unwrap();
    let times = fire_times(&log, "slow");
    let s = q.schedule("slow").await.unwrap().unwrap();
    assert!(s.fired_total >= 3);
    let mut skipped_between = 0;
    for g in times.windows(2) {
        let gap = g[1] - g[0];
        assert!(
            gap >= 3000 && gap % 1000 == 0,
            "tick fired while live: {times:?}"
        );
        skipped_between += gap / 1000 - 1;
    }
    assert!(
        before.skipped_total >= skipped_between,
        "skipped {} < {skipped_between}: {times:?}",
        before.skipped_total
    );
}

/// A firer of every queue (`dueq serve`'s) that runs before a queue has any schedule starts
/// firing it as soon as its first schedule is set, not at its next look at the registry (30 s
/// here): the first ticks are fired, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_firer_fires_a_new_queue_from_its_first_tick() {
    let ctx = Ctx::new().await;
    let firer = spawn_firer(ScheduleFirer::all_queues(ctx.client.clone()).poll_ms(30_000));
    // the firer has read the (empty) registry and listens once the client reports wake-ups
    wait_until_async(DEADLINE, "the firer's registry subscription", || async {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("dueq:schedules:wake")
            .query::<(String, u64)>(&mut ctx.raw())
            .unwrap();
        n > 0
    })
    .await;
    let q = ctx.queue("fresh");
    let spec = ScheduleSpec::new("beat", b"b".to_vec()).every_ms(1_000);
    q.set_schedule(&spec).await.unwrap();
    wait_until_async(DEADLINE, "two ticks fired", || async {
        q.schedule("beat").await.unwrap().unwrap().fired_total >= 2
    })
    .await;
    let s = q.schedule("beat").await.unwrap().unwrap();
    assert_eq!(
        s.skipped_total, 0,
        "ticks skipped before the firer found the queue"
    );
    stop_firer(firer).await;
}

/// A schedule's task template (payload, attempts, lease, priority, group) goes to every task
/// it fires, and `overlap: skip` sees the task of an earlier tick as live while it waits in
/// its group (not in the scheduled set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_tasks_carry_priority_and_group() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("tenant");
    // the first tick's task is claimed only after two more ticks: a grace of a minute keeps it
    // from being dropped as a missed tick meanwhile
    let spec = ScheduleSpec::new("sync", b"payload of sync".to_vec())
        .every_ms(1_000)
        .misfire_grace_ms(60_000)
        .overlap(Overlap::Skip)
        .max_attempts(3)
        .lease_ms(12_345)
        .priority(4)
        .group("tenant-a");
    q.set_schedule(&spec).await.unwrap();
    assert_eq!(q.schedule("sync").await.unwrap().unwrap().spec, spec);
    let firer = default_firer(&ctx, &q);
    wait_until_async(DEADLINE, "two ticks skipped behind the first", || async {
        q.schedule("sync").await.unwrap().unwrap().skipped_total >= 2
    })
    .await;
    stop_firer(firer).await;
    let s = q.schedule("sync").await.unwrap().unwrap();
    assert_eq!(
        s.fired_total, 1,
        "a tick fired while the first tick's task was live"
    );
    let c = q.claim(10, None).await.unwrap();
    assert_eq!(c.tasks.len(), 1);
    let t = &c.tasks[0];
    assert_eq!((t.priority, t.group.as_deref()), (4, Some("tenant-a")));
    assert_eq!(
        (t.payload.as_slice(), t.max_attempts, t.attempt),
        (b"payload of sync".as_slice(), 3, 1)
    );
    assert_eq!(t.lease_expires_at_ms - t.claimed_at_ms, 12_345);
    assert_eq!(
        t.key.as_deref(),
        Some(format!("schedule:sync:{}", t.due_at_ms).as_str())
    );
}

/// [C34](../../../../shared/cases/CASES.md) on the library: every bad spec is refused naming
/// its field, and nothing is stored.
#[tokio::test]
async fn c34_bad_schedules_write_nothing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("bad");
    let base = || ScheduleSpec::new("s", b"x".to_vec());
    let cases = [
        (base().cron("61 * * * *"), "cron"),
        (base().every_ms(0), "every_ms"),
        (base().cron("* * * * *").tz("Mars/Olympus"), "tz"),
        (base().cron("* * * * *").every_ms(1000), "every_ms"),
        (
            ScheduleSpec::new("a b", b"x".to_vec()).every_ms(1000),
            "name",
        ),
        (base().cron("0 0 30 2 *"), "cron"),
        (base().every_ms(1000).priority(10), "priority"),
        (base().every_ms(1000).group(""), "group"),
    ];
    for (spec, field) in cases {
        let e = q.set_schedule(&spec).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(field), "{e} does not name {field}");
    }
    let mut c = ctx.raw();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(keys.is_empty(), "written: {keys:?}");
}

#[tokio::test]
async fn set_is_idempotent_replace_keeps_the_grid_pause_and_delete() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("api");
    let spec = ScheduleSpec::new("hourly", b"1".to_vec()).every_ms(3_600_000);
    let first = q.set_schedule(&spec).await.unwrap();
    assert_eq!(first.outcome, SetOutcome::Created);
    let next = first.next_fire_at_ms.unwrap();
    assert_eq!(next % 3_600_000, 0, "on the epoch grid");
    assert!(next > ctx.redis_now_ms());
    assert_eq!(
        q.set_schedule(&spec).await.unwrap().outcome,
        SetOutcome::Unchanged
    );
    // a new payload keeps the timing and so the next fire time
    let r = q
        .set_schedule(&spec.clone().misfire(Misfire::FireOnce))
        .await
        .unwrap();
    assert_eq!(
        (r.outcome, r.next_fire_at_ms),
        (SetOutcome::Replaced, Some(next))
    );
    let s = q.schedule("hourly").await.unwrap().unwrap();
    assert_eq!(s.spec.misfire, Misfire::FireOnce);
    assert_eq!(
        s.upcoming_ms,
        (0..5).map(|i| next + i * 3_600_000).collect::<Vec<_>>()
    );
    // a new timing starts at its own first tick after now
    let r = q
        .set_schedule(&ScheduleSpec::new("hourly", b"1".to_vec()).cron("0 0 3 * * *"))
        .await
        .unwrap();
    assert_eq!(r.outcome, SetOutcome::Replaced);
    assert_eq!(r.next_fire_at_ms.unwrap() % 86_400_000, 3 * 3_600_000);
    // pause leaves the index; a replace keeps it paused; resume comes back on the grid
    assert_eq!(q.pause_schedule("hourly").await.unwrap(), Some(()));
    let mut c = ctx.raw();
    let indexed: u64 = redis::cmd("ZCARD")
        .arg(&q.keys().schedule_next)
        .query(&mut c)
        .unwrap();
    assert_eq!(indexed, 0);
    let s = q.schedule("hourly").await.unwrap().unwrap();
    assert!(s.paused && s.next_fire_at_ms.is_none() && s.upcoming_ms.is_empty());
    let r = q
        .set_schedule(&ScheduleSpec::new("hourly", b"2".to_vec()).cron("0 0 3 * * *"))
        .await
        .unwrap();
    assert_eq!((r.outcome, r.next_fire_at_ms), (SetOutcome::Replaced, None));
    let resumed = q.resume_schedule("hourly").await.unwrap().unwrap().unwrap();
    assert_eq!(resumed % 86_400_000, 3 * 3_600_000);
    assert_eq!(q.resume_schedule("nope").await.unwrap(), None);
    // list, delete
    q.set_schedule(&ScheduleSpec::new("a", b"".to_vec()).every_ms(5000))
        .await
        .unwrap();
    let names: Vec<_> = q
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    assert_eq!(names, ["a", "hourly"]);
    assert!(q.delete_schedule("hourly").await.unwrap());
    assert!(!q.delete_schedule("hourly").await.unwrap());
    assert!(q.schedule("hourly").await.unwrap().is_none());
    assert_eq!(ctx.client.schedule_queues().await.unwrap(), ["api"]);
}

/// Identical registrations racing: exactly one creates, the others find it unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_identical_sets_create_once() {
    let ctx = Ctx::new().await;
    let spec = ScheduleSpec::new("r", b"x".to_vec()).every_ms(60_000);
    let mut joins = Vec::new();
    for _ in 0..8 {
        let q = ctx.queue("race");
        let spec = spec.clone();
        joins.push(tokio::spawn(
            async move { q.set_schedule(&spec).await.unwrap() },
        ));
    }
    let mut outcomes = BTreeMap::new();
    for j in joins {
        *outcomes
            .entry(format!("{:?}", j.await.unwrap().outcome))
            .or_insert(0) += 1;
    }
    assert_eq!(outcomes.get("Created"), Some(&1), "{outcomes:?}");
    assert_eq!(outcomes.get("Unchanged"), Some(&7), "{outcomes:?}");
}

/// A paused queue still fires its schedules (the tasks wait like any task of a paused
/// queue); with `overlap: skip` the waiting task makes the next ticks skip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_keeps_firing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("paused");
    q.pause().await.unwrap();
    q.set_schedule(&ScheduleSpec::new("p", b"x".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    let firer = default_firer(&ctx, &q);
    wait_until_async(DEADLINE, "two ticks fired", || async {
        q.schedule("p").await.unwrap().unwrap().fired_total >= 2
    })
    .await;
    stop_firer(firer).await;
    let stats = q.stats().await.unwrap();
    assert!(stats.scheduled >= 2 && stats.active == 0, "{stats:?}");
}

/// C30 on a local 3-master Redis Cluster: two workers on independent cluster clients fire an
/// `every_ms` 1 000 schedule (the shortest allowed); one task per tick, on the grid, none
/// skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c30_cluster_one_task_per_tick() {
    let cluster = dueq_testkit::RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let a = Client::connect(&url).await.unwrap();
    let b = Client::connect(&url).await.unwrap();
    let q = a.queue("cticks").unwrap();
    q.set_schedule(&ScheduleSpec::new("half", b"h".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    let log: Log = Arc::default();
    let wa = worker(&a, "cticks", &log, Duration::ZERO);
    let wb = worker(&b, "cticks", &log, Duration::ZERO);
    wait_until_async(DEADLINE, "six ticks fired", || async {
        q.schedule("half").await.unwrap().unwrap().fired_total >= 6
    })
    .await;
    q.pause_schedule("half").await.unwrap().unwrap();
    let s = q.schedule("half").await.unwrap().unwrap();
    wait_until_async(DEADLINE, "every fired task ran", || {
        let log = log.clone();
        async move {
            let mut t = fire_times(&log, "half");
            t.dedup();
            t.len() as u64 >= s.fired_total
        }
    })
    .await;
    wa.shutdown().await.unwrap();
    wb.shutdown().await.unwrap();
    let mut times = fire_times(&log, "half");
    times.dedup();
    assert_eq!(times.len() as u64, s.fired_total);
    assert_eq!(s.skipped_total, 0);
    for w in times.windows(2) {
        assert_eq!(w[1] - w[0], 1_000, "{times:?}");
    }
    // the pause took back the ticks fired ahead whose tasks still waited, if there were any
    let stats = q.stats().await.unwrap();
    assert!(
        stats.cancelled_total <= dueq::schedule::MAX_TICKS_AHEAD as u64,
        "{stats:?}"
    );
    assert_eq!(stats.enqueued_total - stats.cancelled_total, s.fired_total);
}

/// A tick fires ahead of its time (`FIRE_AHEAD_MS`): its task waits, due at the tick, and is
/// not handed out before it. A replace, a pause or a delete before the tick takes that task
/// back (counted as cancelled), and a firer fires the tick again by the new definition; once
/// the tick has come, a pause leaves its task alone. `overlap: skip` schedules fire at the
/// tick itself. On a frozen Redis clock, so every step is exact.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_fired_ahead_waits_and_is_taken_back_by_a_change_before_it() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("ahead").unwrap();
    let spec = |payload: &[u8]| ScheduleSpec::new("ahead", payload.to_vec()).every_ms(20_000);
    let t = set_first_tick(&q, &spec(b"a")).await;
    q.set_schedule(
        &ScheduleSpec::new("skipper", b"s".to_vec())
            .every_ms(20_000)
            .overlap(Overlap::Skip),
    )
    .await
    .unwrap();
    let key = |name: &str| TaskRef::key(format!("schedule:{name}:{t}")).unwrap();
    let task_of = |name: &'static str| {
        let q = q.clone();
        let k = key(name);
        async move { q.get(&k).await.unwrap() }
    };
    // before the firer starts, so the tick is fired at t - 500 (one tick in the look-ahead)
    clock.set_ms(t - 500);
    let firer = queue_firer(&client, &q, 20);
    let fired_ahead = |payload: &'static [u8]| async move {
        wait_until_async(DEADLINE, "the tick fired ahead", || async move {
            task_of("ahead").await.is_some_and(|t| t.payload == payload)
        })
        .await;
    };

    fired_ahead(b"a").await;
    let task = task_of("ahead").await.unwrap();
    assert_eq!((task.due_at_ms, task.created_at_ms), (t, t - 500));
    assert!(
        task_of("skipper").await.is_none(),
        "overlap skip fired ahead"
    );
    let s = q.schedule("ahead").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms, s.fired_total),
        (Some(t), None, 1)
    );
    assert!(
        q.claim(10, None).await.unwrap().tasks.is_empty(),
        "handed out early"
    );

    // a replace takes it back; the firer fires the same tick by the new definition
    let r = q.set_schedule(&spec(b"b")).await.unwrap();
    assert_eq!(
        (r.outcome, r.next_fire_at_ms),
        (SetOutcome::Replaced, Some(t))
    );
    fired_ahead(b"b").await;
    // a pause takes it back and nothing fires it again
    q.pause_schedule("ahead").await.unwrap().unwrap();
    assert!(task_of("ahead").await.is_none());
    assert_eq!(q.schedule("ahead").await.unwrap().unwrap().fired_total, 0);
    assert_eq!(q.resume_schedule("ahead").await.unwrap(), Some(Some(t)));
    fired_ahead(b"b").await;
    // a delete takes it back
    assert!(q.delete_schedule("ahead").await.unwrap());
    assert!(task_of("ahead").await.is_none());
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.enqueued_total, stats.cancelled_total), (3, 3));

    // once the tick has come, its task is the tick's: a pause leaves it, and it is claimed
    q.set_schedule(&spec(b"c")).await.unwrap();
    fired_ahead(b"c").await;
    clock.set_ms(t);
    q.pause_schedule("ahead").await.unwrap().unwrap();
    let claimed = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(
        (claimed[0].payload.as_slice(), claimed[0].due_at_ms),
        (&b"c"[..], t)
    );
    let s = q.schedule("ahead").await.unwrap().unwrap();
    assert_eq!((s.last_fire_at_ms, s.fired_total), (Some(t), 1));
    // and the skip schedule fires at the tick
    wait_until_async(
        DEADLINE,
        "the skip schedule fired at its tick",
        || async move { task_of("skipper").await.is_some() },
    )
    .await;
    stop_firer(firer).await;
}

/// A schedule every second fires up to `MAX_TICKS_AHEAD` ticks ahead of their time (within
/// `FIRE_AHEAD_MS`), then waits until only `REFILL_AT` of them are left (halfway to the next
/// one) and fires the next ones in one step; a pause, resume and delete take back every tick
/// fired ahead whose task still waits, and only those. On a frozen Redis clock.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_ticks_fire_ahead_in_steps_and_a_change_takes_them_all_back() {
    use dueq::schedule::{MAX_TICKS_AHEAD, REFILL_AT};
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("steps").unwrap();
    let t = set_first_tick(
        &q,
        &ScheduleSpec::new("often", b"o".to_vec()).every_ms(1000),
    )
    .await;
    let firer = queue_firer(&client, &q, 20);
    let fired = |n: u64| {
        let q = q.clone();
        async move {
            wait_until_async(DEADLINE, "ticks fired", || async {
                q.schedule("often").await.unwrap().unwrap().fired_total == n
            })
            .await;
        }
    };
    let exists = |at: u64| {
        let q = q.clone();
        async move {
            let k = TaskRef::key(format!("schedule:often:{at}")).unwrap();
            q.get(&k).await.unwrap().is_some()
        }
    };
    let k = MAX_TICKS_AHEAD as u64;
    let left = REFILL_AT as u64;

    // all within the look-ahead, at most MAX_TICKS_AHEAD of them
    clock.set_ms(t - 1);
    fired(k).await;
    for i in 0..k {
        assert!(exists(t + i * 1000).await, "tick {i} not fired ahead");
    }
    assert!(
        !exists(t + k * 1000).await,
        "more than MAX_TICKS_AHEAD fired ahead"
    );
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!((s.next_fire_at_ms, s.last_fire_at_ms), (Some(t), None));
    assert!(
        q.claim(10, None).await.unwrap().tasks.is_empty(),
        "handed out early"
    );

    // once only REFILL_AT wait, halfway to the next tick, the next ones fire in one step
    let came = k - left; // ticks come when the refill is due
    let refill_at = t + (came - 1) * 1000 + 500;
    clock.set_ms(refill_at);
    fired(k + came).await;
    assert!(exists(t + (k + came - 1) * 1000).await);
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!(
        (s.next_fire_at_ms, s.last_fire_at_ms),
        (Some(t + came * 1000), Some(t + (came - 1) * 1000))
    );

    // a pause takes back every tick still ahead, and none that came
    q.pause_schedule("often").await.unwrap().unwrap();
    let stats = q.stats().await.unwrap();
    assert_eq!(stats.cancelled_total, k);
    assert_eq!(stats.scheduled, came);
    for i in 0..k + came {
        assert_eq!(exists(t + i * 1000).await, i < came, "tick {i}");
    }
    let s = q.schedule("often").await.unwrap().unwrap();
    assert_eq!(
        (s.fired_total, s.last_fire_at_ms),
        (came, Some(t + (came - 1) * 1000))
    );
    // a resume fires them again from the first tick after now; a delete takes them back
    assert_eq!(
        q.resume_schedule("often").await.unwrap(),
        Some(Some(t + came * 1000))
    );
    fired(came + k).await;
    assert!(q.delete_schedule("often").await.unwrap());
    let stats = q.stats().await.unwrap();
    assert_eq!(
        (stats.cancelled_total, stats.scheduled),
        (2 * k, came),
        "{stats:?}"
    );
    stop_firer(firer).await;
}

/// One fire call creates at most 1 000 ticks (DESIGN 3, bounded work per call): 150 new
/// schedules every second, ten ticks each fired ahead at once, take several calls. Read from
/// `SLOWLOG` (threshold 0): each `schedule_fire` call's argument count gives its schedules.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_call_creates_at_most_a_thousand_ticks() {
    let ctx = Ctx::new().await;
    let (clock, client) = frozen_client(&ctx, ctx.redis_now_ms()).await;
    let q = client.queue("bounded").unwrap();
    let n = 150;
    let mut t = 0;
    for i in 0..n {
        let spec = ScheduleSpec::new(format!("s{i}"), b"x".to_vec()).every_ms(1000);
        t = set_first_tick(&q, &spec).await;
    }
    let mut raw = ctx.raw();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .exec(&mut raw)
        .unwrap();
    redis::cmd("SLOWLOG").arg("RESET").exec(&mut raw).unwrap();
    clock.set_ms(t - 1);
    let firer = queue_firer(&client, &q, 20);
    // (a schedule set after the real clock passed a whole second has its first tick a second
    // later, so others may fire one tick more: the due one and ten ahead)
    let all = n * dueq::schedule::MAX_TICKS_AHEAD as u64;
    wait_until_async(DEADLINE, "every schedule fired ahead", || async {
        q.stats().await.unwrap().enqueued_total >= all
    })
    .await;
    stop_firer(firer).await;
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query(&mut raw)
        .unwrap();
    // per entry: id, time, duration, args (the first 31, then "... (N more arguments)")
    let mut calls = 0;
    for entry in &log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let Some(redis::Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        if args.len() < 2 || !text(&args[1]).ends_with("_schedule_fire") {
            continue;
        }
        calls += 1;
        let more: usize = text(args.last().unwrap())
            .trim_start_matches("... (")
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // FCALL, name, numkeys, the keys, 4 arguments, then 10 + 1 per tick per schedule: at
        // most 1 000 ticks, 83 schedules of 12 ticks, is under 1 900; all 1 800 ticks in one
        // call would be 3 300
        let numkeys: usize = text(&args[2]).parse().unwrap();
        let per_schedules = args.len() - 1 + more - (3 + numkeys + 4);
        assert!(
            per_schedules < 2_000,
            "a call of {per_schedules} schedule arguments"
        );
    }
    assert!(calls >= 2, "{all} ticks in {calls} fire calls");
}

/// On the real clock: a worker's firer fires each tick ahead, so its task is enqueued before
/// the tick and starts at or after it, never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_fire_ahead_and_never_start_early() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("ontime");
    q.set_schedule(&ScheduleSpec::new("fast", b"f".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    // (due, created, started) of every task run
    let seen: Arc<Mutex<Vec<(u64, u64, u64)>>> = Arc::default();
    let log = seen.clone();
    let w = Worker::builder(ctx.client.clone())
        .handle("ontime", move |t: ClaimedTask| {
            let log = log.clone();
            async move {
                log.lock()
                    .unwrap()
                    .push((t.due_at_ms, t.created_at_ms, t.started_at_ms));
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    // six ticks of 1 s (the shortest `every_ms`) take about six seconds
    wait_until_async(DEADLINE * 2, "six ticks ran", || async {
        seen.lock().unwrap().len() >= 6
    })
    .await;
    w.shutdown().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    for (due, _, started) in &seen {
        assert!(started >= due, "started early: {seen:?}");
    }
    assert!(
        seen.iter().any(|(due, created, _)| created < due),
        "no tick fired ahead: {seen:?}"
    );
}

/// An `every_ms` below 1 000 (`MIN_EVERY_MS`) is refused, naming the field, and writes
/// nothing. A schedule of the shortest allowed 1 000 ms: an offered fire time may pass before
/// the set or resume script runs; the client then offers newer ones, so the schedule never ends
/// up unpaused with no next fire time (found by the review with a 1 ms schedule: 2 of 18 HTTP
/// sets did).
#[tokio::test]
async fn a_one_ms_schedule_is_refused_and_a_one_second_one_always_gets_a_next_fire_time() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("tiny");
    for ms in [1, 999] {
        let e = q
            .set_schedule(&ScheduleSpec::new("t", b"x".to_vec()).every_ms(ms))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("every_ms"), "{e}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut ctx.raw()).unwrap();
    assert!(keys.is_empty(), "a refused schedule wrote {keys:?}");
    for i in 0..40 {
        let name = format!("t{i}");
        let r = q
            .set_schedule(
                &ScheduleSpec::new(&name, b"x".to_vec()).every_ms(dueq::schedule::MIN_EVERY_MS),
            )
            .await
            .unwrap();
        assert!(r.next_fire_at_ms.is_some(), "{name}: {r:?}");
        q.pause_schedule(&name).await.unwrap().unwrap();
        let resumed = q.resume_schedule(&name).await.unwrap().unwrap();
        assert!(
            resumed.is_some(),
            "{name}: resumed without a next fire time"
        );
    }
}
