//! Task headers (DESIGN 1): set at enqueue, returned by get, claim, browse and the dead-letter
//! list, kept across retries, replaced with the payload on a replace or debounce, refused
//! over their limits with nothing written; and whether a run continues the producer's trace.

use dueq::{Headers, OnConflict, Queue, TaskRef, TaskSpec, TaskState};

use crate::support::Ctx;

const TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().copied().collect()
}

async fn claim_all(q: &Queue) -> Vec<dueq::ClaimedTask> {
    q.claim(100, None).await.unwrap().tasks
}

#[tokio::test]
async fn headers_travel_with_the_task_through_every_read() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    let h = headers(&[("traceparent", TP), ("X-Tenant", "acme"), ("e", "")]);
    q.enqueue(
        TaskSpec::new(b"p".to_vec())
            .key("order:42")
            .headers(h.clone())
            .priority(4)
            .delay_ms(60_000),
    )
    .await
    .unwrap();
    // names are kept lower-case
    assert_eq!(h.get("x-tenant"), Some("acme"));
    let t = q
        .get(&TaskRef::key("order:42").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((t.headers.clone(), t.priority), (h.clone(), 4));
    assert_eq!(t.payload, b"p");
    let page = q.browse(TaskState::Scheduled, None, 10).await.unwrap();
    assert_eq!(page.tasks[0].headers, h);
    // a task without headers reads as none beside it, and is not harmed by them
    q.enqueue(TaskSpec::new(b"plain".to_vec()).priority(9))
        .await
        .unwrap();
    let c = claim_all(&q).await;
    assert_eq!(c.len(), 1);
    assert!(c[0].headers.is_empty());
    assert_eq!(c[0].payload, b"plain");

    // due now: the priority read from the extension orders the claim
    q.reschedule(&TaskRef::key("order:42").unwrap(), dueq::Due::DelayMs(0))
        .await
        .unwrap();
    q.enqueue(
        TaskSpec::new(b"later".to_vec())
            .priority(5)
            .header("n", "1"),
    )
    .await
    .unwrap();
    let c = claim_all(&q).await;
    let keys: Vec<_> = c.iter().map(|t| t.payload.clone()).collect();
    assert_eq!(
        keys,
        vec![b"p".to_vec(), b"later".to_vec()],
        "priority 4, then 5"
    );
    assert_eq!(c[0].headers, h);
    assert_eq!(c[1].headers, headers(&[("n", "1")]));

    // kept across a retry and into the dead-letter queue
    let first = &c[0];
    q.nack(&first.id, &first.lease_token, "boom", Some(0), false)
        .await
        .unwrap();
    let again = claim_all(&q).await;
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].attempt, again[0].headers.clone()), (2, h.clone()));
    q.nack(&again[0].id, &again[0].lease_token, "dead", None, true)
        .await
        .unwrap();
    let dead = q.dead_list(0, 10).await.unwrap();
    assert_eq!(dead.tasks[0].task.headers, h);
    let got = q
        .get(&TaskRef::key("order:42").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((got.state, got.headers), (TaskState::Dead, h.clone()));
    // and back out of it
    q.dead_retry(std::slice::from_ref(&got.id)).await.unwrap();
    let c = claim_all(&q).await;
    assert_eq!(c[0].headers, h);
}

#[tokio::test]
async fn a_replace_or_debounce_replaces_the_headers_with_the_payload() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    let spec = |payload: &str, h: &[(&str, &str)]| {
        TaskSpec::new(payload.as_bytes().to_vec())
            .key("k")
            .delay_ms(60_000)
            .headers(headers(h))
    };
    q.enqueue(spec("one", &[("a", "1"), ("b", "2")]))
        .await
        .unwrap();
    // keep: nothing changes
    q.enqueue(spec("two", &[("c", "3")])).await.unwrap();
    let get = || async { q.get(&TaskRef::key("k").unwrap()).await.unwrap().unwrap() };
    assert_eq!(get().await.headers, headers(&[("a", "1"), ("b", "2")]));
    q.enqueue(spec("three", &[("c", "3")]).on_conflict(OnConflict::Replace))
        .await
        .unwrap();
    let t = get().await;
    assert_eq!(
        (t.payload, t.headers),
        (b"three".to_vec(), headers(&[("c", "3")]))
    );
    // a replace without headers drops them
    q.enqueue(spec("four", &[]).on_conflict(OnConflict::Replace))
        .await
        .unwrap();
    assert!(get().await.headers.is_empty());
    q.enqueue(
        spec("five", &[("d", "4")])
            .on_conflict(OnConflict::Debounce)
            .debounce_max_ms(120_000),
    )
    .await
    .unwrap();
    let t = get().await;
    assert_eq!(
        (t.payload, t.headers),
        (b"five".to_vec(), headers(&[("d", "4")]))
    );
}

#[tokio::test]
async fn headers_over_a_limit_are_refused_and_nothing_is_written() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    let many: Headers = (0..33).map(|i| (format!("h{i}"), "v")).collect();
    let big: Headers = (0..5)
        .map(|i| (format!("h{i}"), "x".repeat(1000)))
        .collect();
    let cases = [
        TaskSpec::new(Vec::new()).headers(many),
        TaskSpec::new(Vec::new()).headers(big),
        TaskSpec::new(Vec::new()).header("bad name", "v"),
        TaskSpec::new(Vec::new()).header("n", "tab\t"),
        TaskSpec::new(Vec::new()).header("n", "x".repeat(1025)),
    ];
    for spec in cases {
        let e = q.enqueue(spec.clone()).await.unwrap_err();
        assert_eq!(e.kind(), dueq::ErrorKind::InvalidInput);
        assert!(e.to_string().starts_with("headers:"), "{e}");
        // a batch is refused whole
        let e = q
            .enqueue_batch(&[TaskSpec::new(Vec::new()), spec])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("headers:"), "{e}");
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut ctx.raw()).unwrap();
    assert!(keys.iter().all(|k| !k.contains("orders")), "{keys:?}");
}

#[tokio::test]
async fn only_a_first_run_of_a_task_due_at_once_continues_the_trace() {
    let ctx = Ctx::new().await;
    let q = ctx.queue("orders");
    q.enqueue(TaskSpec::new(b"now".to_vec()).header("traceparent", TP))
        .await
        .unwrap();
    q.enqueue(
        TaskSpec::new(b"later".to_vec())
            .header("traceparent", TP)
            .delay_ms(1),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + crate::support::DEADLINE;
    while got.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "both due: {got:?}");
        got.extend(claim_all(&q).await);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    got.sort_by_key(|t| t.id.clone());
    assert!(got[0].continues_trace, "due at once, first attempt");
    assert!(!got[1].continues_trace, "delayed");
    q.nack(&got[0].id, &got[0].lease_token, "again", Some(0), false)
        .await
        .unwrap();
    let again = claim_all(&q).await;
    assert_eq!(again.len(), 1);
    assert!(!again[0].continues_trace, "a retry");
}
