//! The claim protocol: claim due tasks under a lease, then ack, nack, extend or release
//! them (fencing by lease token), and recover expired leases.

use super::call::{Args, MAX_BATCH, run};
use super::conn::Conn;
use super::keys::QueueKeys;
use super::record::Record;
use super::scripts;
use crate::error::Result;
use crate::task::{AckOutcome, ClaimedTask, LeaseToken, NackOutcome, TaskId};

/// What a claim returns besides the tasks: the Redis clock and what to wait for next.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimReply {
    pub now_ms: u64,
    pub paused: bool,
    pub next_due_ms: Option<u64>,
    pub next_deadline_ms: Option<u64>,
    pub orphans: bool,
    /// Settings version (bumped by every settings change).
    pub settings_version: u64,
    /// A queue limit that held due work back.
    pub throttle: Option<Throttle>,
    /// Due work waits for a concurrency slot (the queue's, or a parked group's).
    pub waits_for_slot: bool,
    pub tasks: Vec<ClaimedTask>,
    /// The schedule of each missed tick dropped instead of handed out.
    pub missed_ticks: Vec<String>,
}

/// Which queue limit held due work back in a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Throttle {
    /// The rate limit; the next slot opens at this Redis time (ms).
    Rate {
        /// Redis time at which the next slot opens, epoch ms.
        opens_at_ms: u64,
    },
    /// The concurrency limit; a slot frees up when an active task ends.
    Concurrency,
}

/// What a claim records besides its leases (see `claim.lua`): the claiming worker, and the
/// claim ids a caller uses to recover from lost replies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClaimTracking<'a> {
    /// The claiming worker's id ('' = unnamed; checked by the caller: no spaces), kept in
    /// each lease.
    pub holder: &'a str,
    /// This call's id ('' = untracked).
    pub id: &'a str,
    /// The previous call whose reply arrived.
    pub forget: &'a str,
    /// Calls whose replies were lost.
    pub resume: &'a [String],
}

pub(crate) async fn claim(
    conn: &mut Conn,
    k: &QueueKeys,
    max: usize,
    lease_override_ms: u64,
    tracking: ClaimTracking<'_>,
) -> Result<ClaimReply> {
    let mut a = Args::default();
    a.n(max.min(MAX_BATCH))
        .n(lease_override_ms)
        .s(tracking.id)
        .s(tracking.forget)
        .s(tracking.holder)
        .n(tracking.resume.len());
    for r in tracking.resume {
        a.s(r);
    }
    let mut r = run(conn, &scripts::CLAIM, k, a.take()).await?;
    let now_ms = r.u64()?;
    let paused = r.i64()? == 1;
    let next_due_ms = r.opt_u64()?;
    let next_deadline_ms = r.opt_u64()?;
    let orphans = r.i64()? == 1;
    let settings_version = r.u64()?;
    let throttle = r.string()?;
    let opens = r.opt_u64()?;
    let throttle = match (throttle.as_str(), opens) {
        ("rate", Some(opens_at_ms)) => Some(Throttle::Rate { opens_at_ms }),
        ("concurrency", _) => Some(Throttle::Concurrency),
        _ => None,
    };
    let default_max_attempts = r.u64()?.min(u64::from(u32::MAX)) as u32;
    let waits_for_slot = r.i64()? == 1;
    let n = r.u64()? as usize;
    let missed = r.u64()? as usize;
    let mut reply = ClaimReply {
        now_ms,
        paused,
        next_due_ms,
        next_deadline_ms,
        orphans,
        settings_version,
        throttle,
        waits_for_slot,
        tasks: Vec::new(),
        missed_ticks: Vec::with_capacity(missed),
    };
    reply.tasks.reserve(n);
    for _ in 0..n {
        let id = TaskId::from_redis(r.string()?);
        let lease_token = LeaseToken::new(r.string()?);
        let due_at_ms = r.u64()?;
        let lease_expires_at_ms = r.u64()?;
        let rec = Record::decode(r.bytes()?)?;
        let last_error = r.opt_string()?;
        let attempt = rec.attempt.saturating_add(1);
        let continues_trace = attempt == 1 && !rec.tick && due_at_ms <= rec.created_at_ms;
        reply.tasks.push(ClaimedTask {
            id,
            key: rec.key,
            payload: rec.payload,
            headers: rec.headers,
            continues_trace,
            attempt,
            max_attempts: if rec.max_attempts == 0 {
                default_max_attempts
            } else {
                rec.max_attempts
            },
            group: None,
            priority: rec.priority,
            due_at_ms,
            created_at_ms: rec.created_at_ms,
            lease_token,
            lease_expires_at_ms,
            claimed_at_ms: now_ms,
            started_at_ms: now_ms,
            last_error,
        });
    }
    while r.remaining() > missed {
        let i = (r.u64()? as usize).saturating_sub(1);
        let group = r.string()?;
        if let Some(t) = reply.tasks.get_mut(i) {
            t.group = Some(group);
        }
    }
    for _ in 0..missed {
        reply.missed_ticks.push(r.string()?);
    }
    Ok(reply)
}

pub(crate) async fn ack(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(TaskId, LeaseToken)],
) -> Result<Vec<AckOutcome>> {
    let mut a = Args::default();
    a.s(&k.wake).n(items.len());
    for (id, token) in items {
        a.s(id.as_str()).s(token.as_str());
    }
    let mut r = run(conn, &scripts::ACK, k, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        out.push(match r.i64()? {
            1 => AckOutcome::Acked,
            _ => AckOutcome::LeaseLost,
        });
    }
    Ok(out)
}

/// One failed attempt to report.
#[derive(Clone, Copy)]
pub(crate) struct NackItem<'a> {
    pub id: &'a TaskId,
    pub token: &'a LeaseToken,
    /// `None`: the backoff table decides by attempt.
    pub retry_in_ms: Option<u64>,
    pub permanent: bool,
    pub error: &'a str,
}

pub(crate) async fn nack(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[NackItem<'_>],
    backoff_ms: &[u64],
) -> Result<Vec<NackOutcome>> {
    let mut a = Args::default();
    a.s(&k.wake).n(backoff_ms.len());
    for d in backoff_ms {
        a.n(d);
    }
    a.n(items.len());
    for it in items {
        a.s(it.id.as_str())
            .s(it.token.as_str())
            .n(it.retry_in_ms.map_or(-1, |d| d.min(i64::MAX as u64) as i64))
            .s(if it.permanent { "1" } else { "0" })
            .s(it.error);
    }
    let mut r = run(conn, &scripts::NACK, k, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        let code = r.i64()?;
        let due_at_ms = r.u64()?;
        out.push(match code {
            1 => NackOutcome::Rescheduled { due_at_ms },
            2 => NackOutcome::Dead,
            _ => NackOutcome::LeaseLost,
        });
    }
    Ok(out)
}

pub(crate) async fn extend(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(&TaskId, &LeaseToken, u64)],
) -> Result<Vec<Option<u64>>> {
    let mut a = Args::default();
    a.n(items.len());
    for (id, token, lease_ms) in items {
        a.s(id.as_str()).s(token.as_str()).n(lease_ms);
    }
    let mut r = run(conn, &scripts::EXTEND, k, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        let d = r.u64()?;
        out.push((d > 0).then_some(d));
    }
    Ok(out)
}

pub(crate) async fn release(
    conn: &mut Conn,
    k: &QueueKeys,
    items: &[(TaskId, LeaseToken)],
) -> Result<Vec<bool>> {
    let mut a = Args::default();
    a.s(&k.wake).n(items.len());
    for (id, token) in items {
        a.s(id.as_str()).s(token.as_str());
    }
    let mut r = run(conn, &scripts::RELEASE, k, a.take()).await?;
    r.u64()?;
    let mut out = Vec::with_capacity(items.len());
    for _ in items {
        out.push(r.i64()? == 1);
    }
    Ok(out)
}

/// What a recover pass did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecoverReply {
    pub now_ms: u64,
    pub recovered: u64,
    pub dead: u64,
    pub next_deadline_ms: Option<u64>,
    pub swept: bool,
    /// Scheduled tasks expired by this call.
    pub expired: u64,
    /// The expiry batch was full: more expired tasks may wait.
    pub expired_more: bool,
    /// Earliest expiry of a scheduled task.
    pub next_expiry_ms: Option<u64>,
}

pub(crate) async fn recover(
    conn: &mut Conn,
    k: &QueueKeys,
    max: usize,
    backoff_ms: &[u64],
) -> Result<RecoverReply> {
    let mut a = Args::default();
    a.s(&k.wake).n(max.min(MAX_BATCH)).n(backoff_ms.len());
    for d in backoff_ms {
        a.n(d);
    }
    let mut r = run(conn, &scripts::RECOVER, k, a.take()).await?;
    Ok(RecoverReply {
        now_ms: r.u64()?,
        recovered: r.u64()?,
        dead: r.u64()?,
        next_deadline_ms: r.opt_u64()?,
        swept: r.i64()? == 1,
        expired: r.u64()?,
        expired_more: r.i64()? == 1,
        next_expiry_ms: r.opt_u64()?,
    })
}
