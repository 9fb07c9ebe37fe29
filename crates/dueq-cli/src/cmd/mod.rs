//! One module per command group; shared output helpers.

pub mod cleanup;
pub mod dead;
pub mod relay;
pub mod replay;
pub mod schedule;
pub mod serve;
pub mod settings;
pub mod stats;
pub mod tasks;
pub mod test_clock;
pub mod webhook;
pub mod work;
pub mod workers;

use dueq::{Client, Queue, TaskRef};

/// The task an id or `--key` names.
pub fn target(id: Option<&str>, key: Option<&str>) -> anyhow::Result<TaskRef> {
    Ok(match (id, key) {
        (_, Some(k)) => TaskRef::key(k)?,
        (Some(i), None) => TaskRef::id(i)?,
        (None, None) => anyhow::bail!("name the task by id or --key"),
    })
}

/// Prints JSON on one line: a value, or what the HTTP API answers (its response type),
/// written straight to text, so a payload of any nesting depth is copied as stored.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string(v)?);
    Ok(())
}

/// The error of a read on a queue that is not in the registry (never had a task, setting,
/// schedule or webhook): the message of the HTTP API's 404 (`GET /v1/queues/{queue}`).
pub fn no_such_queue(name: &str) -> anyhow::Error {
    anyhow::anyhow!("not_found: no queue {name:?}")
}

/// The queue `name` if it is known (in the registry), else [`no_such_queue`]: for the commands
/// that only read or change what a queue has, so that a misspelt name is an error instead of
/// an empty answer.
pub async fn known_queue(client: &Client, name: &str) -> anyhow::Result<Queue> {
    let q = client.queue(name)?;
    if !client.has_queue(name).await? {
        return Err(no_such_queue(name));
    }
    Ok(q)
}
