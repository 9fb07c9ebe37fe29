//! The only code in dueq that talks to Redis.
//!
//! Everything above this module (client, worker, server, CLI) calls the typed functions here;
//! nothing else issues queue commands. Each state change is one Lua function call, so every
//! transition of DESIGN section 1 is atomic. One folder per resource (`tasks/`, `leases/`,
//! `dead/`, `queues/`, `webhook/`, `schedules/`, `workers/`, `clock/`) holds its `.lua` operations
//! beside their Rust wrappers; `lib/` holds the shared Lua helpers, `scripts.rs` the registry,
//! `keys.rs` every key name and the order scripts take them in. docs/ARCHITECTURE-protocol.md
//! has the key layout, the invariants and how scripts read their keys.

pub(crate) mod call;
pub(crate) mod clock;
pub(crate) mod conn;
pub(crate) mod dead;
pub mod keys;
pub(crate) mod leases;
pub(crate) mod queues;
pub mod record;
pub(crate) mod schedules;
pub(crate) mod scripts;
pub(crate) mod server;
pub(crate) mod tasks;
pub(crate) mod webhook;
pub(crate) mod workers;
