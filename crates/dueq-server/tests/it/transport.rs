//! What HTTP clients see of the transport: a 413 says `Connection: close` (the server does
//! not read the rest of the body, so it closes the connection; a keep-alive client must know
//! to open a new one); keep-alive and HTTP/1.1 pipelining work (a claim, its batch ack and a
//! stats read sent in one write on one connection are answered in order).

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{Ctx, Live, read_response};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_413_says_connection_close() {
    let c = Ctx::with(|b| b, Some(1024)).await;
    let mut live = Live::start(&c.state).await;
    let host = format!("127.0.0.1:{}", live.addr.port());
    // a keep-alive request whose announced body is over the limit (1 KiB + 64 KiB)
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    let head = format!(
        "POST /v1/queues/q/tasks HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: 200000\r\n\r\n{{\"payload\": \""
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // more than the limit, not all of the body (the server stops reading at the limit)
    s.write_all(&[b'x'; 100_000]).await.unwrap();
    let (status, text) = read_response(&mut s).await;
    assert_eq!(status, 413, "{text}");
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(head.contains("\r\nconnection: close"), "{text}");
    assert!(text.contains("\"payload_too_large\""), "{text}");
    live.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_on_one_connection_are_answered_in_order() {
    let c = Ctx::new().await;
    let id = c.enqueue("q", serde_json::json!({"payload": 1})).await;
    let mut live = Live::start(&c.state).await;
    let host = format!("127.0.0.1:{}", live.addr.port());
    let post = |path: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let mut s = TcpStream::connect(live.addr).await.unwrap();
    // the claim's lease token is unknown when the ack is written: a stale one is refused
    // for its own item only, which also shows the ack was read as a separate request
    let pipelined = format!(
        "{}{}GET /v1/queues/q HTTP/1.1\r\nHost: {host}\r\n\r\n",
        post("/v1/queues/q/claim", r#"{"max": 10}"#),
        post(
            "/v1/queues/q/acks",
            &format!(r#"{{"acks": [{{"id": "{id}", "lease_token": "unknown"}}]}}"#)
        ),
    );
    s.write_all(pipelined.as_bytes()).await.unwrap();
    let answers = read_answers(&mut s, 3).await;
    let (status, claim) = &answers[0];
    assert_eq!(*status, 200, "{claim}");
    assert!(claim.contains(&format!(r#""id":"{id}""#)), "{claim}");
    let (status, acks) = &answers[1];
    assert_eq!(*status, 200, "{acks}");
    assert_eq!(acks, r#"{"results":[{"outcome":"lease_lost"}]}"#);
    let (status, stats) = &answers[2];
    assert_eq!(*status, 200, "{stats}");
    assert!(stats.contains(r#""active":1"#), "{stats}");
    live.shutdown().await;
}

/// Reads `n` HTTP/1.1 answers (each with a `Content-Length`) from one connection: their
/// statuses and bodies, in order.
async fn read_answers(s: &mut TcpStream, n: usize) -> Vec<(u16, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let read = async {
        let mut chunk = [0u8; 8192];
        while out.len() < n {
            // take every complete answer at the front of the buffer
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap();
                if buf.len() < end + 4 + len {
                    break;
                }
                let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                buf.drain(..end + 4 + len);
                out.push((status, body));
            }
            if out.len() == n {
                break;
            }
            let got = tokio::io::AsyncReadExt::read(s, &mut chunk).await.unwrap();
            assert!(got > 0, "connection closed after {} answers", out.len());
            buf.extend_from_slice(&chunk[..got]);
        }
    };
    tokio::time::timeout(crate::support::DEADLINE, read)
        .await
        .expect("answers not complete in time");
    out
}
