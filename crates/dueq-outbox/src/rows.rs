//! How the relay reads rows and writes its decisions back: [`OutRow`], [`Update`] (applied
//! in one `UPDATE ... FROM unnest()` per batch), [`Found`] (what Redis said about a row).

use std::sync::Mutex;

use dueq::{TaskOptions, TaskRef, TaskSpec};
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row, Transaction};

use crate::error::Result;
use crate::task::to_u64;

/// A row update: the state a step decided, written back in one statement per batch.
#[derive(Debug)]
pub(crate) struct Update {
    pub id: i64,
    pub state: &'static str,
    pub task_id: Option<String>,
    pub last_error: Option<String>,
    pub checked: bool,
    pub restored: bool,
}

impl Update {
    pub(crate) fn new(id: i64, state: &'static str) -> Self {
        Self {
            id,
            state,
            task_id: None,
            last_error: None,
            checked: false,
            restored: false,
        }
    }

    /// The update that marks row `r` rejected: dueq refused it for `why` (it never runs).
    pub(crate) fn rejected(r: &OutRow, why: &str) -> Self {
        tracing::warn!(
            row = r.id,
            queue = r.queue,
            error = why,
            "row refused by dueq"
        );
        let mut u = Self::new(r.id, "rejected");
        u.last_error = Some(format!("refused by dueq: {why}"));
        u
    }
}

/// A row as the relay reads it.
#[derive(Debug)]
pub(crate) struct OutRow {
    pub id: i64,
    pub queue: String,
    pub key: String,
    pub payload: Vec<u8>,
    pub due_at_ms: i64,
    pub max_attempts: Option<i32>,
    pub lease_ms: Option<i64>,
    /// The `options` column as text (JSON), if set.
    pub options: Option<String>,
    pub relay_op: Option<String>,
    pub task_id: Option<String>,
    pub restores: i32,
    pub age_ms: i64,
}

/// The columns [`OutRow::from_row`] reads, in order.
pub(crate) const ROW_COLUMNS: &str = "id, queue, key, payload, due_at_ms, max_attempts, lease_ms, \
     options::text, relay_op, task_id, restores, \
     dueq_outbox_now_ms() - (extract(epoch FROM created_at) * 1000)::bigint AS age_ms";

impl OutRow {
    pub(crate) fn from_row(r: &PgRow) -> Result<Self> {
        Ok(Self {
            id: r.try_get(0)?,
            queue: r.try_get(1)?,
            key: r.try_get(2)?,
            payload: r.try_get(3)?,
            due_at_ms: r.try_get(4)?,
            max_attempts: r.try_get(5)?,
            lease_ms: r.try_get(6)?,
            options: r.try_get(7)?,
            relay_op: r.try_get(8)?,
            task_id: r.try_get(9)?,
            restores: r.try_get(10)?,
            age_ms: r.try_get(11)?,
        })
    }

    /// The row's live Redis task: by key, since the row is the one live row of its key (task
    /// ids are not used here: a wiped Redis hands out the same ids again).
    pub(crate) fn key_ref(&self) -> Result<TaskRef> {
        Ok(TaskRef::key(self.key.clone())?)
    }

    /// The dueq task for this row, due at its stored (original) due time.
    ///
    /// # Errors
    /// The reason, naming the option, when the options are not dueq's or out of their range
    /// (the row is refused).
    pub(crate) fn spec(&self) -> std::result::Result<TaskSpec, String> {
        let mut options: TaskOptions = match &self.options {
            Some(text) => read_options(text)?,
            None => TaskOptions::default(),
        };
        // a column set wins over the same name in the JSON
        if let Some(n) = self.max_attempts {
            options.max_attempts = Some(u32::try_from(n).unwrap_or(0));
        }
        if let Some(l) = self.lease_ms {
            options.lease_ms = Some(to_u64(l));
        }
        options.check().map_err(|e| e.to_string())?;
        Ok(TaskSpec::new(self.payload.clone())
            .key(self.key.clone())
            .due_at_ms(to_u64(self.due_at_ms))
            .options(options))
    }
}

/// Reads the `options` column; the error names the first option that does not read, or a
/// name that is not an option (a typo would otherwise be lost without a word).
fn read_options(text: &str) -> std::result::Result<TaskOptions, String> {
    use serde::Deserialize;
    use serde_json::Value;
    let value: Value = serde_json::from_str(text).map_err(|e| format!("options: {e}"))?;
    let map = value.as_object().ok_or("options: not a JSON object")?;
    if let Some(name) = map
        .keys()
        .find(|k| !TaskOptions::FIELDS.contains(&k.as_str()))
    {
        return Err(format!(
            "options.{name}: not a task option (they are {})",
            TaskOptions::FIELDS.join(", ")
        ));
    }
    TaskOptions::deserialize(&value).map_err(|e| {
        // the option at fault: the first that does not read on its own
        let bad = map.iter().find(|(k, v)| {
            let one = Value::Object([((*k).clone(), (*v).clone())].into_iter().collect());
            TaskOptions::deserialize(&one).is_err()
        });
        match bad {
            Some((name, _)) => format!("options.{name}: {e}"),
            None => format!("options: {e}"),
        }
    })
}

/// Marks the transaction as the relay's, so the table's guard trigger leaves no tombstone
/// for the state changes it writes.
pub(crate) async fn relay_mode(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
    sqlx::query("SELECT set_config('dueq.relay', 'on', true)")
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Writes a batch of [`Update`]s in one statement.
pub(crate) async fn apply(tx: &mut Transaction<'_, Postgres>, updates: &[Update]) -> Result<()> {
    if updates.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = updates.iter().map(|u| u.id).collect();
    let states: Vec<&str> = updates.iter().map(|u| u.state).collect();
    let task_ids: Vec<Option<&str>> = updates.iter().map(|u| u.task_id.as_deref()).collect();
    let errors: Vec<Option<&str>> = updates.iter().map(|u| u.last_error.as_deref()).collect();
    let checked: Vec<bool> = updates.iter().map(|u| u.checked).collect();
    let restored: Vec<bool> = updates.iter().map(|u| u.restored).collect();
    sqlx::query(
        "UPDATE dueq_outbox AS o SET
             state = u.state,
             relay_op = NULL,
             task_id = coalesce(u.task_id, o.task_id),
             last_error = coalesce(u.last_error, o.last_error),
             relayed_at = CASE WHEN o.state = 'pending' AND u.state = 'relayed'
                               THEN clock_timestamp() ELSE o.relayed_at END,
             finished_at = CASE WHEN u.state IN ('succeeded', 'dead', 'cancelled', 'rejected')
                                THEN clock_timestamp() ELSE o.finished_at END,
             checked_at_ms = CASE WHEN u.checked THEN dueq_outbox_now_ms() END,
             restores = o.restores + CASE WHEN u.restored THEN 1 ELSE 0 END
         FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::bool[])
              AS u(id, state, task_id, last_error, checked, restored)
         WHERE o.id = u.id",
    )
    .bind(&ids)
    .bind(&states)
    .bind(&task_ids)
    .bind(&errors)
    .bind(&checked)
    .bind(&restored)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// What a lookup by id says about a row's task.
pub(crate) enum Found {
    /// Scheduled or active, with this id.
    Live(String),
    Succeeded,
    Dead(Option<String>),
    Missing,
}

/// Locks a mutex, recovering from poisoning (the maps hold plain handles, valid either way).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The rows of `rows` that can be restored to Redis, with their tasks, and the updates that
/// reject the others: a relayed row's options were read when it was relayed, so one that no
/// longer reads or checks was changed by hand since (or written before a check existed); it
/// is marked `rejected`, naming the option, rather than restored or left waiting.
pub(crate) fn restorable<'a>(
    rows: impl IntoIterator<Item = &'a OutRow>,
) -> (Vec<&'a OutRow>, Vec<TaskSpec>, Vec<Update>) {
    let (mut ok, mut specs, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for r in rows {
        match r.spec() {
            Ok(s) => {
                ok.push(r);
                specs.push(s);
            }
            Err(why) => refused.push(Update::rejected(r, &why)),
        }
    }
    (ok, specs, refused)
}
