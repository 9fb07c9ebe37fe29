//! The dashboard's live task pages: `/ui/queues/{queue}/scheduled` with
//! the charts of what falls due in the next hour and day, `/ui/queues/{queue}/active`; their
//! rows, the escaping of what users wrote (keys, groups, payloads), and paging by cursor.

use axum::http::StatusCode;
use dueq::TaskSpec;

use crate::support::Ctx;

/// The ids of the rows of a tasks page, in page order.
fn row_ids(html: &str) -> Vec<String> {
    html.match_indices(r#"<tr data-id=""#)
        .map(|(at, m)| {
            let rest = &html[at + m.len()..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect()
}

/// The `href` of the element with `id`, unescaped (`&amp;` back to `&`).
fn href_of(html: &str, id: &str) -> Option<String> {
    let tag_at = html.find(&format!(r#"id="{id}""#))?;
    let start = html[..tag_at].rfind("<a ")?;
    let tag = &html[start..tag_at];
    let h = tag.find(r#"href=""#)? + 6;
    let end = tag[h..].find('"')? + h;
    Some(tag[h..end].replace("&amp;", "&"))
}

fn redis_now_ms(c: &Ctx) -> u64 {
    let mut conn = c.server.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    s * 1_000 + us / 1_000
}

#[tokio::test]
async fn scheduled_page_shows_what_is_coming_escaped() {
    let c = Ctx::new().await;
    let q = c.client.queue("coming").unwrap();
    let now = redis_now_ms(&c);
    let specs = vec![
        // due in 20.5 min, with markup in its key, group and payload
        TaskSpec::new(br#"{"note": "<b>bold</b> & \"quoted\""}"#.to_vec())
            .due_at_ms(now + 20 * 60_000 + 30_000)
            .key("order:<script>alert(1)</script>")
            .group("tenant\"&'<i>")
            .priority(4),
        // due in 5.5 min, two in 3 h
        TaskSpec::new(b"first".to_vec()).due_at_ms(now + 5 * 60_000 + 30_000),
        TaskSpec::new(b"later-a".to_vec()).due_at_ms(now + 3 * 3_600_000 + 1_800_000),
        TaskSpec::new(b"later-b".to_vec())
            .due_at_ms(now + 3 * 3_600_000 + 1_900_000)
            .priority(9),
    ];
    let e = q.enqueue_batch(&specs).await.unwrap();

    let r = c.get("/ui/queues/coming/scheduled").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let html = &r.text;
    // the rows, in due order, each linking to its task page
    let ids: Vec<String> = [1, 0, 2, 3]
        .iter()
        .map(|&i| e[i].id.as_str().to_owned())
        .collect();
    assert_eq!(row_ids(html), ids);
    assert!(html.contains(&format!(
        r#"href="/ui/task?queue=coming&amp;by=id&amp;value={}""#,
        ids[0]
    )));
    // what users wrote is escaped, never markup
    assert!(!html.contains("<script>alert(1)</script>"), "{html}");
    assert!(
        html.contains("order:&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{html}"
    );
    assert!(!html.contains("<i>") && !html.contains("<b>bold"));
    assert!(html.contains("tenant&#34;&#38;&#39;&#60;i&#62;"), "{html}");
    assert!(html.contains("&#60;b&#62;bold&#60;/b&#62; &#38;"), "{html}");
    assert!(
        html.contains(r#"<td class="num attempt">0/5</td>"#),
        "{html}"
    );
    assert!(html.contains(r#"<td class="num">9</td>"#));

    // the charts: minute 5 and 20 of the next hour, hour 3 of the day
    let coming = &html[html.find(r#"id="coming""#).expect("the charts")..];
    assert!(coming.contains("Falling due per minute, next hour"));
    assert!(coming.contains("2 in the next hour; 0 due now"), "{coming}");
    assert!(coming.contains("4 in the next 24 h; 0 later"), "{coming}");
    assert_eq!(coming.matches(r#"<rect class="c-sched""#).count(), 4);
    for bucket in ["in 5–6 min (", "in 20–21 min (", "in 0–1 h (", "in 3–4 h ("] {
        assert!(coming.contains(bucket), "{bucket}: {coming}");
    }
    assert!(
        coming.contains("): 2 falling due"),
        "hour 0 and hour 3 hold two"
    );

    // an empty queue: empty charts and no rows
    let r = c.get("/ui/queues/nothing/scheduled").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"id="tasks-empty""#) && r.text.contains("No scheduled tasks."));
    assert_eq!(r.text.matches("nothing falls due in this time").count(), 2);

    // the queue page links to both pages
    let r = c.get("/ui/queues/coming").await;
    assert!(r.text.contains(r#"href="/ui/queues/coming/scheduled""#));
    assert!(r.text.contains(r#"href="/ui/queues/coming/active""#));
}

#[tokio::test]
async fn scheduled_pages_follow_the_cursor() {
    let c = Ctx::new().await;
    let q = c.client.queue("many").unwrap();
    let now = redis_now_ms(&c);
    let specs: Vec<TaskSpec> = (0..120u64)
        .map(|i| {
            let s = TaskSpec::new(i.to_string().into_bytes()).due_at_ms(now + 60_000 + i * 7 % 50);
            if i % 5 == 0 { s.group("g") } else { s }
        })
        .collect();
    let e = q.enqueue_batch(&specs).await.unwrap();
    let mut want: Vec<(u64, String)> = e
        .iter()
        .map(|x| (x.due_at_ms, x.id.as_str().to_owned()))
        .collect();
    want.sort();

    let mut seen = Vec::new();
    let mut uri = "/ui/queues/many/scheduled".to_owned();
    let mut pages = 0;
    loop {
        let r = c.get(&uri).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {r:?}");
        let ids = row_ids(&r.text);
        assert!(ids.len() <= 50);
        assert_eq!(
            href_of(&r.text, "first-page").is_some(),
            pages > 0,
            "a later page links to the first"
        );
        seen.extend(ids);
        pages += 1;
        match href_of(&r.text, "next-page") {
            Some(next) => uri = next,
            None => break,
        }
        assert!(pages < 10);
    }
    assert_eq!(pages, 3);
    let want_ids: Vec<String> = want.into_iter().map(|w| w.1).collect();
    assert_eq!(seen, want_ids, "every task once, in due order");

    let r = c.get("/ui/queues/many/scheduled?after=not-a-cursor").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    assert!(r.text.contains("after"), "{}", r.text);
}

#[tokio::test]
async fn active_page_by_lease_deadline() {
    let c = Ctx::new().await;
    let q = c.client.queue("busy").unwrap();
    for (lease, key) in [(50_000u64, "long"), (10_000, "short<&>"), (30_000, "mid")] {
        q.enqueue(TaskSpec::new(b"x".to_vec()).lease_ms(lease).key(key))
            .await
            .unwrap();
    }
    q.enqueue(TaskSpec::new(b"waiting".to_vec()).delay_ms(3_600_000))
        .await
        .unwrap();
    let claimed = q.claim(10, None).await.unwrap().tasks;
    assert_eq!(claimed.len(), 3);
    let by_key = |k: &str| {
        claimed
            .iter()
            .find(|t| t.key.as_deref() == Some(k))
            .unwrap()
            .id
            .as_str()
            .to_owned()
    };

    let r = c.get("/ui/queues/busy/active").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        row_ids(&r.text),
        [by_key("short<&>"), by_key("mid"), by_key("long")]
    );
    assert!(r.text.contains(r#"<table id="tasks" data-state="active">"#));
    assert!(r.text.contains("short&#60;&#38;&#62;") && !r.text.contains("short<&>"));
    assert!(
        r.text.contains(r#"<td class="num attempt">1/5</td>"#),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#"<td class="lease" title=""#));
    assert!(
        !r.text.contains(r#"id="coming""#),
        "no charts on the active page"
    );

    // the scheduled page shows only the waiting one
    let r = c.get("/ui/queues/busy/scheduled").await;
    assert_eq!(row_ids(&r.text).len(), 1);
}
