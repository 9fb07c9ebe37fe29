//! What HTTP clients see of the transport: a 413 says `Connection: close` (the server does
//! not read the rest of the body, so it closes the connection; a keep-alive client must know
//! to open a new one).

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
