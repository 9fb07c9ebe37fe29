//! Integration tests of the `dueq` library against real `redis-server` processes (one per test,
//! started by `dueq-testkit` on a unix socket in a temp dir; never the shared 6379).
//!
//! Case tests are named after `shared/cases/CASES.md` ids (`c01_...`).

// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod basics;
mod browse;
mod cases_failover;
mod cases_limits;
mod cases_options;
mod cases_ownership;
mod cases_redis;
mod cases_schedules;
mod cases_scheduling;
mod chaos;
mod cleanup;
mod cluster;
mod cluster_failover;
mod dangerous;
mod dead_letter;
mod due;
mod examples;
mod flow;
mod headers;
mod options;
mod partition_faults;
mod partitions;
mod recovery;
mod schedules;
mod test_clock;
// the frozen test clock it runs on exists in debug builds only (dueq::FrozenClock)
#[cfg(debug_assertions)]
mod protocol_model;
mod sentinel_loss;
mod unique;
mod webhook;
mod weights;
mod worker;
mod workers;
