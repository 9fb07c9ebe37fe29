//! Redis Cluster: `redis+cluster://h1:p1,h2:p2` (or comma-separated `redis://` URLs).
//!
//! The link routes each call itself, to the master that serves the slot of its first key
//! (a pipeline: of its first keyed command; a keyless command: any master, in turn), over
//! one multiplexed connection per node. The slot map comes from `CLUSTER SLOTS` (any node
//! that answers); it is read again in the background every second and after a `MOVED`, a
//! refused connection, a dropped or timed-out call or a `READONLY` reply (at most every
//! [`REFRESH_GAP`]), never while calls wait for it. So one node's trouble delays only the
//! calls routed to that node.
//!
//! A call refused without being run is tried again until the response timeout: `MOVED` and
//! `ASK` at once on the node named, `CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, `LOADING`,
//! `READONLY` and a connection that could not be opened after a pause of 10 ms doubling to
//! 100 ms (with jitter), routed again by the slot map of then. A call that may have run (its
//! connection dropped, or no answer in time) is not repeated: the error reaches the caller,
//! who retries as after any Redis error.
//!
//! Why not redis-rs's `cluster_async::ClusterConnection` (issue 29): its one task serves
//! every node, and while it reads the slot map again (`refresh_slots` holds the slot map's
//! write lock, redis 1.8.1 `cluster_handling/async_connection/mod.rs:983`) it polls none of
//! the calls in flight (`poll_flush`, :1713). With tokio 1.54, a call whose read of that lock
//! is granted just as the task's cooperative budget runs out keeps the permit and returns
//! `Pending` (`sync/batch_semaphore.rs:653-665`); the refresh then waits for that call and the
//! call for the refresh: the connection answers nothing, to any node, for good. A killed master
//! under a few thousand calls a second did it in most tries. Its retry pause is 1.28 s at
//! least (`RetryParams::default`), so a call refused once with `CLUSTERDOWN` waited that long
//! after the cluster was whole again; shortening the pause made the hang above near certain.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    Arg, AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use tokio::time::Instant;

use super::CONNECT_TIMEOUT;

/// Redis Cluster hash slots.
const SLOTS: usize = 16_384;
/// First pause before a refused call is tried again; it doubles up to [`PAUSE_MAX`].
const PAUSE_MIN: Duration = Duration::from_millis(10);
/// Longest pause before a refused call is tried again: how late a call may go through after
/// the cluster serves its slot again.
const PAUSE_MAX: Duration = Duration::from_millis(100);
/// How often a call to a slot's master looks whether the slot map names another master for
/// the slot, and gives up if so (see [`ClusterLink::try_while_master`]).
const SLOT_CHECK: Duration = Duration::from_millis(250);
/// An answer that took this long is checked against another node's slot map: a failover
/// takes `cluster-node-timeout` and an election, so a quicker answer came from a node that
/// was not stopped long enough to be replaced.
const LATE_ANSWER: Duration = Duration::from_secs(1);
/// Least time between two reads of the slot map.
const REFRESH_GAP: Duration = Duration::from_millis(100);
/// How often the slot map is read again when nothing asked for it: calls to a master that
/// takes them and answers none (stopped, cut off) fail only by their timeout, so its
/// replica's promotion is seen this soon at the latest.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Longest wait for one node's `CLUSTER SLOTS` (then the next node is asked).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(1);
/// Most `MOVED`/`ASK` redirections one call follows.
const MAX_REDIRECTS: u32 = 5;
/// After a failed connect to a node, how long its callers get that failure instead of a new
/// try (and the callers that waited for that try get it too): one connect at a time, and
/// not more than one per gap, to a node that is down, instead of one per waiting call
/// queued behind each other.
const RECONNECT_GAP: Duration = Duration::from_millis(10);

/// The command link to a Redis Cluster (module docs).
pub(crate) struct ClusterLink {
    /// A seed's URL: scheme, credentials and options of every node's URL (host and port
    /// replaced).
    template: url::Url,
    /// `host:port` of each seed: where the slot map is read when no known node answers.
    seeds: Vec<String>,
    response_timeout: Duration,
    topology: RwLock<Arc<Topology>>,
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    refresh: Mutex<RefreshState>,
    /// Turn of the next keyless command among the masters.
    turn: AtomicUsize,
}

#[derive(Default)]
struct RefreshState {
    running: bool,
    last: Option<Instant>,
}

/// One node's connection, made on first use and again after it failed.
struct Node {
    client: redis::Client,
    /// The connection and its number (a failure drops it only if it is still that one).
    conn: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Held while connecting: the callers of a node wait for one connect, not one each.
    connecting: tokio::sync::Mutex<()>,
    made: AtomicU64,
    /// When the last connect failed, and how.
    failed: Mutex<Option<(Instant, RedisError)>>,
}

/// The slot map as a node last told it.
#[derive(Debug, Default, PartialEq)]
struct Topology {
    /// `host:port` of each master.
    masters: Vec<String>,
    /// Per slot, the index of its master in `masters` ([`UNSERVED`]: none).
    slot_master: Vec<u16>,
    /// Every node named, masters first: whom to ask for the slot map next time.
    nodes: Vec<String>,
}

const UNSERVED: u16 = u16::MAX;

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Slot(u16),
    AnyMaster,
    EveryMaster,
}

#[derive(Clone, Copy)]
enum Req<'a> {
    One(&'a Cmd),
    Many(&'a Pipeline, usize, usize),
}

enum Reply {
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
    /// Reads the slot map from the first seed that answers.
    pub(crate) async fn connect(
        seeds: &[String],
        response_timeout: Duration,
    ) -> RedisResult<Arc<Self>> {
        let first = seeds.first().ok_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "empty cluster seed list"))
        })?;
        redis::Client::open(first.as_str())?;
        let template = url::Url::parse(first).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "bad cluster seed URL",
                e.to_string(),
            ))
        })?;
        let mut hosts = Vec::with_capacity(seeds.len());
        for s in seeds {
            let u = url::Url::parse(s).map_err(|e| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "bad cluster seed URL",
                    e.to_string(),
                ))
            })?;
            let host = u.host_str().unwrap_or("127.0.0.1");
            hosts.push(host_port(host, u.port().unwrap_or(6379)));
        }
        let link = Arc::new(Self {
            template,
            seeds: hosts,
            response_timeout,
            topology: RwLock::new(Arc::new(Topology::default())),
            nodes: Mutex::new(HashMap::new()),
            refresh: Mutex::new(RefreshState {
                running: true,
                last: None,
            }),
            turn: AtomicUsize::new(0),
        });
        let read = link.read_topology(None).await;
        link.refresh_done();
        read?;
        tokio::spawn(watch(Arc::downgrade(&link)));
        Ok(link)
    }

    pub(crate) async fn command(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        let target = target_of(cmd);
        if target == Target::EveryMaster {
            return self.on_every_master(cmd).await;
        }
        match self.call(target, Req::One(cmd)).await? {
            Reply::One(v) => Ok(v),
            Reply::Many(mut v) => v.pop().unwrap_or(Value::Nil).extract_error(),
        }
    }

    pub(crate) async fn commands(
        self: &Arc<Self>,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let target = pipeline
            .cmd_iter()
            .map(target_of)
            .find(|t| matches!(t, Target::Slot(_)))
            .unwrap_or(Target::AnyMaster);
        match self
            .call(target, Req::Many(pipeline, offset, count))
            .await?
        {
            Reply::Many(v) => Ok(v),
            Reply::One(v) => Ok(vec![v]),
        }
    }

    /// `cmd` on every master at once: the first error, or else the first master's answer.
    pub(crate) async fn on_every_master(self: &Arc<Self>, cmd: &Cmd) -> RedisResult<Value> {
        let masters = self.topology().masters.clone();
        if masters.is_empty() {
            return Err(no_master());
        }
        let calls = masters.into_iter().map(|addr| async move {
            match self
                .call_at(Some(addr), Target::AnyMaster, Req::One(cmd))
                .await?
            {
                Reply::One(v) => v.extract_error(),
                Reply::Many(mut v) => v.pop().unwrap_or(Value::Nil).extract_error(),
            }
        });
        let mut first = None;
        for answer in join_all(calls).await {
            let answer = answer?;
            first.get_or_insert(answer);
        }
        Ok(first.unwrap_or(Value::Nil))
    }

    fn topology(&self) -> Arc<Topology> {
        self.topology
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

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

    async fn call(self: &Arc<Self>, target: Target, req: Req<'_>) -> RedisResult<Reply> {
        self.call_at(None, target, req).await
    }

    /// Tries `req` (on node `pinned` if given, else where `target` routes now) until it is
    /// answered, fails in a way that may have run it, or the response timeout passes (which
    /// bounds the whole call, tries and pauses included, as the cluster connection did).
    async fn call_at(
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

    fn node(&self, addr: &str) -> RedisResult<Arc<Node>> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(addr) {
            return Ok(n.clone());
        }
        let n = Arc::new(Node {
            client: redis::Client::open(node_url(&self.template, addr)?.as_str())?,
            conn: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            made: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        nodes.insert(addr.to_owned(), n.clone());
        Ok(n)
    }

    /// Reads the slot map again in the background, unless that is being done or was done
    /// less than [`REFRESH_GAP`] ago.
    fn refresh_soon(self: &Arc<Self>) {
        {
            let mut st = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
            if st.running || st.last.is_some_and(|t| t.elapsed() < REFRESH_GAP) {
                return;
            }
            st.running = true;
        }
        let link = self.clone();
        tokio::spawn(async move {
            if let Err(e) = link.read_topology(None).await {
                tracing::debug!(error = %e, "Redis Cluster: no node told the slot map");
            }
            link.refresh_done();
        });
    }

    fn refresh_done(&self) {
        let mut st = self.refresh.lock().unwrap_or_else(|p| p.into_inner());
        st.running = false;
        st.last = Some(Instant::now());
    }

    /// Asks the known nodes (masters first), then the seeds, but never `skip`, for `CLUSTER
    /// SLOTS`, and keeps the first answer.
    async fn read_topology(self: &Arc<Self>, skip: Option<&str>) -> RedisResult<()> {
        let known = self.topology();
        let mut asked: Vec<String> = skip.map(str::to_owned).into_iter().collect();
        let mut last_err = None;
        for addr in known.nodes.iter().chain(self.seeds.iter()) {
            if asked.contains(addr) {
                continue;
            }
            asked.push(addr.clone());
            let node = match self.node(addr) {
                Ok(n) => n,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let answer = tokio::time::timeout(REFRESH_TIMEOUT, async {
                let (made, mut conn) = node.connection(self.response_timeout).await?;
                let r = conn
                    .req_packed_command(redis::cmd("CLUSTER").arg("SLOTS"))
                    .await
                    .and_then(Value::extract_error);
                if r.as_ref().is_err_and(|e| e.is_io_error() || e.is_timeout()) {
                    node.forget(made);
                }
                r
            })
            .await;
            let parsed = match answer {
                Ok(Ok(v)) => Topology::parse(&v, addr),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(RedisError::from((
                    ErrorKind::Io,
                    "CLUSTER SLOTS timed out",
                    addr.clone(),
                ))),
            };
            match parsed {
                Ok(t) => {
                    if t != *known {
                        tracing::debug!(masters = ?t.masters, "Redis Cluster: new slot map");
                    }
                    *self.topology.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(t);
                    return Ok(());
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(no_master))
    }
}

/// Reads the slot map every [`WATCH_EVERY`] (with jitter) until the link is dropped.
async fn watch(link: std::sync::Weak<ClusterLink>) {
    loop {
        tokio::time::sleep(crate::backoff::jittered(WATCH_EVERY)).await;
        let Some(l) = link.upgrade() else { return };
        l.refresh_soon();
    }
}

impl Node {
    /// The node's connection, made now if there is none.
    async fn connection(
        &self,
        response_timeout: Duration,
    ) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let asked = Instant::now();
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        // a connect that failed while this call waited, or just before: its error
        {
            let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, e)) = failed.as_ref()
                && (*at >= asked || at.elapsed() < RECONNECT_GAP)
            {
                return Err(e.clone());
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        let conn = match self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), e.clone()));
                return Err(e);
            }
        };
        let made = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some((made, conn.clone()));
        Ok((made, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops connection number `made` (if it is still the current one): the next call makes
    /// a new one.
    fn forget(&self, made: u64) {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if c.as_ref().is_some_and(|(n, _)| *n == made) {
            *c = None;
        }
    }
}

impl Topology {
    fn master_of(&self, slot: u16) -> Option<&str> {
        let i = *self.slot_master.get(usize::from(slot))?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }

    /// A `CLUSTER SLOTS` reply from node `asked` (whose host stands for a node named with
    /// an empty host).
    fn parse(reply: &Value, asked: &str) -> RedisResult<Self> {
        let bad = || RedisError::from((ErrorKind::Parse, "unexpected CLUSTER SLOTS reply"));
        let Value::Array(ranges) = reply else {
            return Err(bad());
        };
        let (asked_host, _) = split_host_port(asked);
        let node_addr = |v: &Value| -> Option<String> {
            let Value::Array(f) = v else { return None };
            let host = text(f.first()?)?;
            let port = match f.get(1)? {
                Value::Int(p) => u16::try_from(*p).ok()?,
                _ => return None,
            };
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            Some(host_port(&host, port))
        };
        let mut t = Topology {
            slot_master: vec![UNSERVED; SLOTS],
            ..Topology::default()
        };
        let mut replicas = Vec::new();
        for range in ranges {
            let Value::Array(f) = range else {
                return Err(bad());
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(master)) =
                (f.first(), f.get(1), f.get(2))
            else {
                return Err(bad());
            };
            let master = node_addr(master).ok_or_else(bad)?;
            let i = match t.masters.iter().position(|m| *m == master) {
                Some(i) => i,
                None => {
                    t.masters.push(master);
                    t.masters.len() - 1
                }
            };
            let i = u16::try_from(i).map_err(|_| bad())?;
            let (first, last) = (usize::try_from(*first), usize::try_from(*last));
            let (Ok(first), Ok(last)) = (first, last) else {
                return Err(bad());
            };
            for s in first..=last.min(SLOTS - 1) {
                t.slot_master[s] = i;
            }
            replicas.extend(f.iter().skip(3).filter_map(node_addr));
        }
        if t.masters.is_empty() {
            return Err(bad());
        }
        t.nodes = t.masters.clone();
        for r in replicas {
            if !t.nodes.contains(&r) {
                t.nodes.push(r);
            }
        }
        Ok(t)
    }
}

/// Where `cmd` goes: the slot of its first key; every master for the commands that change
/// what each node holds of the function and script libraries; any master for other keyless
/// commands. A command routed by a guess (a key elsewhere than the first argument) is answered
/// `MOVED` and follows it.
fn target_of(cmd: &Cmd) -> Target {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .take(4)
        .filter_map(|a| match a {
            Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect();
    let Some(name) = args.first().map(|n| n.to_ascii_uppercase()) else {
        return Target::AnyMaster;
    };
    let sub = || {
        args.get(1)
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default()
    };
    match name.as_slice() {
        b"FCALL" | b"FCALL_RO" | b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" => {
            let keys = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            match args.get(3) {
                Some(key) if keys > 0 => Target::Slot(slot_of(key)),
                _ => Target::AnyMaster,
            }
        }
        b"FUNCTION" | b"SCRIPT" => match sub().as_slice() {
            b"LOAD" | b"FLUSH" | b"DELETE" | b"RESTORE" => Target::EveryMaster,
            _ => Target::AnyMaster,
        },
        b"PING" | b"ECHO" | b"TIME" | b"INFO" | b"CONFIG" | b"CLIENT" | b"CLUSTER" | b"COMMAND"
        | b"SLOWLOG" | b"LATENCY" | b"MEMORY" | b"ROLE" | b"DBSIZE" | b"PUBLISH" | b"WAIT"
        | b"WAITAOF" | b"HELLO" | b"AUTH" | b"SELECT" | b"READONLY" | b"READWRITE" | b"ASKING"
        | b"MULTI" | b"EXEC" | b"DISCARD" | b"LASTSAVE" | b"LOLWUT" | b"ACL" | b"MODULE" => {
            Target::AnyMaster
        }
        _ => match args.get(1) {
            Some(key) => Target::Slot(slot_of(key)),
            None => Target::AnyMaster,
        },
    }
}

/// The hash slot of `key` (its hash tag's, if it has one): CRC16 (XMODEM) modulo 16 384.
fn slot_of(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let close = key[open + 1..].iter().position(|&c| c == b'}')?;
            (close > 0).then(|| &key[open + 1..open + 1 + close])
        })
        .unwrap_or(key);
    (usize::from(crc16::State::<crc16::XMODEM>::calculate(tagged)) % SLOTS) as u16
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

/// The URL of node `addr` (`host:port`): `template` (a seed's URL: scheme, credentials,
/// options) with that host and port.
fn node_url(template: &url::Url, addr: &str) -> RedisResult<url::Url> {
    let (host, port) = split_host_port(addr);
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let mut url = template.clone();
    let bad = |what: &str| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "unusable Redis Cluster node address",
            format!("{what} of {addr:?}"),
        ))
    };
    url.set_host(Some(&host)).map_err(|_| bad("host"))?;
    url.set_port(Some(port)).map_err(|()| bad("port"))?;
    Ok(url)
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

fn no_master() -> RedisError {
    RedisError::from((
        ErrorKind::ClusterConnectionNotFound,
        "no master of the Redis Cluster is known for this call",
    ))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn host_port(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// `host:port` (IPv6 hosts without brackets) into its parts; no port: 6379.
fn split_host_port(addr: &str) -> (&str, u16) {
    match addr.rsplit_once(':') {
        Some((h, p)) => match p.parse() {
            Ok(port) => (h.trim_start_matches('[').trim_end_matches(']'), port),
            Err(_) => (addr, 6379),
        },
        None => (addr, 6379),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![bulk(host), Value::Int(port), bulk("id")])
    }

    #[test]
    fn routes_by_the_first_key() {
        let mut f = redis::cmd("FCALL");
        f.arg("dueq_enqueue")
            .arg(2)
            .arg("{q}:sched")
            .arg("{q}:meta");
        assert_eq!(target_of(&f), Target::Slot(slot_of(b"q")));
        assert_eq!(slot_of(b"{q}:sched"), slot_of(b"q"));
        let mut probe = redis::cmd("FCALL");
        probe.arg("dueq_version").arg(0);
        assert_eq!(target_of(&probe), Target::AnyMaster);
        let mut h = redis::cmd("HGETALL");
        h.arg("k");
        assert_eq!(target_of(&h), Target::Slot(slot_of(b"k")));
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("#!lua name=x");
        assert_eq!(target_of(&load), Target::EveryMaster);
        let mut cfg = redis::cmd("CONFIG");
        cfg.arg("GET").arg("maxmemory-policy");
        assert_eq!(target_of(&cfg), Target::AnyMaster);
        assert_eq!(target_of(&redis::cmd("TIME")), Target::AnyMaster);
        // the slots Redis gives ("foo" 12182, "bar" 5061, as CLUSTER KEYSLOT says)
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"bar"), 5_061);
        assert_eq!(slot_of(b"{}x"), slot_of(b"{}x"));
        assert_eq!(slot_of(b"a{b}c"), slot_of(b"b"));
    }

    #[test]
    fn parses_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.5", 7004),
            ]),
        ]);
        let t = Topology::parse(&reply, "10.0.0.9:7001").unwrap();
        assert_eq!(t.masters, ["10.0.0.1:7000", "10.0.0.9:7001"]);
        assert_eq!(t.master_of(0), Some("10.0.0.1:7000"));
        assert_eq!(t.master_of(5460), Some("10.0.0.1:7000"));
        assert_eq!(t.master_of(5461), Some("10.0.0.9:7001"));
        assert_eq!(t.master_of(16383), Some("10.0.0.9:7001"));
        assert_eq!(
            t.nodes,
            [
                "10.0.0.1:7000",
                "10.0.0.9:7001",
                "10.0.0.4:7003",
                "10.0.0.5:7004"
            ]
        );
        let partial = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(99),
            node("h", 1),
        ])]);
        let t = Topology::parse(&partial, "h:1").unwrap();
        assert_eq!(t.master_of(100), None);
        assert!(Topology::parse(&Value::Nil, "h:1").is_err());
    }

    #[test]
    fn node_urls_keep_the_seed_options() {
        let t = url::Url::parse("rediss://u:p%40w@seed:7000/?protocol=3#insecure").unwrap();
        assert_eq!(
            node_url(&t, "10.0.0.2:7001").unwrap().as_str(),
            "rediss://u:p%40w@10.0.0.2:7001/?protocol=3#insecure"
        );
        assert_eq!(
            node_url(&t, "::1:7002").unwrap().as_str(),
            "rediss://u:p%40w@[::1]:7002/?protocol=3#insecure"
        );
    }

    #[test]
    fn splits_addresses() {
        assert_eq!(split_host_port("10.0.0.1:7000"), ("10.0.0.1", 7000));
        assert_eq!(split_host_port("::1:7000"), ("::1", 7000));
        assert_eq!(split_host_port("[::1]:7000"), ("::1", 7000));
        assert_eq!(split_host_port("host"), ("host", 6379));
    }
}
