//! The plumbing every script wrapper shares: [`run`] and [`run_global`] (a queue's keys or
//! a global key, and arguments in, a [`Reply`] cursor out), the [`Args`] builder, and the
//! per-call task cap.

use redis::Value;

use super::conn::{Conn, WaitFor};
use super::keys::{GlobalKey, QueueKeys, Span, TEST_CLOCK_KEY};
use super::scripts::{self, Function};
use crate::error::{Error, ErrorKind, Result};

/// Most tasks one script call handles (bounded work per call).
pub(crate) const MAX_BATCH: usize = 1000;

/// Calls operation `function` on the queue (or partition) of `k`, passing the span of its
/// keys the registry gives the operation.
pub(crate) async fn run(
    conn: &mut Conn,
    function: &Function<Span>,
    k: &QueueKeys,
    args: Vec<Vec<u8>>,
) -> Result<Reply> {
    let keys = k.script_keys();
    let name = function.name_on(conn);
    let call: Boxed<'_> = Box::pin(fcall(
        conn,
        function.op,
        name,
        &keys[..function.takes.len()],
        args,
    ));
    call.await
}

/// Calls operation `function` on its one key outside any hash tag.
pub(crate) async fn run_global(
    conn: &mut Conn,
    function: &Function<GlobalKey>,
    args: Vec<Vec<u8>>,
) -> Result<Reply> {
    let keys = [function.takes.key];
    let name = function.name_on(conn);
    let call: Boxed<'_> = Box::pin(fcall(conn, function.op, name, &keys, args));
    call.await
}

/// A script call as a boxed future: every operation goes through one, so the futures of
/// the library's methods stay shallow enough for the compiler to prove a caller's spawned
/// task `Send`.
type Boxed<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Reply>> + Send + 'a>>;

/// Calls operation `name` (`FCALL` of the library's function `function`). A server without
/// the library (`Function not found`: restart without persistence, `FUNCTION FLUSH`) gets it
/// loaded and the call again; the refused call wrote nothing.
async fn fcall(
    conn: &mut Conn,
    name: &'static str,
    function: &str,
    keys: &[&str],
    args: Vec<Vec<u8>>,
) -> Result<Reply> {
    if let Some(wait) = conn.wait()
        && DURABLE.contains(&name)
    {
        let v = run_durable(conn, name, function, keys, &args, wait).await?;
        return Reply::new(name, v);
    }
    let call = fcall_cmd(conn, name, function, keys, &args);
    let v: Value = match call.query_async(conn).await {
        Err(e) if scripts::is_missing_function(&e) => {
            scripts::load_all(conn).await?;
            call.query_async(conn).await?
        }
        other => other?,
    };
    Reply::new(name, v)
}

/// `FCALL function keys args` of operation `op`. On the test clock the clock's key follows the
/// call's own keys (`test_clock.lua` takes it off `KEYS` again); in a build with the frozen clock, the
/// frozen time follows the arguments.
fn fcall_cmd(conn: &Conn, op: &str, function: &str, keys: &[&str], args: &[Vec<u8>]) -> redis::Cmd {
    let clocked = scripts::on_test_clock(conn, op);
    let mut call = redis::cmd("FCALL");
    call.arg(function)
        .arg(keys.len() + usize::from(clocked))
        .arg(keys);
    if clocked {
        call.arg(TEST_CLOCK_KEY);
    }
    call.arg(args);
    #[cfg(all(feature = "frozen-clock", debug_assertions))]
    call.arg(conn.clock_arg());
    call
}

/// The writes a durable connection follows with `WAIT`: the ones whose loss in
/// a failover a caller would notice (a task that vanishes, a cancel or an ack undone). Claims,
/// extensions and recovery are left out: losing one only hands a task out again, which
/// at-least-once allows, and waiting there would slow every claim.
const DURABLE: &[&str] = &[
    "enqueue",
    "ack",
    "nack",
    "cancel",
    "reschedule",
    "dead_retry",
    "dead_delete",
];

/// `FCALL` and `WAIT` in one pipeline: both go down the same socket back to back, so the
/// `WAIT` counts this write (a `WAIT` sent on another connection after a reconnect would
/// count nothing and confirm at once). `Function not found` loads the library and sends
/// both again (the refused call wrote nothing).
async fn run_durable(
    conn: &mut Conn,
    name: &'static str,
    function: &str,
    keys: &[&str],
    args: &[Vec<u8>],
    wait: WaitFor,
) -> Result<Value> {
    let mut pipe = redis::pipe();
    pipe.add_command(fcall_cmd(conn, name, function, keys, args));
    pipe.cmd("WAIT").arg(wait.replicas).arg(wait.timeout_ms);
    let answer: redis::RedisResult<(Value, u64)> = match pipe.query_async(conn).await {
        Err(e) if scripts::is_missing_function(&e) => {
            scripts::load_all(conn).await?;
            pipe.query_async(conn).await
        }
        other => other,
    };
    let (v, acked) = answer?;
    if acked < u64::from(wait.replicas) {
        return Err(Error::new(
            ErrorKind::NotReplicated,
            format!(
                "{name}: written on the primary but confirmed by {acked} of {} replicas within \
                 {} ms; it may be lost if the primary fails now (an enqueue with a key sent \
                 again returns the first task while that task is scheduled or running, but \
                 creates a second one once the first has finished; an ack, nack, cancel or \
                 reschedule sent again finds it applied: lease_lost or not_found)",
                wait.replicas, wait.timeout_ms
            ),
        ));
    }
    Ok(v)
}

/// Argument list builder.
#[derive(Default)]
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>);

impl Args {
    pub(crate) fn s(&mut self, v: impl AsRef<[u8]>) -> &mut Self {
        self.0.push(v.as_ref().to_vec());
        self
    }
    pub(crate) fn n(&mut self, v: impl std::fmt::Display) -> &mut Self {
        self.0.push(v.to_string().into_bytes());
        self
    }
    pub(crate) fn take(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.0)
    }
}

/// A cursor over a script's array reply.
pub(crate) struct Reply {
    items: std::vec::IntoIter<Value>,
    script: &'static str,
}

impl Reply {
    pub fn new(script: &'static str, v: Value) -> Result<Self> {
        match v {
            Value::Array(items) => Ok(Self {
                items: items.into_iter(),
                script,
            }),
            other => Err(Error::protocol(format!(
                "{script}: expected an array reply, got {other:?}"
            ))),
        }
    }

    fn bad(&self, what: &str, v: &Value) -> Error {
        Error::protocol(format!("{}: expected {what}, got {v:?}", self.script))
    }

    fn next_value(&mut self) -> Result<Value> {
        self.items
            .next()
            .ok_or_else(|| Error::protocol(format!("{}: reply is too short", self.script)))
    }

    pub fn remaining(&self) -> usize {
        self.items.len()
    }

    pub fn i64(&mut self) -> Result<i64> {
        match self.next_value()? {
            Value::Int(i) => Ok(i),
            Value::BulkString(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| self.bad("an integer", &Value::BulkString(b.clone()))),
            other => Err(self.bad("an integer", &other)),
        }
    }

    /// A time or count that may be -1 for "none".
    pub fn opt_u64(&mut self) -> Result<Option<u64>> {
        let i = self.i64()?;
        Ok(u64::try_from(i).ok())
    }

    pub fn u64(&mut self) -> Result<u64> {
        let i = self.i64()?;
        u64::try_from(i).map_err(|_| self.bad("a non-negative integer", &Value::Int(i)))
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>> {
        match self.next_value()? {
            Value::BulkString(b) => Ok(b),
            Value::SimpleString(s) => Ok(s.into_bytes()),
            other => Err(self.bad("a string", &other)),
        }
    }

    /// Text that may be empty for "none" (lossy UTF-8).
    pub fn opt_string(&mut self) -> Result<Option<String>> {
        let b = self.bytes()?;
        Ok((!b.is_empty()).then(|| String::from_utf8_lossy(&b).into_owned()))
    }

    pub fn string(&mut self) -> Result<String> {
        let b = self.bytes()?;
        String::from_utf8(b)
            .map_err(|_| Error::protocol(format!("{}: non-UTF-8 text", self.script)))
    }
}
