//! The log lines on stderr (`tracing`): text or JSON (`--log-format`), level from `DUEQ_LOG`.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::args::LogFormat;

/// Set once the subscriber writes JSON: a command's output meant for stderr (`dueq work`'s
/// pass-through of its commands' stderr) then goes out as log events too, so that stderr
/// stays one JSON object per line.
static JSON: AtomicBool = AtomicBool::new(false);

/// Whether the logs are JSON.
pub fn json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Installs the subscriber: `DUEQ_LOG` (an `EnvFilter`) if set, else `default_filter`.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DUEQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => {
            JSON.store(true, Ordering::Relaxed);
            builder
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(false)
                .init();
        }
    }
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
