//! Confirmed enqueues lost in a Sentinel failover, measured (docs/RELIABILITY.md, "Failover
//! without durable acks redelivers, and loses plain writes").
//!
//! A primary, one replica and one sentinel; producers enqueue keyed tasks (due in an hour, so
//! nothing runs) through a `redis+sentinel://` client as fast as they can, and record for every
//! key whether the enqueue was confirmed and when (a monotonic `Instant`), before, during and
//! after a `SENTINEL FAILOVER`, until writes have landed on the new primary for 2 s. Then every
//! confirmed key is looked up on the new primary (`HEXISTS` on the queue's `keys` hash).
//!
//! The failover window runs from the (accepted) `SENTINEL FAILOVER` to the first enqueue
//! confirmed by the new primary: one sent after the replica answered `ROLE master` whose key is
//! on it (the promoted replica no longer takes the old primary's stream, so such a key was
//! written there). Meanwhile the old primary keeps taking writes the new one never sees: the
//! replica is promoted ~0.2 s after the request, but the sentinel names it (`+switch-master`,
//! which the client follows) only once its next `INFO` of the replica shows the promotion, up to
//! a second later.
//!
//! * Without durable writes, every lost confirmed enqueue was confirmed inside the window
//!   (within [`MARGIN`]): the loss is bounded by the window, however many that is.
//! * With `replicas(1)` (`WAIT` for the one replica there is: every replica), no confirmed
//!   enqueue is lost; the price is durable writes failing (`NotReplicated`) from the promotion
//!   until the old primary has resynced as a replica of the new one.
//!
//! Both print the figures (run with `--no-capture` to see them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dueq::{Client, ErrorKind, QueueKeys, TaskSpec};
use dueq_testkit::{MASTER_NAME, RedisSentinels, RedisServer, wait_until, wait_until_async};

use crate::support::DEADLINE;

/// The queue written to.
const QUEUE: &str = "loss";
/// Concurrent producers (one client, so one connection to the primary).
const PRODUCERS: usize = 4;
/// Replicas of the setup, all of which a durable write waits for.
const REPLICAS: u8 = 1;
/// Slack on both sides of the window: replication lag at the promotion (a write confirmed just
/// before it may not have reached the replica), answers in flight when the client switches,
/// and the scheduling delay between an answer and the producer reading the clock.
const MARGIN: Duration = Duration::from_millis(200);
/// Without durable writes, the first enqueue confirmed by the new primary comes at most this
/// long after the sentinel names it: the client follows `+switch-master` (and asks the
/// sentinels every 500 ms besides; docs/RELIABILITY.md says ~100 ms). This keeps the window,
/// and so the bound on the loss, from growing with a client that is slow to switch.
const FOLLOW_BOUND: Duration = Duration::from_secs(1);
/// Writes before the failover is requested (a measured period).
const BEFORE: Duration = Duration::from_secs(1);
/// Writes after the first one confirmed by the new primary (a measured period).
const AFTER: Duration = Duration::from_secs(2);
/// Longest wait for Sentinel to accept a failover and promote the replica. Sentinel
/// sometimes refuses (`-NOGOODSLAVE`) or drops an accepted forced failover for ~20 s.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(35);
/// Sentinel drops an accepted failover without saying so: sent again when the replica is not
/// promoted this long after it, no failover is running and the old primary is still named.
const RESEND_AFTER: Duration = Duration::from_secs(5);
/// Longest wait, after the promotion, for an enqueue confirmed by the new primary (with
/// durable writes: until the old primary has resynced as a replica, 10 to 15 s).
const CONFIRM_DEADLINE: Duration = Duration::from_secs(30);

/// The answer to one enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Confirmed,
    NotReplicated,
    Redis,
}

/// One enqueue: key `k{i}`, when it was sent and answered.
#[derive(Debug, Clone, Copy)]
struct Rec {
    i: u64,
    sent: Instant,
    answered: Instant,
    answer: Answer,
}

/// What the failover thread saw.
#[derive(Debug)]
struct Failover {
    /// Index of the promoted replica in `servers`.
    new: usize,
    /// When the `SENTINEL FAILOVER` that led to the promotion was sent.
    requested: Instant,
    /// When the replica first answered `ROLE master`.
    promoted: Instant,
    /// When the sentinel first named it as primary.
    named: Instant,
    /// Requests refused (`-NOGOODSLAVE`, `-INPROG`) and accepted.
    refused: u32,
    accepted: u32,
}

/// Milliseconds from `from` to `to`, negative when `to` is earlier.
fn ms(from: Instant, to: Instant) -> i64 {
    if to >= from {
        i64::try_from(to.duration_since(from).as_millis()).unwrap()
    } else {
        -i64::try_from(from.duration_since(to).as_millis()).unwrap()
    }
}

fn left(start: Instant, deadline: Duration) -> Duration {
    deadline.saturating_sub(start.elapsed())
}

/// Whether `server` answers `ROLE master`. The connection is opened again after an error:
/// Sentinel's promotion ends with `CLIENT KILL TYPE normal`, which closes it.
fn is_master(server: &RedisServer, conn: &mut Option<redis::Connection>) -> bool {
    for _ in 0..2 {
        if conn.is_none() {
            *conn = server
                .client()
                .get_connection_with_timeout(Duration::from_secs(1))
                .ok();
            if let Some(c) = conn {
                c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            }
        }
        let Some(c) = conn.as_mut() else {
            return false;
        };
        match redis::cmd("ROLE").query::<Vec<redis::Value>>(c) {
            Ok(role) => {
                return matches!(role.as_slice(), [redis::Value::BulkString(b), ..] if b == b"master");
            }
            Err(_) => *conn = None,
        }
    }
    false
}

fn named_port(c: &mut redis::Connection) -> Option<u16> {
    let (_, port): (String, u16) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(c)
        .ok()?;
    Some(port)
}

/// Whether the sentinel's flags for the primary show a failover (unreadable: assumed so).
fn failover_running(c: &mut redis::Connection) -> bool {
    let fields: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER_NAME)
        .query(c);
    fields.map_or(true, |f| {
        f.chunks(2)
            .any(|kv| kv[0] == "flags" && kv.get(1).is_some_and(|v| v.contains("failover")))
    })
}

/// `SENTINEL FAILOVER` until the replica is promoted (like `RedisSentinels::failover`, which
/// does not tell when the request that worked was sent): refused requests are repeated, and an
/// accepted one that Sentinel dropped is sent again (never while one runs or once the old
/// primary is no longer named, which would move the primary back). Then waits until the
/// sentinel names the new primary.
fn force_failover(cluster: &RedisSentinels) -> Failover {
    let start = Instant::now();
    assert_eq!(cluster.servers.len(), 2, "one primary and one replica");
    let mut sentinel =
        redis::Client::open(format!("redis://127.0.0.1:{}", cluster.sentinel_ports()[0]))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(1))
            .unwrap();
    sentinel
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let old_port = named_port(&mut sentinel).expect("the sentinel names the primary");
    let new = cluster
        .servers
        .iter()
        .position(|s| s.port() != Some(old_port))
        .unwrap();
    let new_port = cluster.servers[new].port().unwrap();
    let mut replica = None;
    let (mut refused, mut accepted) = (0, 0);
    let (requested, promoted) = loop {
        let mut sent = start;
        wait_until(
            left(start, FAILOVER_DEADLINE),
            "SENTINEL FAILOVER is accepted",
            || {
                sent = Instant::now();
                let ok = redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(MASTER_NAME)
                    .query::<()>(&mut sentinel)
                    .is_ok();
                if !ok {
                    refused += 1;
                }
                ok
            },
        );
        accepted += 1;
        let mut promoted = None;
        wait_until(
            left(start, FAILOVER_DEADLINE),
            "the replica is promoted (or Sentinel dropped the failover)",
            || {
                if is_master(&cluster.servers[new], &mut replica) {
                    promoted = Some(Instant::now());
                    return true;
                }
                sent.elapsed() >= RESEND_AFTER
                    && !failover_running(&mut sentinel)
                    && named_port(&mut sentinel) == Some(old_port)
            },
        );
        if let Some(p) = promoted {
            break (sent, p);
        }
    };
    wait_until(DEADLINE, "the sentinel names the new primary", || {
        named_port(&mut sentinel) == Some(new_port)
    });
    Failover {
        new,
        requested,
        promoted,
        named: Instant::now(),
        refused,
        accepted,
    }
}

/// What one run measured.
#[derive(Debug)]
struct Measured {
    fo: Failover,
    recs: Vec<Rec>,
    /// Every confirmed enqueue, and whether its key is missing on the new primary.
    confirmed: Vec<(Rec, bool)>,
    /// When the first enqueue confirmed by the new primary was answered.
    first_new: Instant,
}

/// Producers before, during and after a forced failover; then every confirmed key looked up on
/// the new primary.
async fn measure(durable: bool) -> Measured {
    let cluster = Arc::new(RedisSentinels::start(usize::from(REPLICAS), 1));
    let mut builder = Client::builder(&cluster.url()).response_timeout_ms(2_000);
    if durable {
        builder = builder.replicas(REPLICAS).replica_timeout_ms(250);
    }
    let client = builder.connect().await.unwrap();
    let q = client.queue(QUEUE).unwrap();
    let recs: Arc<Mutex<Vec<Rec>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let confirmed_n = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (q, recs, next) = (q.clone(), recs.clone(), next.clone());
            let (confirmed_n, stop) = (confirmed_n.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let spec = TaskSpec::new(i.to_be_bytes().to_vec())
                        .key(format!("k{i}"))
                        .delay_ms(3_600_000);
                    let sent = Instant::now();
                    let r = q.enqueue(spec).await;
                    let answered = Instant::now();
                    let answer = match r {
                        Ok(_) => {
                            confirmed_n.fetch_add(1, Ordering::Relaxed);
                            Answer::Confirmed
                        }
                        Err(e) if e.kind() == ErrorKind::NotReplicated => Answer::NotReplicated,
                        Err(e) if e.kind() == ErrorKind::Redis => Answer::Redis,
                        Err(e) => panic!("k{i}: {e}"),
                    };
                    recs.lock().unwrap().push(Rec {
                        i,
                        sent,
                        answered,
                        answer,
                    });
                }
            })
        })
        .collect();
    wait_until_async(DEADLINE, "enqueues are confirmed", || {
        let n = confirmed_n.load(Ordering::Relaxed);
        async move { n >= 100 }
    })
    .await;
    tokio::time::sleep(BEFORE).await;

    let c2 = cluster.clone();
    let fo = tokio::task::spawn_blocking(move || force_failover(&c2))
        .await
        .unwrap();
    let mut new_conn = cluster.servers[fo.new]
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = QueueKeys::new(QUEUE).unwrap().keys;
    wait_until_async(
        CONFIRM_DEADLINE,
        "an enqueue sent after the promotion is confirmed by the new primary",
        || {
            let newest = recs
                .lock()
                .unwrap()
                .iter()
                .rev()
                .take_while(|r| r.sent > fo.promoted)
                .find(|r| r.answer == Answer::Confirmed)
                .map(|r| r.i);
            let (mut c, keys) = (new_conn.clone(), keys.clone());
            async move {
                let Some(i) = newest else { return false };
                redis::cmd("HEXISTS")
                    .arg(&keys)
                    .arg(format!("k{i}"))
                    .query_async::<bool>(&mut c)
                    .await
                    .unwrap_or(false)
            }
        },
    )
    .await;
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Release);
    for p in producers {
        p.await.unwrap();
    }

    let recs = std::mem::take(&mut *recs.lock().unwrap());
    let confirmed: Vec<Rec> = recs
        .iter()
        .filter(|r| r.answer == Answer::Confirmed)
        .copied()
        .collect();
    let mut present = Vec::with_capacity(confirmed.len());
    for chunk in confirmed.chunks(1_000) {
        let mut pipe = redis::pipe();
        for r in chunk {
            pipe.cmd("HEXISTS").arg(&keys).arg(format!("k{}", r.i));
        }
        let found: Vec<bool> = pipe.query_async(&mut new_conn).await.unwrap();
        present.extend(found);
    }
    let first_new = confirmed
        .iter()
        .zip(&present)
        .filter(|(r, on_new)| **on_new && r.sent > fo.promoted)
        .map(|(r, _)| r.answered)
        .min()
        .expect("an enqueue was confirmed by the new primary (waited for above)");
    let confirmed = confirmed
        .into_iter()
        .zip(present)
        .map(|(r, on_new)| (r, !on_new))
        .collect();
    Measured {
        fo,
        recs,
        confirmed,
        first_new,
    }
}

impl Measured {
    fn lost(&self) -> Vec<Rec> {
        self.confirmed
            .iter()
            .filter(|(_, missing)| *missing)
            .map(|(r, _)| *r)
            .collect()
    }

    /// The first 10 lost enqueues that `f` picks, times in ms from the failover request.
    fn lost_where(&self, f: impl Fn(&Rec) -> bool) -> Vec<String> {
        let t0 = self.fo.requested;
        let show = |r: &Rec| {
            let (sent, answered) = (ms(t0, r.sent), ms(t0, r.answered));
            format!("k{} (sent {sent} ms, answered {answered} ms)", r.i)
        };
        self.lost()
            .iter()
            .filter(|r| f(r))
            .take(10)
            .map(show)
            .collect()
    }

    /// One line of figures, times in ms from the failover request.
    fn report(&self, mode: &str) -> String {
        let fo = &self.fo;
        let t0 = fo.requested;
        let lost = self.lost();
        let in_window = self
            .confirmed
            .iter()
            .filter(|(r, _)| r.answered >= t0 && r.answered <= self.first_new)
            .count();
        let failed: Vec<&Rec> = self
            .recs
            .iter()
            .filter(|r| r.answer != Answer::Confirmed)
            .collect();
        let count = |a: Answer| failed.iter().filter(|r| r.answer == a).count();
        let failing = match (
            failed.iter().map(|r| r.sent).min(),
            failed.iter().map(|r| r.answered).max(),
        ) {
            (Some(a), Some(b)) => format!(
                "{} ms (first sent at {} ms, last answered at {} ms)",
                ms(a, b),
                ms(t0, a),
                ms(t0, b)
            ),
            _ => "none".to_owned(),
        };
        let mut answered: Vec<Instant> = self.confirmed.iter().map(|(r, _)| r.answered).collect();
        answered.sort_unstable();
        let gap = answered
            .windows(2)
            .map(|w| w[1].duration_since(w[0]))
            .max()
            .unwrap_or_default();
        let lost_span = match (
            lost.iter().map(|r| r.answered).min(),
            lost.iter().map(|r| r.answered).max(),
        ) {
            (Some(a), Some(b)) => format!("{}..{} ms", ms(t0, a), ms(t0, b)),
            _ => "-".to_owned(),
        };
        format!(
            "sentinel_loss {mode}: {} enqueues, {} confirmed; lost {} confirmed (answered at \
             {lost_span}; {} before the promotion was seen), {in_window} confirmed in the window; \
             window {} ms (promoted +{} ms, named +{} ms, first confirmed by the new primary \
             +{} ms); failed: {} not_replicated, {} redis, failing for {failing}; longest gap \
             between confirmations {} ms; failover requests: {} refused, {} accepted",
            self.recs.len(),
            self.confirmed.len(),
            lost.len(),
            lost.iter().filter(|r| r.answered < fo.promoted).count(),
            ms(t0, self.first_new),
            ms(t0, fo.promoted),
            ms(t0, fo.named),
            ms(t0, self.first_new),
            count(Answer::NotReplicated),
            count(Answer::Redis),
            gap.as_millis(),
            fo.refused,
            fo.accepted,
        )
    }

    /// Measurement sanity: confirmed writes on both sides of the window.
    fn assert_covered(&self) {
        let before = self
            .confirmed
            .iter()
            .filter(|(r, _)| r.answered < self.fo.requested)
            .count();
        let after = self
            .confirmed
            .iter()
            .filter(|(r, _)| r.answered > self.first_new)
            .count();
        assert!(
            before > 0 && after > 0,
            "{before} confirmed before the failover, {after} after it"
        );
    }
}

/// Without durable writes a forced failover loses confirmed enqueues, but only ones confirmed
/// inside the failover window: from the `SENTINEL FAILOVER` request to the first enqueue
/// confirmed by the new primary, give or take [`MARGIN`]; and that window ends within
/// [`FOLLOW_BOUND`] of the sentinel naming the new primary. The count is printed, not bounded:
/// it is whatever the producers wrote in the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_loses_only_writes_confirmed_in_the_window() {
    let m = measure(false).await;
    let report = m.report("no WAIT");
    eprintln!("{report}");
    m.assert_covered();
    assert!(
        m.first_new.saturating_duration_since(m.fo.named) <= FOLLOW_BOUND,
        "the client wrote to the new primary more than {FOLLOW_BOUND:?} after the sentinel \
         named it; {report}"
    );
    let (from, to) = (m.fo.requested - MARGIN, m.first_new + MARGIN);
    let outside = m.lost_where(|r| r.answered < from || r.answered > to);
    assert!(
        outside.is_empty(),
        "confirmed enqueues lost outside the failover window (times from the request): \
         {outside:?}; {report}"
    );
}

/// With durable writes for every replica (`replicas(1)`, one replica), a forced failover
/// loses no confirmed enqueue. Printed: how many enqueues failed (`NotReplicated` while the
/// new primary has no replica, `Redis` errors) and for how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_loses_no_durable_write() {
    let m = measure(true).await;
    let report = m.report("replicas(1)");
    eprintln!("{report}");
    m.assert_covered();
    let lost = m.lost_where(|_| true);
    assert!(
        lost.is_empty(),
        "durable enqueues confirmed, missing on the new primary (times from the failover \
         request): {lost:?}; {report}"
    );
}
