//! Schedule faults that reviews found, each test named by what must hold: firing goes on after
//! a user cancels the task of a tick fired ahead and the schedule is then paused and resumed
//! or given a new timing; a change takes a cron tick fired ahead out of its group; state
//! written with ticks fired ahead still reads by the older scripts' pattern; a resume after a
//! pause by an older version keeps the schedule firing.

use std::time::Duration;

use dueq::schedule::MAX_TICKS_AHEAD;
use dueq::{CancelOutcome, Client, Queue, ScheduleSpec, TaskRef};
use dueq_testkit::wait_until_async;

use super::check::hget;
use crate::support::{Ctx, DEADLINE, Firer, queue_firer, script_calls, stop_firer};

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
async fn a_cancelled_ahead_task_then_a_pause_and_resume_keep_the_schedule_firing() {
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
async fn a_cancelled_ahead_task_then_a_new_timing_keep_the_schedule_firing() {
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
async fn a_change_takes_a_cron_tick_fired_ahead_out_of_its_group() {
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

/// The pause of a process of a version from before several ticks fired ahead (it takes back
/// only the newest tick fired ahead and sets `last` to the tick before it), then a resume
/// from an upgraded process: the resume takes back the ticks the old pause left and the
/// schedule goes on firing (before the fix, the next fire time was at or before that `last`
/// and every fire step was refused as stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_after_an_older_version_paused_keeps_the_schedule_firing() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("mixed");
    q.set_schedule(&ScheduleSpec::new("m", b"m".to_vec()).every_ms(1000))
        .await
        .unwrap();
    let f = queue_firer(&ctx.client, &q, 200);
    wait_until_async(DEADLINE, "ticks fired ahead", || async {
        q.schedule("m").await.unwrap().unwrap().fired_total >= MAX_TICKS_AHEAD as u64
    })
    .await;
    old_version_pause(&ctx, &q, "m").await;
    let next = q.resume_schedule("m").await.unwrap().unwrap().unwrap();
    let resumed_at = ctx.redis_now_ms();
    eprintln!(
        "resume -> next {next} (now {resumed_at}); state {:?}",
        hget(&ctx, &q.keys().schedule_state, "m")
    );
    // some tick 12 s or more after the resume must get its task (the look-ahead is FIRE_AHEAD_MS,
    // so every tick fired before the pause is earlier than that)
    let target = (resumed_at / 1000 + 12) * 1000;
    let c0 = script_calls(&ctx);
    let k = TaskRef::key(format!("schedule:m:{target}")).unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            if q.get(&k).await.unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .is_ok();
    let calls = script_calls(&ctx) - c0;
    let s = q.schedule("m").await.unwrap().unwrap();
    stop_firer(f).await;
    assert!(
        fired,
        "schedule stopped firing after an old-version pause and a resume: view next {:?} last {:?}, \
         state {:?}, {calls} script calls meanwhile",
        s.next_fire_at_ms,
        s.last_fire_at_ms,
        hget(&ctx, &q.keys().schedule_state, "m")
    );
}

/// Does what the pause of a version from before several ticks fired ahead (2469255) does to
/// a schedule with ticks fired ahead: it takes back the newest tick only (cancels its task,
/// `fired` one less), sets `last` to the tick before it and `prev` to none, marks the state
/// paused and leaves the index, and writes no `schedule_fired`.
async fn old_version_pause(ctx: &Ctx, q: &Queue, name: &str) {
    let k = q.keys();
    let st = hget(ctx, &k.schedule_state, name).unwrap();
    let f: Vec<&str> = st.split(' ').collect();
    let (fp, prev) = f[5].split_once('/').unwrap();
    let key = TaskRef::key(format!("schedule:{name}:{}", f[1])).unwrap();
    q.cancel(&key).await.unwrap();
    let fired: u64 = f[4].parse().unwrap();
    let text = format!("{} {} {} 1 {} {fp}/-1", f[0], prev, f[2], fired - 1);
    let mut c = ctx.raw();
    redis::cmd("HSET")
        .arg(&k.schedule_state)
        .arg(name)
        .arg(text)
        .exec(&mut c)
        .unwrap();
    redis::cmd("ZREM")
        .arg(&k.schedule_next)
        .arg(name)
        .exec(&mut c)
        .unwrap();
}
