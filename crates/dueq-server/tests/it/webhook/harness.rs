//! The webhook receiver and the server under test, shared by the webhook tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use dueq::Backoff;
use dueq_server::push::PushOptions;
use dueq_testkit::wait_until_async;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::net::TcpListener;

use crate::support::{Ctx, DEADLINE, Live};

/// A Standard Webhooks secret: `whsec_` and the base64 of the 24-byte key `test-secret-0123456789ab`.
pub const SECRET: &str = "whsec_dGVzdC1zZWNyZXQtMDEyMzQ1Njc4OWFi";

/// What the receiver answers.
#[derive(Clone)]
pub enum Behave {
    /// This status and body at once.
    Status(u16, &'static str),
    /// 200 after this long.
    Hold(Duration),
    /// 302 to this URL.
    Redirect(String),
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Hit {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Hit {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A webhook receiver on 127.0.0.1 that records what it gets.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
    in_flight: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
    behave: Arc<Mutex<Behave>>,
}

/// Decrements the in-flight count even when the request is dropped mid-way.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    r.hits.lock().unwrap().push(Hit {
        headers,
        body: body.to_vec(),
    });
    let n = r.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight(r.in_flight.clone());
    r.max_in_flight.fetch_max(n, Ordering::SeqCst);
    let behave = r.behave.lock().unwrap().clone();
    match behave {
        Behave::Status(s, text) => (StatusCode::from_u16(s).unwrap(), text).into_response(),
        Behave::Hold(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
        Behave::Redirect(to) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
    }
}

impl Receiver {
    pub async fn start(behave: Behave) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Self {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            hits: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
            behave: Arc::new(Mutex::new(behave)),
        };
        let app = Router::new()
            .route("/hook", any(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        r
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.hits.lock().unwrap().len()
    }

    pub fn set(&self, b: Behave) {
        *self.behave.lock().unwrap() = b;
    }
}

/// A Redis, the router, and `serve` running on a real listener with fast push settings
/// (fixed 50 ms backoff, settings re-read every 50 ms).
pub struct Server {
    pub ctx: Ctx,
    live: Live,
}

impl Server {
    pub async fn start() -> Self {
        Self::start_with(|b| b).await
    }

    /// With more settings of the state (`state` gets the builder with push set up).
    pub async fn start_with(
        state: impl FnOnce(dueq_server::AppStateBuilder) -> dueq_server::AppStateBuilder,
    ) -> Self {
        let push = PushOptions::default()
            .backoff(Backoff::new(50, 1.0, 50))
            .poll_ms(50);
        let ctx = Ctx::with(|b| state(b.push(push)), None).await;
        let live = Live::start(&ctx.state).await;
        Self { ctx, live }
    }

    /// As [`start`](Self::start), on a Redis that runs the test clock.
    pub async fn start_on_test_clock() -> Self {
        let push = PushOptions::default()
            .backoff(Backoff::new(50, 1.0, 50))
            .poll_ms(50);
        let ctx = Ctx::build(|b| b.test_clock(), |b| b.push(push)).await;
        let live = Live::start(&ctx.state).await;
        Self { ctx, live }
    }

    /// Stops `serve` and waits for it to return (bounded).
    pub async fn shutdown(&mut self) {
        self.live.shutdown().await;
    }

    pub async fn set_webhook(&self, queue: &str, body: Value) -> Value {
        let r = self
            .ctx
            .call(
                axum::http::Method::PUT,
                &format!("/v1/queues/{queue}/webhook"),
                Some(body),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        r.body
    }

    pub async fn task(&self, queue: &str, id: &str) -> Value {
        let r = self
            .ctx
            .get(&format!("/v1/queues/{queue}/tasks/{id}"))
            .await;
        if r.status == StatusCode::NOT_FOUND {
            return Value::Null;
        }
        assert_eq!(r.status, StatusCode::OK, "{r:?}");
        r.body
    }

    pub async fn wait_state(&self, queue: &str, id: &str, state: &str) -> Value {
        wait_until_async(DEADLINE, &format!("task {id} is {state}"), || async {
            self.task(queue, id).await["state"] == state
        })
        .await;
        self.task(queue, id).await
    }

    pub async fn succeeded(&self, queue: &str) -> u64 {
        let r = self.ctx.get(&format!("/v1/queues/{queue}")).await;
        r.body["succeeded_total"].as_u64().unwrap_or(0)
    }
}

/// Checks a delivery the way a Standard Webhooks receiver must: HMAC-SHA256 keyed with the
/// secret's base64 key over `{webhook-id}.{webhook-timestamp}.{body}`, compared with each
/// `v1,` signature of the header.
pub fn verify(secret: &str, h: &Hit, body: &[u8]) -> bool {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let (Some(id), Some(ts), Some(sigs)) = (
        h.header("webhook-id"),
        h.header("webhook-timestamp"),
        h.header("webhook-signature"),
    ) else {
        return false;
    };
    let Some(key) = secret
        .strip_prefix("whsec_")
        .and_then(|k| b64.decode(k).ok())
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let want = format!("v1,{}", b64.encode(mac.finalize().into_bytes()));
    sigs.split(' ').any(|s| s == want)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}
