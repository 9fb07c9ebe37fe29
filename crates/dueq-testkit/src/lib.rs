//! Test support for dueq.
//!
//! This crate starts throwaway `redis-server` processes for tests and offers
//! a few polling and inspection helpers:
//!
//! * [`RedisServer`] — one `redis-server` in its own temporary directory,
//!   listening on a unix socket (default) or a free `127.0.0.1` TCP port.
//!   It can be killed with SIGKILL, restarted on the same socket/port and data
//!   directory, run with AOF, or run as a replica of another server.
//! * [`RedisCluster`] — N masters forming a Redis Cluster, with or without
//!   replicas; a master can be killed, its replica's promotion awaited, and
//!   the killed node restarted and awaited as a replica again.
//! * [`RedisSentinels`] — a primary, replicas and `redis-server --sentinel`
//!   processes watching them, with a forced failover.
//! * `otlp::OtlpReceiver` (feature `otlp`) — a trace collector that decodes the OTLP
//!   exports (HTTP/protobuf and gRPC) it receives.
//! * [`wait_until`] / [`wait_until_async`] — poll a condition with a deadline.
//! * [`zcard`], [`hlen`], [`active_len`], [`leases_len`], [`keys_matching`],
//!   [`slowlog_max_us`], [`info_field`] — small synchronous inspection helpers.
//!
//! # Failure mode: panics
//!
//! Everything here is meant to be called from tests, so **failure is reported
//! by panicking** (`expect` with a descriptive message) instead of returning
//! `Result`s: a helper that cannot start Redis or cannot talk to it has made
//! the calling test fail, and the panic message (which includes the tail of
//! the server log where relevant) is the diagnostic.
//!
//! The lab (`dueq bench` and `dueq chaos`) starts its servers and clusters here too and
//! reports failures itself: the calls it makes have `try_` forms that return an [`Error`]
//! with the same message instead.
//!
//! # Processes
//!
//! Every server is a child process owned by its handle; dropping the handle
//! kills the process (SIGKILL) and removes its temporary directory. The
//! shared/system Redis (e.g. on port 6379) is never touched: servers started
//! here use unix sockets in fresh temporary directories or TCP ports the OS
//! reported as free, and readiness checks verify the answering server's
//! `process_id` is our child's pid.
//!
//! Unix only (unix sockets, SIGKILL). Readiness and cluster waits poll in
//! real time with `std::thread::sleep`; only [`wait_until_async`] needs a
//! tokio runtime.
//!
//! If the test process itself is killed with SIGKILL, `Drop` cannot run and
//! the `redis-server` children are orphaned; a normal test failure (panic)
//! unwinds and cleans up.

mod cluster;
mod error;
mod helpers;
#[cfg(feature = "otlp")]
pub mod otlp;
mod sentinel;
mod server;
mod wait;

pub use cluster::{RedisCluster, RedisClusterBuilder};
pub use error::Error;
pub use helpers::{
    LEASES_PIN, active_len, hlen, info_field, keys_matching, leases_len, slowlog_max_us, zcard,
};
pub use sentinel::{MASTER_NAME, RedisSentinels};
pub use server::{RedisServer, RedisServerBuilder};
pub use wait::{wait_until, wait_until_async};
