//! OTLP export of dueq's spans, configured by the standard OpenTelemetry environment variables.
//!
//! The `dueq` library makes each task run a consumer span (target [`dueq::trace::SPAN_TARGET`])
//! linked to, or a child of, the span that enqueued the task. This crate sends those spans to
//! an OTLP endpoint: `dueq serve`, `dueq work` and `dueq relay` use it, and so can any Rust
//! program that runs a `dueq::Worker`:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! use tracing_subscriber::util::SubscriberInitExt as _;
//!
//! # async fn start() -> Result<(), dueq_otel::Error> {
//! let export = dueq_otel::Export::from_env("my-worker")?;
//! tracing_subscriber::registry()
//!     .with(export.as_ref().map(|e| e.layer()))
//!     .init();
//! // ... run the worker ...
//! if let Some(e) = export {
//!     e.shutdown().await; // sends the spans still buffered
//! }
//! # Ok(()) }
//! ```
//!
//! Nothing is exported, and nothing costs, unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set. The variables read:
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector, e.g. `http://localhost:4318` (HTTP) or `http://localhost:4317` (gRPC); `/v1/traces` is added for HTTP |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full traces URL, instead of the above |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) | `http/protobuf` (the default) or `grpc`; `http/json` sends protobuf, which every OTLP/HTTP receiver takes too |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT` | headers and timeout of each export |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the service's name (default: the program's, as given to [`Export::from_env`]) and attributes |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | sampling (default `parentbased_always_on`) |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | turn export off |

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// Why export could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A variable holds a value this crate does not take.
    #[error("{name}: {message}")]
    Config {
        /// The variable.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Not called inside a tokio runtime, where the exports run.
    #[error("OTLP export needs a tokio runtime to run on")]
    NoRuntime,
    /// The OTLP exporter could not be built (a bad endpoint, say).
    #[error("OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Spans going out by OTLP. Dropping it stops the export without sending what is buffered:
/// call [`shutdown`](Self::shutdown) at exit.
#[derive(Debug)]
pub struct Export {
    provider: SdkTracerProvider,
}

/// The OTLP protocols a span can go out by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    HttpProtobuf,
    Grpc,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn protocol() -> Result<Protocol, Error> {
    let (name, value) = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        Some(v) => ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v),
        None => match var("OTEL_EXPORTER_OTLP_PROTOCOL") {
            Some(v) => ("OTEL_EXPORTER_OTLP_PROTOCOL", v),
            None => return Ok(Protocol::HttpProtobuf),
        },
    };
    match value.trim() {
        // an OTLP/HTTP receiver takes protobuf and JSON alike on the same path
        "http/protobuf" | "http/json" => Ok(Protocol::HttpProtobuf),
        "grpc" => Ok(Protocol::Grpc),
        other => Err(Error::Config {
            name,
            message: format!("must be http/protobuf, http/json or grpc, got {other:?}"),
        }),
    }
}

/// Whether the variables ask for export.
fn wanted() -> bool {
    let endpoint = var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let none = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
    endpoint && !disabled && !none
}

impl Export {
    /// Starts exporting when the variables ask for it (see the crate's documentation), with
    /// `service` as the service's name unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
    /// names one. `None` when no endpoint is set. Call it inside a tokio runtime: the exports
    /// run on it.
    ///
    /// # Errors
    /// [`Error::Config`] for a protocol other than `http/protobuf` and `grpc`;
    /// [`Error::Exporter`] when the exporter cannot be built.
    pub fn from_env(service: &str) -> Result<Option<Self>, Error> {
        if !wanted() {
            return Ok(None);
        }
        Self::build(protocol()?, None, service).map(Some)
    }

    /// Starts exporting to the collector at `endpoint` (`http://host:4318`; `/v1/traces` is
    /// added) by HTTP/protobuf, whatever the variables say, for a program that configures
    /// itself in code. `service` as in [`from_env`](Self::from_env).
    ///
    /// # Errors
    /// [`Error::Exporter`] when the exporter cannot be built.
    pub fn http(endpoint: &str, service: &str) -> Result<Self, Error> {
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        Self::build(Protocol::HttpProtobuf, Some(url), service)
    }

    fn build(protocol: Protocol, url: Option<String>, service: &str) -> Result<Self, Error> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let exporter = match protocol {
            Protocol::HttpProtobuf => {
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(Reqwest(reqwest::Client::new()));
                if let Some(url) = url {
                    b = b.with_endpoint(url);
                }
                b.build()?
            }
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .build()?,
        };
        let mut resource = Resource::builder();
        let named = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| v.contains("service.name="));
        if !named {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(OnRuntime {
                inner: Arc::new(exporter),
                rt,
            })
            .with_resource(resource.build())
            .build();
        Ok(Self { provider })
    }

    /// The `tracing` layer that turns dueq's task spans into OpenTelemetry spans and exports
    /// them (only the target [`dueq::trace::SPAN_TARGET`]: add your own layer for your spans).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("dueq"))
            // the span's attributes are the messaging ones: no source location, thread or
            // busy time of the process that ran it
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(Targets::new().with_target(dueq::trace::SPAN_TARGET, tracing::Level::INFO))
    }

    /// The tracer provider, for a program that exports its own spans the same way.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Sends the spans still buffered (waiting up to the export timeout) and stops.
    pub async fn shutdown(self) {
        let provider = self.provider;
        // the provider blocks until its export thread is done, and that thread's exports run
        // on this runtime: wait for it off the runtime's threads
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "OTLP export: shutdown"),
            Err(e) => tracing::warn!(error = %e, "OTLP export: shutdown panicked"),
        }
    }
}

/// An exporter whose exports run on a tokio runtime. The SDK's batch processor exports from a
/// thread of its own, where the OTLP transports (hyper, tonic) find no runtime.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    rt: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let inner = self.inner.clone();
        self.rt
            .spawn(async move { inner.export(batch).await })
            .await
            .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // called once, while the provider is built and nothing else holds the exporter
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// The longest wait for one export when the exporter gives none (OTLP's default timeout).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP/HTTP transport over dueq's own HTTP client (rustls, webpki roots), run on tokio.
#[derive(Debug)]
struct Reqwest(reqwest::Client);

#[async_trait::async_trait]
impl HttpClient for Reqwest {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut req = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body);
        if let Some(timeout) = parts.extensions.get::<Duration>() {
            req = req.timeout(*timeout);
        } else {
            req = req.timeout(EXPORT_TIMEOUT);
        }
        let res = req.send().await?;
        let mut out = Response::builder().status(res.status());
        if let Some(h) = out.headers_mut() {
            *h = res.headers().clone();
        }
        let body = res.bytes().await?;
        Ok(out.body(body)?)
    }
}
