//! The log lines on stderr (`tracing`): text or JSON (`--log-format`), level from `DUEQ_LOG`.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::args::LogFormat;

/// Set once the subscriber writes JSON: a command's output meant for stderr (`dueq work`'s
/// pass-through of its commands' stderr) then goes out as log events too, so that stderr
/// stays one JSON object per line.
static JSON: AtomicBool = AtomicBool::new(false);

/// Whether the logs are JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Installs the subscriber: `DUEQ_LOG` (an `EnvFilter`) if set, else `default_filter`, and
/// with `export`, the layer that sends the task spans by OTLP.
pub fn init(format: LogFormat, default_filter: &str, export: Option<&dueq_otel::Export>) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DUEQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter))
        // the task spans are for the OTLP export only: never a prefix on log lines
        .add_directive(
            format!("{}=off", dueq::trace::SPAN_TARGET)
                .parse()
                .unwrap_or_default(),
        );
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => {
            JSON.store(true, Ordering::Relaxed);
            fmt.json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .with_filter(filter)
                .boxed()
        }
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(export.map(|e| e.layer()))
        .init();
}

/// A line for the person running the command (a server's start-up and stop lines, the final
/// error), shown whatever `DUEQ_LOG` says: as is, or with `--log-format json` as one JSON
/// object shaped like the log events, so that stderr stays one object per line.
pub fn status(level: &str, message: &str) {
    if json() {
        let line = serde_json::json!({
            "timestamp": jiff::Timestamp::now().to_string(),
            "level": level,
            "message": message,
            "target": "dueq",
        });
        eprintln!("{line}");
    } else {
        eprintln!("{message}");
    }
}
