//! Connection limits of `serve`: a client that dribbles its request head is closed
//! at the header-read timeout, an idle keep-alive connection at the idle timeout (and not at
//! the shorter header-read one), a busy request is cut by neither, and past the connection
//! cap a new connection waits (in the listen backlog) until an open one closes.
//!
//! Timing is asserted as lower bounds (closed no earlier than the limit) and as "closed at
//! all" within a deadline far below what an unbounded connection would take; no assert needs
//! a fast machine.

use std::time::{Duration, Instant};

use dueq_server::HttpOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Ctx, DEADLINE, Live, read_response};

fn head(live: &Live, path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        live.addr.port()
    )
}

/// Reads until the server closes the connection (EOF or reset); the bytes it sent. Panics
/// past `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .expect("the server kept the connection open");
    got
}

async fn serve_with(http: HttpOptions) -> (Ctx, Live) {
    let c = Ctx::with(|b| b.http(http), None).await;
    let live = Live::start(&c.state).await;
    (c, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_header_client_is_closed_at_the_header_read_timeout() {
    let (_c, mut live) = serve_with(
        HttpOptions::default()
            .header_read_timeout_ms(1_000)
            .idle_timeout_ms(60_000),
    )
    .await;
    let s = TcpStream::connect(live.addr).await.unwrap();
    let started = Instant::now();
    let (mut rd, mut wr) = s.into_split();
    // one byte of a valid head every 2 s, until the server hangs up
    let dribble = tokio::spawn(async move {
        for b in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" {
            if wr.write_all(&[*b]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = rd.read(&mut buf).await {
            got.extend_from_slice(&buf[..n]);
        }
    };
    // the whole head would take 80 s
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("the slow client's connection stayed open");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1_000),
        "closed after {took:?}"
    );
    assert!(
        got.is_empty(),
        "answered: {:?}",
        String::from_utf8_lossy(&got)
    );
    dribble.abort();
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout() {
    // the header-read timeout is shorter: it must not apply between requests
    let (_c, mut live) = serve_with(
        HttpOptions::default()
            .header_read_timeout_ms(300)
            .idle_timeout_ms(1_500),
    )
    .await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    for _ in 0..2 {
        s.write_all(head(&live, "/healthz").as_bytes())
            .await
            .unwrap();
        let (status, _) = read_response(&mut s).await;
        assert_eq!(status, 200);
    }
    let idle_from = Instant::now();
    let got = closed_within(&mut s, DEADLINE).await;
    let idle = idle_from.elapsed();
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        idle >= Duration::from_millis(1_500),
        "closed after {idle:?} idle: before the idle timeout"
    );
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_request_head_has_the_header_read_timeout_from_its_first_byte() {
    let (_c, mut live) = serve_with(
        HttpOptions::default()
            .header_read_timeout_ms(1_000)
            .idle_timeout_ms(60_000),
    )
    .await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(head(&live, "/healthz").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
    // the start of a second head, never finished
    s.write_all(b"GET /hea").await.unwrap();
    let started = Instant::now();
    // far below the 60 s idle timeout
    let got = closed_within(&mut s, DEADLINE).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(started.elapsed() >= Duration::from_millis(1_000));
    live.shutdown().await;
}

/// A long-poll claim outlives both timeouts: a connection busy with a request is bounded by
/// the request time limit only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_request_is_not_cut_by_the_connection_timeouts() {
    let (_c, mut live) = serve_with(
        HttpOptions::default()
            .header_read_timeout_ms(200)
            .idle_timeout_ms(200),
    )
    .await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    let body = r#"{"max": 1, "wait_ms": 1500}"#;
    let req = format!(
        "POST /v1/queues/q/claim HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        live.addr.port(),
        body.len()
    );
    let started = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut s).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""tasks":[]"#), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(1_500));
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_a_connection_waits_until_one_closes() {
    const CAP: usize = 3;
    let (_c, mut live) = serve_with(
        HttpOptions::default()
            .header_read_timeout_ms(60_000)
            .idle_timeout_ms(60_000)
            .max_connections(CAP),
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..CAP {
        let mut s = TcpStream::connect(live.addr).await.unwrap();
        s.write_all(head(&live, "/healthz").as_bytes())
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.0, 200);
        open.push(s);
    }
    // the kernel completes the handshake (listen backlog); the server does not accept
    let mut extra = TcpStream::connect(live.addr).await.unwrap();
    extra
        .write_all(head(&live, "/healthz").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), extra.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "connection {} was served: {early:?}",
        CAP + 1
    );
    // one closes: the waiting one is accepted and answered
    drop(open.pop());
    let (status, _) = read_response(&mut extra).await;
    assert_eq!(status, 200);
    // the open ones still work
    let s = &mut open[0];
    s.write_all(head(&live, "/healthz").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(s).await.0, 200);
    drop(open);
    drop(extra);
    live.shutdown().await;
}

/// Graceful shutdown closes idle keep-alive connections at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_idle_keep_alive_connections() {
    let (_c, mut live) = serve_with(HttpOptions::default()).await;
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    s.write_all(head(&live, "/healthz").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut s).await.0, 200);
    live.shutdown().await;
    let got = closed_within(&mut s, DEADLINE).await;
    assert!(got.is_empty());
}
