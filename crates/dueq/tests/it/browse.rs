//! Browsing live tasks page by page: scheduled ones in one due order over
//! every priority and group, active ones by lease deadline, cursors that survive tasks
//! leaving between pages; and the due-time histogram of what is coming.

use std::collections::BTreeSet;

use dueq::{DueHistogram, ErrorKind, Queue, TaskRef, TaskSpec, TaskState};

use crate::support::Ctx;

/// Every page from the start, `limit` at a time; (score, id) per task.
async fn all_pages(q: &Queue, state: TaskState, limit: usize) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10_000 {
        let p = q.browse(state, after.as_deref(), limit).await.unwrap();
        assert!(p.tasks.len() <= limit);
        for t in &p.tasks {
            assert_eq!(t.state, state);
            let score = if state == TaskState::Active {
                t.state_at_ms.unwrap()
            } else {
                t.due_at_ms
            };
            out.push((score, t.id.as_str().to_owned()));
        }
        match p.next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
    panic!("paging never ended");
}

#[tokio::test]
async fn scheduled_tasks_in_one_due_order_over_priorities_and_groups() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("browse");
    let now = ctx.redis_now_ms();
    let specs: Vec<TaskSpec> = (0..90u64)
        .map(|i| {
            let s =
                TaskSpec::new(i.to_string().into_bytes()).due_at_ms(now + 60_000 + (i % 7) * 10);
            match i % 3 {
                0 => s.priority((i % 10) as u8),
                1 => s.group(format!("g{}", i % 4)),
                _ => s.ttl_ms(3_600_000),
            }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    // and active tasks, which a scheduled browse never shows
    q.enqueue_batch(&vec![TaskSpec::new(b"run".to_vec()); 4])
        .await
        .unwrap();
    let claimed = q.claim(4, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), 4);

    let got = all_pages(&q, TaskState::Scheduled, 7).await;
    assert_eq!(got.len(), 90);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted, "not in (due, enqueue) order");
    let p = q.browse(TaskState::Scheduled, None, 1000).await.unwrap();
    assert_eq!(p.next, None);
    let t = p.tasks.iter().find(|t| t.payload == b"2").unwrap();
    assert!(t.expires_at_ms.is_some());
    let t = p.tasks.iter().find(|t| t.payload == b"1").unwrap();
    assert_eq!(t.group.as_deref(), Some("g1"));
    let t = p.tasks.iter().find(|t| t.payload == b"9").unwrap();
    assert_eq!(t.priority, 9);

    let active = all_pages(&q, TaskState::Active, 3).await;
    let ids: BTreeSet<_> = active.iter().map(|a| a.1.clone()).collect();
    let want: BTreeSet<_> = claimed.iter().map(|t| t.id.as_str().to_owned()).collect();
    assert_eq!(ids, want);

    for (state, limit) in [
        (TaskState::Dead, 10),
        (TaskState::Scheduled, 0),
        (TaskState::Scheduled, 1001),
    ] {
        let e = q.browse(state, None, limit).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    let e = q
        .browse(TaskState::Scheduled, Some("nonsense"), 5)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("after"), "{e}");
}

/// Active tasks come by lease deadline, whatever their due order.
#[tokio::test]
async fn active_tasks_by_lease_deadline() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("lease");
    for lease in [50_000u64, 10_000, 30_000] {
        q.enqueue(TaskSpec::new(lease.to_string().into_bytes()).lease_ms(lease))
            .await
            .unwrap();
    }
    assert_eq!(q.claim(10, None).await.unwrap().tasks.len(), 3);
    let p = q.browse(TaskState::Active, None, 10).await.unwrap();
    let order: Vec<_> = p.tasks.iter().map(|t| t.payload.clone()).collect();
    assert_eq!(
        order,
        [b"10000".to_vec(), b"30000".to_vec(), b"50000".to_vec()]
    );
    assert!(p.tasks.iter().all(|t| t.attempt == 1));
}

/// A cursor whose task left between pages (cancelled, claimed) still continues right after
/// it, also among hundreds of tasks due in the same millisecond (found by halving the ranks
/// of that millisecond, not by reading them).
#[tokio::test]
async fn cursors_survive_tasks_leaving() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("same-ms");
    let e = q
        .enqueue_batch(&vec![TaskSpec::new(b"x".to_vec()).delay_ms(60_000); 300])
        .await
        .unwrap();
    assert!(e.windows(2).all(|w| w[0].due_at_ms == w[1].due_at_ms));
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..40 {
        let p = q
            .browse(TaskState::Scheduled, after.as_deref(), 5)
            .await
            .unwrap();
        seen.extend(p.tasks.iter().map(|t| t.id.clone()));
        after = p.next;
    }
    assert_eq!(seen.len(), 200);
    // the cursor's task goes away: the next page starts right after it anyway
    let cursor_id = seen.last().unwrap().clone();
    q.cancel(&TaskRef::id(cursor_id.as_str()).unwrap())
        .await
        .unwrap();
    let mut pages = 0;
    while let Some(a) = after.clone() {
        let p = q.browse(TaskState::Scheduled, Some(&a), 5).await.unwrap();
        seen.extend(p.tasks.iter().map(|t| t.id.clone()));
        after = p.next;
        pages += 1;
        assert!(pages < 1_000);
    }
    assert_eq!(seen.len(), 300);
    let want: Vec<_> = e.iter().map(|x| x.id.clone()).collect();
    assert_eq!(seen, want, "a task was skipped or repeated");
}

/// Where `due_histogram` must count a task due at `due`, seen at `now`: `None` = due now,
/// `Some(("m", i))` minute i, `("h", i)` hour i (hours from 1: hour 0 is the minutes' sum),
/// `("later", 0)`.
fn bucket(due: u64, now: u64) -> Option<(&'static str, usize)> {
    if due <= now {
        return None;
    }
    let past = due - now - 1;
    Some(if past < 3_600_000 {
        ("m", (past / 60_000) as usize)
    } else if past < 86_400_000 {
        ("h", (past / 3_600_000) as usize)
    } else {
        ("later", 0)
    })
}

/// The histogram `due_histogram` must return for these due times at `now`.
fn expected(dues: &[u64], now: u64) -> DueHistogram {
    // non-exhaustive: built field by field
    let mut want = DueHistogram::default();
    want.now_ms = now;
    want.minutes = vec![0; DueHistogram::MINUTES];
    want.hours = vec![0; DueHistogram::HOURS];
    for &d in dues {
        match bucket(d, now) {
            None => want.due += 1,
            Some(("m", i)) => {
                want.minutes[i] += 1;
                want.hours[0] += 1;
            }
            Some(("h", i)) => want.hours[i] += 1,
            Some(_) => want.later += 1,
        }
    }
    want
}

/// `Queue::due_histogram`: tasks of every priority and group, with and
/// without an expiry, counted in the minute and hour they fall due in by the Redis clock the
/// reply carries; active tasks are not counted; the buckets add up to `stats().scheduled`.
#[tokio::test]
async fn due_histogram_counts_each_minute_and_hour() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("coming");
    let empty = q.due_histogram().await.unwrap();
    assert_eq!(empty, expected(&[], empty.now_ms));

    let t0 = ctx.redis_now_ms();
    // offsets in the middle of their buckets, so they land where meant even if the count is
    // read seconds later; the exact check below uses the reply's own clock anyway
    let offsets: Vec<i64> = vec![
        -5_000,
        -1,
        30_000,
        30_000,
        90_000,
        59 * 60_000 + 30_000,
        60 * 60_000 + 30 * 60_000,
        5 * 3_600_000 + 1_800_000,
        23 * 3_600_000 + 1_800_000,
        48 * 3_600_000,
        40 * 60_000 + 20_000,
        40 * 60_000 + 25_000,
        40 * 60_000 + 29_000,
    ];
    let mut specs = Vec::new();
    let mut dues = Vec::new();
    for (i, off) in offsets.iter().enumerate() {
        let due = t0.checked_add_signed(*off).unwrap();
        let spec = TaskSpec::new(i.to_string().into_bytes()).due_at_ms(due);
        specs.push(match i % 4 {
            0 => spec,
            1 => spec.priority(3),
            2 => spec
                .group(format!("g{}", i % 3))
                .priority(u8::from(i % 8 == 2) * 7),
            _ => spec.priority(9).ttl_ms(7 * 86_400_000),
        });
        // a due time in the past is stored as "now" (by the Redis clock, at the enqueue)
        dues.push(due.max(t0));
    }
    q.enqueue_batch(&specs).await.unwrap();
    // active tasks are not scheduled
    q.enqueue_batch(&vec![TaskSpec::new(b"run".to_vec()).delay_ms(0); 3])
        .await
        .unwrap();
    let claimed = q.claim(10, None).await.unwrap().tasks;
    // the claim takes the three `run` tasks and the two overdue ones
    assert_eq!(claimed.len(), 5, "{claimed:?}");
    let still: Vec<u64> = dues.iter().copied().filter(|d| *d > t0).collect();

    let h = q.due_histogram().await.unwrap();
    assert!(h.now_ms >= t0);
    assert_eq!(h, expected(&still, h.now_ms));
    // spot checks of the mid-bucket placement
    assert_eq!(h.due, 0);
    assert_eq!(h.minutes[0], 2);
    assert_eq!(h.minutes[1], 1);
    assert_eq!(h.minutes[40], 3);
    assert_eq!(h.minutes[59], 1);
    assert_eq!(h.hours[0], 7);
    assert_eq!(h.hours[1], 1);
    assert_eq!(h.hours[5], 1);
    assert_eq!(h.hours[23], 1);
    assert_eq!(h.later, 1);
    assert_eq!(h.scheduled(), q.stats().await.unwrap().scheduled);
    assert_eq!(h.scheduled(), still.len() as u64);

    // overdue tasks count as due; a cancelled one no longer counts
    let late = q
        .enqueue(TaskSpec::new(b"late".to_vec()).group("g1").priority(5))
        .await
        .unwrap();
    let h = q.due_histogram().await.unwrap();
    assert_eq!(h.due, 1);
    q.cancel(&TaskRef::id(late.id.as_str()).unwrap())
        .await
        .unwrap();
    let h = q.due_histogram().await.unwrap();
    assert_eq!(h, expected(&still, h.now_ms));
}

/// Bucket edges, exactly: on a frozen Redis clock, a bucket holds its end and not its start.
#[cfg(debug_assertions)]
#[tokio::test]
async fn due_histogram_bucket_edges() {
    let ctx = Ctx::new().await;
    let now = ctx.redis_now_ms();
    let clock = dueq::FrozenClock::frozen_at(now);
    let client = dueq::Client::builder(&ctx.server.url())
        .frozen_clock(clock)
        .connect()
        .await
        .unwrap();
    let q = client.queue("edges").unwrap();
    let (min, hour, day) = (60_000, 3_600_000, 86_400_000);
    let edges = [
        now,
        now + 1,
        now + min,
        now + min + 1,
        now + hour,
        now + hour + 1,
        now + 2 * hour,
        now + day,
        now + day + 1,
    ];
    let specs: Vec<TaskSpec> = edges
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let s = TaskSpec::new(b"e".to_vec()).due_at_ms(*d);
            if i % 2 == 0 { s } else { s.group("edge") }
        })
        .collect();
    q.enqueue_batch(&specs).await.unwrap();
    let h = q.due_histogram().await.unwrap();
    assert_eq!(h.now_ms, now);
    assert_eq!(h.due, 1);
    assert_eq!(h.minutes[0], 2, "(now, now + 1 min]");
    assert_eq!(h.minutes[1], 1);
    assert_eq!(h.minutes[59], 1, "now + 1 h is the last minute");
    assert_eq!(h.minutes.iter().sum::<u64>(), 4);
    assert_eq!(h.hours[0], 4);
    assert_eq!(h.hours[1], 2, "(now + 1 h, now + 2 h]");
    assert_eq!(h.hours[23], 1, "now + 24 h is the last hour");
    assert_eq!(h.later, 1);
    assert_eq!(h, expected(&edges, now));
}
