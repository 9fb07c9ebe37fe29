//! Ownership, crash, clock and cancel cases C07 to C12 of `shared/cases/CASES.md`.
//!
//! Every test runs against its own real `redis-server`. Times the cases give in seconds are
//! shortened where noted (each test's doc comment says so); the guarantee checked is the same.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dueq::{
    AckOutcome, Backoff, CancelOutcome, ClaimedTask, Client, LeaseToken, NackOutcome, Outcome,
    Queue, QueueKeys, TaskId, TaskRef, TaskSpec, TaskState, Worker, WorkerBuilder,
};
use dueq_testkit::{
    LEASES_PIN, active_len, hlen, keys_matching, leases_len, wait_until_async, zcard,
};

use crate::support::{Ctx, DEADLINE};

/// Tasks seen by a recording handler, in the order their handlers started.
type Runs = Arc<Mutex<Vec<ClaimedTask>>>;

/// A worker builder whose handler records each task and succeeds. Retries and recovered leases
/// are due again after 1 ms (`Backoff::new(1, 1.0, 1)`), so lateness measures recovery alone.
fn recording_worker(client: Client, queue: &str, runs: &Runs) -> WorkerBuilder {
    let r = runs.clone();
    Worker::builder(client)
        .backoff(Backoff::new(1, 1.0, 1))
        .handle(queue, move |t: ClaimedTask| {
            let r = r.clone();
            async move {
                r.lock().unwrap().push(t);
                Outcome::Success
            }
        })
}

fn runs_len(runs: &Runs) -> usize {
    runs.lock().unwrap().len()
}

/// Claims until one task comes back (it may be due a few ms from now).
async fn claim_one(q: &Queue, lease_ms: u64) -> ClaimedTask {
    let start = Instant::now();
    loop {
        let mut c = q.claim(1, Some(lease_ms)).await.unwrap();
        if let Some(t) = c.tasks.pop() {
            return t;
        }
        assert!(start.elapsed() < DEADLINE, "no task became claimable");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until the Redis clock is past `ms`.
async fn wait_redis_past(ctx: &Ctx, ms: u64) {
    wait_until_async(DEADLINE, &format!("Redis time passes {ms}"), || {
        let now = ctx.redis_now_ms();
        async move { now > ms }
    })
    .await;
}

fn exists(raw: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<u64>(raw).unwrap() == 1
}

/// The lease invariant (DESIGN 3 / protocol docs): an id is in `active` exactly when it has an
/// entry in `leases`, with the same deadline, and its record exists. Returns the active ids.
fn assert_lease_invariant(raw: &mut redis::Connection, k: &QueueKeys) -> BTreeSet<String> {
    let leases: HashMap<String, String> = redis::cmd("HGETALL").arg(&k.leases).query(raw).unwrap();
    let active: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(&k.active)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(raw)
        .unwrap();
    let in_leases: BTreeSet<String> = leases.keys().cloned().collect();
    let in_active: BTreeSet<String> = active.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(
        in_leases, in_active,
        "HKEYS leases and ZRANGE active differ: an active task without a deadline (or the reverse)"
    );
    // both hold the pin exactly while they hold tasks
    let mut in_active = in_active;
    assert_eq!(
        in_active.remove(LEASES_PIN),
        !in_active.is_empty(),
        "the pin is in the active set exactly while tasks are: {in_active:?}"
    );
    for (id, score) in active.iter().filter(|(id, _)| id != LEASES_PIN) {
        let lv = &leases[id];
        // "token deadline keyed"
        let deadline: u64 = lv.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(
            deadline, *score as u64,
            "lease of {id} is {lv:?}, score {score}"
        );
        let has: bool = redis::cmd("HEXISTS")
            .arg(&k.tasks)
            .arg(id)
            .query(raw)
            .unwrap();
        assert!(has, "active task {id} has no record");
    }
    in_active
}

/// Everything Redis holds about one task, to show that a refused operation changed nothing.
#[derive(Debug, PartialEq)]
struct Snapshot {
    lease: Option<String>,
    active: Option<f64>,
    sched: Option<f64>,
    dead: Option<f64>,
    record: Option<Vec<u8>>,
    stats: BTreeMap<String, String>,
}

fn snapshot(raw: &mut redis::Connection, k: &QueueKeys, id: &TaskId) -> Snapshot {
    let id = id.as_str();
    let zscore = |raw: &mut redis::Connection, key: &str| -> Option<f64> {
        redis::cmd("ZSCORE").arg(key).arg(id).query(raw).unwrap()
    };
    Snapshot {
        lease: redis::cmd("HGET")
            .arg(&k.leases)
            .arg(id)
            .query(raw)
            .unwrap(),
        active: zscore(raw, &k.active),
        sched: zscore(raw, &k.sched),
        dead: zscore(raw, &k.dead),
        record: redis::cmd("HGET").arg(&k.tasks).arg(id).query(raw).unwrap(),
        stats: redis::cmd("HGETALL").arg(&k.stats).query(raw).unwrap(),
    }
}

/// A small deterministic random generator (xorshift64*), so the test needs no rand API.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

// ---------------------------------------------------------------------------------------------
// C07
// ---------------------------------------------------------------------------------------------

/// 50 claimers (one per queue handle) loop `claim(random 1..20)` until the queue is empty.
/// Returns every delivered task. Stops early if more than `total` deliveries happen (a
/// duplicate-delivery bug would otherwise loop for ever).
async fn claim_race(queues: Vec<Queue>, total: usize) -> Vec<ClaimedTask> {
    let delivered = Arc::new(AtomicUsize::new(0));
    let mut joins = Vec::new();
    for (i, q) in queues.into_iter().enumerate() {
        let delivered = delivered.clone();
        joins.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
            let mut mine = Vec::new();
            loop {
                let n = 1 + rng.below(19) as usize;
                let c = q.claim(n, Some(60_000)).await.unwrap();
                if c.tasks.is_empty() {
                    break;
                }
                assert!(c.tasks.len() <= n, "asked {n}, got {}", c.tasks.len());
                let so_far = delivered.fetch_add(c.tasks.len(), Ordering::SeqCst) + c.tasks.len();
                mine.extend(c.tasks);
                if so_far > total {
                    break;
                }
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for j in joins {
        all.extend(j.await.unwrap());
    }
    all
}

async fn check_claim_race(ctx: &Ctx, q: &Queue, queues: Vec<Queue>) {
    let specs: Vec<_> = (0..1_000u32)
        .map(|i| TaskSpec::new(i.to_be_bytes().to_vec()))
        .collect();
    let enqueued: BTreeSet<TaskId> = q
        .enqueue_batch(&specs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(enqueued.len(), 1_000);

    let all = claim_race(queues, 1_000).await;
    assert_eq!(all.len(), 1_000, "total deliveries");
    let ids: BTreeSet<TaskId> = all.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids.len(), 1_000, "an id was delivered twice");
    assert_eq!(ids, enqueued, "delivered ids are not the enqueued ones");
    assert!(all.iter().all(|t| t.attempt == 1));
    // one token per claim call (each call takes at most 20 here), never reused across calls
    let mut per_token: HashMap<LeaseToken, usize> = HashMap::new();
    for t in &all {
        *per_token.entry(t.lease_token.clone()).or_default() += 1;
    }
    assert!(
        per_token.values().all(|n| *n <= 20),
        "a lease token spans more than one claim call"
    );

    let mut raw = ctx.raw();
    assert_eq!(assert_lease_invariant(&mut raw, q.keys()).len(), 1_000);
    let items: Vec<_> = all
        .iter()
        .map(|t| (t.id.clone(), t.lease_token.clone()))
        .collect();
    let acks = q.ack_batch(&items).await.unwrap();
    assert!(acks.iter().all(|a| *a == AckOutcome::Acked));
    let s = q.stats().await.unwrap();
    assert_eq!(s.succeeded_total, 1_000);
    assert_eq!((s.scheduled, s.active), (0, 0));
}

/// Case C07 in shared/cases/CASES.md (claim race): 1 000 tasks due now, 50 concurrent claimers
/// sharing one `Client` (clones pipelining over one multiplexed connection) loop
/// `claim(random 1..20)` until empty. Proves: exactly 1 000 deliveries, no id twice, every
/// enqueued id delivered, one distinct lease token each, and all 1 000 acks succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c07_claim_race_shared_client() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c07");
    let queues = (0..50)
        .map(|_| ctx.client.clone().queue("c07").unwrap())
        .collect();
    check_claim_race(&ctx, &q, queues).await;
}

/// Case C07 in shared/cases/CASES.md (claim race), with 50 claimers on 50 separate
/// connections (`Client::connect` each), so their claims really interleave at the server.
/// Proves the same as `c07_claim_race_shared_client`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c07_claim_race_separate_connections() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c07");
    let mut queues = Vec::new();
    for _ in 0..50 {
        let c = Client::connect(&ctx.server.url()).await.unwrap();
        queues.push(c.queue("c07").unwrap());
    }
    check_claim_race(&ctx, &q, queues).await;
}

// ---------------------------------------------------------------------------------------------
// C08
// ---------------------------------------------------------------------------------------------

/// Case C08 in shared/cases/CASES.md (stale owner), with the case's 2 s lease and no renewal.
/// Worker 1 claims A (token t1); the lease expires and A is recovered; worker 2 (its own
/// connection) claims A (t2). Proves: with t1, ack / nack / permanent nack are `lease_lost`,
/// extend is refused (`None`) and release is refused, and none of them changes anything in
/// Redis (lease, scores, record, counters); worker 2's ack succeeds; A is counted succeeded
/// once and its second claim had attempt 2.
#[tokio::test]
async fn c08_stale_owner_is_fenced() {
    const LEASE_MS: u64 = 2_000;
    let ctx = Ctx::new().await;
    let w1 = ctx.queue("c08");
    let c2 = Client::connect(&ctx.server.url()).await.unwrap();
    let w2 = c2
        .queue("c08")
        .unwrap()
        .with_backoff(Backoff::new(1, 1.0, 1));
    let a = w1.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap().id;

    let t1 = claim_one(&w1, LEASE_MS).await;
    assert_eq!((t1.id.clone(), t1.attempt), (a.clone(), 1));
    assert_eq!(t1.lease_expires_at_ms, t1.claimed_at_ms + LEASE_MS);

    // no renewal: the lease runs out by the Redis clock, then A is recovered
    wait_redis_past(&ctx, t1.lease_expires_at_ms).await;
    let r = w2.recover().await.unwrap();
    assert_eq!((r.recovered, r.dead), (1, 0));
    let mut raw = ctx.raw();
    assert!(assert_lease_invariant(&mut raw, w1.keys()).is_empty());
    let got = w2.get(&a.clone().into()).await.unwrap().unwrap();
    assert_eq!(got.state, TaskState::Scheduled);
    assert_eq!(got.attempt, 1, "the expired attempt is counted");

    let t2 = claim_one(&w2, LEASE_MS).await;
    assert_eq!(t2.id, a);
    assert_eq!(t2.attempt, 2);
    assert_ne!(t2.lease_token, t1.lease_token);

    // worker 1 wakes up late: everything it tries with t1 is refused and changes nothing
    let before = snapshot(&mut raw, w1.keys(), &a);
    assert!(before.lease.is_some() && before.active.is_some());
    assert_eq!(
        w1.ack(&a, &t1.lease_token).await.unwrap(),
        AckOutcome::LeaseLost
    );
    assert_eq!(
        w1.extend(&a, &t1.lease_token, 60_000).await.unwrap(),
        None,
        "extend with a stale token"
    );
    assert_eq!(
        w1.nack(&a, &t1.lease_token, "stale", Some(0), false)
            .await
            .unwrap(),
        NackOutcome::LeaseLost
    );
    assert_eq!(
        w1.nack(&a, &t1.lease_token, "stale", None, true)
            .await
            .unwrap(),
        NackOutcome::LeaseLost
    );
    assert_eq!(
        w1.release(&[(a.clone(), t1.lease_token.clone())])
            .await
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        snapshot(&mut raw, w1.keys(), &a),
        before,
        "a refused call changed Redis"
    );
    let got = w1.get(&a.clone().into()).await.unwrap().unwrap();
    assert_eq!((got.state, got.attempt), (TaskState::Active, 2));
    assert_eq!(got.state_at_ms, Some(t2.lease_expires_at_ms));

    // worker 2 completes
    assert_eq!(
        w2.ack(&a, &t2.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    assert_eq!(
        w1.ack(&a, &t1.lease_token).await.unwrap(),
        AckOutcome::LeaseLost
    );
    assert!(w1.get(&a.clone().into()).await.unwrap().is_none());
    let s = w1.stats().await.unwrap();
    assert_eq!(s.succeeded_total, 1);
    assert_eq!(s.lease_expired_total, 1);
    assert_eq!((s.failed_total, s.retried_total, s.dead_total), (1, 1, 0));
    assert_eq!((s.scheduled, s.active, s.dead), (0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// C09
// ---------------------------------------------------------------------------------------------

/// Set in the child process of `c09_sigkilled_worker_lease_recovered` (the test binary run
/// again): the Redis URL the child's worker uses.
const C09_CHILD_ENV: &str = "DUEQ_IT_C09_CHILD_URL";

/// Kills (SIGKILL) the child process if the test ends early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Case C09 in shared/cases/CASES.md (orphan after a crash), with a real process and a real
/// SIGKILL: this test binary runs itself again as a child whose `Worker` (1 s lease, the shortest
/// allowed, renewed by its lease keeper) claims A and blocks in the handler. Once a renewal has
/// been seen, the child is killed with SIGKILL (nothing handed back). A worker started in this
/// process then reruns A. Proves: A is recovered and rerun (attempt 2) no later than 1 s after the
/// last lease deadline the dead worker left (Redis time), never before it; the expiry is counted
/// once; `leases` and `active` agree afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c09_sigkilled_worker_lease_recovered() {
    if let Ok(url) = std::env::var(C09_CHILD_ENV) {
        // Child: a worker that holds its task for ever, until the parent kills this process.
        let client = Client::connect(&url).await.unwrap();
        let _worker = Worker::builder(client)
            .lease_ms(dueq::MIN_LEASE_MS)
            .handle("c09", |_t: ClaimedTask| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Outcome::Success
            })
            .build()
            .unwrap()
            .start();
        // never reached in a passing run: the parent kills us long before
        tokio::time::sleep(Duration::from_secs(30)).await;
        return;
    }

    let ctx = Ctx::new().await;
    let q = ctx.queue("c09");
    let a = q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap().id;
    let module = module_path!().split_once("::").unwrap().1;
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .arg(format!("{module}::c09_sigkilled_worker_lease_recovered"))
        .args(["--exact", "--test-threads=1"])
        .env(C09_CHILD_ENV, ctx.server.url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);

    let mut raw = ctx.raw();
    let k = q.keys().clone();
    let score = |raw: &mut redis::Connection| -> Option<f64> {
        redis::cmd("ZSCORE")
            .arg(&k.active)
            .arg(a.as_str())
            .query(raw)
            .unwrap()
    };
    // the child claimed A ...
    let start = Instant::now();
    let first = loop {
        if let Some(s) = score(&mut raw) {
            break s;
        }
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "the child process exited before claiming"
        );
        assert!(start.elapsed() < DEADLINE, "the child never claimed A");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // ... and is alive: its lease keeper renews the 1 s lease
    wait_until_async(DEADLINE, "the child renews its lease", || {
        let s = score(&mut raw);
        async move { s.is_some_and(|s| s > first) }
    })
    .await;

    child.0.kill().unwrap(); // SIGKILL
    let status = child.0.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "child status {status:?}");
    // the last deadline the dead worker left behind
    let deadline = score(&mut raw).expect("A is still active after the kill") as u64;
    assert_eq!(assert_lease_invariant(&mut raw, &k).len(), 1);

    let runs: Runs = Arc::default();
    let worker = recording_worker(ctx.client.clone(), "c09", &runs)
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "A reruns", || {
        let n = runs_len(&runs);
        async move { n == 1 }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    let run = runs.lock().unwrap()[0].clone();
    assert_eq!(run.id, a);
    assert_eq!(run.attempt, 2, "the killed attempt is counted");
    assert_eq!(run.last_error.as_deref(), Some("lease expired"));
    assert!(
        run.claimed_at_ms >= deadline,
        "rerun at {} before the lease deadline {deadline}",
        run.claimed_at_ms
    );
    let late = run.started_at_ms - deadline;
    eprintln!("c09 (SIGKILL): rerun {late} ms after the lease deadline");
    assert!(late <= 1_000, "rerun {late} ms after the lease deadline");
    assert_eq!(stats.succeeded, 1);
    let s = q.stats().await.unwrap();
    assert_eq!((s.lease_expired_total, s.succeeded_total), (1, 1));
    assert!(assert_lease_invariant(&mut raw, &k).is_empty());
}

/// Case C09 in shared/cases/CASES.md, variant "the structure tracking lease deadlines lost its
/// entry": a claimer takes A (5 attempts) and B (1 attempt) with a 1 s lease (the shortest allowed)
/// and vanishes (its client is dropped, nothing handed back); then A's and B's members are deleted
/// from the `active` sorted set by hand, leaving their `leases` entries. C stays held by a live
/// owner. An idle worker (default 1 s poll) must find them through the claim's orphan flag and the
/// recover sweep. Proves: A goes back to scheduled and reruns (attempt 2) and B goes to the
/// dead-letter queue, each within 1 s of its lease deadline; afterwards every id in `leases` is in
/// `active` with the same deadline and vice versa (only C), and C's owner can still ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c09_lost_deadline_entry_still_recovered() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c09");
    let k = q.keys().clone();
    let a = q
        .enqueue(TaskSpec::new(b"A".to_vec()).max_attempts(5))
        .await
        .unwrap()
        .id;
    let b = q
        .enqueue(TaskSpec::new(b"B".to_vec()).max_attempts(1))
        .await
        .unwrap()
        .id;

    let crashed = Client::connect(&ctx.server.url()).await.unwrap();
    let claim = crashed
        .queue("c09")
        .unwrap()
        .claim(2, Some(dueq::MIN_LEASE_MS))
        .await
        .unwrap();
    drop(crashed);
    assert_eq!(claim.tasks.len(), 2);
    let deadline: HashMap<TaskId, u64> = claim
        .tasks
        .iter()
        .map(|t| (t.id.clone(), t.lease_expires_at_ms))
        .collect();
    let c = q.enqueue(TaskSpec::new(b"C".to_vec())).await.unwrap().id;
    let held = claim_one(&q, 60_000).await;
    assert_eq!(held.id, c);

    let mut raw = ctx.raw();
    let removed: u64 = redis::cmd("ZREM")
        .arg(&k.active)
        .arg(a.as_str())
        .arg(b.as_str())
        .query(&mut raw)
        .unwrap();
    assert_eq!(removed, 2);
    assert_eq!(leases_len(&mut raw, &k.leases), 3);
    assert!(
        q.claim(0, None).await.unwrap().orphans,
        "claim reports orphans"
    );

    let runs: Runs = Arc::default();
    let worker = recording_worker(ctx.client.clone(), "c09", &runs)
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "A reruns and B is dead", || {
        let n = runs_len(&runs);
        let q = q.clone();
        let b = b.clone();
        async move { n == 1 && q.get(&b.into()).await.unwrap().unwrap().state == TaskState::Dead }
    })
    .await;
    let run = runs.lock().unwrap()[0].clone();
    assert_eq!((run.id.clone(), run.attempt), (a.clone(), 2));
    assert!(run.claimed_at_ms >= deadline[&a]);
    let late = run.started_at_ms - deadline[&a];
    eprintln!("c09 (lost deadline entry): A rerun {late} ms after its lease deadline");
    assert!(late <= 1_000, "A rerun {late} ms after its lease deadline");
    let dead_b = q.get(&b.clone().into()).await.unwrap().unwrap();
    let died = dead_b.state_at_ms.unwrap();
    assert!(died >= deadline[&b]);
    assert!(
        died - deadline[&b] <= 1_000,
        "B went dead {} ms after its lease deadline",
        died - deadline[&b]
    );
    assert_eq!(dead_b.last_error.as_deref(), Some("lease expired"));

    // the invariant holds again, with C (live owner) the only active task
    let ids = assert_lease_invariant(&mut raw, &k);
    assert_eq!(ids, BTreeSet::from([c.as_str().to_owned()]));
    worker.shutdown().await.unwrap();
    assert_eq!(
        q.ack(&c, &held.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.lease_expired_total, s.succeeded_total, s.dead),
        (2, 2, 1)
    );
    assert!(assert_lease_invariant(&mut raw, &k).is_empty());
}

/// Case C09 in shared/cases/CASES.md, variant "two recoverers racing": 100 rounds of (claim the
/// task with a 1 s lease, the shortest allowed, let it expire, then two `recover()` calls at
/// once on two connections). Both clients share a frozen Redis clock (debug builds) that the
/// test moves past each lease deadline, so a round takes no real second. Proves: in every round
/// exactly one of them recovers it (sum of `recovered` is 1, no `dead`), and the attempt grows
/// by exactly 1 per round (101 on the final claim); the counters say 100 expiries and 100
/// retries.
#[cfg(debug_assertions)]
#[tokio::test]
async fn c09_racing_recoverers_recover_once() {
    let ctx = Ctx::new().await;
    let (clock, c1) = crate::support::frozen_client(&ctx, ctx.redis_now_ms()).await;
    let c2 = Client::builder(&ctx.server.url())
        .frozen_clock(clock.clone())
        .connect()
        .await
        .unwrap();
    let backoff = Backoff::new(1, 1.0, 1);
    let q1 = c1.queue("c09r").unwrap().with_backoff(backoff);
    let q2 = c2.queue("c09r").unwrap().with_backoff(backoff);
    let a = q1
        .enqueue(TaskSpec::new(b"A".to_vec()).max_attempts(1_000))
        .await
        .unwrap()
        .id;
    let mut raw = ctx.raw();
    for round in 0..100u32 {
        let mut c = q1.claim(1, Some(dueq::MIN_LEASE_MS)).await.unwrap();
        let t = c.tasks.pop().expect("the task is due on the frozen clock");
        assert_eq!((t.id.clone(), t.attempt), (a.clone(), round + 1));
        // past the lease deadline
        clock.set_ms(t.lease_expires_at_ms + 1);
        let (r1, r2) = if round % 2 == 0 {
            tokio::join!(q1.recover(), q2.recover())
        } else {
            let (r2, r1) = tokio::join!(q2.recover(), q1.recover());
            (r1, r2)
        };
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        assert_eq!(
            r1.recovered + r2.recovered,
            1,
            "round {round}: recovered {r1:?} and {r2:?}"
        );
        assert_eq!(r1.dead + r2.dead, 0);
        assert!(
            assert_lease_invariant(&mut raw, q1.keys()).is_empty(),
            "round {round}: a lease is left behind"
        );
        // past the 1 ms backoff: due again
        clock.advance_ms(2);
    }
    let last = claim_one(&q1, 60_000).await;
    assert_eq!(last.attempt, 101);
    assert_eq!(
        q1.ack(&a, &last.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let s = q1.stats().await.unwrap();
    assert_eq!((s.lease_expired_total, s.retried_total), (100, 100));
    assert_eq!(s.succeeded_total, 1);
}

// ---------------------------------------------------------------------------------------------
// C10
// ---------------------------------------------------------------------------------------------

/// Starts a worker with a 1-hour lease whose handler sets `started` and then blocks for an
/// hour: it holds whatever it claims until it is shut down.
fn blocking_worker(
    client: Client,
    queue: &str,
    notifications: bool,
    started: &Arc<AtomicBool>,
) -> dueq::WorkerHandle {
    let s2 = started.clone();
    Worker::builder(client)
        .lease_ms(3_600_000)
        .notifications(notifications)
        .handle(queue, move |_t: ClaimedTask| {
            let s2 = s2.clone();
            async move {
                s2.store(true, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start()
}

async fn wait_flag(flag: &Arc<AtomicBool>, what: &str) {
    wait_until_async(DEADLINE, what, || {
        let s = flag.load(Ordering::SeqCst);
        async move { s }
    })
    .await;
}

/// Case C10 in shared/cases/CASES.md (graceful shutdown): a worker with a 1-hour lease whose
/// handler blocks holds A; it is shut down (`WorkerHandle::shutdown`, what SIGTERM triggers in
/// the CLI). Done twice: with wake-up notifications on (the default) and off. Proves: shutdown
/// returns at once (under 250 ms, not after a poll interval); right after it A is scheduled
/// again, due at once, its attempt not counted, with no lease or active entry left, and the
/// worker counted 1 released; a second worker then runs A (attempt 1) within 1 s (Redis time),
/// not after the hour; no lease ever expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_shutdown_hands_lease_back_at_once() {
    let ctx = Ctx::new().await;
    for notifications in [true, false] {
        let name = format!("c10-{notifications}");
        let q = ctx.queue(&name);
        let a = q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let w1 = blocking_worker(ctx.client.clone(), &name, notifications, &started);
        wait_flag(&started, "worker 1 runs A").await;
        let held = q.get(&a.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(held.state, TaskState::Active);
        let now = ctx.redis_now_ms();
        assert!(
            held.state_at_ms.unwrap() > now + 3_500_000,
            "a 1-hour lease"
        );
        // short set-up delay: worker 1's claimer goes back to sleep
        tokio::time::sleep(Duration::from_millis(50)).await;

        let t = Instant::now();
        let stats = w1.shutdown().await.unwrap();
        let took = t.elapsed();
        let after_ms = ctx.redis_now_ms();
        assert!(
            took < Duration::from_millis(250),
            "notifications {notifications}: shutdown took {took:?}"
        );
        assert_eq!(stats.released, 1);
        let back = q.get(&a.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(back.state, TaskState::Scheduled, "handed back at once");
        assert_eq!(back.attempt, 0, "a released attempt is not counted");
        assert!(back.due_at_ms <= after_ms, "due again at once");
        let mut raw = ctx.raw();
        assert_eq!(zcard(&mut raw, &q.keys().active), 0);
        assert_eq!(hlen(&mut raw, &q.keys().leases), 0);

        let runs: Runs = Arc::default();
        let w2 = recording_worker(ctx.client.clone(), &name, &runs)
            .build()
            .unwrap()
            .start();
        wait_until_async(DEADLINE, "worker 2 runs A", || {
            let n = runs_len(&runs);
            async move { n == 1 }
        })
        .await;
        w2.shutdown().await.unwrap();
        let run = runs.lock().unwrap()[0].clone();
        assert_eq!((run.id.clone(), run.attempt), (a.id.clone(), 1));
        assert!(
            run.started_at_ms - after_ms <= 1_000,
            "ran {} ms after the shutdown",
            run.started_at_ms - after_ms
        );
        let s = q.stats().await.unwrap();
        assert_eq!(
            (s.succeeded_total, s.lease_expired_total, s.failed_total),
            (1, 0, 0)
        );
    }
}

/// Case C10 in shared/cases/CASES.md, second half, with an already running idle worker:
/// worker 2 waits idle while worker 1 (1-hour lease, blocking handler) holds A; worker 1 shuts
/// down. Proves: worker 2 runs A within 1 s of the shutdown (woken by the hand-back, not by a
/// lease expiry: no expiry and no failed attempt are counted, attempt stays 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_idle_worker_takes_handed_back_task() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c10");
    let a = q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap();
    let started = Arc::new(AtomicBool::new(false));
    let w1 = blocking_worker(ctx.client.clone(), "c10", true, &started);
    wait_flag(&started, "worker 1 runs A").await;
    let c2 = Client::connect(&ctx.server.url()).await.unwrap();
    let runs: Runs = Arc::default();
    let w2 = recording_worker(c2, "c10", &runs).build().unwrap().start();
    // short set-up delay: let worker 2 make its first (empty) claim and go idle
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(runs_len(&runs), 0);

    let before_ms = ctx.redis_now_ms();
    assert_eq!(w1.shutdown().await.unwrap().released, 1);
    wait_until_async(DEADLINE, "worker 2 runs A", || {
        let n = runs_len(&runs);
        async move { n == 1 }
    })
    .await;
    w2.shutdown().await.unwrap();
    let run = runs.lock().unwrap()[0].clone();
    assert_eq!((run.id.clone(), run.attempt), (a.id.clone(), 1));
    let late = run.started_at_ms - before_ms;
    eprintln!("c10: idle worker ran A {late} ms after the shutdown began");
    assert!(late <= 1_000, "ran {late} ms after the shutdown began");
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.succeeded_total, s.lease_expired_total, s.failed_total),
        (1, 0, 0)
    );
}

/// Case C10 in shared/cases/CASES.md, last sentence: "a future task is never held by a worker
/// before it is due". A worker with a 1-hour lease runs while F is due in 1 s (shortened from
/// the general case; the delay length does not matter), and a second claimer asks for due
/// tasks every 10 ms. Proves: no claim before the due time (by the claim's own Redis time)
/// hands F out; at every check whose Redis time is before F's due time, F is scheduled and
/// nothing is active; F is claimed at or after its due time (Redis clock) and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_future_task_not_held_before_due() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c10f");
    let runs: Runs = Arc::default();
    let worker = recording_worker(ctx.client.clone(), "c10f", &runs)
        .lease_ms(3_600_000)
        .build()
        .unwrap()
        .start();
    let f = q
        .enqueue(TaskSpec::new(b"F".to_vec()).delay_ms(1_000))
        .await
        .unwrap();
    // a second "worker" on its own connection that keeps asking for due tasks directly
    let probe = Client::connect(&ctx.server.url())
        .await
        .unwrap()
        .queue("c10f")
        .unwrap();
    let mut raw = ctx.raw();
    let mut checks = 0;
    let mut last_now = 0;
    loop {
        // (stop probing well before the due time, so the probe never takes F from the worker)
        if last_now + 200 < f.due_at_ms {
            let c = probe.claim(10, None).await.unwrap();
            assert!(
                c.tasks.is_empty() || c.now_ms >= f.due_at_ms,
                "a claim at Redis time {} handed out F, due at {}",
                c.now_ms,
                f.due_at_ms
            );
        }
        let state = q.get(&f.id.clone().into()).await.unwrap().map(|t| t.state);
        let active = active_len(&mut raw, &q.keys().active);
        let now = ctx.redis_now_ms();
        if now >= f.due_at_ms {
            break;
        }
        // both reads happened before `now`, which is before the due time
        assert_eq!(
            state,
            Some(TaskState::Scheduled),
            "held {} ms early",
            f.due_at_ms - now
        );
        assert_eq!(active, 0);
        assert_eq!(runs_len(&runs), 0);
        last_now = now;
        checks += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(checks > 20, "only {checks} checks before the due time");
    wait_until_async(DEADLINE, "F runs", || {
        let n = runs_len(&runs);
        async move { n == 1 }
    })
    .await;
    let stats = worker.shutdown().await.unwrap();
    let run = runs.lock().unwrap()[0].clone();
    assert!(run.claimed_at_ms >= f.due_at_ms, "claimed early");
    assert!(run.started_at_ms >= f.due_at_ms, "started early");
    assert_eq!((stats.claimed, stats.succeeded), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// C11
// ---------------------------------------------------------------------------------------------

/// Numbers that look like the client's wall clock (ms, s or µs since the epoch, within a day).
fn looks_like_client_time(arg: &str, client_now_ms: u64) -> bool {
    let Ok(v) = arg.parse::<f64>() else {
        return false;
    };
    let day_ms = 86_400_000.0;
    let now = client_now_ms as f64;
    (v - now).abs() < day_ms
        || (v * 1_000.0 - now).abs() < day_ms
        || (v / 1_000.0 - now).abs() < day_ms
}

/// The quoted arguments of one `MONITOR` line (`<time> [db addr] "CMD" "arg" ...`; the address
/// is `lua` for commands a script ran).
fn monitor_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        match (&mut cur, ch) {
            (None, '"') => cur = Some(String::new()),
            (Some(s), '\\') => {
                if let Some(n) = chars.next() {
                    s.push('\\');
                    s.push(n);
                }
            }
            (Some(_), '"') => out.push(cur.take().unwrap()),
            (Some(s), c) => s.push(c),
            (None, _) => {}
        }
    }
    out
}

/// Case C11 in shared/cases/CASES.md (producer clock skew), with the case's 3 s delay.
/// The library reads no client clock at all, so a skewed producer clock cannot be simulated
/// by changing it; instead this proves the due time is computed from Redis's clock:
/// * `MONITOR` shows that no command the library sent while enqueueing carries anything that
///   looks like a client timestamp (ms, s or µs) — only `"delay" "3000"` — so a producer
///   clock 90 s ahead (or behind) has nothing to act on;
/// * the returned and stored (`get`) due time equal Redis `TIME` at the enqueue plus 3 000
///   (bracketed by `TIME` read right before and right after);
/// * A is claimed and started at or after that due time by the Redis clock (never early), and
///   promptly (under 100 ms late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_due_time_comes_from_redis_clock() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c11");
    let runs: Runs = Arc::default();
    let worker = recording_worker(ctx.client.clone(), "c11", &runs)
        .build()
        .unwrap()
        .start();
    let mut mon = ctx.raw();
    redis::cmd("MONITOR").query::<()>(&mut mon).unwrap();
    mon.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

    let t0 = ctx.redis_now_ms();
    let e = q
        .enqueue(TaskSpec::new(b"A".to_vec()).delay_ms(3_000))
        .await
        .unwrap();
    let t1 = ctx.redis_now_ms();
    let client_now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    assert!(
        t0 + 3_000 <= e.due_at_ms && e.due_at_ms <= t1 + 3_000,
        "due {} not Redis time [{t0}, {t1}] + 3000",
        e.due_at_ms
    );
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(got.due_at_ms, e.due_at_ms, "GET shows the due time");
    assert!(t0 <= got.created_at_ms && got.created_at_ms <= t1);

    // Every command between the two TIME calls: the enqueue (and any worker claims).
    let mut lines = Vec::new();
    let mut times = 0;
    while times < 2 {
        let v = mon.recv_response().unwrap();
        let line: String = redis::from_redis_value(v).unwrap();
        // commands run inside a script (`[0 lua]`) use Redis's own TIME: only what clients
        // sent matters here
        let from_lua = line
            .split_once(']')
            .is_some_and(|(head, _)| head.contains(" lua"));
        if from_lua {
            continue;
        }
        let args = monitor_args(&line);
        if args.first().is_some_and(|c| c.eq_ignore_ascii_case("TIME")) {
            times += 1;
        } else if times == 1 {
            lines.push(args);
        }
    }
    drop(mon);
    for args in &lines {
        for arg in args {
            assert!(
                !looks_like_client_time(arg, client_now_ms),
                "argument {arg:?} of {args:?} looks like a client timestamp"
            );
        }
    }
    let enqueue = lines
        .iter()
        .find(|a| {
            // the call of the library's enqueue function
            a.first().is_some_and(|c| c == "FCALL")
                && a.get(1).is_some_and(|f| f.ends_with("_enqueue"))
        })
        .unwrap_or_else(|| panic!("no enqueue script call among {lines:?}"));
    // per task: key, mode ("kd" = keep, delay), due value, spec
    let at = enqueue
        .iter()
        .position(|x| x == "kd")
        .unwrap_or_else(|| panic!("the enqueue sent no relative delay: {enqueue:?}"));
    assert_eq!(enqueue[at + 1], "3000", "the delay travels as a delay");

    wait_until_async(DEADLINE, "A runs", || {
        let n = runs_len(&runs);
        async move { n == 1 }
    })
    .await;
    worker.shutdown().await.unwrap();
    let run = runs.lock().unwrap()[0].clone();
    assert_eq!(run.due_at_ms, e.due_at_ms);
    assert!(
        run.claimed_at_ms >= e.due_at_ms,
        "claimed early by Redis time"
    );
    assert!(
        run.started_at_ms >= e.due_at_ms,
        "started early by Redis time"
    );
    let late = run.started_at_ms - e.due_at_ms;
    eprintln!("c11: ran {late} ms after the Redis-clock due time");
    assert!(late < 100, "ran {late} ms late");
}

// ---------------------------------------------------------------------------------------------
// C12
// ---------------------------------------------------------------------------------------------

/// The data keys of a queue that must be gone when it holds no task (meta and stats may stay).
fn task_keys(k: &QueueKeys) -> [&str; 7] {
    [
        &k.sched, &k.active, &k.leases, &k.tasks, &k.keys, &k.dead, &k.done,
    ]
}

fn assert_no_task_left(raw: &mut redis::Connection, k: &QueueKeys, id: &TaskId, key: &str) {
    for name in task_keys(k) {
        assert!(!exists(raw, name), "{name} still exists");
    }
    let all = keys_matching(raw, "*");
    let allowed = [
        k.meta.as_str(),
        k.stats.as_str(),
        k.hist.as_str(),
        dueq::protocol::keys::QUEUES_KEY,
        // the live workers list of a worker still running (about the process, not a task)
        dueq::protocol::keys::WORKERS_KEY,
        // when a recoverer should look at the queue next (about the queue, not a task; its
        // entry goes at that look)
        dueq::protocol::keys::RECOVERY_KEY,
    ];
    for name in &all {
        assert!(allowed.contains(&name.as_str()), "unexpected key {name}");
    }
    for name in [&k.meta, &k.stats, &k.hist] {
        let h: HashMap<String, String> = redis::cmd("HGETALL").arg(name).query(raw).unwrap();
        for (f, v) in &h {
            for needle in [id.as_str(), key] {
                assert!(
                    !f.contains(needle) && !v.contains(needle),
                    "{name} still mentions {needle}: {f} = {v}"
                );
            }
        }
    }
}

/// Case C12 (a) in shared/cases/CASES.md (cancel before due), times shortened: key `order-42`,
/// delay 1 s (not 10 s), cancelled at T0+0.5 s (not 5 s) while an idle worker runs.
/// Proves: the cancel answers `cancelled`; no trace is left in any key (the sched, active,
/// leases, tasks, keys, dead and done keys are gone; only the meta and stats hashes, the
/// queue list and the running worker's entry in the live workers list remain, and they do
/// not mention the id or key); `get` by id and key finds nothing; a second cancel is
/// `not_found`; the task never runs, even well past its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_cancel_before_due_leaves_no_trace() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c12");
    let runs: Runs = Arc::default();
    let worker = recording_worker(ctx.client.clone(), "c12", &runs)
        .build()
        .unwrap()
        .start();
    let e = q
        .enqueue(
            TaskSpec::new(b"42".to_vec())
                .key("order-42")
                .delay_ms(1_000),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = TaskRef::key("order-42").unwrap();
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::Cancelled);

    let mut raw = ctx.raw();
    assert_no_task_left(&mut raw, q.keys(), &e.id, "order-42");
    assert!(q.get(&key).await.unwrap().is_none());
    assert!(q.get(&e.id.clone().into()).await.unwrap().is_none());
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::NotFound);
    assert_eq!(
        q.cancel(&e.id.clone().into()).await.unwrap(),
        CancelOutcome::NotFound
    );

    wait_redis_past(&ctx, e.due_at_ms + 300).await;
    let stats = worker.shutdown().await.unwrap();
    assert_eq!(runs_len(&runs), 0, "a cancelled task ran");
    assert_eq!(stats.claimed, 0);
    assert_no_task_left(&mut raw, q.keys(), &e.id, "order-42");
    let s = q.stats().await.unwrap();
    assert_eq!((s.cancelled_total, s.succeeded_total), (1, 0));
}

/// Case C12 (b) and (c) in shared/cases/CASES.md, times shortened: key `order-42` due in 1 s,
/// claimed when due with a 1 s lease (the shortest allowed), cancelled 100 ms later, acked, then
/// cancelled again. Proves: (b) cancel by key and by id answers `in_progress` and touches nothing
/// (task still active, index entry kept); the ack still succeeds; the task does not come back (past
/// the old lease deadline a recover finds nothing, a claim gets nothing, nothing is left in any
/// key); (c) a cancel after the ack answers `not_found`, by key and by id.
#[tokio::test]
async fn c12_cancel_while_running_then_after_ack() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c12");
    let key = TaskRef::key("order-42").unwrap();
    let e = q
        .enqueue(
            TaskSpec::new(b"42".to_vec())
                .key("order-42")
                .delay_ms(1_000),
        )
        .await
        .unwrap();
    wait_redis_past(&ctx, e.due_at_ms).await;
    let t = claim_one(&q, dueq::MIN_LEASE_MS).await;
    assert_eq!(t.id, e.id);
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut raw = ctx.raw();
    let before = snapshot(&mut raw, q.keys(), &e.id);
    // (b)
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::InProgress);
    assert_eq!(
        q.cancel(&e.id.clone().into()).await.unwrap(),
        CancelOutcome::InProgress
    );
    assert_eq!(
        snapshot(&mut raw, q.keys(), &e.id),
        before,
        "cancel changed the task"
    );
    let got = q.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (got.id.clone(), got.state),
        (e.id.clone(), TaskState::Active)
    );
    assert_eq!(
        q.ack(&t.id, &t.lease_token).await.unwrap(),
        AckOutcome::Acked
    );

    wait_redis_past(&ctx, t.lease_expires_at_ms + 50).await;
    let r = q.recover().await.unwrap();
    assert_eq!((r.recovered, r.dead), (0, 0));
    assert!(q.claim(10, None).await.unwrap().tasks.is_empty());
    assert!(q.get(&key).await.unwrap().is_none());
    assert_no_task_left(&mut raw, q.keys(), &e.id, "order-42");

    // (c)
    assert_eq!(q.cancel(&key).await.unwrap(), CancelOutcome::NotFound);
    assert_eq!(
        q.cancel(&e.id.clone().into()).await.unwrap(),
        CancelOutcome::NotFound
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.succeeded_total, s.cancelled_total), (1, 0));
    assert_eq!((s.lease_expired_total, s.failed_total), (0, 0));
}

/// Case C12 (d) in shared/cases/CASES.md: 1 000 rounds of a cancel by key racing a claim
/// (`tokio::join!` of the two on separate connections; which one is polled first alternates).
/// Proves: every round ends in exactly one of (cancelled, nothing claimed) or (claimed, cancel
/// says `in_progress`), never both and never `not_found`; a claimed task's ack succeeds;
/// afterwards no cancelled task can be claimed and nothing is left in any key (no orphaned
/// key-index entry: the `keys` hash is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_cancel_racing_claim() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("c12d");
    let ca = Client::connect(&ctx.server.url()).await.unwrap();
    let cb = Client::connect(&ctx.server.url()).await.unwrap();
    let canceller = ca.queue("c12d").unwrap();
    let claimer = cb.queue("c12d").unwrap();
    let (mut cancelled, mut claimed) = (0, Vec::new());
    for i in 0..1_000u32 {
        let key = format!("order-{i}");
        let e = q
            .enqueue(TaskSpec::new(i.to_be_bytes().to_vec()).key(key.clone()))
            .await
            .unwrap();
        assert!(e.created());
        let r = TaskRef::key(key).unwrap();
        let (cancel, claim) = if i % 2 == 0 {
            tokio::join!(canceller.cancel(&r), claimer.claim(1, Some(60_000)))
        } else {
            let (claim, cancel) =
                tokio::join!(claimer.claim(1, Some(60_000)), canceller.cancel(&r));
            (cancel, claim)
        };
        let (cancel, mut claim) = (cancel.unwrap(), claim.unwrap());
        match (cancel, claim.tasks.pop()) {
            (CancelOutcome::Cancelled, None) => cancelled += 1,
            (CancelOutcome::InProgress, Some(t)) => {
                assert_eq!(t.id, e.id);
                claimed.push((t.id, t.lease_token));
            }
            (c, t) => panic!("round {i}: cancel said {c:?} and the claim got {t:?}"),
        }
    }
    let acks = q.ack_batch(&claimed).await.unwrap();
    assert!(acks.iter().all(|a| *a == AckOutcome::Acked));
    assert!(q.claim(1_000, None).await.unwrap().tasks.is_empty());
    let mut raw = ctx.raw();
    assert_eq!(
        hlen(&mut raw, &q.keys().keys),
        0,
        "orphaned key-index entries"
    );
    for name in task_keys(q.keys()) {
        assert!(!exists(&mut raw, name), "{name} still exists");
    }
    assert!(
        cancelled > 0 && !claimed.is_empty(),
        "only one side ever won: {cancelled} cancelled, {} claimed",
        claimed.len()
    );
    let s = q.stats().await.unwrap();
    assert_eq!(s.cancelled_total, cancelled);
    assert_eq!(s.succeeded_total, claimed.len() as u64);
    assert_eq!(s.cancelled_total + s.succeeded_total, 1_000);
    eprintln!(
        "c12 (d): {cancelled} cancelled first, {} claimed first",
        claimed.len()
    );
}

/// Case C09 with many live leases: an active task whose deadline entry was deleted is still
/// recovered within about a second of its deadline while 3 000 other leases are held (the
/// sweep runs back to back once a claim sees an orphan, 1 000 leases per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c09_orphan_found_among_thousands_of_leases() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("many");
    let specs: Vec<_> = (0..3_000)
        .map(|_| TaskSpec::new(b"held".to_vec()))
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    for _ in 0..3 {
        assert_eq!(
            q.claim(1_000, Some(3_600_000)).await.unwrap().tasks.len(),
            1_000
        );
    }
    let a = q.enqueue(TaskSpec::new(b"A".to_vec())).await.unwrap();
    let t = q
        .claim(1, Some(dueq::MIN_LEASE_MS))
        .await
        .unwrap()
        .tasks
        .remove(0);
    assert_eq!(t.id, a.id);
    let mut raw = ctx.raw();
    let _: () = redis::cmd("ZREM")
        .arg(&q.keys().active)
        .arg(a.id.as_str())
        .query(&mut raw)
        .unwrap();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r2 = runs.clone();
    let worker = Worker::builder(ctx.client.clone())
        .backoff(Backoff::new(1, 1.0, 1))
        .handle("many", move |t| {
            let r2 = r2.clone();
            async move {
                r2.lock().unwrap().push(t.started_at_ms);
                Outcome::Success
            }
        })
        .build()
        .unwrap()
        .start();
    wait_until_async(DEADLINE, "A reran", || {
        let n = runs.lock().unwrap().len();
        async move { n == 1 }
    })
    .await;
    worker.shutdown().await.unwrap();
    let started = runs.lock().unwrap()[0];
    assert!(
        started <= t.lease_expires_at_ms + 1_500,
        "A reran {} ms after its deadline",
        started.saturating_sub(t.lease_expires_at_ms)
    );
}
