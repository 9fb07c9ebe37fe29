//! Schedule ticks fired ahead, from the review that tried to break them: a user cancels the
//! waiting task of a tick fired ahead, then a pause and resume or a new timing comes before
//! the tick (the schedule must keep firing, and its firer must not spin), and a cron every
//! second with priority and group taken back out of the group index.

use std::time::Duration;

use dueq::{CancelOutcome, Client, ScheduleSpec, TaskRef};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, Firer, queue_firer, script_calls};

fn firer(client: &Client, q: &dueq::Queue) -> Firer {
    queue_firer(client, q, 200)
}

/// Sets schedule `s` every `every` ms on `q`, starts a firer and waits for a tick fired ahead
/// (see [`wait_fired_ahead`]); returns the firer and that tick.
async fn fire_ahead_every(ctx: &Ctx, q: &dueq::Queue, every: u64) -> (Firer, u64) {
    q.set_schedule(&ScheduleSpec::new("s", b"a".to_vec()).every_ms(every))
        .await
        .unwrap();
    let f = firer(&ctx.client, q);
    let t = wait_fired_ahead(ctx, q, "s", every).await;
    (f, t)
}

/// Waits for the tick fired ahead (a task under a `schedule:{name}:` key whose fire time is
/// still after Redis now); returns that fire time.
async fn wait_fired_ahead(ctx: &Ctx, q: &dueq::Queue, name: &str, every: u64) -> u64 {
    let start = std::time::Instant::now();
    loop {
        let now = ctx.redis_now_ms();
        let t = (now / every + 1) * every;
        let k = TaskRef::key(format!("schedule:{name}:{t}")).unwrap();
        // only accept it early enough in its lead that the test has time to act
        if t - now > 700 && q.get(&k).await.unwrap().is_some() {
            return t;
        }
        assert!(start.elapsed() < DEADLINE * 3, "never fired ahead");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn assert_fires_after(ctx: &Ctx, q: &dueq::Queue, name: &str, t: u64, every: u64) {
    // let the tick t pass, then measure script calls over 1 s
    while ctx.redis_now_ms() < t + 300 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c0 = script_calls(ctx);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = script_calls(ctx) - c0;
    let s = q.schedule(name).await.unwrap().unwrap();
    eprintln!(
        "script calls in 1 s after the tick: {calls}; schedule: next {:?} last {:?} fired {}",
        s.next_fire_at_ms, s.last_fire_at_ms, s.fired_total
    );
    let sk: Vec<String> = redis::cmd("KEYS")
        .arg("*schedule_state")
        .query(&mut ctx.raw())
        .unwrap();
    let raw: String = redis::cmd("HGET")
        .arg(&sk[0])
        .arg(name)
        .query(&mut ctx.raw())
        .unwrap_or_default();
    eprintln!("raw state: {raw:?}");
    // the next ticks after t must fire
    let later = t + 2 * every;
    let k = TaskRef::key(format!("schedule:{name}:{later}")).unwrap();
    wait_until_async(
        Duration::from_millis(2 * every + 3_000),
        "a later tick fired",
        || {
            let k = k.clone();
            async move { q.get(&k).await.unwrap().is_some() }
        },
    )
    .await;
    assert!(calls < 200, "firer spins: {calls} script calls in 1 s");
}

/// The task of a tick fired ahead is cancelled by a user (e.g. from the dashboard), then the
/// schedule is paused and resumed before the tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_ahead_task_then_pause_resume_before_tick() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rv1");
    let every = 3_000;
    let ((stop, join), t) = fire_ahead_every(&ctx, &q, every).await;
    let k = TaskRef::key(format!("schedule:s:{t}")).unwrap();
    assert_eq!(q.cancel(&k).await.unwrap(), CancelOutcome::Cancelled);
    q.pause_schedule("s").await.unwrap().unwrap();
    let r = q.resume_schedule("s").await.unwrap();
    eprintln!("resume -> {r:?} (tick {t}, now {})", ctx.redis_now_ms());
    assert_fires_after(&ctx, &q, "s", t, every).await;
    let _ = stop.send(());
    join.await.unwrap();
}

/// The task of a tick fired ahead is cancelled by a user, then the schedule is replaced with
/// a new, shorter timing before the tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_ahead_task_then_new_timing_before_tick() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rv2");
    let every = 3_000;
    let ((stop, join), t) = fire_ahead_every(&ctx, &q, every).await;
    let k = TaskRef::key(format!("schedule:s:{t}")).unwrap();
    assert_eq!(q.cancel(&k).await.unwrap(), CancelOutcome::Cancelled);
    let r = q
        .set_schedule(&ScheduleSpec::new("s", b"a".to_vec()).every_ms(1_000))
        .await
        .unwrap();
    eprintln!("replace -> {r:?} (tick {t}, now {})", ctx.redis_now_ms());
    assert_fires_after(&ctx, &q, "s", t, 1_000).await;
    let _ = stop.send(());
    join.await.unwrap();
}

fn raw_ids(ctx: &Ctx) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut c = ctx.raw();
    let one = |c: &mut redis::Connection, pat: &str| -> String {
        let k: Vec<String> = redis::cmd("KEYS").arg(pat).query(c).unwrap();
        k.into_iter().next().unwrap_or_default()
    };
    let gdue = one(&mut c, "*:gdue");
    let groups = one(&mut c, "*:groups");
    let gsched = one(&mut c, "*:gsched");
    let a: Vec<String> = redis::cmd("ZRANGE")
        .arg(&gdue)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap_or_default();
    let b: Vec<String> = redis::cmd("HKEYS")
        .arg(&groups)
        .query(&mut c)
        .unwrap_or_default();
    let s: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(&gsched)
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap_or_default();
    let s = s
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect();
    (a, b, s)
}

/// A cron schedule every second with priority and group: the tick fired ahead waits in its
/// group; a replace and a pause take it back out of the group index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_every_second_group_priority_withdraw() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("rv3");
    // the tasks left are claimed after tick t, more than the default 1 s misfire grace after
    // the tick before it: a longer grace keeps them from being dropped as missed ticks
    let spec = |p: &[u8]| {
        ScheduleSpec::new("c", p.to_vec())
            .cron("* * * * * *")
            .misfire_grace_ms(60_000)
            .priority(3)
            .group("g1")
    };
    q.set_schedule(&spec(b"a")).await.unwrap();
    let (stop, join) = firer(&ctx.client, &q);
    let t = wait_fired_ahead(&ctx, &q, "c", 1000).await;
    let k = TaskRef::key(format!("schedule:c:{t}")).unwrap();
    let t1 = q.get(&k).await.unwrap().unwrap();
    assert_eq!((t1.priority, t1.group.as_deref()), (3, Some("g1")));
    q.set_schedule(&spec(b"b")).await.unwrap();
    wait_until_async(Duration::from_millis(500), "fired again with b", || {
        let k = k.clone();
        let q = q.clone();
        async move { q.get(&k).await.unwrap().is_some_and(|t| t.payload == b"b") }
    })
    .await;
    let t2 = q.get(&k).await.unwrap().unwrap();
    assert_ne!(t1.id, t2.id);
    let (gdue, groups, gsched) = raw_ids(&ctx);
    let id1 = t1.id.as_str().to_owned();
    assert!(
        !gdue.contains(&id1) && !groups.contains(&id1),
        "withdrawn id left in group index"
    );
    assert!(
        !gsched.iter().any(|m| m.ends_with(&id1)),
        "withdrawn id left in gsched"
    );
    q.pause_schedule("c").await.unwrap().unwrap();
    assert!(ctx.redis_now_ms() < t, "test too slow");
    assert!(
        q.get(&k).await.unwrap().is_none(),
        "pause left the task of the tick fired ahead"
    );
    let (gdue, groups, gsched) = raw_ids(&ctx);
    let id2 = t2.id.as_str().to_owned();
    assert!(!gdue.contains(&id2) && !groups.contains(&id2));
    assert!(!gsched.iter().any(|m| m.ends_with(&id2)));
    let st = q.stats().await.unwrap();
    let s = q.schedule("c").await.unwrap().unwrap();
    eprintln!(
        "stats enq {} canc {} sched {}; fired_total {}; gdue {} gsched {}",
        st.enqueued_total,
        st.cancelled_total,
        st.scheduled,
        s.fired_total,
        gdue.len(),
        gsched.len()
    );
    // the replace and the pause each took back every tick fired ahead whose task waited
    assert!(st.cancelled_total >= 2, "{st:?}");
    assert_eq!(st.enqueued_total - st.cancelled_total, s.fired_total);
    assert_eq!(st.scheduled as usize, gdue.len());
    // everything left is claimable, of the group, none of tick t
    while ctx.redis_now_ms() < t + 50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let c = q.claim(100, None).await.unwrap().tasks;
    assert_eq!(c.len() as u64, s.fired_total, "{c:?}");
    for x in &c {
        assert_eq!((x.priority, x.group.as_deref()), (3, Some("g1")));
        assert_ne!(x.key.as_deref(), Some(format!("schedule:c:{t}").as_str()));
    }
    let _ = stop.send(());
    join.await.unwrap();
}

/// The state of a schedule with a tick fired ahead still reads with the pattern of the
/// scripts from before ticks fired ahead (six fields, `prev` riding on the fingerprint), so
/// a process not yet upgraded neither misreads nor resets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_with_a_tick_fired_ahead_reads_by_the_older_pattern() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("compat");
    let every = 2_000;
    let ((stop, join), t) = fire_ahead_every(&ctx, &q, every).await;
    let _ = stop.send(());
    join.await.unwrap();
    let raw: String = redis::cmd("HGET")
        .arg(&q.keys().schedule_state)
        .arg("s")
        .query(&mut ctx.raw())
        .unwrap();
    let old: Vec<String> = redis::cmd("EVAL")
        .arg("return {string.match(ARGV[1], '^(%-?%d+) (%-?%d+) (%d+) (%d) (%d+) (%S*)$')}")
        .arg(0)
        .arg(&raw)
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(old.len(), 6, "{raw:?}");
    // `last` is the newest tick fired (ahead), on the grid
    let last: u64 = old[1].parse().unwrap();
    assert!(last >= t && last.is_multiple_of(every), "{raw:?}");
}
