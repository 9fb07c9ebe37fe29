//! The dashboard over HTTP (no browser): login when tokens are configured, the CSRF and
//! origin checks of every POST (refused ones change nothing), pause/resume, the dead-letter
//! page's retry and delete, and the task page. The actions (run now, cancel,
//! bulk dead-letter retry and delete, purge, the webhook card, workers of active tasks) are
//! in `dashboard_actions.rs`, a submodule that shares the `Browser` below. The browser test
//! is `tests/browser`.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use dueq_server::Tokens;
use serde_json::json;

use crate::support::{Ctx, Res, enc, send};

// a child module, so that it shares `Browser` and the helpers here (`tests/it/main.rs`
// lists the test files; this keeps the new one beside its siblings without touching it)
#[path = "dashboard_actions.rs"]
mod actions;

const HOST: &str = "dash.test:7878";
const ORIGIN: &str = "http://dash.test:7878";

/// A cookie jar of one: the dashboard session.
struct Browser<'a> {
    c: &'a Ctx,
    cookie: Option<String>,
}

impl<'a> Browser<'a> {
    fn new(c: &'a Ctx) -> Self {
        Self { c, cookie: None }
    }

    fn keep_cookie(&mut self, r: &Res) {
        if let Some(v) = r.headers.get(header::SET_COOKIE) {
            let v = v.to_str().unwrap();
            let pair = v.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            assert_eq!(name, "dueq_session");
            assert!(
                v.contains("HttpOnly") && v.contains("SameSite=Strict") && v.contains("Path=/")
            );
            self.cookie = (!value.is_empty()).then(|| value.to_owned());
        }
    }

    async fn send(&mut self, req: axum::http::request::Builder, body: Body) -> Res {
        let mut req = req.header(header::HOST, HOST);
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, format!("dueq_session={c}"));
        }
        let r = send(&self.c.app, req.body(body).unwrap()).await;
        self.keep_cookie(&r);
        r
    }

    async fn get(&mut self, uri: &str) -> Res {
        self.send(Request::get(uri), Body::empty()).await
    }

    /// A form POST from this origin.
    async fn post(&mut self, uri: &str, form: &str) -> Res {
        self.post_with(uri, form, &[(header::ORIGIN.as_str(), ORIGIN)])
            .await
    }

    async fn post_with(&mut self, uri: &str, form: &str, headers: &[(&str, &str)]) -> Res {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req, Body::from(form.to_owned())).await
    }

    /// The CSRF token the page at `uri` embeds.
    async fn csrf(&mut self, uri: &str) -> String {
        let r = self.get(uri).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        csrf_of(&r.text)
    }

    /// Logs in with `token` (expects success).
    async fn login(&mut self, token: &str) {
        let csrf = self.csrf("/login").await;
        let r = self
            .post("/login", &format!("csrf={csrf}&token={}", enc(token)))
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
        assert_eq!(r.headers[header::LOCATION], "/");
    }
}

fn csrf_of(html: &str) -> String {
    let at = html
        .find(r#"name="csrf" value=""#)
        .expect("page has a csrf field")
        + 19;
    html[at..at + 64].to_owned()
}

async fn paused(c: &Ctx, queue: &str) -> bool {
    c.client.queue(queue).unwrap().stats().await.unwrap().paused
}

#[tokio::test]
async fn login_required_when_tokens_set() {
    let mut c = Ctx::with(|b| b.tokens(Tokens::new(["s3cret"])), None).await;
    c.token = Some("s3cret".into());
    c.enqueue("orders", json!({"payload": 1})).await;
    let mut b = Browser::new(&c);

    for uri in [
        "/",
        "/ui/queues/orders",
        "/ui/queues/orders/dead",
        "/ui/queues/orders/scheduled",
        "/ui/queues/orders/active",
        "/ui/task?queue=orders&value=x",
    ] {
        let r = b.get(uri).await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{uri}: {r:?}");
        assert_eq!(r.headers[header::LOCATION], "/login");
        assert!(!r.text.contains("orders"));
    }
    let r = b
        .send(
            Request::get("/ui/fragments/queues").header("hx-request", "true"),
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers["hx-redirect"], "/login");

    // the API token in a bearer header does not open the dashboard
    let r = b
        .send(
            Request::get("/").header(header::AUTHORIZATION, "Bearer s3cret"),
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);

    let anon = b
        .cookie
        .clone()
        .expect("an anonymous session for the login form");
    let csrf = b.csrf("/login").await;
    for wrong in ["", "s3cre", "s3cret2", "S3CRET"] {
        let r = b
            .post("/login", &format!("csrf={csrf}&token={}", enc(wrong)))
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{wrong:?}: {r:?}");
        assert!(r.text.contains("not one of the server"), "{r:?}");
        assert_eq!(b.get("/").await.status, StatusCode::SEE_OTHER);
    }
    // a valid CSRF token of a session that has not logged in: sent to /login, nothing written
    let r = b
        .post("/ui/queues/orders/pause", &format!("csrf={csrf}"))
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(r.headers[header::LOCATION], "/login");
    assert!(!paused(&c, "orders").await);
    // right token, no CSRF token or wrong origin: refused
    let r = b.post("/login", "token=s3cret").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    let r = b
        .post_with(
            "/login",
            &format!("csrf={csrf}&token=s3cret"),
            &[("origin", "http://evil.test")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{r:?}");
    assert_eq!(b.get("/").await.status, StatusCode::SEE_OTHER);

    b.login("s3cret").await;
    let session = b.cookie.clone().unwrap();
    assert_ne!(session, anon, "login starts a new session id");
    assert!(!session.contains("s3cret"));
    let r = b.get("/").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.text.contains(r#"data-queue="orders""#), "{}", r.text);
    assert!(r.text.contains("Log out"));
    // the anonymous session id no longer works
    let mut old = Browser::new(&c);
    old.cookie = Some(anon);
    assert_eq!(old.get("/").await.status, StatusCode::SEE_OTHER);

    let csrf = csrf_of(&r.text);
    let r = b.post("/logout", &format!("csrf={csrf}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(r.headers[header::LOCATION], "/login");
    assert_eq!(b.cookie, None);
    let mut again = Browser::new(&c);
    again.cookie = Some(session);
    assert_eq!(again.get("/").await.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn posts_need_csrf_and_same_origin() {
    for tokens in [false, true] {
        let mut c = if tokens {
            Ctx::with(|b| b.tokens(Tokens::new(["tok"])), None).await
        } else {
            Ctx::new().await
        };
        c.token = tokens.then(|| "tok".to_owned());
        c.enqueue("q", json!({"payload": 1})).await;
        let mut b = Browser::new(&c);
        if tokens {
            b.login("tok").await;
        }
        let csrf = b.csrf("/").await;
        let other = Browser::new(&c)
            .csrf(if tokens { "/login" } else { "/" })
            .await;
        assert_ne!(csrf, other);

        let refused: [(String, Vec<(&str, &str)>); 6] = [
            (String::new(), vec![("origin", ORIGIN)]),
            ("csrf=".into(), vec![("origin", ORIGIN)]),
            (format!("csrf={other}"), vec![("origin", ORIGIN)]),
            (format!("csrf={csrf}"), vec![]),
            (format!("csrf={csrf}"), vec![("origin", "http://evil.test")]),
            (format!("csrf={csrf}"), vec![("origin", "null")]),
        ];
        for (form, headers) in &refused {
            let r = b.post_with("/ui/queues/q/pause", form, headers).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{form} {headers:?}: {r:?}");
            assert!(r.text.contains("refused"), "{r:?}");
            assert!(!paused(&c, "q").await, "a refused POST changed nothing");
        }
        // no session cookie at all
        let r = Browser::new(&c)
            .post("/ui/queues/q/pause", &format!("csrf={csrf}"))
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN);
        assert!(!paused(&c, "q").await);

        // with the token in the form and a same-origin Referer: paused
        let r = b
            .post_with(
                "/ui/queues/q/pause",
                &format!("csrf={csrf}&back=overview"),
                &[("referer", "http://dash.test:7878/")],
            )
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
        assert_eq!(r.headers[header::LOCATION], "/?done=paused");
        assert!(paused(&c, "q").await);
        let page = b.get("/?done=paused").await.text;
        assert!(page.contains("b-paused") && page.contains("Queue paused"));

        // with the token in the htmx header: resumed
        let r = b
            .post_with(
                "/ui/queues/q/resume",
                "",
                &[("origin", ORIGIN), ("x-csrf-token", &csrf)],
            )
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
        assert_eq!(r.headers[header::LOCATION], "/ui/queues/q?done=resumed");
        assert!(!paused(&c, "q").await);

        // bad input: nothing written, a clear error page
        let r = b
            .post("/ui/queues/bad%20name/pause", &format!("csrf={csrf}"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{r:?}");
        assert!(r.text.contains("error-message"), "{r:?}");
    }
}

/// Claims the one due task of `queue` and nacks it with `error` (`permanent`: to the DLQ).
async fn fail(c: &Ctx, queue: &str, error: &str, permanent: bool) {
    let t = c.claim(queue, 1).await;
    let id = t[0]["id"].as_str().unwrap();
    let r = c
        .post(
            &format!("/v1/queues/{queue}/tasks/{id}/nack"),
            json!({"lease_token": t[0]["lease_token"], "error": error, "permanent": permanent, "retry_in_ms": 60000}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

#[tokio::test]
async fn task_page_shows_state_and_last_error() {
    let c = Ctx::new().await;
    let id = c
        .enqueue(
            "q",
            json!({"payload": {"order": "<script>alert(1)</script>"}, "key": "order:1 & <2>",
                   "priority": 3, "headers": {"x-tenant": "<i>acme</i>"}}),
        )
        .await;
    fail(&c, "q", "boom <b>bold</b> & \"quoted\"", false).await;
    let mut b = Browser::new(&c);

    for query in [
        format!("queue=q&by=id&value={id}"),
        format!("queue=q&by=key&value={}", enc("order:1 & <2>")),
    ] {
        let r = b.get(&format!("/ui/task?{query}")).await;
        assert_eq!(r.status, StatusCode::OK, "{query}: {r:?}");
        let t = &r.text;
        assert!(t.contains(&id));
        assert!(t.contains(r#"id="task-state">scheduled<"#), "{t}");
        assert!(t.contains("1 of 5"));
        assert!(
            t.contains("boom &#60;b&#62;bold&#60;/b&#62; &#38; &#34;quoted&#34;"),
            "{t}"
        );
        assert!(t.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
        assert!(t.contains("order:1 &#38; &#60;2&#62;"));
        assert!(!t.contains("<b>bold") && !t.contains("<script>alert"));
    }
    // a dead task is found by its key too (DESIGN 2.18)
    let r = c
        .patch(&format!("/v1/queues/q/tasks/{id}"), json!({"delay_ms": 0}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    fail(&c, "q", "gave up", true).await;
    let r = b
        .get(&format!(
            "/ui/task?queue=q&by=key&value={}",
            enc("order:1 & <2>")
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.text.contains(r#"id="task-state">dead<"#), "{}", r.text);
    assert!(r.text.contains("2 of 5"), "{}", r.text);
    // its headers, escaped, and its priority
    assert!(
        r.text
            .contains("<td>x-tenant</td><td>&#60;i&#62;acme&#60;/i&#62;</td>"),
        "{}",
        r.text
    );
    assert!(r.text.contains("<dt>Priority</dt><dd>3</dd>"), "{}", r.text);
    for (query, status) in [
        ("queue=q&by=id&value=nosuchid", StatusCode::NOT_FOUND),
        ("queue=q&by=key&value=nokey", StatusCode::NOT_FOUND),
        ("queue=q&by=name&value=x", StatusCode::BAD_REQUEST),
        ("queue=q&by=id&value=", StatusCode::BAD_REQUEST),
        ("queue=bad%20name&by=id&value=x", StatusCode::BAD_REQUEST),
        ("by=id&value=x", StatusCode::BAD_REQUEST),
    ] {
        let r = b.get(&format!("/ui/task?{query}")).await;
        assert_eq!(r.status, status, "{query}: {r:?}");
        assert!(r.text.contains("error-message"), "{query}: {r:?}");
    }
}

#[tokio::test]
async fn dead_letter_page_retries_and_deletes() {
    let c = Ctx::new().await;
    let a = c.enqueue("q", json!({"payload": "first"})).await;
    fail(&c, "q", "gave up", true).await;
    let d = c.enqueue("q", json!({"payload": "second"})).await;
    fail(&c, "q", "gave up too", true).await;
    let mut b = Browser::new(&c);

    let r = b.get("/ui/queues/q/dead").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.text.contains(&format!(r#"data-id="{a}""#)) && r.text.contains("gave up too"));
    assert!(r.text.contains("1–2 of 2"));
    // attempts made of attempts allowed: the queue's default (5) when the task set none
    assert!(r.text.contains(r#"<td class="num">1/5</td>"#), "{}", r.text);
    let csrf = csrf_of(&r.text);

    let r = b.post(&format!("/ui/queues/q/dead/{a}/retry"), "").await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "retry needs the CSRF token"
    );
    let r = b
        .post(
            &format!("/ui/queues/q/dead/{a}/retry"),
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/dead?done=retried"
    );
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{a}")).await.body["state"],
        "scheduled"
    );
    let r = b
        .post(
            &format!("/ui/queues/q/dead/{a}/retry"),
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");

    let r = b
        .post(
            &format!("/ui/queues/q/dead/{d}/delete"),
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(
        c.get(&format!("/v1/queues/q/tasks/{d}")).await.status,
        StatusCode::NOT_FOUND
    );
    let r = b.get("/ui/queues/q/dead?done=deleted").await;
    assert!(r.text.contains("No dead tasks.") && r.text.contains("Dead task deleted."));
    let r = b.get("/ui/queues/q/dead?offset=-1").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn pages_fragments_and_assets() {
    let c = Ctx::new().await;
    c.enqueue("q", json!({"payload": 1})).await;
    fail(&c, "q", "x", false).await;
    let mut b = Browser::new(&c);

    let r = b.get("/ui/queues/q").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(
        r.text.contains(r#"data-count="scheduled">1<"#),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#"data-count="failed">1<"#));
    assert_eq!(r.text.matches("<svg").count(), 2);
    assert!(
        r.text.contains("1 claimed"),
        "the lateness chart counts the claim"
    );
    assert_eq!(r.headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(r.headers[header::X_FRAME_OPTIONS], "DENY");
    assert!(
        r.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    let live = b.get("/ui/queues/q/live").await;
    assert_eq!(live.status, StatusCode::OK);
    assert!(live.text.starts_with(r#"<div id="live""#) && !live.text.contains("<html"));
    let frag = b.get("/ui/fragments/queues").await;
    assert!(frag.text.contains(r#"data-queue="q""#) && !frag.text.contains("<html"));

    let r = b.get("/ui/queues/nosuch").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    assert_eq!(
        b.get("/ui/queues/bad%20name").await.status,
        StatusCode::BAD_REQUEST
    );

    let page = b.get("/").await.text;
    let src = dueq_server::dashboard::HTMX_PATH;
    assert!(page.contains(&format!(r#"<script src="{src}""#)));
    let js = b.get(src).await;
    assert_eq!(js.status, StatusCode::OK);
    assert!(js.text.starts_with("var htmx="));
    assert!(
        js.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert!(
        js.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );

    // not part of the API document
    let doc = c.get("/openapi.json").await.body;
    let paths = doc["paths"].as_object().unwrap();
    assert!(
        paths
            .keys()
            .all(|p| p.starts_with("/v1/") || !p.starts_with("/ui") && p != "/login" && p != "/"),
        "{paths:?}"
    );
}

/// A flood of cookie-less visits (each one a new anonymous session) while a user is on the
/// login form: the user's session survives and the login works; logged-in users stay in.
#[tokio::test]
async fn a_flood_of_new_visitors_does_not_end_other_sessions() {
    let c = Ctx::with(|b| b.tokens(Tokens::new(["tok"])), None).await;
    let mut inside = Browser::new(&c);
    inside.login("tok").await;
    let mut user = Browser::new(&c);
    let csrf = user.csrf("/login").await;
    // more than the session table holds (10 000)
    for _ in 0..10_050 {
        let r = Browser::new(&c).get("/login").await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let r = user.post("/login", &format!("csrf={csrf}&token=tok")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(r.headers[header::LOCATION], "/");
    assert_eq!(user.get("/").await.status, StatusCode::OK);
    assert_eq!(inside.get("/").await.status, StatusCode::OK);
}

/// `/ui/workers` lists live workers (queues linked, tasks in hand) and its fragment is polled;
/// a stopped worker is gone from the next fragment.
#[tokio::test]
async fn workers_page_lists_live_workers() {
    let c = Ctx::new().await;
    let mut b = Browser::new(&c);
    let empty = b.get("/ui/workers").await;
    assert_eq!(empty.status, StatusCode::OK, "{empty:?}");
    assert!(
        empty.text.contains(r#"id="workers-empty""#),
        "{}",
        empty.text
    );
    assert!(empty.text.contains(r#"<a href="/ui/workers">Workers</a>"#));
    let worker = dueq::Worker::builder(c.client.clone())
        .concurrency(3)
        .heartbeat_ms(100)
        .handle("jobs", |_t| async { dueq::Outcome::Success })
        .build()
        .unwrap();
    let id = worker.id().unwrap().to_owned();
    let handle = worker.start();
    dueq_testkit::wait_until_async(crate::support::DEADLINE, "the worker is listed", || async {
        c.client.workers().await.unwrap().len() == 1
    })
    .await;
    let page = b.get("/ui/workers").await.text;
    assert!(page.contains(&format!(r#"data-worker="{id}""#)), "{page}");
    assert!(
        page.contains(r#"<a href="/ui/queues/jobs">jobs</a>"#),
        "{page}"
    );
    assert!(page.contains(r#"<td class="num in-hand">0</td>"#), "{page}");
    let frag = b.get("/ui/fragments/workers").await.text;
    assert!(frag.starts_with(r#"<div id="workers""#) && !frag.contains("<html"));
    assert!(frag.contains(&id));
    handle.shutdown().await.unwrap();
    let frag = b.get("/ui/fragments/workers").await.text;
    assert!(
        !frag.contains(&id) && frag.contains("No live worker."),
        "{frag}"
    );
}

#[tokio::test]
async fn schedules_page_lists_pauses_resumes_and_deletes() {
    let c = Ctx::new().await;
    let r = b_put_schedule(
        &c,
        "q",
        "nightly",
        json!({"cron": "30 2 * * *", "tz": "Europe/Berlin"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let r = b_put_schedule(&c, "q", "every-minute", json!({"every_ms": 60000})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    let mut b = Browser::new(&c);

    let r = b.get("/ui/queues/q").await;
    assert!(
        r.text.contains(r#"href="/ui/queues/q/schedules""#),
        "queue page links to its schedules"
    );
    let r = b.get("/ui/queues/q/schedules").await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(r.text.contains(r#"data-schedule="nightly""#) && r.text.contains("cron 30 2 * * *"));
    assert!(
        r.text.contains("Europe/Berlin") && r.text.contains("every 1.0 min"),
        "{}",
        r.text
    );
    assert!(!r.text.contains(r#"class="paused""#));
    let csrf = csrf_of(&r.text);

    let r = b.post("/ui/queues/q/schedules/nightly/pause", "").await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "pause needs the CSRF token"
    );
    assert!(
        !c.client
            .queue("q")
            .unwrap()
            .schedule("nightly")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    let r = b
        .post(
            "/ui/queues/q/schedules/nightly/pause",
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert_eq!(
        r.headers[header::LOCATION],
        "/ui/queues/q/schedules?done=schedule_paused"
    );
    assert!(
        c.client
            .queue("q")
            .unwrap()
            .schedule("nightly")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    let r = b.get("/ui/queues/q/schedules?done=schedule_paused").await;
    assert!(r.text.contains("Schedule paused") && r.text.contains(r#"class="paused""#));
    assert!(r.text.contains("/ui/queues/q/schedules/nightly/resume"));

    let r = b
        .post(
            "/ui/queues/q/schedules/nightly/resume",
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    let s = c
        .client
        .queue("q")
        .unwrap()
        .schedule("nightly")
        .await
        .unwrap()
        .unwrap();
    assert!(!s.paused && s.next_fire_at_ms.is_some());

    let r = b
        .post(
            "/ui/queues/q/schedules/every-minute/delete",
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{r:?}");
    assert!(
        c.client
            .queue("q")
            .unwrap()
            .schedule("every-minute")
            .await
            .unwrap()
            .is_none()
    );
    let r = b
        .post(
            "/ui/queues/q/schedules/every-minute/delete",
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{r:?}");
    let r = b.get("/ui/queues/q/schedules").await;
    assert!(!r.text.contains(r#"data-schedule="every-minute""#));
    let r = b.get("/ui/queues/other/schedules").await;
    assert!(r.text.contains(r#"id="schedules-empty""#));
}

async fn b_put_schedule(c: &Ctx, queue: &str, name: &str, body: serde_json::Value) -> Res {
    c.call(
        Method::PUT,
        &format!("/v1/queues/{queue}/schedules/{name}"),
        Some(body),
    )
    .await
}
