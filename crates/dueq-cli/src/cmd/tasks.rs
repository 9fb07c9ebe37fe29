//! `enqueue`, `get`, `cancel`, `reschedule`.

use std::io::Read;

use anyhow::{Context, Result};
use dueq::{CancelOutcome, Client, Due, OnConflict, RescheduleOutcome, TaskSpec};
use serde_json::json;

use super::{print_json, target};
use crate::args::{DueArgs, EnqueueArgs, RescheduleArgs, TargetArgs};
use crate::human::{when, when_opt};
use dueq_server::api::tasks::TaskResponse;

fn due(d: &DueArgs) -> Option<Due> {
    match (d.delay_ms, d.due_at_ms) {
        (Some(ms), _) => Some(Due::DelayMs(ms)),
        (None, Some(at)) => Some(Due::AtMs(at)),
        (None, None) => None,
    }
}

/// `dueq enqueue`.
pub async fn enqueue(client: &Client, a: &EnqueueArgs, json_out: bool) -> Result<()> {
    let payload = match (&a.payload, &a.payload_file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            let mut v = Vec::new();
            std::io::stdin().read_to_end(&mut v)?;
            v
        }
        (None, Some(f)) => {
            std::fs::read(f).with_context(|| format!("reading payload file {}", f.display()))?
        }
        (None, None) => Vec::new(),
    };
    let mut spec = TaskSpec::new(payload).due(due(&a.due).unwrap_or(Due::DelayMs(0)));
    if let Some(k) = &a.key {
        spec = spec.key(k.clone());
    }
    if a.replace {
        spec = spec.on_conflict(OnConflict::Replace);
    }
    if let Some(m) = a.debounce_max_ms {
        spec = spec.on_conflict(OnConflict::Debounce).debounce_max_ms(m);
    }
    if let Some(t) = a.ttl_ms {
        spec = spec.ttl_ms(t);
    }
    if let Some(t) = a.expires_at_ms {
        spec = spec.expires_at_ms(t);
    }
    let mut options = a.options.options()?;
    // a trace context handed down in the environment (as `dueq work` and OpenTelemetry's
    // environment carriers pass it), unless --header gives one
    let env: dueq::Headers = [dueq::TRACEPARENT, dueq::TRACESTATE]
        .into_iter()
        .filter_map(|name| Some((name, std::env::var(name.to_ascii_uppercase()).ok()?)))
        .collect();
    dueq::trace::add_context(&mut options.headers, env);
    spec = spec.options(options);
    let replacing = a.replace || a.debounce_max_ms.is_some();
    let e = client.queue(&a.queue)?.enqueue(spec).await?;
    let (outcome, finished) = match e.outcome {
        dueq::EnqueueOutcome::Created => ("created", None),
        dueq::EnqueueOutcome::Existing => ("existing", None),
        dueq::EnqueueOutcome::Replaced => ("replaced", None),
        dueq::EnqueueOutcome::InProgress => ("in_progress", None),
        dueq::EnqueueOutcome::Finished(s) => ("unique_window", Some(s.as_str())),
        _ => ("unknown", None),
    };
    if json_out {
        let mut v = json!({"id": e.id.as_str(), "due_at_ms": e.due_at_ms,
            "created": e.created(), "outcome": outcome});
        if let Some(s) = finished {
            v["state"] = json!(s);
        }
        print_json(&v)?;
    } else if let Some(s) = finished {
        outln!("{outcome} {} finished as {s}; nothing enqueued", e.id);
    } else {
        outln!("{outcome} {} due {}", e.id, when(e.due_at_ms));
    }
    if e.outcome == dueq::EnqueueOutcome::InProgress {
        anyhow::bail!("the key is live on a running task; not replaced");
    }
    if finished.is_some() && replacing {
        anyhow::bail!("the key is in the unique window of a finished task; not replaced");
    }
    Ok(())
}

/// `dueq get`.
pub async fn get(client: &Client, a: &TargetArgs, json_out: bool) -> Result<()> {
    let q = client.queue(&a.queue)?;
    let Some(t) = q.get(&target(a.id.as_deref(), a.key.as_deref())?).await? else {
        // a key whose task finished otherwise than dead may still be held by its unique window
        let window = match a.key.as_deref() {
            Some(k) => q.unique_window(k).await?,
            None => None,
        };
        if json_out {
            let mut v = json!({"outcome": "not_found"});
            if let Some(w) = &window {
                v["unique_window"] = json!({"id": w.id.as_str(), "state": w.state.as_str(),
                    "due_at_ms": w.due_at_ms, "ends_at_ms": w.ends_at_ms});
            }
            print_json(&v)?;
        }
        if let Some(w) = window {
            anyhow::bail!(
                "not_found: no live or dead task under this key; it is in the unique window of \
                 task {}, which finished as {}, until {}",
                w.id,
                w.state.as_str(),
                when(w.ends_at_ms)
            );
        }
        anyhow::bail!(
            "not_found: no such task (a live or dead task is found by id or key; a succeeded \
             one only by id, and only when the queue keeps them: setting succeeded_max; a \
             cancelled or expired one is not kept)"
        );
    };
    if json_out {
        print_json(&TaskResponse::from(t))?;
    } else {
        outln!("id:         {}", t.id);
        outln!("key:        {}", t.key.as_deref().unwrap_or("-"));
        outln!("group:      {}", t.group.as_deref().unwrap_or("-"));
        outln!("state:      {}", t.state.as_str());
        outln!("due_at:     {}", when(t.due_at_ms));
        outln!("attempt:    {}/{}", t.attempt, t.max_attempts);
        outln!("last_error: {}", t.last_error.as_deref().unwrap_or("-"));
        outln!("created_at: {}", when(t.created_at_ms));
        outln!("priority:   {}", t.priority);
        if t.expires_at_ms.is_some() {
            outln!("expires_at: {}", when_opt(t.expires_at_ms));
        }
        for (name, value) in t.headers.iter() {
            outln!("header:     {name}: {value}");
        }
        outln!("payload:    {}", String::from_utf8_lossy(&t.payload));
    }
    Ok(())
}

/// `dueq cancel`: exit status 0 only for `cancelled`.
pub async fn cancel(client: &Client, a: &TargetArgs, json_out: bool) -> Result<()> {
    let q = client.queue(&a.queue)?;
    let o = q
        .cancel(&target(a.id.as_deref(), a.key.as_deref())?)
        .await?;
    if json_out {
        print_json(&json!({"outcome": o.as_str()}))?;
    } else {
        outln!("{}", o.as_str());
    }
    if o != CancelOutcome::Cancelled {
        anyhow::bail!("not cancelled: {}", o.as_str());
    }
    Ok(())
}

/// `dueq reschedule`.
pub async fn reschedule(client: &Client, a: &RescheduleArgs, json_out: bool) -> Result<()> {
    let q = client.queue(&a.target.queue)?;
    let d = due(&a.due).context("give --delay or --at")?;
    let t = target(a.target.id.as_deref(), a.target.key.as_deref())?;
    let (outcome, due_at) = match q.reschedule(&t, d).await? {
        RescheduleOutcome::Rescheduled { due_at_ms } => ("rescheduled", Some(due_at_ms)),
        RescheduleOutcome::InProgress => ("in_progress", None),
        _ => ("not_found", None),
    };
    if json_out {
        print_json(&json!({"outcome": outcome, "due_at_ms": due_at}))?;
    } else {
        match due_at {
            Some(d) => outln!("{outcome}; due {}", when(d)),
            None => outln!("{outcome}"),
        }
    }
    if due_at.is_none() {
        anyhow::bail!("not rescheduled: {outcome}");
    }
    Ok(())
}
