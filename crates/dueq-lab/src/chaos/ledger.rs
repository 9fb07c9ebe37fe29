//! The ledger of `dueq chaos`, kept outside Redis: one JSON line per event, appended with one
//! `write` per line (no buffer to lose) by each worker process to its own file, and by the
//! producer to its own; read back by the command while it runs and at the end.
//!
//! A file per process keeps writers from interleaving without locks; a worker killed with
//! SIGKILL can leave at most a torn last line, which the reader skips and counts.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What an ack answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckAnswer {
    /// Completed.
    Acked,
    /// The token was no longer current; nothing changed.
    LeaseLost,
    /// The call failed: the ack may or may not have landed.
    Unknown,
}

/// What an enqueue answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnqueueAnswer {
    /// Written (AOF fsynced before the reply).
    Confirmed,
    /// The call failed: the task may or may not exist.
    Unknown,
}

/// One ledger line. `at_ms` is the writer's wall clock (epoch ms; all processes are on one
/// host, so one clock), used only for the time to recover, never for the checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A worker process started.
    Start {
        /// Its process id.
        pid: u32,
        /// When.
        at_ms: u64,
    },
    /// The producer's answer to one enqueue.
    Enqueue {
        /// Business key (each key is enqueued once).
        key: String,
        /// The answer.
        answer: EnqueueAnswer,
        /// The task's id, when confirmed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Its due time (Redis clock, epoch ms), when confirmed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due_at_ms: Option<u64>,
        /// The error, when the answer is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// When the answer came.
        at_ms: u64,
    },
    /// A task handed to a worker by a claim (written for the whole batch when the claim
    /// answers, before any of its acks).
    Deliver {
        /// Task id.
        id: String,
        /// Business key (empty if none: unexpected).
        key: String,
        /// Lease token of this delivery.
        token: String,
        /// Attempt number (1-based; grows by one per expired lease).
        attempt: u32,
        /// Due time, epoch ms (Redis clock).
        due_at_ms: u64,
        /// Redis time of the claim, epoch ms.
        claimed_at_ms: u64,
        /// When the claim answered.
        at_ms: u64,
    },
    /// The answer to the ack of one delivery.
    Ack {
        /// Task id.
        id: String,
        /// Business key.
        key: String,
        /// Lease token the ack carried.
        token: String,
        /// The answer.
        answer: AckAnswer,
        /// The error, when the answer is unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// When the answer came.
        at_ms: u64,
    },
}

/// Milliseconds since the Unix epoch by this host's clock (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends events to one ledger file, one `write` per line.
pub struct Writer {
    file: File,
}

impl Writer {
    /// Creates (or appends to) `path`.
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self { file })
    }

    /// Appends `ev` as one line.
    ///
    /// # Errors
    /// When the write fails.
    pub fn write(&mut self, ev: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(ev)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }
}

/// One file being read as it grows.
struct Tail {
    path: PathBuf,
    offset: u64,
    /// Bytes after the last newline read so far.
    partial: Vec<u8>,
}

/// Reads ledger files incrementally: each [`poll`](Self::poll) returns the complete lines
/// written since the last one.
#[derive(Default)]
pub struct Reader {
    tails: Vec<Tail>,
    /// Lines that were not a valid event.
    pub bad_lines: u64,
}

impl Reader {
    /// Follows `path` from its start (it need not exist yet).
    pub fn add(&mut self, path: PathBuf) {
        self.tails.push(Tail {
            path,
            offset: 0,
            partial: Vec::new(),
        });
    }

    /// The complete lines written to every file since the last call, parsed, appended to
    /// `out`.
    ///
    /// # Errors
    /// When a file that exists cannot be read.
    pub fn poll(&mut self, out: &mut Vec<Event>) -> std::io::Result<()> {
        for t in &mut self.tails {
            let mut f = match File::open(&t.path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            f.seek(SeekFrom::Start(t.offset))?;
            let mut buf = std::mem::take(&mut t.partial);
            let n = f.read_to_end(&mut buf)?;
            t.offset += n as u64;
            let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            t.partial = buf.split_off(complete);
            for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice(line) {
                    Ok(ev) => out.push(ev),
                    Err(_) => self.bad_lines += 1,
                }
            }
        }
        Ok(())
    }

    /// Torn last lines (a writer killed in the middle of one), counted once the writers are
    /// gone.
    pub fn torn_lines(&self) -> u64 {
        self.tails.iter().filter(|t| !t.partial.is_empty()).count() as u64
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reader_returns_complete_lines_once_and_keeps_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let mut w = Writer::create(&path).unwrap();
        let mut r = Reader::default();
        r.add(path.clone());
        r.add(dir.path().join("not-yet.jsonl"));
        let mut out = Vec::new();
        r.poll(&mut out).unwrap();
        assert!(out.is_empty());
        let ev = Event::Start { pid: 7, at_ms: 1 };
        w.write(&ev).unwrap();
        // a line cut short, as a SIGKILL in the middle of a write would leave it
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"ev":"start","pi"#)
            .unwrap();
        r.poll(&mut out).unwrap();
        assert_eq!(out, vec![ev.clone()]);
        r.poll(&mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(r.torn_lines(), 1);
        assert_eq!(r.bad_lines, 0);
    }

    #[test]
    fn events_round_trip_as_tagged_json() {
        let ev = Event::Ack {
            id: "i".into(),
            key: "t1".into(),
            token: "k".into(),
            answer: AckAnswer::LeaseLost,
            error: None,
            at_ms: 5,
        };
        let line = serde_json::to_string(&ev).unwrap();
        assert_eq!(
            line,
            r#"{"ev":"ack","id":"i","key":"t1","token":"k","answer":"lease_lost","at_ms":5}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), ev);
    }
}
