//! Browsing live tasks page by page (issue 9, item 5): scheduled ones in one due order over
//! every priority and group, active ones by lease deadline, cursors that survive tasks
//! leaving between pages.

use std::collections::BTreeSet;

use dueq::{ErrorKind, Queue, TaskRef, TaskSpec, TaskState};

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
