//! [`OtlpReceiver`]: a trace collector for tests. It takes OTLP exports over HTTP/protobuf
//! (`POST /v1/traces`) and gRPC (`TraceService/Export`) on free `127.0.0.1` ports, decodes them
//! with the protocol's own types, and keeps every span it received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A span as received, with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The sender's `service.name` resource attribute.
    pub service: String,
    /// The span.
    pub span: Span,
}

impl ReceivedSpan {
    /// The span's trace id, hex.
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    /// The span's id, hex.
    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    /// The parent span's id, hex (empty for a root).
    pub fn parent_span_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// The attribute `key`, as text (numbers and booleans printed), if the span has it.
    pub fn attr(&self, key: &str) -> Option<String> {
        let kv = self.span.attributes.iter().find(|kv| kv.key == key)?;
        Some(match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => s.clone(),
            Value::IntValue(i) => i.to_string(),
            Value::BoolValue(b) => b.to_string(),
            Value::DoubleValue(d) => d.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// The attribute `key` as an integer (panics when it is missing or not an integer).
    pub fn int(&self, key: &str) -> i64 {
        let kv = self.span.attributes.iter().find(|kv| kv.key == key);
        match kv.and_then(|kv| kv.value.as_ref()?.value.as_ref()) {
            Some(Value::IntValue(i)) => *i,
            other => panic!("attribute {key} is not an integer: {other:?} on {self:?}"),
        }
    }

    /// `(trace id, span id)` of each link, hex.
    pub fn links(&self) -> Vec<(String, String)> {
        self.span
            .links
            .iter()
            .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
            .collect()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

type Store = Arc<Mutex<Vec<ReceivedSpan>>>;

fn keep(store: &Store, req: ExportTraceServiceRequest) {
    let mut spans = store.lock().unwrap_or_else(|p| p.into_inner());
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for span in ss.spans {
                spans.push(ReceivedSpan {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
}

struct Grpc(Store);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A trace collector on two free ports; dropping it stops both.
pub struct OtlpReceiver {
    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT` for HTTP/protobuf.
    pub http_endpoint: String,
    /// `http://127.0.0.1:PORT`: the value of `OTEL_EXPORTER_OTLP_ENDPOINT` for gRPC.
    pub grpc_endpoint: String,
    store: Store,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Starts both servers on the current tokio runtime.
    pub async fn start() -> Self {
        let store: Store = Arc::default();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP/HTTP port");
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP/gRPC port");
        let http_endpoint = format!("http://{}", http.local_addr().expect("its address"));
        let grpc_endpoint = format!("http://{}", grpc.local_addr().expect("its address"));
        let s = store.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let s = s.clone();
                async move {
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(req) => {
                            keep(&s, req);
                            (
                                axum::http::StatusCode::OK,
                                [("content-type", "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(e) => (
                            axum::http::StatusCode::BAD_REQUEST,
                            [("content-type", "text/plain")],
                            e.to_string().into_bytes(),
                        ),
                    }
                }
            }),
        );
        let http_task = tokio::spawn(async move {
            let _ = axum::serve(http, app).await;
        });
        let service = TraceServiceServer::new(Grpc(store.clone()));
        let grpc_task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc))
                .await;
        });
        Self {
            http_endpoint,
            grpc_endpoint,
            store,
            tasks: vec![http_task, grpc_task],
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.store.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits up to `deadline` for a span that `f` accepts, and returns it (panics, listing
    /// what came, when none does).
    pub async fn wait_for(
        &self,
        deadline: Duration,
        what: &str,
        f: impl Fn(&ReceivedSpan) -> bool,
    ) -> ReceivedSpan {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| f(s)) {
                return s;
            }
            if tokio::time::Instant::now() > end {
                panic!(
                    "no span {what} within {deadline:?}; received: {:#?}",
                    self.spans()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
