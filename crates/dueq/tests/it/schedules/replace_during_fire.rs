//! A replace while a fire call is in flight: a step is refused when the schedule's stored
//! definition is not the one the step read. A proxy holds a firer's fire call between its read
//! (`schedule_due`) and the fire script, the schedules are replaced meanwhile (one field each,
//! and an A -> B -> A replace), then the call is let through with the firer stopped, so what
//! fires is the held call's doing. No tick may fire by a definition that a returned replace
//! superseded; schedules left alone, one whose definition was written by hand (bytes no
//! client encodes) and one with a binary payload fire from the held call itself (the check
//! does not refuse them forever).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use dueq::{Client, Misfire, Overlap, Queue, ScheduleFirer, ScheduleSpec, SetOutcome, TaskRef};
use dueq_testkit::wait_until_async;

use crate::support::{Ctx, DEADLINE, queue_firer, spawn_firer, stop_firer};

const FIRE_FN: &[u8] = b"_schedule_fire\r\n";

#[derive(Default)]
struct Gate {
    /// The next fire call is to be held.
    armed: bool,
    /// A fire call is held.
    held: bool,
    /// The held call may go on; fire calls after it are held until `opened`.
    released: bool,
    /// Every fire call may go on.
    opened: bool,
}

type Shared = Arc<(Mutex<Gate>, Condvar)>;

/// A TCP proxy to the test server's unix socket that holds the first `schedule_fire` call
/// sent after [`arm`] until [`release`], and every later one until [`open`]: the chunk with
/// the end of the function's name is kept back, so the server never has the whole command.
fn proxy(socket: std::path::PathBuf) -> (String, Shared) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let gate: Shared = Arc::default();
    let g = gate.clone();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = UnixStream::connect(&socket) else {
                return;
            };
            let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
            });
            let g = g.clone();
            thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                let mut tail: Vec<u8> = Vec::new();
                loop {
                    let n = match client.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let chunk = &buf[..n];
                    let mut window = tail.clone();
                    window.extend_from_slice(chunk);
                    if window.windows(FIRE_FN.len()).any(|w| w == FIRE_FN) {
                        let (m, cv) = &*g;
                        let mut s = m.lock().unwrap();
                        if s.armed {
                            s.armed = false;
                            s.held = true;
                            cv.notify_all();
                            while !s.released {
                                s = cv.wait(s).unwrap();
                            }
                        } else if s.held {
                            while !s.opened {
                                s = cv.wait(s).unwrap();
                            }
                        }
                    }
                    if server.write_all(chunk).is_err() {
                        break;
                    }
                    let keep = window.len().saturating_sub(FIRE_FN.len());
                    tail = window[keep..].to_vec();
                }
                let _ = server.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (url, gate)
}

fn arm(g: &Shared) {
    g.0.lock().unwrap().armed = true;
}

fn open(g: &Shared) {
    let (m, cv) = &**g;
    m.lock().unwrap().opened = true;
    cv.notify_all();
}

fn release(g: &Shared) {
    let (m, cv) = &**g;
    m.lock().unwrap().released = true;
    cv.notify_all();
}

type TickTask = (u64, u8, u32, u64, Option<String>, Vec<u8>);

/// Every task of `tasks` carries the template of `spec` (`what` names it in a failure).
fn assert_template(tasks: &[TickTask], spec: &ScheduleSpec, what: &str) {
    for (due, prio, attempts, lease, group, payload) in tasks {
        assert_eq!(
            (
                *prio,
                *attempts,
                *lease,
                group.as_deref(),
                payload.as_slice()
            ),
            (
                spec.task.priority,
                spec.task.max_attempts.unwrap(),
                spec.task.lease_ms.unwrap(),
                spec.task.group.as_deref(),
                spec.payload.as_slice()
            ),
            "{what}: tick {due}"
        );
    }
}

/// `(due_at_ms, priority, max_attempts, lease_ms, group, payload)` of every tick task of
/// `name`, by the queue's `keys` hash.
async fn tick_tasks(ctx: &Ctx, q: &Queue, name: &str) -> Vec<TickTask> {
    let all: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&q.keys().keys)
        .query(&mut ctx.raw())
        .unwrap();
    let prefix = format!("schedule:{name}:");
    let mut out = Vec::new();
    for (key, _) in all.into_iter().filter(|(k, _)| k.starts_with(&prefix)) {
        let t = q
            .get(&TaskRef::key(key.clone()).unwrap())
            .await
            .unwrap()
            .expect("the task of a key");
        out.push((
            t.due_at_ms,
            t.priority,
            t.max_attempts,
            t.lease_ms,
            t.group,
            t.payload,
        ));
    }
    out.sort();
    out
}

async fn fired(q: &Queue, name: &str) -> u64 {
    q.schedule(name).await.unwrap().unwrap().fired_total
}

/// A replace that lands between a firer's read and its fire call (the call held by a proxy)
/// refuses the step for the replaced schedules, whatever field changed; an A -> B -> A
/// replace lets it through by A (the current definition); untouched schedules, a definition
/// written by hand and a binary payload fire from the held call. `dueq serve`'s firer
/// (`ScheduleFirer::all_queues`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_while_a_fire_call_is_in_flight_fires_nothing_by_the_old_definition() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("defcheck");
    let base = |name: &str| {
        ScheduleSpec::new(name, format!("{name}-A").into_bytes())
            .every_ms(1000)
            .priority(1)
    };
    // (name, replaced by): each changes one field
    let changed: Vec<(&str, ScheduleSpec)> = vec![
        ("prio", base("prio").priority(7)),
        ("attempts", base("attempts").max_attempts(9)),
        ("lease", base("lease").lease_ms(123_456)),
        ("group", base("group").group("g1")),
        (
            "payload",
            ScheduleSpec::new("payload", b"payload-B".to_vec())
                .every_ms(1000)
                .priority(1),
        ),
        ("overlap", base("overlap").overlap(Overlap::Skip)),
        ("misfire", base("misfire").misfire(Misfire::FireOnce)),
    ];
    for (name, _) in &changed {
        let r = q.set_schedule(&base(name)).await.unwrap();
        assert_eq!(r.outcome, SetOutcome::Created);
    }
    q.set_schedule(&base("aba")).await.unwrap();
    q.set_schedule(&base("same")).await.unwrap();
    let binary = ScheduleSpec::new("binary", vec![0xff, 0xfe, 0, b'\n', 0x80, 0xc3])
        .every_ms(1000)
        .group("t");
    q.set_schedule(&binary).await.unwrap();
    q.set_schedule(&base("hand")).await.unwrap();
    // the definition of "hand" rewritten as no client encodes it (whitespace, fields in
    // another order, priority 0 spelled out): it decodes, and must not be refused forever
    let hand_def = b"{ \"priority\": 0, \"every_ms\": 1000, \"cron\": null, \"tz\": null, \
        \"misfire\": \"skip\", \"misfire_grace_ms\": 1000, \"overlap\": \"allow\", \
        \"max_attempts\": 4, \"lease_ms\": 50000 }\nhand-H"
        .to_vec();
    let old_def: Vec<u8> = redis::cmd("HGET")
        .arg(&q.keys().schedules)
        .arg("hand")
        .query(&mut ctx.raw())
        .unwrap();
    redis::cmd("HSET")
        .arg(&q.keys().schedules)
        .arg("hand")
        .arg(&hand_def)
        .query::<()>(&mut ctx.raw())
        .unwrap();
    let hand = q.schedule("hand").await.unwrap().unwrap().spec;
    assert_eq!(hand.payload, b"hand-H", "the hand definition decodes");
    assert_ne!(old_def, hand_def);

    let (url, gate) = proxy(ctx.server.socket_path().unwrap().to_path_buf());
    let pc = Client::connect(&url).await.unwrap();
    arm(&gate);
    let firer = spawn_firer(ScheduleFirer::all_queues(pc.clone()).poll_ms(100));
    wait_until_async(DEADLINE, "a fire call is held", || async {
        gate.0.lock().unwrap().held
    })
    .await;
    // nothing fired yet: the one fire call is held
    for n in ["prio", "aba", "same", "hand", "binary"] {
        assert_eq!(fired(&q, n).await, 0, "{n} fired before the held call");
    }
    for (name, spec) in &changed {
        let r = q.set_schedule(spec).await.unwrap();
        assert_eq!(r.outcome, SetOutcome::Replaced, "{name}");
    }
    let r = q.set_schedule(&base("aba").priority(2)).await.unwrap();
    assert_eq!(r.outcome, SetOutcome::Replaced);
    let r = q.set_schedule(&base("aba")).await.unwrap();
    assert_eq!(r.outcome, SetOutcome::Replaced);
    // the firer's later fire calls are held: whatever fires now is the held call's doing
    release(&gate);
    wait_until_async(DEADLINE, "the held call ran", || async {
        fired(&q, "same").await > 0
    })
    .await;
    // it refused every replaced schedule, and fired the untouched ones, the hand-written one
    // and the A -> B -> A one (whose stored bytes are A's again)
    for (name, _) in &changed {
        assert_eq!(fired(&q, name).await, 0, "{name}: the held call fired it");
        assert!(tick_tasks(&ctx, &q, name).await.is_empty(), "{name}");
    }
    for n in ["aba", "same", "hand", "binary"] {
        assert!(fired(&q, n).await >= 10, "{n}: the held call was refused");
    }
    // the replaced ones fire by the new definition in later steps
    open(&gate);
    stop_firer(firer).await;
    let firer = queue_firer(&ctx.client, &q, 100);
    wait_until_async(DEADLINE, "every replaced schedule fired", || async {
        let mut all = true;
        for (n, _) in &changed {
            all &= fired(&q, n).await > 0;
        }
        all
    })
    .await;
    stop_firer(firer).await;
    let now = ctx.redis_now_ms();

    for (name, spec) in &changed {
        let tasks = tick_tasks(&ctx, &q, name).await;
        assert!(!tasks.is_empty(), "{name}: no tick task");
        assert_template(
            &tasks,
            spec,
            &format!("{name}: fired by the old definition"),
        );
        if *name == "overlap" {
            // overlap skip fires at the tick itself: a task due later came from the old
            // (allow) definition, fired ahead
            assert!(
                tasks.iter().all(|t| t.0 <= now),
                "overlap: ticks fired ahead by the old definition: {:?}",
                tasks.iter().map(|t| t.0).collect::<Vec<_>>()
            );
        }
    }
    for (name, spec) in [
        ("aba", base("aba")),
        ("same", base("same")),
        ("binary", binary.clone()),
        ("hand", hand.clone()),
    ] {
        let tasks = tick_tasks(&ctx, &q, name).await;
        assert_eq!(
            tasks.len() as u64,
            fired(&q, name).await,
            "{name}: one task per fired tick"
        );
        assert_template(&tasks, &spec, name);
    }
}
