//! The dueq lab: the measurements and checks behind `dueq bench`, `dueq chaos` and `dueq
//! replay`. The `dueq` binary parses their flags ([`args`]) and calls the commands here.
//!
//! The lab is apart from the CLI because none of it serves production: it starts its own
//! `redis-server` processes and clusters through `dueq-testkit`, breaks them on purpose, and
//! reads the order trace. `anyhow` is used here as in the binary: every error ends as a line
//! on stderr.

/// `println!` that ends the process quietly when stdout is closed (`dueq ... | head`) instead
/// of panicking on the broken pipe.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

pub mod args;
pub mod bench;
pub mod chaos;
pub mod replay;
pub mod servers;

pub use args::{ChaosArgs, ChaosWorkerArgs, ReplayArgs};
pub use bench::BenchArgs;

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
