//! Integration tests of the HTTP API: the router (through `tower::ServiceExt::oneshot`, and
//! through a real TCP listener where the transport matters) against a real `redis-server`
//! per test, started by `dueq-testkit` (never the shared 6379).
//!
//! Case tests are named after `shared/cases/CASES.md` ids (`c12_...`).

// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod acks;
mod auth;
mod cases;
mod claim;
mod cleanup;
mod dashboard;
mod dashboard_tasks;
mod dead;
mod examples;
mod limits;
mod metrics;
mod openapi;
mod options;
mod origin;
mod paging;
mod queues;
mod recover;
mod reliability;
mod schedules;
mod settings;
mod tasks;
mod test_clock;
mod timeouts;
mod transport;
mod wake;
mod webhook;
mod workers;
