//! The dashboard's actions over HTTP, each effect checked through the
//! library: run now and cancel (after a confirmation page) on a scheduled task, bulk retry and
//! delete of dead tasks by filter (a dry run's count first, then what was counted, resumable
//! by cursor), purge per state (count, confirm, continue), the webhook card, the worker
//! holding an active task and the workers' language. Every new POST route refuses a form
//! without the CSRF token or from another origin, and nothing changes. A submodule of
//! `dashboard.rs` (its `Browser` keeps the session cookie); the browser test is
//! `tests/browser`.

use std::collections::HashMap;

use axum::http::{StatusCode, header};
use dueq::{
    DeadBulk, DeadFilter, Queue, SettingsPatch, TaskRef, TaskSpec, TaskState, WebhookConfig,
};
use dueq_testkit::wait_until;
use serde_json::json;

use super::{Browser, ORIGIN, csrf_of};
use crate::support::{Ctx, DEADLINE, Res, enc};

fn redis_now_ms(c: &Ctx) -> u64 {
    let mut conn = c.server.conn();
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    s * 1_000 + us / 1_000
}

/// How the dashboard shows an epoch time.
fn shown(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap())
        .unwrap()
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// Askama's escapes back to text.
fn unescape(s: &str) -> String {
    s.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
}

/// The confirmation form of a page: its `action` and its fields as a form body (the CSRF
/// token and `confirm=yes` included), as the browser would send them.
fn confirm_form(html: &str) -> (String, String) {
    let start = html
        .find(r#"<div class="card confirm">"#)
        .expect("a confirmation page");
    let html = &html[start..];
    let form = &html[..html.find("</form>").expect("a confirm form")];
    let attr = |tag: &str, name: &str| -> Option<String> {
        let at = tag.find(&format!(r#"{name}=""#))? + name.len() + 2;
        Some(unescape(&tag[at..at + tag[at..].find('"')?]))
    };
    let action = attr(form, "action").unwrap();
    let body: Vec<String> = form
        .split("<input ")
        .skip(1)
        .map(|tag| {
            format!(
                "{}={}",
                attr(tag, "name").unwrap(),
                enc(&attr(tag, "value").unwrap())
            )
        })
        .collect();
    (action, body.join("&"))
}

/// The `href` of the link with `id`, unescaped.
fn href_of_id(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!(r#"id="{id}""#))?;
    let start = html[..at].rfind("<a ")?;
    let tag = &html[start..at];
    let h = tag.find(r#"href=""#)? + 6;
    Some(unescape(&tag[h..h + tag[h..].find('"')?]))
}

/// The text of the element with `id` (up to its first `<`), unescaped.
fn text_of(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!(r#"id="{id}""#))?;
    let rest = &html[at..];
    let rest = &rest[rest.find('>')? + 1..];
    Some(unescape(&rest[..rest.find('<')?]))
}

/// Sends every spec of `dead` (all due now) to the dead-letter queue of `q` with its error;
/// returns the ids in the order given. `q` must have no other due task.
async fn kill_all(q: &Queue, dead: Vec<(TaskSpec, &str)>) -> Vec<String> {
    let specs: Vec<TaskSpec> = dead.iter().map(|(s, _)| s.clone()).collect();
    let ids: Vec<String> = q
        .enqueue_batch(&specs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id.as_str().to_owned())
        .collect();
    let errors: HashMap<&str, &str> = ids
        .iter()
        .map(String::as_str)
        .zip(dead.iter().map(|(_, e)| *e))
        .collect();
    let claimed = q.claim(ids.len(), None).await.unwrap().tasks;
    assert_eq!(claimed.len(), ids.len(), "every task claimed");
    let items: Vec<_> = claimed
        .iter()
        .map(|t| {
            let error = errors
                .get(t.id.as_str())
                .expect("the queue had another due task");
            (&t.id, &t.lease_token, *error, None, true)
        })
        .collect();
    q.nack_batch(&items).await.unwrap();
    ids
}

async fn state(q: &Queue, id: &str) -> Option<TaskState> {
    q.get(&TaskRef::id(id).unwrap())
        .await
        .unwrap()
        .map(|t| t.state)
}

/// Posts the confirmation page's form back, as its button does.
async fn confirm(b: &mut Browser<'_>, page: &Res) -> Res {
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
    let (action, body) = confirm_form(&page.text);
    assert!(body.contains("confirm=yes"), "{body}");
    b.post(&action, &body).await
}

#[tokio::test]
async fn run_now_and_cancel_a_scheduled_task() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let hour = 3_600_000;
    let e = q
        .enqueue_batch(&[
            TaskSpec::new(b"a".to_vec()).delay_ms(hour),
            TaskSpec::new(b"b".to_vec()).delay_ms(hour + 1),
            TaskSpec::new(b"c".to_vec())
                .delay_ms(hour + 2)
                .key("order:<7>&cancel"),
        ])
        .await
        .unwrap();
    let (a, bb, cc) = (
        e[0].id.as_str().to_owned(),
        e[1].id.as_str().to_owned(),
        e[2].id.as_str().to_owned(),
    );
    let mut b = Browser::new(&c);

    // the scheduled list has both buttons on every row
    let r = b.get("/ui/queues/q/scheduled").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    for id in [&a, &bb, &cc] {
        assert!(
            r.text
                .contains(&format!(r#"action="/ui/queues/q/tasks/{id}/run-now""#)),
            "{}",
            r.text
        );
        assert!(
            r.text
                .contains(&format!(r#"action="/ui/queues/q/tasks/{id}/cancel""#))
        );
    }
    let csrf = csrf_of(&r.text);

    // run now from the list: due now by the Redis clock, back to the list with a notice
    let before = redis_now_ms(&c);
    let r = b
        .post(
            &format!("/ui/queues/q/tasks/{a}/run-now"),
            &format!("csrf={csrf}&back=scheduled"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/scheduled?done=run_now"
    );
    let t = q
        .get(&TaskRef::id(a.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.state, TaskState::Scheduled);
    assert!(
        (before..=redis_now_ms(&c)).contains(&t.due_at_ms),
        "due now: {} not in [{before}, now]",
        t.due_at_ms
    );
    assert_eq!(t.attempt, 0);
    assert_eq!(q.stats().await.unwrap().due, 1);
    let page = b.get("/ui/queues/q/scheduled?done=run_now").await.text;
    assert!(page.contains("Task due now"), "{page}");
    // a button on a later page comes back to that page
    let r = b
        .post(
            &format!("/ui/queues/q/tasks/{a}/run-now"),
            &format!("csrf={csrf}&back=scheduled&after={}", enc("12:x y")),
        )
        .await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/scheduled?after=12%3Ax%20y&done=run_now"
    );

    // run now from the task page: back to it, with the notice
    let r = b.get(&format!("/ui/task?queue=q&by=id&value={bb}")).await;
    assert!(r.text.contains(r#"id="run-now""#) && r.text.contains(r#"id="cancel""#));
    let r = b
        .post(
            &format!("/ui/queues/q/tasks/{bb}/run-now"),
            &format!("csrf={csrf}&back=task"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    let to = r.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert_eq!(
        to,
        format!("/ui/task?queue=q&by=id&value={bb}&done=run_now")
    );
    assert!(b.get(&to).await.text.contains("Task due now"));
    assert_eq!(q.stats().await.unwrap().due, 2);

    // cancel: the first POST only asks (what the task is), nothing changes
    let r = b
        .post(
            &format!("/ui/queues/q/tasks/{cc}/cancel"),
            &format!("csrf={csrf}&back=task"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(
        r.text.contains(&format!("Cancel task {cc} of q?")),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("order:&#60;7&#62;&#38;cancel") && !r.text.contains("order:<7>"),
        "the key, escaped: {}",
        r.text
    );
    assert!(r.text.contains(&shown(e[2].due_at_ms)), "{}", r.text);
    assert_eq!(
        href_of_id(&r.text, "back").as_deref(),
        Some(format!("/ui/task?queue=q&by=id&value={cc}").as_str()),
        "keep it: back to the task"
    );
    assert_eq!(state(&q, &cc).await, Some(TaskState::Scheduled));
    // the confirmed POST cancels it and goes to the scheduled list
    let r = confirm(&mut b, &r).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/scheduled?done=cancelled"
    );
    assert_eq!(state(&q, &cc).await, None);
    let st = q.stats().await.unwrap();
    assert_eq!((st.scheduled, st.cancelled_total), (2, 1));
    assert!(
        b.get("/ui/queues/q/scheduled?done=cancelled")
            .await
            .text
            .contains("Task cancelled")
    );
    // gone: both steps say so
    for form in [format!("csrf={csrf}"), format!("csrf={csrf}&confirm=yes")] {
        let r = b
            .post(&format!("/ui/queues/q/tasks/{cc}/cancel"), &form)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{form}: {r:?}");
        let r = b
            .post(&format!("/ui/queues/q/tasks/{cc}/run-now"), &form)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{form}: {r:?}");
    }

    // a task a worker holds is left alone: 409 for both, still active
    let claimed = q.claim(1, None).await.unwrap().tasks;
    let held = claimed[0].id.as_str().to_owned();
    for path in ["run-now", "cancel"] {
        for form in [format!("csrf={csrf}"), format!("csrf={csrf}&confirm=yes")] {
            let r = b
                .post(&format!("/ui/queues/q/tasks/{held}/{path}"), &form)
                .await;
            assert_eq!(r.status, StatusCode::CONFLICT, "{path} {form}: {r:?}");
            assert!(r.text.contains("is running"), "{r:?}");
        }
    }
    assert_eq!(state(&q, &held).await, Some(TaskState::Active));
    let r = b
        .post(
            "/ui/queues/q/tasks/not%20an%20id/run-now",
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
}

#[tokio::test]
async fn new_action_routes_refuse_a_form_without_csrf_or_from_elsewhere() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let later = q
        .enqueue(TaskSpec::new(b"later".to_vec()).delay_ms(3_600_000))
        .await
        .unwrap();
    kill_all(&q, vec![(TaskSpec::new(b"d".to_vec()), "boom")]).await;
    let mut b = Browser::new(&c);
    let csrf = b.csrf("/ui/queues/q").await;
    let id = later.id.as_str();
    let posts = [
        (format!("/ui/queues/q/tasks/{id}/run-now"), String::new()),
        (
            format!("/ui/queues/q/tasks/{id}/cancel"),
            "confirm=yes".into(),
        ),
        (
            "/ui/queues/q/dead/bulk".into(),
            "action=delete&confirm=yes".into(),
        ),
        (
            "/ui/queues/q/purge".into(),
            "state=scheduled&confirm=yes".into(),
        ),
        ("/ui/queues/q/purge".into(), "state=dead&confirm=yes".into()),
    ];
    // a token that differs from the real one in its first character
    let wrong = format!(
        "{}{}",
        if csrf.starts_with('0') { '1' } else { '0' },
        &csrf[1..]
    );
    for (uri, form) in &posts {
        for (body, origin) in [
            (form.clone(), ORIGIN),
            (format!("{form}&csrf={wrong}"), ORIGIN),
            (format!("{form}&csrf={csrf}"), "http://evil.test"),
        ] {
            let r = b.post_with(uri, &body, &[("origin", origin)]).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{uri} {body} {origin}: {r:?}"
            );
            assert!(r.text.contains("refused"), "{r:?}");
        }
    }
    let t = q.get(&TaskRef::id(id).unwrap()).await.unwrap().unwrap();
    assert_eq!(t.due_at_ms, later.due_at_ms, "not run now");
    let st = q.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.dead),
        (1, 1),
        "nothing cancelled, purged or deleted"
    );
}

#[tokio::test]
async fn bulk_retry_counts_first_then_retries_what_was_counted() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let ids = kill_all(
        &q,
        vec![
            (
                TaskSpec::new(b"1".to_vec()).key("order:1"),
                "payment <timeout> & gave up",
            ),
            (
                TaskSpec::new(b"2".to_vec()).key("order:2"),
                "payment <timeout> & gave up",
            ),
            (
                TaskSpec::new(b"3".to_vec()).key("order:3").group("eu"),
                "payment <timeout> & gave up",
            ),
            (TaskSpec::new(b"4".to_vec()).key("order:4"), "stock gone"),
            (
                TaskSpec::new(b"5".to_vec()).key("mail:5"),
                "payment <timeout> & gave up",
            ),
            (TaskSpec::new(b"6".to_vec()), "payment <timeout> & gave up"),
        ],
    )
    .await;
    let mut b = Browser::new(&c);
    let r = b.get("/ui/queues/q/dead").await;
    assert!(
        r.text.contains(r#"<form class="card" id="bulk""#),
        "{}",
        r.text
    );
    let csrf = csrf_of(&r.text);
    let filter = format!(
        "csrf={csrf}&action=retry&error_contains={}&key_prefix=order%3A&group=&died_after=&died_before=&limit=&spread=",
        enc("payment <timeout>")
    );

    // the dry run: the count, nothing retried
    let preview = b.post("/ui/queues/q/dead/bulk", &filter).await;
    assert_eq!(preview.status, StatusCode::OK, "{preview:?}");
    assert_eq!(
        text_of(&preview.text, "confirm-count").as_deref(),
        Some("3 tasks match"),
        "{}",
        preview.text
    );
    assert!(preview.text.contains("Retry 3 tasks"), "{}", preview.text);
    assert!(
        preview
            .text
            .contains("last error contains &#34;payment &#60;timeout&#62;&#34;"),
        "escaped: {}",
        preview.text
    );
    assert_eq!(q.stats().await.unwrap().dead, 6);
    for id in &ids {
        assert_eq!(state(&q, id).await, Some(TaskState::Dead));
    }
    // the run acts on what was counted: a matching task that dies after the count stays dead
    let (_, body) = confirm_form(&preview.text);
    let pinned: u64 = body
        .split('&')
        .find_map(|kv| kv.strip_prefix("died_before="))
        .expect("died before is pinned")
        .parse()
        .unwrap();
    wait_until(DEADLINE, "the Redis clock passes the count", || {
        redis_now_ms(&c) > pinned
    });
    let late = kill_all(
        &q,
        vec![(
            TaskSpec::new(b"7".to_vec()).key("order:7"),
            "payment <timeout> & gave up",
        )],
    )
    .await;
    let r = confirm(&mut b, &preview).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    let to = r.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert_eq!(to, "/ui/queues/q/dead?done=bulk_retried&n=3&refused=0");
    for (i, id) in ids.iter().enumerate() {
        let t = q
            .get(&TaskRef::id(id.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap();
        if i < 3 {
            assert_eq!((t.state, t.attempt), (TaskState::Scheduled, 0), "{i}");
            assert!(t.due_at_ms <= redis_now_ms(&c), "due now");
        } else {
            assert_eq!(t.state, TaskState::Dead, "{i}");
        }
    }
    assert_eq!(state(&q, &late[0]).await, Some(TaskState::Dead));
    assert_eq!(q.stats().await.unwrap().dead, 4);
    let page = b.get(&to).await.text;
    assert!(
        page.contains("Retried 3 tasks from the dead-letter queue."),
        "{page}"
    );

    // a spread over 1 h and a limit of 1: one task, due within the hour
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!("csrf={csrf}&action=retry&error_contains=payment&limit=1&spread=1h"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("3 tasks match")
    );
    assert!(
        r.text.contains("Retry 1 task<") && r.text.contains("1.0 h"),
        "{}",
        r.text
    );
    let start = redis_now_ms(&c);
    let r = confirm(&mut b, &r).await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/dead?done=bulk_retried&n=1&refused=0"
    );
    let st = q.stats().await.unwrap();
    assert_eq!(st.dead, 3);
    let browse = q
        .browse(TaskState::Scheduled, None, 100)
        .await
        .unwrap()
        .tasks;
    let spread: Vec<_> = browse
        .iter()
        .filter(|t| !ids[..3].contains(&t.id.as_str().to_owned()))
        .collect();
    assert_eq!(spread.len(), 1);
    assert!(
        (start..=start + 3_600_000 + 1_000).contains(&spread[0].due_at_ms),
        "due within the spread: {}",
        spread[0].due_at_ms
    );

    // no match: the count says so and there is no button
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!("csrf={csrf}&action=retry&error_contains=nothing%20like%20it"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("No dead task matches.")
    );
    assert!(!r.text.contains(r#"id="confirm""#));

    // a retry refused because its key is live again: counted, left dead, said so (on another
    // queue: the tasks retried above are due on this one)
    let q2 = c.client.queue("q2").unwrap();
    let dup = kill_all(&q2, vec![(TaskSpec::new(b"d".to_vec()).key("dup:1"), "x")]).await;
    q2.enqueue(
        TaskSpec::new(b"live".to_vec())
            .key("dup:1")
            .delay_ms(60_000),
    )
    .await
    .unwrap();
    let r = b
        .post(
            "/ui/queues/q2/dead/bulk",
            &format!("csrf={csrf}&action=retry&key_prefix=dup%3A"),
        )
        .await;
    let r = confirm(&mut b, &r).await;
    let to = r.headers[header::LOCATION].to_str().unwrap().to_owned();
    assert_eq!(to, "/ui/queues/q2/dead?done=bulk_retried&n=0&refused=1");
    assert_eq!(state(&q2, &dup[0]).await, Some(TaskState::Dead));
    assert!(b.get(&to).await.text.contains("1 task left dead"));
}

#[tokio::test]
async fn bulk_delete_by_death_time_group_and_limit_and_bad_input() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let first = kill_all(
        &q,
        vec![
            (TaskSpec::new(b"1".to_vec()).group("eu"), "e"),
            (TaskSpec::new(b"2".to_vec()).group("us"), "e"),
        ],
    )
    .await;
    let t0 = redis_now_ms(&c);
    wait_until(DEADLINE, "a later millisecond", || redis_now_ms(&c) > t0);
    let second = kill_all(
        &q,
        vec![
            (TaskSpec::new(b"3".to_vec()).group("eu"), "e"),
            (TaskSpec::new(b"4".to_vec()).group("eu"), "e"),
            (TaskSpec::new(b"5".to_vec()).group("us"), "e"),
        ],
    )
    .await;
    let mut b = Browser::new(&c);
    let csrf = b.csrf("/ui/queues/q/dead").await;

    // bad input: 400 naming the field, nothing deleted
    for (form, says) in [
        ("action=delete&limit=abc", "at most"),
        ("action=delete&limit=0", "at most"),
        ("action=delete&died_after=yesterday", "died after"),
        (
            "action=delete&died_before=2026-13-01%2000%3A00",
            "died before",
        ),
        ("action=retry&spread=30x", "spread"),
        ("action=retry&spread=31d", "spread"),
        (
            "action=delete&died_after=2000&died_before=1000",
            "died_after",
        ),
        ("action=retry&group=GROUP300", "group"),
        ("action=burn", "retry"),
        ("", "retry"),
    ] {
        let form = form.replace("GROUP300", &"g".repeat(300));
        for confirm in ["", "&confirm=yes"] {
            let r = b
                .post(
                    "/ui/queues/q/dead/bulk",
                    &format!("csrf={csrf}&{form}{confirm}"),
                )
                .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "{form}: {:?}",
                text_of(&r.text, "confirm-count")
            );
            assert!(
                text_of(&r.text, "error-message").unwrap().contains(says),
                "{form}: {}",
                r.text
            );
        }
    }
    assert_eq!(q.stats().await.unwrap().dead, 5);

    // died after t0 (in epoch ms: the text form has whole seconds), group eu, at most 1 of
    // the 2 that match: exactly one of tasks 3 and 4 goes
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!(
                "csrf={csrf}&action=delete&died_after={}&group=eu&limit=1",
                t0 + 1
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("2 tasks match")
    );
    assert!(r.text.contains("Delete 1 task<"), "{}", r.text);
    assert!(
        r.text
            .contains(&format!("died at or after {}", shown(t0 + 1)))
    );
    let r = confirm(&mut b, &r).await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/dead?done=bulk_deleted&n=1&refused=0"
    );
    let gone = [&second[0], &second[1]];
    let mut left = 0;
    for id in gone {
        if state(&q, id).await.is_some() {
            left += 1;
        }
    }
    assert_eq!(left, 1, "one of the two eu tasks deleted");
    for id in first.iter().chain([&second[2]]) {
        assert_eq!(state(&q, id).await, Some(TaskState::Dead), "{id}");
    }

    // died before a time written as the dashboard shows times (UTC text), and a spread,
    // which a delete ignores: the 4 left go
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!(
                "csrf={csrf}&action=delete&died_before={}&spread=10m",
                enc("2999-01-01 00:00:00 UTC")
            ),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("4 tasks match")
    );
    assert!(
        r.text.contains("died before 2999-01-01 00:00:00 UTC"),
        "{}",
        r.text
    );
    let r = confirm(&mut b, &r).await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/dead?done=bulk_deleted&n=4&refused=0"
    );
    assert_eq!(q.stats().await.unwrap().dead, 0);
    assert!(q.dead_list(0, 10).await.unwrap().tasks.is_empty());
}

/// With `budget_ms=0` each request does one bounded library call: the run stops with
/// "continue", the cursor and the counts so far, and the limit holds over the whole run.
#[tokio::test]
async fn bulk_run_continues_from_its_cursor() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let mut all = Vec::new();
    for _ in 0..2 {
        let specs: Vec<_> = (0..500)
            .map(|i| (TaskSpec::new(format!("{i}").into_bytes()), "flaky upstream"))
            .collect();
        all.extend(kill_all(&q, specs).await);
    }
    // 1 000 dead tasks: a dry run looks at 1 000 a call, a retry at 200
    let mut b = Browser::new(&c);
    let csrf = b.csrf("/ui/queues/q/dead").await;
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!("csrf={csrf}&action=retry&error_contains=flaky&limit=450"),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("1000 tasks match"),
        "{}",
        r.text
    );
    // the run, one bounded library call per request
    let (action, body) = confirm_form(&r.text);
    let mut page = b.post(&action, &format!("{body}&budget_ms=0")).await;
    let mut steps = Vec::new();
    let location = loop {
        if page.status == StatusCode::SEE_OTHER {
            break page.headers[header::LOCATION].to_str().unwrap().to_owned();
        }
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        assert!(page.text.contains("not done yet"), "{}", page.text);
        let count = text_of(&page.text, "confirm-count").unwrap();
        steps.push(count);
        assert!(confirm_form(&page.text).1.contains("cursor="));
        assert!(steps.len() < 10, "{steps:?}");
        page = confirm(&mut b, &page).await;
    };
    assert_eq!(
        steps,
        [
            "200 tasks retried so far, 0 refused",
            "400 tasks retried so far, 0 refused"
        ]
    );
    assert_eq!(
        location,
        "/ui/queues/q/dead?done=bulk_retried&n=450&refused=0"
    );
    let st = q.stats().await.unwrap();
    assert_eq!((st.dead, st.scheduled), (550, 450));
    // the rest are still dead and match: the library's own count agrees
    let dry = DeadBulk::new(DeadFilter::new().error_contains("flaky")).dry_run(true);
    let r = q
        .dead_retry_where(&dry, None, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!((r.matched, r.cursor), (550, None));

    // a dry run that cannot finish in its budget says "at least"
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!("csrf={csrf}&action=delete&budget_ms=0"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("550 tasks match")
    );
    // (the retried ones are due: out of the way of the claim that kills more)
    q.purge(dueq::Purge::Scheduled, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let more = kill_all(
        &q,
        (0..600)
            .map(|_| (TaskSpec::new(b"x".to_vec()), "again"))
            .collect(),
    )
    .await;
    assert_eq!(more.len(), 600);
    let r = b
        .post(
            "/ui/queues/q/dead/bulk",
            &format!("csrf={csrf}&action=delete&budget_ms=0"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("At least 1000 tasks match"),
        "{}",
        r.text
    );
    assert!(r.text.contains("Delete the matching tasks"), "{}", r.text);
}

#[tokio::test]
async fn purge_counts_confirms_and_continues() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let mut patch = SettingsPatch::default();
    patch.succeeded_max = Some(Some(100));
    q.update_settings(&patch).await.unwrap();
    // 2 succeeded (kept), 1 dead, 1 active, 2 500 scheduled
    for _ in 0..2 {
        q.enqueue(TaskSpec::new(b"ok".to_vec())).await.unwrap();
    }
    for t in q.claim(2, None).await.unwrap().tasks {
        q.ack(&t.id, &t.lease_token).await.unwrap();
    }
    kill_all(&q, vec![(TaskSpec::new(b"d".to_vec()), "dead")]).await;
    let running = q.enqueue(TaskSpec::new(b"run".to_vec())).await.unwrap();
    assert_eq!(q.claim(1, None).await.unwrap().tasks.len(), 1);
    for chunk in 0..3 {
        let n = if chunk < 2 { 1_000 } else { 500 };
        let specs: Vec<_> = (0..n)
            .map(|_| TaskSpec::new(b"s".to_vec()).delay_ms(3_600_000))
            .collect();
        q.enqueue_batch(&specs).await.unwrap();
    }
    let st = q.stats().await.unwrap();
    assert_eq!(
        (st.scheduled, st.dead, st.succeeded_kept, st.active),
        (2_500, 1, 2, 1)
    );

    let mut b = Browser::new(&c);
    let r = b.get("/ui/queues/q").await;
    for s in ["scheduled", "dead", "succeeded"] {
        assert!(
            r.text.contains(&format!(r#"name="state" value="{s}""#)),
            "{}",
            r.text
        );
    }
    let csrf = csrf_of(&r.text);

    // dead: the count, then the purge, back to the queue page with the count
    let r = b
        .post("/ui/queues/q/purge", &format!("csrf={csrf}&state=dead"))
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("1 dead task")
    );
    assert_eq!(q.stats().await.unwrap().dead, 1, "asking changes nothing");
    let r = confirm(&mut b, &r).await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q?done=purged_dead&n=1"
    );
    assert!(
        b.get("/ui/queues/q?done=purged_dead&n=1")
            .await
            .text
            .contains("Purged the dead-letter queue: 1 task deleted.")
    );
    // succeeded
    let r = b
        .post(
            "/ui/queues/q/purge",
            &format!("csrf={csrf}&state=succeeded"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("2 succeeded tasks")
    );
    let r = confirm(&mut b, &r).await;
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q?done=purged_succeeded&n=2"
    );
    // scheduled, one Redis call (1 000) per request: continue twice, the running task stays
    let r = b
        .post(
            "/ui/queues/q/purge",
            &format!("csrf={csrf}&state=scheduled&budget_ms=0"),
        )
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("2500 scheduled tasks")
    );
    let mut page = confirm(&mut b, &r).await;
    let mut steps = Vec::new();
    while page.status == StatusCode::OK {
        steps.push(text_of(&page.text, "confirm-count").unwrap());
        assert!(steps.len() < 10);
        page = confirm(&mut b, &page).await;
    }
    assert_eq!(
        steps,
        [
            "1000 tasks dropped so far, 1500 left",
            "2000 tasks dropped so far, 500 left"
        ]
    );
    assert_eq!(
        page.headers[header::LOCATION],
        "/ui/queues/q?done=purged_scheduled&n=2500"
    );
    let st = q.stats().await.unwrap();
    assert_eq!(
        (
            st.scheduled,
            st.dead,
            st.succeeded_kept,
            st.active,
            st.cancelled_total
        ),
        (0, 0, 0, 1, 2_500)
    );
    assert_eq!(
        state(&q, running.id.as_str()).await,
        Some(TaskState::Active)
    );

    // nothing left: no button; bad state and unknown queue refused
    let r = b
        .post("/ui/queues/q/purge", &format!("csrf={csrf}&state=dead"))
        .await;
    assert_eq!(
        text_of(&r.text, "confirm-count").as_deref(),
        Some("No dead tasks: nothing to purge.")
    );
    assert!(!r.text.contains(r#"id="confirm""#));
    let r = b
        .post("/ui/queues/q/purge", &format!("csrf={csrf}&state=active"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
    let r = b
        .post(
            "/ui/queues/nosuch/purge",
            &format!("csrf={csrf}&state=dead&confirm=yes"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    assert!(!c.client.has_queue("nosuch").await.unwrap());
}

#[tokio::test]
async fn queue_page_shows_the_webhook_and_its_last_delivery_error() {
    let c = Ctx::new().await;
    let q = c.client.queue("hooked").unwrap();
    c.enqueue("plain", json!({"payload": 1})).await;
    let mut b = Browser::new(&c);
    let r = b.get("/ui/queues/plain").await;
    assert!(r.text.contains(r#"id="webhook-none""#), "{}", r.text);

    q.set_webhook(
        WebhookConfig::new("https://alice:s3cret@hooks.example.com/dueq?x=<1>").timeout_ms(2_500),
    )
    .await
    .unwrap();
    q.enqueue(TaskSpec::new(b"1".to_vec()).delay_ms(60_000))
        .await
        .unwrap();
    let r = b.get("/ui/queues/hooked").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let url = text_of(&r.text, "webhook-url").unwrap();
    assert!(
        url.starts_with("https://alice:***@hooks.example.com/dueq"),
        "{url}"
    );
    assert!(!r.text.contains("s3cret"), "the password is never shown");
    assert!(r.text.contains("each within 2.5 s"), "{}", r.text);
    assert!(r.text.contains("none since it was set"), "{}", r.text);

    // failed deliveries: the last one's error, escaped
    q.note_webhook_error("webhook answered HTTP 500 Internal Server Error: old")
        .await
        .unwrap();
    q.note_webhook_error("webhook answered HTTP 503 Service Unavailable: <h1>down</h1>")
        .await
        .unwrap();
    let r = b.get("/ui/queues/hooked").await;
    let card = &r.text[r.text.find(r#"id="webhook""#).unwrap()..];
    let card = &card[..card.find("<h2>").unwrap()];
    assert!(
        card.contains("503 Service Unavailable: &#60;h1&#62;down&#60;/h1&#62;"),
        "{card}"
    );
    assert!(
        !card.contains("<h1>down") && !card.contains(": old"),
        "{card}"
    );
    // setting the webhook again starts afresh
    q.set_webhook(WebhookConfig::new("https://hooks.example.com/v2"))
        .await
        .unwrap();
    let r = b.get("/ui/queues/hooked").await;
    assert!(r.text.contains("none since it was set"), "{}", r.text);
}

#[tokio::test]
async fn active_tasks_name_their_worker_and_the_workers_their_language() {
    let c = Ctx::new().await;
    let r = c
        .call(
            axum::http::Method::PUT,
            "/v1/workers/py-worker:1",
            Some(json!({"queues": ["busy"], "concurrency": 4, "in_hand": 1, "language": "python", "host": "box"})),
        )
        .await;
    assert!(r.status.is_success(), "{r:?}");
    let q = c.client.queue("busy").unwrap();
    let a = q
        .enqueue(TaskSpec::new(b"a".to_vec()).key("k<a>"))
        .await
        .unwrap();
    let r = c
        .post(
            "/v1/queues/busy/claim",
            json!({"max": 1, "worker_id": "py-worker:1"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    // one claimed without a worker id
    let other = q.enqueue(TaskSpec::new(b"b".to_vec())).await.unwrap();
    assert_eq!(q.claim(1, None).await.unwrap().tasks[0].id, other.id);
    let t = q
        .get(&TaskRef::id(a.id.as_str()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.worker.as_deref(), Some("py-worker:1"));
    let claimed_at = t.claimed_at_ms.unwrap();

    let mut b = Browser::new(&c);
    let r = b.get("/ui/queues/busy/active").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    let row = |id: &str| {
        let at = r.text.find(&format!(r#"<tr data-id="{id}">"#)).unwrap();
        let row = &r.text[at..];
        row[..row.find("</tr>").unwrap()].to_owned()
    };
    let ra = row(a.id.as_str());
    assert!(
        ra.contains(r#"<a href="/ui/workers#worker-py-worker%3A1">py-worker:1</a>"#),
        "{ra}"
    );
    assert!(
        ra.contains(&format!(
            r#"<td class="claimed" title="{}">"#,
            shown(claimed_at)
        )),
        "{ra}"
    );
    let rb = row(other.id.as_str());
    assert!(rb.contains("its claimer gave no worker id"), "{rb}");

    let r = b
        .get(&format!("/ui/task?queue=busy&by=id&value={}", a.id))
        .await;
    assert!(
        r.text
            .contains(r#"<a href="/ui/workers#worker-py-worker%3A1">py-worker:1</a>"#),
        "{}",
        r.text
    );
    assert_eq!(
        text_of(&r.text, "task-claimed").as_deref(),
        Some(format!("{} ", shown(claimed_at)).as_str())
    );
    assert!(
        !r.text.contains(r#"id="run-now""#),
        "no run now on an active task"
    );

    // the workers page: the row the link points at, with its language
    let worker = dueq::Worker::builder(c.client.clone())
        .heartbeat_ms(100)
        .handle("busy", |_t| async { dueq::Outcome::Success })
        .build()
        .unwrap();
    let handle = worker.start();
    dueq_testkit::wait_until_async(DEADLINE, "both workers listed", || async {
        c.client.workers().await.unwrap().len() == 2
    })
    .await;
    let page = b.get("/ui/workers").await.text;
    let wrow = &page[page
        .find(r#"id="worker-py-worker:1""#)
        .expect("the linked row")..];
    let wrow = &wrow[..wrow.find("</tr>").unwrap()];
    assert!(
        wrow.contains(r#"<td class="language">python</td>"#),
        "{wrow}"
    );
    assert!(page.contains(r#"<td class="language">rust</td>"#), "{page}");
    assert!(page.contains("<th>Language</th>"));
    handle.shutdown().await.unwrap();
}
