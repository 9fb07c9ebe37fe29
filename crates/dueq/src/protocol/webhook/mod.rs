//! Redis operations on a queue's push delivery target (its `webhook` hash) and on the
//! `dueq:webhooks` set that lets servers find the queues that have one.
//!
//! Writes are one script each (`webhook_set.lua`, `webhook_clear.lua`); reads are plain
//! `HGETALL` / `SMEMBERS`. Set adds the queue name to `dueq:webhooks` *before* its script runs
//! and clear never removes it, so every stored webhook is listed (the set lives outside the
//! queue's hash tag, so one script cannot write both on a cluster).

use std::collections::HashMap;

use super::call::{Args, run};
use super::conn::Conn;
use super::keys::{QueueKeys, WEBHOOKS_KEY};
use super::scripts;
use crate::error::{Error, Result};

/// A webhook as stored (fields of the `webhook` hash).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub url: String,
    pub secret: String,
    pub concurrency: u32,
    pub timeout_ms: u64,
    pub updated_at_ms: u64,
    /// The last failed delivery's error and when (since the webhook was last set).
    pub last_error: Option<(String, u64)>,
    /// The replaced secrets that may still sign, newest first, each with the end of its
    /// window (epoch ms).
    pub previous_secrets: Vec<(String, u64)>,
}

/// What `webhook_set` did.
pub(crate) struct SetReply {
    pub now_ms: u64,
    pub secret: String,
    pub existed: bool,
    /// The replaced secrets that still sign, newest first, each with the end of its window
    /// (epoch ms).
    pub previous_secrets: Vec<(String, u64)>,
}

/// A webhook to store: `secret` empty keeps the stored secret, or uses `new_secret` when
/// there is none; a replaced secret keeps signing for `rotation_ms`, beside at most
/// `max_previous - 1` others replaced before it.
pub(crate) struct SetArgs<'a> {
    pub url: &'a str,
    pub secret: &'a str,
    pub new_secret: &'a str,
    pub concurrency: u32,
    pub timeout_ms: u64,
    pub rotation_ms: u64,
    pub max_previous: usize,
}

/// Stores a validated webhook.
pub(crate) async fn set(conn: &mut Conn, k: &QueueKeys, w: &SetArgs<'_>) -> Result<SetReply> {
    redis::cmd("SADD")
        .arg(WEBHOOKS_KEY)
        .arg(&k.name)
        .query_async::<()>(conn)
        .await?;
    let mut a = Args::default();
    a.s(w.url)
        .s(w.secret)
        .s(w.new_secret)
        .n(w.concurrency)
        .n(w.timeout_ms)
        .n(w.rotation_ms)
        .n(w.max_previous);
    let mut r = run(conn, &scripts::WEBHOOK_SET, k, a.take()).await?;
    let (now_ms, secret, existed) = (r.u64()?, r.string()?, r.i64()? == 1);
    let previous_secrets = previous_secrets(&r.string()?)
        .map_err(|e| Error::protocol(format!("{}: previous_secrets: {e}", k.webhook)))?;
    Ok(SetReply {
        now_ms,
        secret,
        existed,
        previous_secrets,
    })
}

/// Removes the webhook; whether there was one.
pub(crate) async fn clear(conn: &mut Conn, k: &QueueKeys) -> Result<bool> {
    let mut r = run(conn, &scripts::WEBHOOK_CLEAR, k, Vec::new()).await?;
    r.u64()?;
    Ok(r.i64()? == 1)
}

/// The stored webhook, or `None`.
///
/// # Errors
/// [`ErrorKind::Protocol`](crate::ErrorKind) when the hash exists but lacks a field or holds a
/// value that is not a number (changed by hand).
pub(crate) async fn get(conn: &mut Conn, k: &QueueKeys) -> Result<Option<Stored>> {
    let mut h: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(&k.webhook)
        .query_async(conn)
        .await?;
    if h.is_empty() {
        return Ok(None);
    }
    let mut field = |name: &str| {
        h.remove(name)
            .ok_or_else(|| Error::protocol(format!("{}: field {name} is missing", k.webhook)))
    };
    let url = field("url")?;
    let secret = field("secret")?;
    let (concurrency, timeout_ms, updated_at_ms) = (
        field("concurrency")?,
        field("timeout_ms")?,
        field("updated_at_ms")?,
    );
    let num = |name: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| Error::protocol(format!("{}: {name} {v:?} is not a number", k.webhook)))
    };
    let last_error = match (h.remove("last_error"), h.remove("last_error_at_ms")) {
        (Some(text), Some(at)) => Some((text, num("last_error_at_ms", &at)?)),
        _ => None,
    };
    let mut previous_secrets = match h.remove("previous_secrets") {
        Some(json) => previous_secrets(&json)
            .map_err(|e| Error::protocol(format!("{}: previous_secrets: {e}", k.webhook)))?,
        None => Vec::new(),
    };
    // earlier versions kept one replaced secret in two fields (moved by the next set)
    if let (Some(secret), Some(until)) =
        (h.remove("previous_secret"), h.remove("previous_until_ms"))
    {
        previous_secrets.push((secret, num("previous_until_ms", &until)?));
    }
    Ok(Some(Stored {
        last_error,
        previous_secrets,
        url,
        secret,
        concurrency: u32::try_from(num("concurrency", &concurrency)?)
            .map_err(|_| Error::protocol(format!("{}: concurrency is out of range", k.webhook)))?,
        timeout_ms: num("timeout_ms", &timeout_ms)?,
        updated_at_ms: num("updated_at_ms", &updated_at_ms)?,
    }))
}

/// The stored list of replaced secrets: `[[secret, until_ms], ...]`, `until_ms` a decimal
/// string (Lua numbers would lose digits in JSON).
fn previous_secrets(json: &str) -> std::result::Result<Vec<(String, u64)>, String> {
    let list: Vec<(String, String)> = serde_json::from_str(json).map_err(|e| e.to_string())?;
    list.into_iter()
        .map(|(secret, until)| match until.parse() {
            Ok(u) => Ok((secret, u)),
            Err(_) => Err(format!("{until:?} is not a number")),
        })
        .collect()
}

/// Notes a failed delivery's error on the webhook (when the queue still has one).
pub(crate) async fn failed(conn: &mut Conn, k: &QueueKeys, error: &str) -> Result<()> {
    let mut a = Args::default();
    a.s(error);
    run(conn, &scripts::WEBHOOK_FAILED, k, a.take()).await?;
    Ok(())
}

/// Names in `dueq:webhooks`, sorted: every queue with a webhook, and queues that had one.
pub(crate) async fn list(conn: &mut Conn) -> Result<Vec<String>> {
    let mut names: Vec<String> = redis::cmd("SMEMBERS")
        .arg(WEBHOOKS_KEY)
        .query_async(conn)
        .await?;
    names.sort();
    Ok(names)
}
