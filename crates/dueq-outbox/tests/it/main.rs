//! Integration tests of dueq-outbox: each test creates (and drops) its own PostgreSQL database
//! on the machine's server (127.0.0.1:5432, user postgres, or `DUEQ_TEST_POSTGRES`) and starts
//! its own `redis-server` through `dueq-testkit` (never the shared 6379).
//!
//! Case tests are named after `shared/cases/CASES.md` ids (`c37_...`).

// Test code panics on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod cases;
mod examples;
mod orphans;
mod outbox;
mod set_again;
