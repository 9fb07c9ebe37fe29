//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use dueq::{Client, ClientBuilder};
use dueq_server::{AppState, AppStateBuilder, router};
use dueq_testkit::RedisServer;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

/// Default deadline for conditions in tests.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A fresh Redis, a client, and the router over it.
pub struct Ctx {
    pub server: RedisServer,
    pub client: Client,
    pub state: AppState,
    pub app: Router,
    pub token: Option<String>,
}

/// A response: status, headers and body (parsed as JSON when it is JSON, else a string).
#[derive(Debug)]
pub struct Res {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Ctx {
    pub async fn new() -> Self {
        Self::with(|b| b, None).await
    }

    /// With a state built by `state` (and the client's payload limit).
    pub async fn with(
        state: impl FnOnce(AppStateBuilder) -> AppStateBuilder,
        payload_limit: Option<usize>,
    ) -> Self {
        Self::build(
            |b| match payload_limit {
                Some(l) => b.payload_limit_bytes(l),
                None => b,
            },
            state,
        )
        .await
    }

    /// With a client built by `client` and a state built by `state`.
    pub async fn build(
        client: impl FnOnce(ClientBuilder) -> ClientBuilder,
        state: impl FnOnce(AppStateBuilder) -> AppStateBuilder,
    ) -> Self {
        let server = RedisServer::start();
        let client = client(Client::builder(&server.url()))
            .connect()
            .await
            .unwrap();
        let st = state(AppState::builder(client.clone())).build();
        Self {
            app: router(st.clone()),
            state: st,
            server,
            client,
            token: None,
        }
    }

    /// Sends a request; `body` as JSON with `Content-Type: application/json`.
    pub async fn call(&self, method: Method, uri: &str, body: Option<Value>) -> Res {
        let bytes = body.map(|b| serde_json::to_vec(&b).unwrap());
        self.raw(method, uri, bytes, true).await
    }

    pub async fn get(&self, uri: &str) -> Res {
        self.call(Method::GET, uri, None).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Res {
        self.call(Method::POST, uri, Some(body)).await
    }

    pub async fn delete(&self, uri: &str) -> Res {
        self.call(Method::DELETE, uri, None).await
    }

    pub async fn patch(&self, uri: &str, body: Value) -> Res {
        self.call(Method::PATCH, uri, Some(body)).await
    }

    /// Sends raw body bytes (marked JSON when `json`).
    pub async fn raw(&self, method: Method, uri: &str, body: Option<Vec<u8>>, json: bool) -> Res {
        let mut req = Request::builder().method(method).uri(uri);
        if json {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(t) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(body.map(Body::from).unwrap_or_else(Body::empty))
            .unwrap();
        send(&self.app, req).await
    }

    /// Enqueues `body` on `queue`, expecting 201; returns the id.
    pub async fn enqueue(&self, queue: &str, body: Value) -> String {
        let r = self.post(&format!("/v1/queues/{queue}/tasks"), body).await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
        r.body["id"].as_str().unwrap().to_owned()
    }

    /// Claims up to `max` tasks without waiting.
    pub async fn claim(&self, queue: &str, max: u32) -> Vec<Value> {
        let r = self
            .post(
                &format!("/v1/queues/{queue}/claim"),
                serde_json::json!({"max": max}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        r.body["tasks"].as_array().unwrap().clone()
    }

    /// Every Redis key that exists.
    pub fn all_keys(&self) -> Vec<String> {
        let mut c = self.server.conn();
        let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        k.sort();
        k
    }

    /// Keys of one queue (other than the queue registry).
    pub fn queue_keys(&self, queue: &str) -> Vec<String> {
        let mut c = self.server.conn();
        let mut k: Vec<String> = redis::cmd("KEYS")
            .arg(format!("dueq:{{{queue}}}:*"))
            .query(&mut c)
            .unwrap();
        k.sort();
        k
    }
}

/// Sends a request to a router.
pub async fn send(app: &Router, req: Request<Body>) -> Res {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::String(text.clone()));
    Res {
        status,
        headers,
        body,
        text,
    }
}

/// Asserts the error shape and code.
pub fn assert_error(r: &Res, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.body["error"]["code"], code, "{r:?}");
    assert!(r.body["error"]["message"].is_string(), "{r:?}");
    // every code an answer carries is one the OpenAPI document lists
    assert!(
        dueq_server::openapi::ERROR_CODES.contains(&code),
        "{code} is not in the document's ErrorDetail.code enum"
    );
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `serve()` on a real listener on 127.0.0.1, stopped by [`Live::shutdown`].
pub struct Live {
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Live {
    pub async fn start(state: &AppState) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(dueq_server::serve(listener, state.clone(), async {
            let _ = rx.await;
        }));
        Self {
            addr,
            stop: Some(tx),
            join: Some(join),
        }
    }

    /// Sends the shutdown signal and waits (up to [`DEADLINE`]) for `serve` to return.
    pub async fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(j) = self.join.take() {
            tokio::time::timeout(DEADLINE, j)
                .await
                .expect("serve did not return after shutdown")
                .unwrap()
                .unwrap();
        }
    }
}

/// Sends `request` (raw HTTP/1.1 bytes) on a new connection and reads the answer until the
/// server closes the connection or the head and `Content-Length` bytes of body are in
/// (up to [`DEADLINE`]). Returns the status and the whole text.
pub async fn raw_http(addr: std::net::SocketAddr, request: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, request.as_bytes())
        .await
        .unwrap();
    read_response(&mut s).await
}

/// Reads one HTTP/1.1 response from `s` (see [`raw_http`]).
pub async fn read_response(s: &mut tokio::net::TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let read = async {
        let mut chunk = [0u8; 8192];
        loop {
            let n = tokio::io::AsyncReadExt::read(s, &mut chunk)
                .await
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())
                            .flatten()
                    })
                    .unwrap_or(usize::MAX);
                if buf.len() >= end + 4 + len {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("no complete answer in time");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    (status, text)
}
