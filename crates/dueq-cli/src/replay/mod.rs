//! `dueq replay`: turn the Olist order trace into queue operations and replay them.
//!
//! [`trace`] is the pure part: it reads the CSV, derives the tasks, their expected outcome and
//! the time-ordered list of steps, and maps trace time to compressed real time. [`run`] plays
//! the plan against a real queue with real workers and checks the result.

pub mod check;
pub mod outbox;
pub mod run;
pub mod trace;
