//! The request time limit covers the dashboard as well as `/v1` (a stalled form POST gets
//! 408 instead of holding a connection and a handler), and `serve` returns after its
//! shutdown signal even while clients hold connections open.

use std::time::{Duration, Instant};

use dueq_server::Tokens;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{Ctx, Live, raw_http, read_response};

const LIMIT_MS: u64 = 300;

/// Opens a connection and sends `head` and the start of a body that never completes.
async fn stalled(live: &Live, head: &str) -> TcpStream {
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_dashboard_post_gets_408_within_the_limit() {
    let c = Ctx::with(
        |b| b.request_timeout_ms(LIMIT_MS).tokens(Tokens::new(["tok"])),
        None,
    )
    .await;
    let mut live = Live::start(&c.state).await;
    let host = format!("127.0.0.1:{}", live.addr.port());
    let (status, page) = raw_http(
        live.addr,
        &format!("GET /login HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let cookie = page
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|v| v.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {page}"))
        .to_owned();

    // the form's body announces 1000 bytes and sends 5
    let post = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nCookie: {cookie}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ncsrf="
        )
    };
    for path in ["/login", "/ui/queues/q/pause"] {
        let started = Instant::now();
        let mut s = stalled(&live, &post(path)).await;
        let (status, text) = read_response(&mut s).await;
        assert_eq!(status, 408, "{path}: {text}");
        assert!(
            started.elapsed() >= Duration::from_millis(LIMIT_MS),
            "{path}: 408 before the limit"
        );
    }

    // one more stalled POST held open across the shutdown: serve still returns
    let _held = stalled(&live, &post("/login")).await;
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_while_clients_hold_connections() {
    let c = Ctx::with(|b| b.request_timeout_ms(LIMIT_MS), None).await;
    let mut live = Live::start(&c.state).await;
    let host = format!("127.0.0.1:{}", live.addr.port());
    // a request head that never ends, a /v1 body that never ends, a dashboard form likewise
    let _head = stalled(
        &live,
        &format!("GET /v1/queues HTTP/1.1\r\nHost: {host}\r\n"),
    )
    .await;
    let _api = stalled(
        &live,
        &format!(
            "POST /v1/queues/q/tasks HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{\"payload\""
        ),
    )
    .await;
    let _form = stalled(
        &live,
        &format!("POST /login HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\ncsrf="),
    )
    .await;
    // the connections are accepted and being served
    let (status, _) = raw_http(
        live.addr,
        &format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert_eq!(status, 200);
    live.shutdown().await;
}
