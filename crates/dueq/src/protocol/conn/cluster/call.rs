//! Routing and retry: a call goes to the master of its slot, follows `MOVED` and `ASK`, and
//! is tried again after a refusal until the response timeout; a call that may have run is
//! not repeated.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::ClusterLink;
use super::slots::Target;

/// First pause before a refused call is tried again; it doubles up to [`PAUSE_MAX`].
const PAUSE_MIN: Duration = Duration::from_millis(10);
/// Longest pause before a refused call is tried again: how late a call may go through after
/// the cluster serves its slot again.
const PAUSE_MAX: Duration = Duration::from_millis(100);
/// Most `MOVED`/`ASK` redirections one call follows.
const MAX_REDIRECTS: u32 = 5;
/// How often a call to a slot's master looks whether the slot map names another master for
/// the slot, and gives up if so (see [`ClusterLink::try_while_master`]).
const SLOT_CHECK: Duration = Duration::from_millis(250);
/// An answer that took this long is checked against another node's slot map: a failover
/// takes `cluster-node-timeout` and an election, so a quicker answer came from a node that
/// was not stopped long enough to be replaced.
const LATE_ANSWER: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
pub(super) enum Req<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

pub(super) enum Reply {
    One(Value),
    Many(Vec<Value>),
}

/// What became of one try.
enum Tried {
    Answered(Reply),
    /// Not run: the connection could not be made, or the cluster refused the call.
    Refused(RedisError),
    /// `MOVED` or `ASK` to the node named (`true`: `ASK`).
    Redirected(RedisError, String, bool),
    /// Failed, and may have run: not repeated.
    Failed(RedisError),
}

impl ClusterLink {
    /// The node a call to `target` goes to now.
    fn route(&self, target: Target) -> Option<String> {
        let t = self.topology();
        match target {
            Target::Slot(slot) => t.master_of(slot).map(str::to_owned),
            Target::AnyMaster | Target::EveryMaster => {
                let n = t.masters.len();
                (n > 0).then(|| t.masters[self.turn.fetch_add(1, Ordering::Relaxed) % n].clone())
            }
        }
    }

    pub(super) async fn call(self: &Arc<Self>, target: Target, req: Req<'_>) -> RedisResult<Reply> {
        self.call_at(None, target, req).await
    }

    /// Tries `req` (on node `pinned` if given, else where `target` routes now) until it is
    /// answered, fails in a way that may have run it, or the response timeout passes (which
    /// bounds the whole call, tries and pauses included, as the cluster connection did).
    pub(super) async fn call_at(
        self: &Arc<Self>,
        pinned: Option<String>,
        target: Target,
        req: Req<'_>,
    ) -> RedisResult<Reply> {
        let deadline = Instant::now() + self.response_timeout;
        tokio::time::timeout_at(deadline, self.tries(pinned, target, req, deadline))
            .await
            .unwrap_or_else(|_| {
                // a node that takes calls and answers none (stopped, or cut off): the slot
                // map shows when its replica has taken over
                self.refresh_soon();
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "Redis Cluster: no answer within the response timeout",
                )))
            })
    }

    async fn tries(
        self: &Arc<Self>,
        pinned: Option<String>,
        target: Target,
        req: Req<'_>,
        deadline: Instant,
    ) -> RedisResult<Reply> {
        let mut pause = PAUSE_MIN;
        let mut redirects = 0;
        let mut next: Option<(String, bool)> = None;
        loop {
            let (addr, asking) = match next.take() {
                Some(n) => n,
                None => match pinned.clone().or_else(|| self.route(target)) {
                    Some(a) => (a, false),
                    None => {
                        self.refresh_soon();
                        let e = no_master();
                        if Instant::now() + pause >= deadline {
                            return Err(e);
                        }
                        tokio::time::sleep(crate::backoff::jittered(pause)).await;
                        pause = (pause * 2).min(PAUSE_MAX);
                        continue;
                    }
                },
            };
            let tried = match target {
                Target::Slot(slot) if pinned.is_none() => {
                    self.try_while_master(&addr, slot, req, asking).await
                }
                _ => self.try_once(&addr, req, asking).await,
            };
            let refused = match tried {
                Tried::Answered(r) => return Ok(r),
                Tried::Failed(e) => return Err(e),
                Tried::Redirected(e, to, ask) => {
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(e);
                    }
                    if !ask {
                        self.refresh_soon();
                    }
                    next = Some((to, ask));
                    continue;
                }
                Tried::Refused(e) => e,
            };
            if Instant::now() + pause >= deadline {
                return Err(refused);
            }
            tokio::time::sleep(crate::backoff::jittered(pause)).await;
            pause = (pause * 2).min(PAUSE_MAX);
        }
    }

    /// [`Self::try_once`] on `addr`, the master of `slot`, refusing an answer that `addr` gives
    /// after it lost `slot` to a failover. A master that was stopped (or cut off) past its
    /// replica's promotion answers the calls it took before it hears that it was replaced, and
    /// what they wrote there is lost with its data: a claim's tasks are handed out again by
    /// the new master, an enqueue never happened. So the call gives up as soon as the slot
    /// map names another master (looked at every [`SLOT_CHECK`]), and an answer that took
    /// [`LATE_ANSWER`] or more counts only if another node still names `addr`. Both failures
    /// say the call may have run.
    async fn try_while_master(
        self: &Arc<Self>,
        addr: &str,
        slot: u16,
        req: Req<'_>,
        asking: bool,
    ) -> Tried {
        let started = Instant::now();
        let call = self.try_once(addr, req, asking);
        tokio::pin!(call);
        let tried = loop {
            tokio::select! {
                t = &mut call => break t,
                () = tokio::time::sleep(SLOT_CHECK) => {
                    if self.topology().master_of(slot).is_some_and(|m| m != addr) {
                        return Tried::Failed(lost_slot(addr, slot));
                    }
                }
            }
        };
        // a refusal, redirect or failure goes back to the caller as it is
        if matches!(tried, Tried::Answered(_))
            && started.elapsed() >= LATE_ANSWER
            && self.lost_to_another(addr, slot).await
        {
            return Tried::Failed(lost_slot(addr, slot));
        }
        tried
    }

    /// Whether another node's slot map names a master other than `addr` for `slot` (and
    /// keeps that map). `false` when no other node answers.
    async fn lost_to_another(self: &Arc<Self>, addr: &str, slot: u16) -> bool {
        if self.read_topology(Some(addr)).await.is_err() {
            return false;
        }
        self.topology().master_of(slot).is_some_and(|m| m != addr)
    }

    async fn try_once(self: &Arc<Self>, addr: &str, req: Req<'_>, asking: bool) -> Tried {
        let node = match self.node(addr) {
            Ok(n) => n,
            Err(e) => return Tried::Failed(e),
        };
        let (made, mut conn) = match node.connection(self.response_timeout).await {
            Ok(c) => c,
            // nothing was sent: the node is down (or moved), which the slot map may show
            Err(e) if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() => {
                self.refresh_soon();
                return Tried::Refused(e);
            }
            Err(e) => return Tried::Failed(e),
        };
        let answer = match (req, asking) {
            (Req::One(cmd), false) => conn.req_packed_command(cmd).await.map(Reply::One),
            (Req::One(cmd), true) => {
                let mut p = redis::pipe();
                p.cmd("ASKING").add_command(cmd.clone());
                conn.req_packed_commands(&p, 1, 1).await.map(Reply::Many)
            }
            (Req::Many(p, offset, count), false) => conn
                .req_packed_commands(p, offset, count)
                .await
                .map(Reply::Many),
            (Req::Many(p, offset, count), true) => {
                let mut asked = redis::pipe();
                asked.cmd("ASKING");
                for c in p.cmd_iter() {
                    asked.add_command(c.clone());
                }
                conn.req_packed_commands(&asked, offset + 1, count)
                    .await
                    .map(Reply::Many)
            }
        };
        let err = match answer {
            Ok(Reply::One(v)) => match v.extract_error() {
                Ok(v) => return Tried::Answered(Reply::One(v)),
                Err(e) => e,
            },
            // a pipeline is refused whole when one of its commands is: dueq's pipelines have
            // one keyed command (an `FCALL` and its `WAIT`), which the cluster ran or not
            Ok(Reply::Many(values)) => match values.iter().find_map(cluster_error) {
                None => return Tried::Answered(Reply::Many(values)),
                Some(e) => e,
            },
            Err(e) => e,
        };
        if let Some((to, _slot)) = err.redirect_node() {
            let to = to.to_owned();
            let ask = err.kind() == ErrorKind::Server(ServerErrorKind::Ask);
            return Tried::Redirected(err, to, ask);
        }
        if is_refusal(&err) {
            if err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly) {
                self.refresh_soon();
            }
            return Tried::Refused(err);
        }
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_unrecoverable_error()
        {
            node.forget(made);
            self.refresh_soon();
        }
        Tried::Failed(err)
    }
}

/// A cluster error inside a pipeline's answers: one that refused the whole pipeline.
fn cluster_error(v: &Value) -> Option<RedisError> {
    let Value::ServerError(e) = v else {
        return None;
    };
    matches!(
        e.kind(),
        Some(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        )
    )
    .then(|| v.clone().extract_error().err())
    .flatten()
}

/// A refusal: the cluster did not run the call (and may take it again soon).
fn is_refusal(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        )
    )
}

/// The error of a call `addr` took or answered after it lost `slot`: it may have run there.
fn lost_slot(addr: &str, slot: u16) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "Redis Cluster: {addr} lost slot {slot} to a failover while the call waited; \
             it may have run there and been lost with that node's data"
        ),
    ))
}

pub(super) fn no_master() -> RedisError {
    RedisError::from((
        ErrorKind::ClusterConnectionNotFound,
        "no master of the Redis Cluster is known for this call",
    ))
}
