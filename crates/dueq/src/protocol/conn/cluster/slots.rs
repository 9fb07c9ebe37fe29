//! The slot map: which master serves each of the 16 384 hash slots, read from a
//! `CLUSTER SLOTS` reply, and the slot (or the masters) a command goes to.

use redis::{Arg, Cmd, ErrorKind, RedisError, RedisResult, Value};

use super::node::{host_port, split_host_port};

/// Redis Cluster hash slots.
const SLOTS: usize = 16_384;

/// The slot map as a node last told it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Topology {
    /// `host:port` of each master.
    pub(super) masters: Vec<String>,
    /// Per slot, the index of its master in `masters` ([`UNSERVED`]: none).
    slot_master: Vec<u16>,
    /// Every node named, masters first: whom to ask for the slot map next time.
    pub(super) nodes: Vec<String>,
}

const UNSERVED: u16 = u16::MAX;

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Slot(u16),
    AnyMaster,
    EveryMaster,
}

impl Topology {
    pub(super) fn master_of(&self, slot: u16) -> Option<&str> {
        let i = *self.slot_master.get(usize::from(slot))?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }

    /// A `CLUSTER SLOTS` reply from node `asked` (whose host stands for a node named with
    /// an empty host).
    pub(super) fn parse(reply: &Value, asked: &str) -> RedisResult<Self> {
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
pub(super) fn target_of(cmd: &Cmd) -> Target {
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
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
}
