//! Cross-origin writes to `/v1` are refused with 403 `forbidden_origin` and write nothing, with
//! or without tokens; same-origin and header-less (curl, SDK) requests pass, and reads are
//! never refused. A server on a loopback address answers only to loopback host names (a
//! DNS-rebinding guard), reads included.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use dueq_server::Tokens;
use serde_json::json;

use crate::support::{Ctx, Live, Res, assert_error, raw_http, send};

const HOST: &str = "127.0.0.1:7878";

/// Sends `method uri` with `Host: 127.0.0.1:7878`, these extra headers, the context's token
/// and, when `body` is given, a JSON body.
async fn call(
    c: &Ctx,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Res {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(t) = &c.token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(b) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(serde_json::to_vec(&b).unwrap())
        }
        None => Body::empty(),
    };
    send(&c.app, req.body(body).unwrap()).await
}

async fn paused(c: &Ctx, queue: &str) -> bool {
    c.client.queue(queue).unwrap().stats().await.unwrap().paused
}

#[tokio::test]
async fn cross_origin_writes_are_refused_and_write_nothing() {
    let c = Ctx::new().await;
    let evil = [("origin", "http://evil.example")];
    let other_port = [("origin", "http://127.0.0.1:3000")];
    let null = [("origin", "null")];
    let cross_site = [("sec-fetch-site", "cross-site")];
    for headers in [&evil[..], &other_port, &null, &cross_site] {
        // the body-less "simple" request a page can send without a preflight
        let r = call(&c, Method::POST, "/v1/queues/q/pause", headers, None).await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(
            &c,
            Method::POST,
            "/v1/queues/q/tasks",
            headers,
            Some(json!({"payload": 1, "key": "k"})),
        )
        .await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(&c, Method::DELETE, "/v1/queues/q/keys/k", headers, None).await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        let r = call(
            &c,
            Method::PATCH,
            "/v1/queues/q/keys/k",
            headers,
            Some(json!({"delay_ms": 1})),
        )
        .await;
        assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
        // reads are not refused
        let r = call(&c, Method::GET, "/v1/queues", headers, None).await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
    }
    assert!(!paused(&c, "q").await);
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());

    // same origin (the dashboard, a page served by this host) and no Origin at all (curl)
    let same = [
        ("origin", "http://127.0.0.1:7878"),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = call(&c, Method::POST, "/v1/queues/q/pause", &same, None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(paused(&c, "q").await);
    let r = call(&c, Method::POST, "/v1/queues/q/resume", &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(!paused(&c, "q").await);
    let r = call(
        &c,
        Method::POST,
        "/v1/queues/q/tasks",
        &[],
        Some(json!({"payload": 1})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
}

#[tokio::test]
async fn the_check_applies_with_tokens_too() {
    let mut c = Ctx::with(|b| b.tokens(Tokens::new(["tok"])), None).await;
    c.token = Some("tok".into());
    let r = call(
        &c,
        Method::POST,
        "/v1/queues/q/pause",
        &[("origin", "https://evil.example")],
        None,
    )
    .await;
    assert_error(&r, StatusCode::FORBIDDEN, "forbidden_origin");
    assert!(c.all_keys().is_empty(), "{:?}", c.all_keys());
    let r = call(&c, Method::POST, "/v1/queues/q/pause", &[], None).await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
    assert!(paused(&c, "q").await);
}

/// `method path` with this `Host` (and an `Origin` naming the same host) on a fresh
/// connection to `addr`.
async fn with_host(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    host: &str,
) -> (u16, String) {
    raw_http(
        addr,
        &format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_server_answers_only_to_loopback_host_names() {
    let c = Ctx::new().await;
    let mut live = Live::start(&c.state).await;
    let port = live.addr.port();
    // a rebound name: same-origin for the browser, but not a loopback name
    for host in [format!("evil.example:{port}"), "evil.example".to_owned()] {
        for (method, path) in [
            ("GET", "/v1/queues"),
            ("GET", "/"),
            ("GET", "/healthz"),
            ("GET", "/nosuch"),
            ("POST", "/v1/queues/q/pause"),
        ] {
            let (status, text) = with_host(live.addr, method, path, &host).await;
            assert_eq!(status, 403, "{method} {path} Host {host}: {text}");
            assert!(text.contains(r#""code":"forbidden_host""#), "{text}");
        }
    }
    // nothing written but the server's own heartbeat (the live workers list)
    let written: Vec<String> = c
        .all_keys()
        .into_iter()
        .filter(|k| k != dueq::protocol::keys::WORKERS_KEY)
        .collect();
    assert!(written.is_empty(), "{written:?}");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
    ] {
        for path in ["/v1/queues", "/", "/healthz"] {
            let (status, text) = with_host(live.addr, "GET", path, &host).await;
            assert_eq!(status, 200, "GET {path} Host {host}: {text}");
        }
    }
    let (status, text) = with_host(
        live.addr,
        "POST",
        "/v1/queues/q/pause",
        &format!("localhost:{port}"),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(paused(&c, "q").await);
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_another_address_does_not_check_the_host() {
    let c = Ctx::new().await;
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dueq_server::serve(listener, c.state.clone(), async {
        let _ = stopped.await;
    }));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (status, text) =
        with_host(addr, "GET", "/v1/queues", &format!("dueq.example:{port}")).await;
    assert_eq!(status, 200, "{text}");
    stop.send(()).unwrap();
    tokio::time::timeout(crate::support::DEADLINE, server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
