//! The dueq command-line tool.

// Placeholder: the real `main` (argument parsing, Redis connection, replay driver) is written
// separately. Until it uses the planning code, that code would be flagged as dead.
#[allow(dead_code)]
mod replay;

fn main() {}
