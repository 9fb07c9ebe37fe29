//! `dueq replay`: turn the Olist order trace into queue operations and replay them.
//!
//! [`trace`] is the pure part: it reads the CSV, derives the tasks, their expected outcome and
//! the time-ordered list of steps, and maps trace time to compressed real time. [`run`] plays
//! the plan against a real queue with real workers, through [`outbox`] with `--postgres`, and
//! [`check`] compares what ran with the plan. [`records`] holds the settings and records
//! they pass each other; [`command`] is `dueq replay` itself.

mod check;
pub mod command;
mod outbox;
mod records;
mod run;
mod trace;
