//! Redis behind Sentinel: `redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER_NAME[/DB]`.
//!
//! The link asks the sentinels (in the order given, first answer wins) for the current
//! primary of `MASTER_NAME`, checks with `ROLE` that the server named is a primary, and sends
//! every call there through one auto-reconnecting `ConnectionManager`. After a call fails
//! for want of a connection, or with `READONLY` (the server was demoted by a failover), it
//! asks the sentinels again, at most every [`RESOLVE_GAP`], and switches to the new primary
//! if there is one; a `READONLY` write is then sent once more to the new primary (a refused
//! write wrote nothing, so this cannot apply it twice). Other failures reach the caller, who
//! retries as after any Redis error.
//!
//! Failures alone are not enough: after a promotion the old primary keeps taking writes until
//! Sentinel demotes it (seconds), and those writes are lost. So a watcher ([`watch`]) also
//! asks the sentinels every 500 ms, and at once when one publishes `+switch-master`.
//!
//! URL variants: `rediss+sentinel://` speaks TLS to the sentinels and to Redis; the user
//! info (`user:pass@`) is for Redis; `?sentinel_password=...` (and `sentinel_username`)
//! for the sentinels. A host without a port means 26379.

use std::sync::RwLock;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, Value};
use tokio::time::Instant;

use super::{CONNECT_TIMEOUT, is_outage, is_readonly, manager};
use crate::error::{Error, Result};

/// Least time between two rounds of questions to the sentinels.
const RESOLVE_GAP: Duration = Duration::from_millis(100);
/// Timeout of one question to one sentinel.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Default sentinel port.
const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `host:port` of each sentinel.
    sentinels: Vec<String>,
    master: String,
    db: i64,
    /// `user:pass@` (still percent-encoded) for Redis, or empty.
    redis_auth: String,
    /// `user:pass@` for the sentinels, or empty.
    sentinel_auth: String,
}

impl SentinelUrl {
    /// `None` when `url` is not a Sentinel URL.
    ///
    /// # Errors
    /// [`crate::ErrorKind::InvalidInput`] for a Sentinel URL without hosts or master name.
    pub(crate) fn parse(url: &str) -> Result<Option<Self>> {
        let (scheme, rest) = if let Some(r) = url.strip_prefix("redis+sentinel://") {
            ("redis", r)
        } else if let Some(r) = url.strip_prefix("rediss+sentinel://") {
            ("rediss", r)
        } else {
            return Ok(None);
        };
        let bad = |why: &str| Error::invalid(format!("bad Sentinel URL {url:?}: {why}"));
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no /MASTER_NAME"))?;
        let (redis_auth, hosts) = match authority.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), authority),
        };
        let sentinels: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| {
                let has_port = h
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                    && !h.ends_with(']');
                if has_port {
                    h.to_owned()
                } else {
                    format!("{h}:{SENTINEL_PORT}")
                }
            })
            .collect();
        if sentinels.is_empty() {
            return Err(bad("no sentinel hosts"));
        }
        let mut parts = path.split('/');
        let master = parts.next().unwrap_or_default().to_owned();
        if master.is_empty() {
            return Err(bad("empty master name"));
        }
        let db = match parts.next() {
            None | Some("") => 0,
            Some(d) => d.parse().map_err(|_| bad("the database is not a number"))?,
        };
        let (mut s_user, mut s_pass) = (String::new(), String::new());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_password", v)) => v.clone_into(&mut s_pass),
                Some(("sentinel_username", v)) => v.clone_into(&mut s_user),
                _ => return Err(bad(&format!("unknown parameter {pair:?}"))),
            }
        }
        let sentinel_auth = if s_user.is_empty() && s_pass.is_empty() {
            String::new()
        } else {
            format!("{s_user}:{s_pass}@")
        };
        Ok(Some(Self {
            scheme,
            sentinels,
            master,
            db,
            redis_auth,
            sentinel_auth,
        }))
    }

    fn sentinel_url(&self, host: &str) -> String {
        format!("{}://{}{host}", self.scheme, self.sentinel_auth)
    }

    fn redis_url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!(
            "{}://{}{host}:{port}/{}",
            self.scheme, self.redis_auth, self.db
        )
    }
}

struct Current {
    /// Bumped at every switch to another primary.
    generation: u64,
    addr: (String, u16),
    client: redis::Client,
    conn: ConnectionManager,
}

/// The command link to whatever server the sentinels name as primary (module docs).
pub(crate) struct SentinelLink {
    url: SentinelUrl,
    response_timeout: Duration,
    current: RwLock<Current>,
    /// When the sentinels were last asked; held while asking, so callers queue behind one
    /// round instead of all asking at once.
    resolving: tokio::sync::Mutex<Option<Instant>>,
}

impl SentinelLink {
    pub(crate) async fn connect(url: SentinelUrl, response_timeout: Duration) -> Result<Self> {
        let addr = ask_sentinels(&url).await?;
        let (client, conn) = open_primary(&url, &addr, response_timeout).await?;
        tracing::info!(master = %url.master, primary = %format!("{}:{}", addr.0, addr.1),
            "Sentinel: connected to the primary");
        Ok(Self {
            url,
            response_timeout,
            current: RwLock::new(Current {
                generation: 0,
                addr,
                client,
                conn,
            }),
            resolving: tokio::sync::Mutex::new(Some(Instant::now())),
        })
    }

    fn current(&self) -> (u64, ConnectionManager) {
        // A poisoned lock only means a panic elsewhere while swapping; the value inside is
        // a whole `Current` either way.
        let c = self.current.read().unwrap_or_else(|p| p.into_inner());
        (c.generation, c.conn.clone())
    }

    pub(crate) fn pubsub_client(&self) -> redis::Client {
        let c = self.current.read().unwrap_or_else(|p| p.into_inner());
        c.client.clone()
    }

    pub(crate) fn db(&self) -> i64 {
        self.url.db
    }

    pub(crate) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.current();
        let r = conn.req_packed_command(cmd).await;
        if let Err(e) = &r
            && is_outage(e)
            && self.re_resolve(generation).await
            && is_readonly(e)
        {
            let (_, mut conn) = self.current();
            return conn.req_packed_command(cmd).await;
        }
        r
    }

    pub(crate) async fn commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.current();
        let r = conn.req_packed_commands(pipeline, offset, count).await;
        if let Err(e) = &r
            && is_outage(e)
        {
            // not repeated: part of a pipeline may have been applied
            self.re_resolve(generation).await;
        }
        r
    }

    /// Asks the sentinels for the primary again (unless another caller just did) and
    /// switches to it. Whether the link now points elsewhere than at `generation`.
    async fn re_resolve(&self, generation: u64) -> bool {
        let mut last = self.resolving.lock().await;
        if self.current().0 != generation {
            return true;
        }
        if last.is_some_and(|t| t.elapsed() < RESOLVE_GAP) {
            return false;
        }
        *last = Some(Instant::now());
        self.switch_if_moved().await
    }

    /// Asks the sentinels and switches when they name another primary (the caller holds
    /// `resolving`). Whether it switched.
    async fn switch_if_moved(&self) -> bool {
        let addr = match ask_sentinels(&self.url).await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "Sentinel: no primary named yet");
                return false;
            }
        };
        let same = {
            let c = self.current.read().unwrap_or_else(|p| p.into_inner());
            c.addr == addr
        };
        if same {
            return false;
        }
        match open_primary(&self.url, &addr, self.response_timeout).await {
            Ok((client, conn)) => {
                let mut c = self.current.write().unwrap_or_else(|p| p.into_inner());
                tracing::warn!(master = %self.url.master,
                    from = %format!("{}:{}", c.addr.0, c.addr.1),
                    to = %format!("{}:{}", addr.0, addr.1),
                    "Sentinel: the primary changed; switched to the new one");
                *c = Current {
                    generation: c.generation + 1,
                    addr,
                    client,
                    conn,
                };
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "Sentinel: the named primary is not usable yet");
                false
            }
        }
    }
}

/// How often the watcher asks the sentinels even when nothing failed: a demoted primary may
/// keep taking writes for seconds after the promotion (until Sentinel reconfigures it), and
/// writes it takes then are lost; asking keeps that window short.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// The background half of the link, until it is dropped: asks the sentinels every
/// [`WATCH_EVERY`] (with jitter) and at once when a sentinel publishes `+switch-master`.
pub(crate) async fn watch(link: std::sync::Weak<SentinelLink>) {
    use futures_util::StreamExt;
    let mut events = None;
    loop {
        let Some(l) = link.upgrade() else { return };
        if events.is_none() {
            events = subscribe_switches(&l.url).await;
        }
        drop(l);
        let pause = crate::backoff::jittered(WATCH_EVERY);
        let switched = match events.as_mut() {
            Some(stream) => tokio::select! {
                m = stream.next() => {
                    if m.is_none() {
                        events = None;
                    }
                    true
                }
                () = tokio::time::sleep(pause) => false,
            },
            None => {
                tokio::time::sleep(pause).await;
                false
            }
        };
        let Some(l) = link.upgrade() else { return };
        let mut last = l.resolving.lock().await;
        if switched || last.is_none_or(|t| t.elapsed() >= RESOLVE_GAP) {
            *last = Some(Instant::now());
            l.switch_if_moved().await;
        }
    }
}

/// A `+switch-master` subscription on the first sentinel that takes one.
async fn subscribe_switches(
    url: &SentinelUrl,
) -> Option<std::pin::Pin<Box<dyn futures_util::Stream<Item = redis::Msg> + Send>>> {
    for host in &url.sentinels {
        let Ok(client) = redis::Client::open(url.sentinel_url(host).as_str()) else {
            continue;
        };
        let Ok(Ok(mut ps)) =
            tokio::time::timeout(SENTINEL_TIMEOUT, client.get_async_pubsub()).await
        else {
            continue;
        };
        if ps.subscribe("+switch-master").await.is_ok() {
            return Some(Box::pin(ps.into_on_message()));
        }
    }
    None
}

/// The first answer of `SENTINEL get-master-addr-by-name`, sentinel by sentinel.
async fn ask_sentinels(url: &SentinelUrl) -> Result<(String, u16)> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SENTINEL_TIMEOUT))
        .set_response_timeout(Some(SENTINEL_TIMEOUT));
    let mut errors = Vec::new();
    for host in &url.sentinels {
        let su = url.sentinel_url(host);
        let client = redis::Client::open(su.as_str())
            .map_err(|e| Error::invalid(format!("bad sentinel address {host:?}: {e}")))?;
        let answer = async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&url.master)
                .query_async::<Option<(String, u16)>>(&mut c)
                .await
        };
        match answer.await {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => errors.push(format!("{host}: does not know {:?}", url.master)),
            Err(e) => errors.push(format!("{host}: {e}")),
        }
    }
    Err(Error::new(
        crate::ErrorKind::Redis,
        format!("no sentinel named a primary: {}", errors.join("; ")),
    ))
}

/// A connection to `addr`, checked with `ROLE` to be a primary.
async fn open_primary(
    url: &SentinelUrl,
    addr: &(String, u16),
    response_timeout: Duration,
) -> Result<(redis::Client, ConnectionManager)> {
    let ru = url.redis_url(&addr.0, addr.1);
    let client = redis::Client::open(ru.as_str())
        .map_err(|e| Error::invalid(format!("bad primary address {addr:?}: {e}")))?;
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, manager(&client, response_timeout))
        .await
        .map_err(|_| Error::new(crate::ErrorKind::Redis, "connect to the primary timed out"))??;
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
    let is_master = matches!(role.first(), Some(Value::BulkString(b)) if b == b"master")
        || matches!(role.first(), Some(Value::SimpleString(s)) if s == "master");
    if !is_master {
        return Err(Error::new(
            crate::ErrorKind::Redis,
            format!("{}:{} is not a primary (ROLE)", addr.0, addr.1),
        ));
    }
    Ok((client, conn))
}

#[cfg(test)]
mod tests {
    use super::SentinelUrl;

    #[test]
    fn parses_sentinel_urls() {
        assert_eq!(SentinelUrl::parse("redis://a:1").unwrap(), None);
        let u = SentinelUrl::parse("redis+sentinel://h1:1,h2/mymaster")
            .unwrap()
            .unwrap();
        assert_eq!(u.sentinels, vec!["h1:1", "h2:26379"]);
        assert_eq!(u.master, "mymaster");
        assert_eq!(u.redis_url("10.0.0.1", 6380), "redis://10.0.0.1:6380/0");
        assert_eq!(u.sentinel_url("h1:1"), "redis://h1:1");

        let u = SentinelUrl::parse(
            "rediss+sentinel://app:p%40ss@h1:1/m/3?sentinel_password=s3&sentinel_username=sv",
        )
        .unwrap()
        .unwrap();
        assert_eq!(u.redis_url("::1", 7000), "rediss://app:p%40ss@[::1]:7000/3");
        assert_eq!(u.sentinel_url("h1:1"), "rediss://sv:s3@h1:1");

        for bad in [
            "redis+sentinel://h1:1",
            "redis+sentinel://h1:1/",
            "redis+sentinel:///m",
            "redis+sentinel://h1/m/x",
            "redis+sentinel://h1/m?tls=1",
        ] {
            assert!(SentinelUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
