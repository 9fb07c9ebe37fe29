//! Redis Cluster: `redis+cluster://h1:p1,h2:p2` (or comma-separated `redis://` URLs).
//!
//! The link routes each call itself, to the master that serves the slot of its first key
//! (a pipeline: of its first keyed command; a keyless command: any master, in turn), over
//! one multiplexed connection per node. The slot map comes from `CLUSTER SLOTS` (any node
//! that answers); it is read again in the background every second and after a `MOVED`, a
//! refused connection, a dropped or timed-out call or a `READONLY` reply (at most every
//! [`REFRESH_GAP`](refresh::REFRESH_GAP)), never while calls wait for it. So one node's trouble delays only the
//! calls routed to that node.
//!
//! A call refused without being run is tried again until the response timeout: `MOVED` and
//! `ASK` at once on the node named, `CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, `LOADING`,
//! `READONLY` and a connection that could not be opened after a pause of 10 ms doubling to
//! 100 ms (with jitter), routed again by the slot map of then. A call that may have run (its
//! connection dropped, or no answer in time) is not repeated: the error reaches the caller,
//! who retries as after any Redis error.
//!
//! Why not redis-rs's `cluster_async::ClusterConnection`: its one task serves
//! every node, and while it reads the slot map again (`refresh_slots` holds the slot map's
//! write lock, redis 1.8.1 `cluster_handling/async_connection/mod.rs:983`) it polls none of
//! the calls in flight (`poll_flush`, :1713). With tokio 1.54, a call whose read of that lock
//! is granted just as the task's cooperative budget runs out keeps the permit and returns
//! `Pending` (`sync/batch_semaphore.rs:653-665`); the refresh then waits for that call and the
//! call for the refresh: the connection answers nothing, to any node, for good. A killed master
//! under a few thousand calls a second did it in most tries. Its retry pause is 1.28 s at
//! least (`RetryParams::default`), so a call refused once with `CLUSTERDOWN` waited that long
//! after the cluster was whole again; shortening the pause made the hang above near certain.

mod call;
mod node;
mod refresh;
mod slots;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Value};

use call::{Reply, Req, no_master};
use node::{Node, host_port};
use refresh::{RefreshState, watch};
use slots::{Target, Topology, target_of};

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
}
