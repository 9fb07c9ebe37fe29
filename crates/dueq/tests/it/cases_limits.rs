//! Cases C13 to C16 of `shared/cases/CASES.md`: names, payload limits, backoff and retention.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use dueq::{
    AckOutcome, Backoff, CancelOutcome, ClaimedTask, Client, EnqueueOutcome, ErrorKind, LeaseToken,
    NackOutcome, Queue, SettingsPatch, TaskId, TaskRef, TaskSpec, TaskState,
};
use dueq_testkit::{RedisServer, hlen, keys_matching, zcard};

use crate::support::{Ctx, DEADLINE};

/// Every key of the server with its `DUMP`, sorted: equal snapshots mean nothing was written.
fn snapshot(conn: &mut redis::Connection) -> Vec<(String, Vec<u8>)> {
    keys_matching(conn, "*")
        .into_iter()
        .map(|k| {
            let v: Vec<u8> = redis::cmd("DUMP").arg(&k).query(conn).unwrap();
            (k, v)
        })
        .collect()
}

fn dbsize(conn: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(conn).unwrap()
}

/// Case C13 in shared/cases/CASES.md: names that fight the key layout.
///
/// Proves that queue names which could change the hash tag or the key separator (`billing:v2`,
/// `a{b}c`, `x}y{`, empty, 129 characters) are refused with `InvalidInput` and a message naming
/// the rule, writing nothing; that two similar accepted names (`billing`, `billing.v2`) never
/// share a Redis key even with identical business keys; and that business keys made of
/// awkward bytes (multi-byte UTF-8, spaces, `%3A`, `:`, NUL, exactly 512 bytes) round-trip byte
/// for byte through enqueue, dedupe, get, claim, nack and cancel, while empty and 513-byte keys
/// are refused with nothing written. (The HTTP part, URL-encoded keys in paths, belongs to the
/// HTTP API tests.)
#[tokio::test]
async fn c13_names_that_fight_the_key_layout() {
    let ctx = Ctx::new().await;
    let mut raw = ctx.raw();

    // --- queue names
    let long = "q".repeat(129);
    for bad in ["billing:v2", "a{b}c", "x}y{", "", long.as_str(), "a b", "ü"] {
        let err = ctx.client.queue(bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("queue name") && msg.contains("A-Z a-z 0-9 _ . -") && msg.contains("128"),
            "unclear message for {bad:?}: {msg}"
        );
    }
    ctx.client.queue(&"q".repeat(128)).unwrap();
    assert_eq!(dbsize(&mut raw), 0, "refused names wrote something");

    // --- two similar queues used the same way never share a key
    let a = ctx.queue("billing");
    let b = ctx.queue("billing.v2");
    for q in [&a, &b] {
        q.update_settings(&SettingsPatch::default().succeeded_max(Some(10)))
            .await
            .unwrap();
        for k in ["shared-1", "shared-2", "shared-3", "shared-4"] {
            q.enqueue(TaskSpec::new(q.name().as_bytes().to_vec()).key(k))
                .await
                .unwrap();
        }
        let later = q
            .enqueue(
                TaskSpec::new(b"later".to_vec())
                    .key("later")
                    .delay_ms(60_000),
            )
            .await
            .unwrap();
        assert!(later.created());
        let mut c = q.claim(3, None).await.unwrap().tasks;
        assert_eq!(c.len(), 3);
        for t in &c {
            assert_eq!(
                t.payload,
                q.name().as_bytes(),
                "a queue got the other's task"
            );
        }
        let dead = c.pop().unwrap();
        assert_eq!(
            q.nack(&dead.id, &dead.lease_token, "x", None, true)
                .await
                .unwrap(),
            NackOutcome::Dead
        );
        let done = c.pop().unwrap();
        assert_eq!(
            q.ack(&done.id, &done.lease_token).await.unwrap(),
            AckOutcome::Acked
        );
        // c[0] stays active (leases + active), one stays scheduled
    }
    // cancelling a key in one queue leaves the same key in the other alone
    assert_eq!(
        a.cancel(&TaskRef::key("later").unwrap()).await.unwrap(),
        CancelOutcome::Cancelled
    );
    let other = b
        .get(&TaskRef::key("later").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.payload, b"later");
    assert_eq!(other.state, TaskState::Scheduled);

    let keys_a: BTreeSet<String> = a.keys().all().iter().map(|s| s.to_string()).collect();
    let keys_b: BTreeSet<String> = b.keys().all().iter().map(|s| s.to_string()).collect();
    assert!(keys_a.is_disjoint(&keys_b));
    let all = keys_matching(&mut raw, "*");
    let (mut of_a, mut of_b) = (0, 0);
    for k in &all {
        let in_a = k.contains("{billing}");
        let in_b = k.contains("{billing.v2}");
        // the registry and the recovery index name queues as values, in keys of their own
        if k == "dueq:queues" || k == "dueq:recovery" {
            continue;
        }
        assert!(in_a != in_b, "key {k:?} belongs to neither or both queues");
        if in_a {
            assert!(keys_a.contains(k), "{k} is not a key of billing");
            of_a += 1;
        } else {
            assert!(keys_b.contains(k), "{k} is not a key of billing.v2");
            of_b += 1;
        }
    }
    // sched, active, leases, tasks, keys, dead, dead_keys (each queue has a keyed dead task),
    // done, meta, stats, errors, hist
    assert_eq!((of_a, of_b), (12, 12), "keys: {all:?}");

    // --- business keys
    let q = ctx.queue("names");
    let k512 = format!("{}ab", "日".repeat(170));
    assert_eq!(k512.len(), 512);
    let accepted = [
        "日本語-✓".to_owned(),
        "a b".to_owned(),
        "%3A".to_owned(),
        "v2:1".to_owned(),
        "a\0b".to_owned(),
        "{billing}:tasks".to_owned(),
        k512.clone(),
    ];
    for (i, key) in accepted.iter().enumerate() {
        let payload = format!("payload {i}").into_bytes();
        let r = TaskRef::key(key.clone()).unwrap();
        let e = q
            .enqueue(TaskSpec::new(payload.clone()).key(key.clone()))
            .await
            .unwrap();
        assert!(e.created(), "{key:?}");
        // dedupe finds the same bytes
        let again = q
            .enqueue(TaskSpec::new(b"dup".to_vec()).key(key.clone()))
            .await
            .unwrap();
        assert_eq!(
            (again.outcome, &again.id),
            (EnqueueOutcome::Existing, &e.id)
        );
        let got = q.get(&r).await.unwrap().unwrap();
        assert_eq!(got.id, e.id, "{key:?}");
        assert_eq!(got.key.as_deref().map(str::as_bytes), Some(key.as_bytes()));
        assert_eq!(got.payload, payload);

        let mut c = q.claim(10, None).await.unwrap().tasks;
        assert_eq!(c.len(), 1, "{key:?}");
        let t = c.pop().unwrap();
        assert_eq!(t.id, e.id);
        assert_eq!(t.key.as_deref().map(str::as_bytes), Some(key.as_bytes()));
        assert_eq!(q.cancel(&r).await.unwrap(), CancelOutcome::InProgress);
        // back to scheduled, the key still points at it
        assert!(matches!(
            q.nack(&t.id, &t.lease_token, "later", Some(60_000), false)
                .await
                .unwrap(),
            NackOutcome::Rescheduled { .. }
        ));
        let got = q.get(&r).await.unwrap().unwrap();
        assert_eq!((got.id, got.state), (e.id.clone(), TaskState::Scheduled));
        assert_eq!(q.cancel(&r).await.unwrap(), CancelOutcome::Cancelled);
        assert!(q.get(&r).await.unwrap().is_none());
        assert_eq!(q.cancel(&r).await.unwrap(), CancelOutcome::NotFound);
        assert!(
            q.get(&e.id.clone().into()).await.unwrap().is_none(),
            "cancel left the record of {key:?}"
        );
    }
    // near misses do not match: the index compares bytes exactly
    q.enqueue(TaskSpec::new(b"nul".to_vec()).key("a\0b").delay_ms(60_000))
        .await
        .unwrap();
    for near in ["a", "ab", "a\0b\0", "a\0c", "a%00b"] {
        assert!(
            q.get(&TaskRef::key(near).unwrap()).await.unwrap().is_none(),
            "{near:?} matched a\\0b"
        );
    }
    assert_eq!(hlen(&mut raw, &q.keys().keys), 1);

    // refused keys write nothing
    let before = snapshot(&mut raw);
    let k513 = "日".repeat(171);
    assert_eq!(k513.len(), 513);
    for bad in [String::new(), k513.clone()] {
        let err = q
            .enqueue(TaskSpec::new(b"x".to_vec()).key(bad.clone()))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{}", bad.len());
        assert!(err.to_string().contains("512"), "{err}");
        assert_eq!(
            TaskRef::key(bad.clone()).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        // one bad key refuses a whole batch, naming its index
        let batch = [
            TaskSpec::new(b"ok".to_vec()).key("fine-1"),
            TaskSpec::new(b"bad".to_vec()).key(bad),
            TaskSpec::new(b"ok".to_vec()).key("fine-2"),
        ];
        let err = q.enqueue_batch(&batch).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.to_string().contains("task 1"), "{err}");
    }
    // a fresh queue that only ever saw refused input has no key at all
    let fresh = ctx.queue("fresh");
    assert!(
        fresh
            .enqueue(TaskSpec::new(b"x".to_vec()).key(k513))
            .await
            .is_err()
    );
    assert_eq!(snapshot(&mut raw), before, "refused keys wrote something");
}

/// Deterministic bytes that are not valid UTF-8 (xorshift, with a 0xFF up front).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.extend_from_slice(&seed.to_le_bytes());
    }
    v.truncate(len);
    if let Some(b) = v.first_mut() {
        *b = 0xFF;
    }
    v
}

/// Case C14 in shared/cases/CASES.md: payload limits (library part).
///
/// With a 256 KiB limit, proves that payloads of 0 B and exactly 262 144 B are accepted and come
/// back byte-identical from claim and get, while 262 145 B is refused with `PayloadTooLarge`
/// and nothing written anywhere (the whole dataset is compared before and after, also for a
/// batch in which only one task is too large). The default limit (1 MiB) is checked too. The
/// 10 MB HTTP body and deeply nested JSON parts belong to the HTTP API tests.
#[tokio::test]
async fn c14_payload_limits() {
    const LIMIT: usize = 262_144;
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .payload_limit_bytes(LIMIT)
        .connect()
        .await
        .unwrap();
    assert_eq!(client.payload_limit_bytes(), LIMIT);
    let mut raw = server.conn();
    let q = client.queue("blobs").unwrap();

    // over the limit on an untouched server: not even the queue registry is written
    let over = noise(LIMIT + 1, 7);
    let err = q
        .enqueue(TaskSpec::new(over.clone()).key("over"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    assert!(
        err.to_string().contains("262145") && err.to_string().contains("262144"),
        "{err}"
    );
    assert_eq!(dbsize(&mut raw), 0, "a refused payload wrote something");

    let at = noise(LIMIT, 42);
    assert!(std::str::from_utf8(&at).is_err());
    let e_at = q
        .enqueue(TaskSpec::new(at.clone()).key("at"))
        .await
        .unwrap();
    let e_zero = q.enqueue(TaskSpec::new(Vec::new())).await.unwrap();
    assert!(e_at.created() && e_zero.created());

    // nothing written anywhere by a refused single enqueue or a batch with one bad task
    let before = snapshot(&mut raw);
    let err = q.enqueue(TaskSpec::new(over.clone())).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    let batch = [
        TaskSpec::new(b"small".to_vec()).key("b0"),
        TaskSpec::new(at.clone()).key("b1"),
        TaskSpec::new(over.clone()).key("b2"),
        TaskSpec::new(Vec::new()).key("b3"),
    ];
    let err = q.enqueue_batch(&batch).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    assert!(err.to_string().contains("task 2"), "{err}");
    // replacing a live task's payload with an oversized one is refused too
    let err = q
        .enqueue(
            TaskSpec::new(over.clone())
                .key("at")
                .on_conflict(dueq::OnConflict::Replace),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    assert_eq!(
        snapshot(&mut raw),
        before,
        "a refused payload wrote something"
    );

    let got = q.get(&e_at.id.clone().into()).await.unwrap().unwrap();
    assert!(got.payload == at, "get changed the payload");
    let claimed = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), 2);
    assert_eq!(claimed[0].id, e_at.id);
    assert_eq!(claimed[0].payload.len(), LIMIT);
    assert!(claimed[0].payload == at, "claim changed the payload");
    assert_eq!(claimed[1].id, e_zero.id);
    assert!(claimed[1].payload.is_empty());

    // the default limit is 1 MiB
    let default = Client::connect(&server.url()).await.unwrap();
    assert_eq!(default.payload_limit_bytes(), 1 << 20);
    let dq = default.queue("blobs").unwrap();
    let before = snapshot(&mut raw);
    let err = dq
        .enqueue(TaskSpec::new(vec![0u8; (1 << 20) + 1]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    assert_eq!(snapshot(&mut raw), before);
    assert!(
        dq.enqueue(TaskSpec::new(vec![0u8; 1 << 20]))
            .await
            .unwrap()
            .created()
    );
}

/// Overwrites the attempt counter (bytes 0..4 of the record, see `protocol/lib/record.lua`) of task `id`.
fn corrupt_attempt(raw: &mut redis::Connection, tasks_key: &str, id: &TaskId, attempt: u32) {
    let mut rec: Vec<u8> = redis::cmd("HGET")
        .arg(tasks_key)
        .arg(id.as_str())
        .query(raw)
        .unwrap();
    assert!(rec.len() >= 24, "unknown record layout");
    rec[0..4].copy_from_slice(&attempt.to_le_bytes());
    redis::cmd("HSET")
        .arg(tasks_key)
        .arg(id.as_str())
        .arg(rec)
        .query::<()>(raw)
        .unwrap();
}

/// Claims one task, polling until one is due (up to [`DEADLINE`]).
async fn claim_one(q: &Queue, lease_ms: Option<u64>) -> ClaimedTask {
    let start = Instant::now();
    loop {
        if let Some(t) = q.claim(1, lease_ms).await.unwrap().tasks.pop() {
            return t;
        }
        assert!(start.elapsed() < DEADLINE, "no task became claimable");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Case C15 in shared/cases/CASES.md: backoff arithmetic, end to end (the pure arithmetic for
/// attempts 1 .. u32::MAX is unit-tested in `src/backoff.rs`).
///
/// Proves that a nack without an explicit delay reschedules by the queue's backoff (50 ms then
/// 100 ms after Redis-now, exactly, no jitter) and that the third failed attempt of a
/// 3-attempt task goes to the dead-letter queue; and that a stored attempt counter corrupted
/// to a huge value neither panics nor raises a Lua error on claim, nack, recover and get: out of
/// attempts it goes to dead, otherwise it retries after the capped delay.
#[tokio::test]
async fn c15_backoff_end_to_end() {
    let ctx = Ctx::new().await;
    let mut raw = ctx.raw();
    let q = ctx
        .queue("retries")
        .with_backoff(Backoff::new(50, 2.0, 1_000));

    // --- the rescheduled due times follow the backoff, by the Redis clock
    let e = q
        .enqueue(TaskSpec::new(b"x".to_vec()).key("k").max_attempts(3))
        .await
        .unwrap();
    for (attempt, expected_delay) in [(1u32, 50u64), (2, 100)] {
        let t = claim_one(&q, None).await;
        assert_eq!((t.id.clone(), t.attempt), (e.id.clone(), attempt));
        let before = ctx.redis_now_ms();
        let o = q
            .nack(&t.id, &t.lease_token, "boom", None, false)
            .await
            .unwrap();
        let after = ctx.redis_now_ms();
        let NackOutcome::Rescheduled { due_at_ms } = o else {
            panic!("attempt {attempt}: {o:?}")
        };
        let nack_now = due_at_ms - expected_delay;
        assert!(
            before <= nack_now && nack_now <= after,
            "attempt {attempt}: due {due_at_ms} is not now+{expected_delay} (now in {before}..={after})"
        );
        let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(
            (got.state, got.attempt, got.due_at_ms),
            (TaskState::Scheduled, attempt, due_at_ms)
        );
    }
    let t = claim_one(&q, None).await;
    assert_eq!(t.attempt, 3);
    assert_eq!(
        q.nack(&t.id, &t.lease_token, "boom", None, false)
            .await
            .unwrap(),
        NackOutcome::Dead
    );
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!((got.state, got.attempt), (TaskState::Dead, 3));

    // --- a corrupted, huge attempt counter: nack path
    for (n, stored) in [u32::MAX - 1, u32::MAX].into_iter().enumerate() {
        let key = format!("huge-nack-{n}");
        let e = q
            .enqueue(TaskSpec::new(b"huge".to_vec()).key(key.clone()))
            .await
            .unwrap();
        corrupt_attempt(&mut raw, &q.keys().tasks, &e.id, stored);
        let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(got.attempt, stored);
        let t = q.claim(1, None).await.unwrap().tasks.pop().unwrap();
        assert_eq!(t.id, e.id);
        assert_eq!(t.attempt, u32::MAX, "claim must saturate, not wrap");
        assert_eq!(t.key.as_deref(), Some(key.as_str()));
        let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
        assert_eq!((got.state, got.attempt), (TaskState::Active, u32::MAX));
        assert_eq!(
            q.nack(&t.id, &t.lease_token, "huge", None, false)
                .await
                .unwrap(),
            NackOutcome::Dead
        );
        let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(got.state, TaskState::Dead);
        assert!(
            got.attempt >= got.max_attempts,
            "dead with attempt {} of {}",
            got.attempt,
            got.max_attempts
        );
        assert_eq!(got.max_attempts, 5);
        assert_eq!(got.payload, b"huge");
        assert_eq!(got.key.as_deref(), Some(key.as_str()));
        assert_eq!(got.last_error.as_deref(), Some("huge"));
        // get by key answers the dead task (no live task holds the key), and the key is free
        // for live work: cancel by key acts on live tasks only
        let by_key = q
            .get(&TaskRef::key(key.clone()).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&by_key.id, by_key.state), (&e.id, TaskState::Dead));
        assert_eq!(
            q.cancel(&TaskRef::key(key).unwrap()).await.unwrap(),
            CancelOutcome::NotFound
        );
    }

    // --- a huge counter on a task that succeeds and is kept by retention
    q.update_settings(&SettingsPatch::default().succeeded_max(Some(10)))
        .await
        .unwrap();
    let e = q.enqueue(TaskSpec::new(b"ok".to_vec())).await.unwrap();
    corrupt_attempt(&mut raw, &q.keys().tasks, &e.id, u32::MAX);
    let t = claim_one(&q, None).await;
    assert_eq!(
        q.ack(&t.id, &t.lease_token).await.unwrap(),
        AckOutcome::Acked
    );
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!((got.state, got.attempt), (TaskState::Succeeded, u32::MAX));

    // --- huge counter with attempts left: retried after the capped delay
    let e = q
        .enqueue(TaskSpec::new(b"many".to_vec()).max_attempts(dueq::MAX_ATTEMPTS))
        .await
        .unwrap();
    corrupt_attempt(&mut raw, &q.keys().tasks, &e.id, dueq::MAX_ATTEMPTS - 10);
    let t = q.claim(1, None).await.unwrap().tasks.pop().unwrap();
    assert_eq!(t.attempt, dueq::MAX_ATTEMPTS - 9);
    let before = ctx.redis_now_ms();
    let o = q
        .nack(&t.id, &t.lease_token, "again", None, false)
        .await
        .unwrap();
    let after = ctx.redis_now_ms();
    let NackOutcome::Rescheduled { due_at_ms } = o else {
        panic!("{o:?}")
    };
    assert!(
        before + 1_000 <= due_at_ms && due_at_ms <= after + 1_000,
        "huge attempt: delay is not the 1 000 ms cap"
    );
    let got = q.get(&e.id.clone().into()).await.unwrap().unwrap();
    assert_eq!(
        (got.state, got.attempt),
        (TaskState::Scheduled, dueq::MAX_ATTEMPTS - 9)
    );
    assert_eq!(
        q.cancel(&e.id.clone().into()).await.unwrap(),
        CancelOutcome::Cancelled
    );

    // --- a corrupted, huge attempt counter: recover path (lease expires); both tasks are
    // claimed with the shortest lease (MIN_LEASE_MS) and left to expire together
    let mut leased = Vec::new();
    for (n, stored) in [u32::MAX - 1, u32::MAX].into_iter().enumerate() {
        let e = q
            .enqueue(TaskSpec::new(b"lease".to_vec()).key(format!("huge-lease-{n}")))
            .await
            .unwrap();
        corrupt_attempt(&mut raw, &q.keys().tasks, &e.id, stored);
        let t = q
            .claim(1, Some(dueq::MIN_LEASE_MS))
            .await
            .unwrap()
            .tasks
            .pop()
            .unwrap();
        assert_eq!(t.id, e.id);
        leased.push(t);
    }
    let waiting = Instant::now();
    let mut dead = 0;
    while dead < leased.len() as u64 {
        let r = q.recover().await.unwrap();
        assert_eq!(r.recovered, 0, "a task out of attempts was rescheduled");
        dead += r.dead;
        assert!(
            waiting.elapsed() < DEADLINE,
            "the expired leases were never recovered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dead, leased.len() as u64);
    for t in &leased {
        let got = q.get(&t.id.clone().into()).await.unwrap().unwrap();
        assert_eq!(got.state, TaskState::Dead);
        assert!(got.attempt >= got.max_attempts, "attempt {}", got.attempt);
        assert_eq!(got.last_error.as_deref(), Some("lease expired"));
        assert_eq!(
            q.ack(&t.id, &t.lease_token).await.unwrap(),
            AckOutcome::LeaseLost
        );
    }
    let page = q.dead_list(0, 100).await.unwrap();
    assert_eq!(page.total, 5);
    for d in &page.tasks {
        assert!(d.task.attempt >= d.task.max_attempts, "{:?}", d.task);
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.scheduled, s.active, s.dead), (0, 0, 5));
}

/// Case C16 in shared/cases/CASES.md: retention.
///
/// With `succeeded_max` 1 000 and `dead_max` 500, runs 100 000 keyed tasks to success (batches
/// of 1 000: enqueue, claim, ack) and 2 000 to the dead-letter queue (permanent nack). Proves at
/// most 1 000 succeeded and 500 dead records remain (the newest ones), that records exist only
/// for them, that the key index is empty, and that the number of Redis keys and of hash fields
/// is the same after 10 000 tasks as after 100 000: storage depends on retention, not on how
/// many tasks ever ran.
#[tokio::test]
async fn c16_retention() {
    const TOTAL: usize = 100_000;
    const BATCH: usize = 1_000;
    const DEAD: usize = 2_000;
    let started = Instant::now();
    let ctx = Ctx::new().await;
    let mut raw = ctx.raw();
    let q = ctx.queue("kept");
    q.update_settings(
        &SettingsPatch::default()
            .succeeded_max(Some(1_000))
            .dead_max(Some(500)),
    )
    .await
    .unwrap();
    let k = q.keys().clone();
    let stat_fields = |raw: &mut redis::Connection| -> Vec<String> {
        redis::cmd("HKEYS").arg(&k.stats).query(raw).unwrap()
    };
    let counters = |raw: &mut redis::Connection| {
        stat_fields(raw)
            .iter()
            .filter(|f| !f.starts_with("lateness:") && !f.starts_with("run_time:"))
            .count() as u64
    };
    let footprint = |raw: &mut redis::Connection| {
        (
            dbsize(raw),
            hlen(raw, &k.tasks),
            hlen(raw, &k.keys),
            hlen(raw, &k.leases),
            hlen(raw, &k.meta),
            // counters; the timing histograms' bucket fields come as values land in them
            // (bounded: one per bucket, checked below)
            counters(raw),
            zcard(raw, &k.done),
            zcard(raw, &k.dead),
        )
    };

    let mut first_acked = None;
    let mut last_acked = None;
    let mut after_10k = None;
    let mut dead_ids = Vec::new();
    let specs_for = |round: usize| -> Vec<TaskSpec> {
        (0..BATCH)
            .map(|i| {
                let n = round * BATCH + i;
                TaskSpec::new((n as u32).to_le_bytes().to_vec()).key(format!("task-{n}"))
            })
            .collect()
    };
    let rounds = TOTAL / BATCH;
    q.enqueue_batch(&specs_for(0)).await.unwrap();
    for round in 0..rounds {
        // 2 000 to the dead-letter queue, spread over the first rounds; due in the past, so
        // they are claimed before the batch waiting to succeed
        if round < DEAD / 100 {
            let specs: Vec<_> = (0..100)
                .map(|i| {
                    TaskSpec::new(b"dead".to_vec())
                        .key(format!("dead-{round}-{i}"))
                        .due_at_ms(1)
                })
                .collect();
            q.enqueue_batch(&specs).await.unwrap();
            let tasks = q.claim(100, None).await.unwrap().tasks;
            assert_eq!(tasks.len(), 100);
            let outcomes = futures_util::future::join_all(
                tasks
                    .iter()
                    .map(|t| q.nack(&t.id, &t.lease_token, "fatal", None, true)),
            )
            .await;
            for (t, o) in tasks.into_iter().zip(outcomes) {
                assert_eq!(o.unwrap(), NackOutcome::Dead);
                dead_ids.push(t.id);
            }
        }
        let c = q.claim(BATCH, None).await.unwrap();
        assert_eq!(c.tasks.len(), BATCH);
        let items: Vec<(TaskId, LeaseToken)> =
            c.tasks.into_iter().map(|t| (t.id, t.lease_token)).collect();
        first_acked.get_or_insert_with(|| items[0].0.clone());
        last_acked = Some(items[BATCH - 1].0.clone());
        // the next batch is enqueued while this one is acknowledged (one pipelined connection)
        let next = (round + 1 < rounds && round != 9).then(|| specs_for(round + 1));
        let (acked, enqueued) = tokio::join!(q.ack_batch(&items), async {
            match &next {
                Some(specs) => q.enqueue_batch(specs).await.map(|v| v.len()),
                None => Ok(0),
            }
        });
        assert!(acked.unwrap().iter().all(|a| *a == AckOutcome::Acked));
        enqueued.unwrap();
        if round == 9 {
            after_10k = Some(footprint(&mut raw));
            q.enqueue_batch(&specs_for(round + 1)).await.unwrap();
        }
    }
    let done_n = zcard(&mut raw, &k.done);
    let dead_n = zcard(&mut raw, &k.dead);
    assert!(
        done_n <= 1_000 && dead_n <= 500,
        "done {done_n}, dead {dead_n}"
    );
    assert_eq!(
        (done_n, dead_n),
        (1_000, 500),
        "retention keeps exactly the caps"
    );
    assert_eq!(
        hlen(&mut raw, &k.tasks),
        done_n + dead_n,
        "records of dropped tasks remain"
    );
    assert_eq!(hlen(&mut raw, &k.keys), 0, "key index leaks");
    let end = footprint(&mut raw);
    assert_eq!(Some(end), after_10k, "storage grew with tasks run");
    let buckets = stat_fields(&mut raw).len() as u64 - counters(&mut raw);
    let most = (dueq::LATENESS_BOUNDS_MS.len() + dueq::RUN_TIME_BOUNDS_MS.len() + 2) as u64;
    assert!(buckets <= most, "{buckets} histogram fields");
    assert!(end.0 <= 11, "dbsize {}", end.0);

    // the newest records are the ones kept
    let last = q.get(&last_acked.unwrap().into()).await.unwrap().unwrap();
    assert_eq!(last.state, TaskState::Succeeded);
    assert!(q.get(&first_acked.unwrap().into()).await.unwrap().is_none());
    let newest_dead = q
        .get(&dead_ids[DEAD - 1].clone().into())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(newest_dead.state, TaskState::Dead);
    assert!(q.get(&dead_ids[0].clone().into()).await.unwrap().is_none());
    let page = q.dead_list(0, 1_000).await.unwrap();
    assert_eq!((page.total, page.tasks.len()), (500, 500));

    let s = q.stats().await.unwrap();
    assert_eq!(s.succeeded_total, TOTAL as u64);
    assert_eq!(s.dead_total, DEAD as u64);
    assert_eq!(
        (s.succeeded_kept, s.dead, s.scheduled, s.active),
        (1_000, 500, 0, 0)
    );
    eprintln!("c16: {TOTAL} + {DEAD} tasks in {:?}", started.elapsed());
}
