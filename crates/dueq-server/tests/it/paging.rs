//! Lists whose cost must not grow with the number of queues or schedules: `/readyz`
//! reads no queue, `GET /v1/queues` and `GET /v1/queues/{queue}/schedules` are paged by name
//! and read only the page's entries, and so are the dashboard's overview and schedules page.
//! Costs are counted in Redis commands (`INFO commandstats`), not in wall-clock time.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Ctx, Res, assert_error};

/// Calls of the commands whose name starts with `prefix` Redis has run so far (commands run
/// inside scripts included), `INFO` itself left out.
fn calls(c: &Ctx, prefix: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c.server.conn())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with(prefix) && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Commands Redis has run so far.
fn commands(c: &Ctx) -> u64 {
    calls(c, "cmdstat_")
}

/// Function calls (`FCALL`, `FCALL_RO`): one per library call that runs a script.
fn fcalls(c: &Ctx) -> u64 {
    calls(c, "cmdstat_fcall")
}

/// The commands one request cost, and its answer.
async fn cost(c: &Ctx, uri: &str) -> (u64, Res) {
    let before = commands(c);
    let r = c.get(uri).await;
    (commands(c) - before, r)
}

/// Queues `q000`, `q001`, ... with one future task each (through the library, at once).
async fn queues(c: &Ctx, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("q{i:04}")).collect();
    for chunk in names.chunks(500) {
        futures_util::future::try_join_all(chunk.iter().map(|name| async {
            let q = c.client.queue(name)?;
            q.enqueue(dueq::TaskSpec::new("1").delay_ms(3_600_000))
                .await
        }))
        .await
        .unwrap();
    }
    names
}

fn names_of(r: &Res, field: &str, name: &str) -> Vec<String> {
    r.body[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field}: {r:?}"))
        .iter()
        .map(|q| q[name].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reads_no_queue() {
    let c = Ctx::new().await;
    assert_eq!(c.get("/readyz").await.status, StatusCode::OK);
    let (empty, r) = cost(&c, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.body.get("queues_behind").is_none(), "{r:?}");
    queues(&c, 2_000).await;
    let (full, r) = cost(&c, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(
        full, empty,
        "/readyz ran {full} commands with 2 000 queues, {empty} with none"
    );
    assert!(empty <= 10, "{empty} commands for a readiness check");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_are_paged_by_name() {
    let c = Ctx::new().await;
    let all = queues(&c, 250).await;
    // what reading one queue's stats costs
    let (one, r) = cost(&c, "/v1/queues/q0000").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut uri = "/v1/queues?limit=100".to_owned();
    loop {
        let (spent, r) = cost(&c, &uri).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body["total"], 250, "{r:?}");
        let page = names_of(&r, "queues", "queue");
        assert!(
            spent <= 2 + one * page.len() as u64,
            "a page of {} cost {spent} commands (one queue: {one})",
            page.len()
        );
        assert!(r.body["queues"][0].get("scheduled").is_some(), "{r:?}");
        sizes.push(page.len());
        seen.extend(page);
        match &r.body["next"] {
            Value::Null => break,
            Value::String(n) => {
                assert_eq!(seen.last(), Some(n), "next is the page's last name");
                uri = format!("/v1/queues?limit=100&after={n}");
            }
            other => panic!("next: {other:?}"),
        }
    }
    assert_eq!(sizes, [100, 100, 50]);
    assert_eq!(seen, all, "every queue once, sorted by name");

    // the default page is 100; a page of one reads one queue
    let r = c.get("/v1/queues").await;
    assert_eq!(r.body["queues"].as_array().unwrap().len(), 100);
    assert_eq!(r.body["next"], "q0099");
    let (spent, r) = cost(&c, "/v1/queues?limit=1&after=q0100").await;
    assert_eq!(names_of(&r, "queues", "queue"), ["q0101"]);
    assert!(spent <= 2 + one, "{spent} commands for one queue");
    // a cursor past the end: an empty last page
    let r = c.get("/v1/queues?after=zzz").await;
    assert_eq!(r.body, json!({"queues": [], "total": 250, "next": null}));
}

#[tokio::test]
async fn bad_paging_values_are_400_naming_the_field() {
    let c = Ctx::new().await;
    for (q, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("after=a%7Bb", "after"),
        ("after=a:b", "after"),
        ("page=2", "page"),
    ] {
        for path in ["/v1/queues", "/v1/queues/q/schedules"] {
            let r = c.get(&format!("{path}?{q}")).await;
            assert_error(&r, StatusCode::BAD_REQUEST, "invalid_input");
            let msg = r.body["error"]["message"].as_str().unwrap();
            assert!(msg.contains(field), "{path}?{q}: {msg}");
        }
    }
    assert_eq!(
        c.get("/v1/queues?limit=1000&after=").await.body,
        json!({"queues": [], "total": 0, "next": null})
    );
    assert_eq!(
        c.get("/v1/queues/q/schedules").await.body,
        json!({"schedules": [], "total": 0, "next": null})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_paged_by_name() {
    let c = Ctx::new().await;
    let all: Vec<String> = (0..250).map(|i| format!("s{i:03}")).collect();
    // created out of name order
    for name in all.iter().rev() {
        let r = c
            .call(
                axum::http::Method::PUT,
                &format!("/v1/queues/q/schedules/{name}"),
                Some(json!({"every_ms": 3_600_000, "payload": {"n": name}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    }
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut uri = "/v1/queues/q/schedules?limit=100".to_owned();
    loop {
        let r = c.get(&uri).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        assert_eq!(r.body["total"], 250, "{r:?}");
        let page = names_of(&r, "schedules", "name");
        assert_eq!(r.body["schedules"][0]["payload"]["n"], page[0].as_str());
        sizes.push(page.len());
        seen.extend(page);
        match &r.body["next"] {
            Value::Null => break,
            Value::String(n) => uri = format!("/v1/queues/q/schedules?limit=100&after={n}"),
            other => panic!("next: {other:?}"),
        }
    }
    assert_eq!(sizes, [100, 100, 50]);
    assert_eq!(seen, all);
    // only the page's schedules are read, one call each: 99 more for 100 than for 1
    let before = fcalls(&c);
    let r = c.get("/v1/queues/q/schedules?limit=1").await;
    let small = fcalls(&c) - before;
    assert_eq!(names_of(&r, "schedules", "name"), ["s000"]);
    assert_eq!(r.body["next"], "s000");
    let before = fcalls(&c);
    c.get("/v1/queues/q/schedules?limit=100").await;
    let large = fcalls(&c) - before;
    assert_eq!(large - small, 99, "1: {small} calls, 100: {large}");
}

/// The overview shows one page of queues with a total and a next link that works, and its
/// live fragment polls the same page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_overview_is_paged() {
    let c = Ctx::new().await;
    queues(&c, 250).await;
    let rows = |r: &Res| r.text.matches("<tr data-queue=").count();

    let (spent, r) = cost(&c, "/").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(rows(&r), 100);
    assert!(r.text.contains("of 250 queues"), "{}", r.text);
    assert!(r.text.contains(r#"data-queue="q0099""#));
    assert!(!r.text.contains(r#"data-queue="q0100""#));
    assert!(!r.text.contains(r#"id="first-page""#));
    assert!(
        r.text.contains(r#"href="/?after=q0099" id="next-page""#),
        "{}",
        r.text
    );
    let (one, _) = cost(&c, "/v1/queues/q0000").await;
    assert!(spent <= 2 + 100 * one, "the overview cost {spent} commands");

    let r = c.get("/?after=q0099").await;
    assert_eq!(rows(&r), 100);
    assert!(r.text.contains(r#"data-queue="q0100""#));
    assert!(r.text.contains(r#"id="first-page""#));
    assert!(
        r.text
            .contains(r#"hx-get="/ui/fragments/queues?after=q0099""#)
    );
    assert!(r.text.contains(r#"href="/?after=q0199" id="next-page""#));
    // the pause form brings the browser back to this page
    assert!(
        r.text
            .contains(r#"<input type="hidden" name="after" value="q0099">"#),
        "{}",
        r.text
    );
    let r = c.get("/ui/fragments/queues?after=q0199").await;
    assert_eq!(rows(&r), 50);
    assert!(r.text.contains(r#"data-queue="q0249""#));
    assert!(!r.text.contains(r#"id="next-page""#));

    let r = c.get("/?after=%7B").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
}

/// The dashboard's schedules page shows one page with a next link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_schedules_are_paged() {
    let c = Ctx::new().await;
    let q = c.client.queue("q").unwrap();
    let specs: Vec<_> = (0..150)
        .map(|i| dueq::ScheduleSpec::new(format!("s{i:03}"), "1").every_ms(3_600_000))
        .collect();
    futures_util::future::try_join_all(specs.iter().map(|s| q.set_schedule(s)))
        .await
        .unwrap();
    let rows = |r: &Res| r.text.matches("<tr data-schedule=").count();
    let r = c.get("/ui/queues/q/schedules").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert_eq!(rows(&r), 100);
    assert!(r.text.contains("of 150 schedules"), "{}", r.text);
    assert!(
        r.text
            .contains(r#"href="/ui/queues/q/schedules?after=s099" id="next-page""#),
        "{}",
        r.text
    );
    let r = c.get("/ui/queues/q/schedules?after=s099").await;
    assert_eq!(rows(&r), 50);
    assert!(r.text.contains(r#"data-schedule="s100""#));
    assert!(!r.text.contains(r#"id="next-page""#));
}
