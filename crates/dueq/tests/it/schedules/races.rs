//! Firers racing each other and changes to the schedule (replace, pause, resume, delete and
//! re-create), also with workers running the ticks and on a Redis Cluster: one task per tick,
//! none for a tick of a paused or deleted span, and counters that add up.

use std::collections::BTreeMap;
use std::time::Duration;

use dueq::{Client, ScheduleSpec};

use super::check::{check_common, hget, scheduled, ticks_of};
use crate::support::{Ctx, Rng, queue_firer, seed, stop_firer, wait_stats};

/// Three firers (own clients) fire a schedule every second (the shortest `every_ms`) while one
/// mutator replaces it (same timing new payload, new timing 1.5 s and back), pauses and resumes
/// it, and a second one replaces its payload. Afterwards: one task per tick, none for a tick of a
/// paused span, fired_total == enqueued - cancelled == live tasks, no orphaned keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firers_racing_replace_pause_and_resume_fire_each_tick_once() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race1");
    let spec = |p: String, every: u64| ScheduleSpec::new("r", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let mut firers = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        let fq = c.queue("race1").unwrap();
        firers.push(queue_firer(&c, &fq, 50));
    }
    let mut rng = Rng(seed());
    let m2 = {
        let q = q.clone();
        let mut rng = Rng(rng.next() | 1);
        tokio::spawn(async move {
            for i in 0..400u64 {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("m2-{i}"), every))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(10 + rng.next() % 30)).await;
            }
        })
    };
    let mut spans = Vec::new();
    let mut paused_from: Option<u64> = None;
    let mut ops = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(7) {
        ops += 1;
        match rng.next() % 5 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("m1-{ops}"), every))
                    .await
                    .unwrap();
            }
            2 if paused_from.is_none() => {
                q.pause_schedule("r").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            _ => {
                if let Some(from) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("r").await.unwrap().unwrap();
                    spans.push((from, to));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    m2.await.unwrap();
    for f in firers {
        stop_firer(f).await;
    }
    let ticks = check_common(&ctx, &q, "r", &spans).await;
    let s = q.schedule("r").await.unwrap().unwrap();
    eprintln!(
        "ops {ops}, spans {}, live ticks {}, fired_total {}, stats {:?}",
        spans.len(),
        ticks.len(),
        s.fired_total,
        q.stats().await.unwrap()
    );
    assert_eq!(s.fired_total, ticks.len() as u64, "fired_total off");
    // the fired list holds every waiting tick
    let now = ctx.redis_now_ms();
    let list = hget(&ctx, &q.keys().schedule_fired, "r").unwrap_or_default();
    let listed: Vec<u64> = list.split(' ').filter_map(|t| t.parse().ok()).collect();
    for t in ticks.iter().filter(|&&t| t > now + 50) {
        assert!(
            listed.contains(t),
            "waiting tick {t} not in schedule_fired {list:?}"
        );
    }
}

/// As above with deletes and re-creates: no task for a tick between a delete and the next
/// create, one per tick, counters add up, no orphaned keys; the last delete leaves no
/// `schedule_fired` entry and no task of a tick after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firers_racing_delete_and_recreate_fire_no_tick_of_a_deleted_span() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race2");
    let spec = |p: String, every: u64| ScheduleSpec::new("d", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let mut firers = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        let fq = c.queue("race2").unwrap();
        firers.push(queue_firer(&c, &fq, 50));
    }
    let mut rng = Rng(seed());
    let mut spans = Vec::new();
    let mut gone_from: Option<u64> = None;
    let mut paused_from: Option<u64> = None;
    let start = std::time::Instant::now();
    let mut ops = 0;
    while start.elapsed() < Duration::from_secs(7) {
        ops += 1;
        let every = if rng.next().is_multiple_of(3) {
            1_500
        } else {
            1_000
        };
        match (rng.next() % 6, gone_from) {
            (_, Some(from)) => {
                let to = ctx.redis_now_ms();
                q.set_schedule(&spec(format!("c{ops}"), every))
                    .await
                    .unwrap();
                spans.push((from, to));
                gone_from = None;
                paused_from = None;
            }
            (0 | 1, None) => {
                assert!(q.delete_schedule("d").await.unwrap());
                let at = ctx.redis_now_ms();
                if let Some(p) = paused_from.take() {
                    spans.push((p, at));
                }
                gone_from = Some(at);
            }
            (2, None) if paused_from.is_none() => {
                q.pause_schedule("d").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            (3, None) => {
                if let Some(p) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("d").await.unwrap().unwrap();
                    spans.push((p, to));
                }
            }
            _ => {
                q.set_schedule(&spec(format!("r{ops}"), every))
                    .await
                    .unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    // end deleted
    if gone_from.is_none() {
        assert!(q.delete_schedule("d").await.unwrap());
        let at = ctx.redis_now_ms();
        if let Some(p) = paused_from.take() {
            spans.push((p, at));
        }
        gone_from = Some(at);
    }
    let deleted_at = gone_from.unwrap();
    // let the firers try for a while after the delete
    tokio::time::sleep(Duration::from_millis(300)).await;
    for f in firers {
        stop_firer(f).await;
    }
    spans.push((deleted_at, u64::MAX));
    let ticks = check_common(&ctx, &q, "d", &spans).await;
    eprintln!(
        "ops {ops}, spans {}, live ticks {}",
        spans.len(),
        ticks.len()
    );
    let k = q.keys();
    assert_eq!(
        hget(&ctx, &k.schedule_fired, "d"),
        None,
        "schedule_fired left"
    );
    assert_eq!(hget(&ctx, &k.schedule_state, "d"), None);
    let z: Option<f64> = redis::cmd("ZSCORE")
        .arg(&k.schedule_next)
        .arg("d")
        .query(&mut ctx.raw())
        .unwrap();
    assert_eq!(z, None);
}

type RunLog = std::sync::Arc<std::sync::Mutex<Vec<(String, String, u64, u64, Vec<u8>)>>>;

fn run_worker(client: &Client, queue: &str, log: &RunLog) -> dueq::WorkerHandle {
    let log = log.clone();
    dueq::Worker::builder(client.clone())
        .handle(queue, move |t: dueq::ClaimedTask| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((
                    t.key.clone().unwrap_or_default(),
                    t.id.as_str().to_owned(),
                    t.due_at_ms,
                    t.started_at_ms,
                    t.payload.clone(),
                ));
                dueq::Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start()
}

/// Two workers (each firing schedules, DESIGN's default) run a schedule every second (the
/// shortest `every_ms`) while a mutator replaces (same timing, new payload / new timing 1.5 s),
/// pauses and resumes it. Every
/// tick gets at most one task, none starts before its tick, none of a paused span runs, and
/// fired_total == enqueued - cancelled == tasks that ran + tasks still waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_each_tick_once_while_the_schedule_changes() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("race3");
    let spec = |p: String, every: u64| ScheduleSpec::new("w", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let log: RunLog = Default::default();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        workers.push(run_worker(&c, "race3", &log));
    }
    let mut rng = Rng(seed());
    let mut spans = Vec::new();
    let mut paused_from: Option<u64> = None;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        match rng.next() % 4 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("x{}", rng.next() % 1000), every))
                    .await
                    .unwrap();
            }
            2 if paused_from.is_none() => {
                q.pause_schedule("w").await.unwrap().unwrap();
                paused_from = Some(ctx.redis_now_ms());
            }
            _ => {
                if let Some(from) = paused_from.take() {
                    let to = ctx.redis_now_ms();
                    q.resume_schedule("w").await.unwrap().unwrap();
                    spans.push((from, to));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 150)).await;
    }
    // stop firing: pause (takes back what waits ahead), then let the workers drain
    q.pause_schedule("w").await.unwrap().unwrap();
    let paused_at = ctx.redis_now_ms();
    if let Some(from) = paused_from.take() {
        spans.push((from, u64::MAX));
    } else {
        spans.push((paused_at, u64::MAX));
    }
    let s = q.schedule("w").await.unwrap().unwrap();
    wait_stats(&q, |st| st.scheduled == 0 && st.active == 0).await;
    for w in workers {
        w.shutdown().await.unwrap();
    }
    let st = q.stats().await.unwrap();
    let log = log.lock().unwrap().clone();
    let mut ids_of: BTreeMap<u64, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (key, id, due, started, _) in &log {
        let tick: u64 = key.strip_prefix("schedule:w:").unwrap().parse().unwrap();
        assert_eq!(*due, tick);
        assert!(started >= due, "started early: {key} at {started}");
        ids_of.entry(tick).or_default().insert(id.clone());
    }
    let dups: Vec<_> = ids_of.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(dups.is_empty(), "several tasks for one tick: {dups:?}");
    let in_span: Vec<u64> = ids_of
        .keys()
        .filter(|&&t| spans.iter().any(|&(a, b)| t > a && t <= b))
        .copied()
        .collect();
    assert!(
        in_span.is_empty(),
        "ran ticks of paused spans: {in_span:?} {spans:?}"
    );
    let distinct = ids_of.len() as u64;
    eprintln!(
        "ran {distinct} ticks, fired_total {}, {st:?}",
        s.fired_total
    );
    assert_eq!(st.enqueued_total - st.cancelled_total, distinct, "{st:?}");
    assert_eq!(s.fired_total, distinct);
}

/// The first race on a 3-master Redis Cluster: two clients fire, one mutates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firers_racing_changes_on_a_cluster_fire_each_tick_once() {
    let cluster = dueq_testkit::RedisCluster::start(3);
    let url = cluster.urls().join(",");
    let a = Client::connect(&url).await.unwrap();
    let b = Client::connect(&url).await.unwrap();
    let q = a.queue("crace").unwrap();
    let spec = |p: String, every: u64| ScheduleSpec::new("c", p.into_bytes()).every_ms(every);
    q.set_schedule(&spec("p0".into(), 1_000)).await.unwrap();
    let fa = queue_firer(&a, &q, 50);
    let qb = b.queue("crace").unwrap();
    let fb = queue_firer(&b, &qb, 50);
    let mut rng = Rng(seed());
    let mut paused = false;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        match rng.next() % 4 {
            0 | 1 => {
                let every = if rng.next().is_multiple_of(2) {
                    1_000
                } else {
                    1_500
                };
                q.set_schedule(&spec(format!("x{}", rng.next() % 1000), every))
                    .await
                    .unwrap();
            }
            2 if !paused => {
                q.pause_schedule("c").await.unwrap().unwrap();
                paused = true;
            }
            _ => {
                if paused {
                    q.resume_schedule("c").await.unwrap().unwrap();
                    paused = false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.next() % 120)).await;
    }
    stop_firer(fa).await;
    stop_firer(fb).await;
    let tasks = scheduled(&q).await;
    let by = ticks_of(&tasks, "c");
    let dups: Vec<_> = by
        .iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(t, _)| *t)
        .collect();
    assert!(dups.is_empty(), "dup ticks {dups:?}");
    let st = q.stats().await.unwrap();
    let s = q.schedule("c").await.unwrap().unwrap();
    assert_eq!(
        st.enqueued_total - st.cancelled_total,
        tasks.len() as u64,
        "{st:?}"
    );
    assert_eq!(s.fired_total, tasks.len() as u64);
    assert!(q.delete_schedule("c").await.unwrap());
    let now_tasks = scheduled(&q).await.len();
    eprintln!("cluster: {} tasks, {now_tasks} after delete", tasks.len());
}
