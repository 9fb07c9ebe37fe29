//! Case C30 at the process level, as CASES.md describes it: an `every_ms` 1 000 and a cron
//! `* * * * * *` schedule, five `dueq work` processes and two `dueq serve` processes on one
//! Redis for about 30 s, a worker and then a server SIGKILLed midway and started again.
//! Every tick's task is enqueued exactly once, none runs early and no tick is skipped.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dueq_testkit::{RedisServer, wait_until};

use crate::dueq_json;
use crate::serve::serve;

/// The two schedules of the case: (name, how `dueq schedule set` gets its timing).
const SCHEDULES: [(&str, [&str; 2]); 2] = [
    ("every", ["--every-ms", "1000"]),
    ("cron", ["--cron", "* * * * * *"]),
];
/// Lease of each tick's task: a SIGKILLed worker's task comes back after it.
const LEASE_MS: &str = "2000";

fn stats(url: &str) -> serde_json::Value {
    let (ok, s) = dueq_json(url, &["stats", "ticks"]);
    assert!(ok, "{s}");
    s
}

fn count(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {v}"))
}

/// Waits until the queue has run `n` tasks in all.
fn wait_ran(url: &str, n: u64) {
    wait_until(Duration::from_secs(40), &format!("{n} tasks ran"), || {
        count(&stats(url), "succeeded_total") >= n
    });
}

fn worker(url: &str, script: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dueq"))
        .args(["--redis", url, "work", "ticks", "--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// One run of a tick's task as its command logged it.
struct Run {
    schedule: String,
    fire_at_ms: u64,
    attempt: u64,
    /// The task's due time and its claim's, Redis time.
    due_ms: u64,
    claimed_ms: u64,
}

fn parse(line: &str) -> Run {
    let bad = || -> ! { panic!("unexpected line {line:?}") };
    let num = |s: Option<&str>| -> u64 { s.and_then(|t| t.parse().ok()).unwrap_or_else(|| bad()) };
    let mut words = line.split(' ');
    let key = words.next().unwrap_or_else(|| bad());
    let mut parts = key.splitn(3, ':');
    if parts.next() != Some("schedule") {
        bad();
    }
    let schedule = parts.next().unwrap_or_else(|| bad()).to_owned();
    Run {
        schedule,
        fire_at_ms: num(parts.next()),
        attempt: num(words.next()),
        due_ms: num(words.next()),
        claimed_ms: num(words.next()),
    }
}

#[test]
fn c30_five_workers_and_two_servers_one_killed_run_each_tick_once() {
    let server = RedisServer::start();
    let url = server.url();
    for (name, timing) in SCHEDULES {
        let mut args = vec!["schedule", "set", "ticks", name, "--lease-ms", LEASE_MS];
        args.extend(timing);
        let (ok, r) = dueq_json(&url, &args);
        assert!(ok, "{r}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ran.txt");
    // each run appends one short line (O_APPEND keeps concurrent writers' lines whole): the
    // task's key, its attempt, its due time and the Redis time it was claimed at
    let script = format!(
        "echo \"$DUEQ_TASK_KEY $DUEQ_TASK_ATTEMPT $DUEQ_TASK_DUE_AT_MS $DUEQ_TASK_CLAIMED_AT_MS\" >> {}",
        out.display()
    );
    let mut workers: Vec<Child> = (0..5).map(|_| worker(&url, &script)).collect();
    let mut servers = vec![
        serve(&["--redis", &url], &[]),
        serve(&["--redis", &url], &[]),
    ];
    // about two tasks run a second: kill a worker after ~8 s, start it again ~5 s later,
    // then the same with a server, and stop the ticks after ~30 s
    wait_ran(&url, 16);
    let mut killed = workers.remove(0);
    killed.kill().unwrap();
    killed.wait().unwrap();
    wait_ran(&url, 26);
    workers.push(worker(&url, &script));
    wait_ran(&url, 36);
    servers[0].kill();
    wait_ran(&url, 46);
    servers[0] = serve(&["--redis", &url], &[]);
    wait_ran(&url, 60);
    // no more ticks (those fired ahead are taken back, counted as cancelled), then let every
    // tick's task run, the killed worker's too once its lease is over
    for (name, _) in SCHEDULES {
        let (ok, p) = dueq_json(&url, &["schedule", "pause", "ticks", name]);
        assert!(ok, "{p}");
    }
    wait_until(Duration::from_secs(40), "every tick's task ran", || {
        let s = stats(&url);
        count(&s, "scheduled") + count(&s, "due") + count(&s, "active") == 0
    });
    for w in workers {
        stop(w);
    }
    drop(servers);

    let s = stats(&url);
    let text = std::fs::read_to_string(&out).unwrap();
    let runs: Vec<Run> = text.lines().map(parse).collect();
    // tick -> attempts it ran in, per schedule
    let mut ticks: BTreeMap<&str, BTreeMap<u64, Vec<u64>>> = BTreeMap::new();
    for r in &runs {
        assert_eq!(
            r.due_ms, r.fire_at_ms,
            "schedule:{}:{} is due at its fire time",
            r.schedule, r.fire_at_ms
        );
        assert!(
            r.claimed_ms >= r.due_ms,
            "schedule:{}:{} ran early: claimed at {}",
            r.schedule,
            r.fire_at_ms,
            r.claimed_ms
        );
        ticks
            .entry(&r.schedule)
            .or_default()
            .entry(r.fire_at_ms)
            .or_default()
            .push(r.attempt);
    }
    let mut tasks = 0;
    for (name, _) in SCHEDULES {
        let (ok, sch) = dueq_json(&url, &["schedule", "get", "ticks", name]);
        assert!(ok, "{sch}");
        assert_eq!(count(&sch, "skipped_total"), 0, "{name}: a tick skipped");
        let mine = ticks.get(name).cloned().unwrap_or_default();
        assert!(mine.len() >= 25, "{name}: only {} ticks ran", mine.len());
        let times: Vec<u64> = mine.keys().copied().collect();
        for w in times.windows(2) {
            assert_eq!(w[1] - w[0], 1000, "{name}: a tick missing: {times:?}");
        }
        // a second run of a tick is a redelivery (the killed worker's lease ran out), never
        // a second task: it comes with the next attempt
        for (t, attempts) in &mine {
            let mut a = attempts.clone();
            a.sort_unstable();
            a.dedup();
            assert_eq!(
                a.len(),
                attempts.len(),
                "{name}: tick {t} ran twice in one attempt: {attempts:?}"
            );
        }
        tasks += mine.len() as u64;
    }
    // exactly one task per tick: every task enqueued and not taken back by the pause ran,
    // and each was a tick of its own
    assert_eq!(
        count(&s, "enqueued_total") - count(&s, "cancelled_total"),
        tasks,
        "{s}"
    );
    // each succeeded once: an ack under a lease that ran out is refused (fencing)
    assert_eq!(count(&s, "succeeded_total"), tasks, "{s}");
}

/// Sends `signal` (`STOP`, `CONT`) to each process.
fn signal(pids: &[u32], sig: &str) {
    for pid in pids {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }
}

fn redis_now_ms(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    s * 1000 + us / 1000
}

/// Case C31 at the process level (DESIGN 2.16): two schedules every second, `skip` and
/// `fire_once`, run by two `dueq work` and two `dueq serve`; every process SIGSTOPped for 5 s,
/// later SIGKILLed for 20 s and started again. Ticks fire up to 12 s ahead, so most missed
/// ticks already have a task waiting: those must follow the misfire policy all the same.
/// Under `skip` no tick's task starts more than the grace (1 s) after its fire time and every
/// tick that came ran or was counted skipped, once; under `fire_once` each outage leaves
/// exactly one late task, the newest missed tick's; no tick runs twice, none early, and the
/// grid goes on after.
#[test]
fn c31_processes_stopped_and_killed_run_missed_ticks_by_the_misfire_policy() {
    const GRACE_MS: u64 = 1_000;
    let server = RedisServer::start();
    let url = server.url();
    let mut first = BTreeMap::new();
    for (name, misfire) in [("skip", "skip"), ("once", "fire-once")] {
        let args = [
            "schedule",
            "set",
            "ticks",
            name,
            "--every-ms",
            "1000",
            "--misfire",
            misfire,
            "--lease-ms",
            "5000",
        ];
        let (ok, r) = dueq_json(&url, &args);
        assert!(ok, "{r}");
        first.insert(name, count(&r, "next_fire_at_ms"));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ran.txt");
    let script = format!(
        "echo \"$DUEQ_TASK_KEY $DUEQ_TASK_ATTEMPT $DUEQ_TASK_DUE_AT_MS $DUEQ_TASK_CLAIMED_AT_MS\" >> {}",
        out.display()
    );
    let start = |workers: &mut Vec<Child>, servers: &mut Vec<crate::serve::Served>| {
        for _ in 0..2 {
            workers.push(worker(&url, &script));
            servers.push(serve(&["--redis", &url], &[]));
        }
    };
    let (mut workers, mut servers) = (Vec::new(), Vec::new());
    start(&mut workers, &mut servers);
    let pids = |w: &Vec<Child>, s: &Vec<crate::serve::Served>| -> Vec<u32> {
        w.iter()
            .map(Child::id)
            .chain(s.iter().map(|s| s.pid()))
            .collect()
    };
    wait_ran(&url, 6);

    // 1. every process stopped for 5 s: the ticks of the outage have tasks fired ahead
    let all = pids(&workers, &servers);
    signal(&all, "STOP");
    std::thread::sleep(Duration::from_secs(5));
    let stop_end = redis_now_ms(&server);
    signal(&all, "CONT");
    let ran = count(&stats(&url), "succeeded_total");
    wait_ran(&url, ran + 6);

    // 2. every process killed for 20 s, then started again
    for mut w in workers.drain(..) {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    for mut s in servers.drain(..) {
        s.kill();
    }
    std::thread::sleep(Duration::from_secs(20));
    let kill_end = redis_now_ms(&server);
    start(&mut workers, &mut servers);
    // about twelve ticks of each after the restart, so the grid can be seen going on
    let ran = count(&stats(&url), "succeeded_total");
    wait_ran(&url, ran + 24);
    for name in ["skip", "once"] {
        let (ok, p) = dueq_json(&url, &["schedule", "pause", "ticks", name]);
        assert!(ok, "{p}");
    }
    wait_until(Duration::from_secs(40), "every tick's task ran", || {
        let s = stats(&url);
        count(&s, "scheduled") + count(&s, "due") + count(&s, "active") == 0
    });
    for w in workers {
        stop(w);
    }
    drop(servers);

    let text = std::fs::read_to_string(&out).unwrap();
    let runs: Vec<Run> = text.lines().map(parse).collect();
    let mut ticks: BTreeMap<&str, BTreeMap<u64, Vec<&Run>>> = BTreeMap::new();
    for r in &runs {
        assert_eq!(r.due_ms, r.fire_at_ms, "due at its fire time");
        assert!(r.claimed_ms >= r.due_ms, "ran early: {}", text);
        ticks
            .entry(&r.schedule)
            .or_default()
            .entry(r.fire_at_ms)
            .or_default()
            .push(r);
    }
    for (name, mine) in &ticks {
        for (t, rs) in mine {
            let mut a: Vec<u64> = rs.iter().map(|r| r.attempt).collect();
            a.sort_unstable();
            a.dedup();
            assert_eq!(
                a.len(),
                rs.len(),
                "{name}: tick {t} ran twice in one attempt"
            );
        }
    }
    // first attempts only: a retry of a tick that started is not a misfire
    let late = |name: &str| -> Vec<(u64, u64)> {
        ticks[name]
            .iter()
            .filter_map(|(t, rs)| {
                rs.iter()
                    .find(|r| r.attempt == 1)
                    .map(|r| (*t, r.claimed_ms))
            })
            .filter(|(t, claimed)| claimed - t > GRACE_MS)
            .collect()
    };

    // skip: no missed tick ran, and every tick that came ran or was skipped, once
    assert_eq!(late("skip"), [], "skip ran missed ticks");
    let (ok, sch) = dueq_json(&url, &["schedule", "get", "ticks", "skip"]);
    assert!(ok, "{sch}");
    let last = count(&sch, "last_fire_at_ms");
    let came = (last - first["skip"]) / 1000 + 1;
    let skipped = count(&sch, "skipped_total");
    assert_eq!(ticks["skip"].len() as u64 + skipped, came, "{sch}");
    // about 4 of the 5 stopped seconds and 19 of the 20 killed ones
    assert!(skipped >= 20, "{sch}");

    // fire_once: one late run per outage, the newest missed tick's (its next tick was not yet
    // missed when it started)
    let catch_up = late("once");
    assert_eq!(catch_up.len(), 2, "one run per missed span: {catch_up:?}");
    for (end, (t, claimed)) in [stop_end, kill_end].into_iter().zip(&catch_up) {
        assert!(
            *t < end && *claimed >= end,
            "{catch_up:?} against {stop_end}, {kill_end}"
        );
        assert!(
            claimed - t <= 2 * GRACE_MS + 500,
            "not the newest missed tick: {catch_up:?}"
        );
    }
    // the grid goes on after the outages: the last ten ticks before the pause all ran
    for name in ["skip", "once"] {
        let times: Vec<u64> = ticks[name].keys().rev().take(10).copied().collect();
        for w in times.windows(2) {
            assert_eq!(
                w[0] - w[1],
                1000,
                "{name}: a tick missing after the outage: {times:?}"
            );
        }
    }
}
