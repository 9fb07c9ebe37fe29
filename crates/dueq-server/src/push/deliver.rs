//! One delivery: POST a claimed task to its queue's webhook, signed, and turn the answer into
//! an [`Outcome`] (2xx acknowledges; any other status, a timeout or a connection error is a
//! failed attempt that the worker retries with its backoff).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use dueq::{ClaimedTask, Outcome, TRACEPARENT, TRACESTATE, Webhook};
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use sha2::Sha256;

/// Standard Webhooks: the message id, `{queue}:{task id}`, the same for every attempt.
pub const HEADER_WEBHOOK_ID: &str = "webhook-id";
/// Standard Webhooks: when the delivery started, Unix seconds (Redis clock).
pub const HEADER_WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Standard Webhooks: `v1,<base64 signature>`, one per signing key, separated by spaces.
pub const HEADER_WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// The task id (12 hex digits).
pub const HEADER_TASK_ID: &str = "dueq-task-id";
/// The business key, percent-encoded (every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`); absent
/// when the task has none.
pub const HEADER_TASK_KEY: &str = "dueq-task-key";
/// This attempt's number, from 1.
pub const HEADER_ATTEMPT: &str = "dueq-attempt";
/// The queue name.
pub const HEADER_QUEUE: &str = "dueq-queue";
/// The task's due time, Unix epoch ms (Redis clock).
pub const HEADER_DUE_AT: &str = "dueq-due-at-ms";
/// Prefix of the HTTP header that carries each task header (other than the trace context,
/// which travels as `traceparent` / `tracestate`).
pub const HEADER_TASK_HEADER_PREFIX: &str = "dueq-header-";

/// Most bytes of a failed answer's body kept in the task's `last_error`.
const ERROR_BODY_BYTES: usize = 256;

/// The `webhook-signature` value for `body` sent as message `id` at `timestamp_s` (Unix
/// seconds), by the Standard Webhooks specification: for each key, `v1,` and the base64 of
/// HMAC-SHA256 keyed with it over `{id}.{timestamp_s}.{body}`; several are joined by spaces
/// so that a receiver holding either secret of a rotation accepts the delivery.
pub fn sign(keys: &[Vec<u8>], id: &str, timestamp_s: u64, body: &[u8]) -> String {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        // HMAC takes keys of any length (longer ones are hashed first), so this cannot fail
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            continue;
        };
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp_s.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        out.push(format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())));
    }
    out.join(" ")
}

/// RFC 3986 percent-encoding of every byte outside the unreserved set.
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `application/json` when the payload is one JSON value (what the HTTP API stores), else
/// `application/octet-stream`.
fn content_type(payload: &[u8]) -> &'static str {
    if serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok() {
        "application/json"
    } else {
        "application/octet-stream"
    }
}

/// An error with its causes, `a: b: c` (reqwest's own text rarely names the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Delivers the tasks of one queue to its webhook.
pub(crate) struct Deliverer {
    pub http: reqwest::Client,
    pub webhook: Webhook,
    /// The queue, where a failed delivery's error is noted for people to see.
    pub queue: dueq::Queue,
    /// The test clock, when the Redis runs it: `webhook-timestamp` stays real time, so that
    /// receivers that check it against their own clock accept the deliveries of a test.
    pub test_clock: Option<dueq::TestClock>,
}

impl Deliverer {
    /// Runs one delivery; a failure's error is also noted on the webhook.
    pub(crate) async fn deliver(&self, task: ClaimedTask) -> Outcome {
        let queue = &self.webhook.queue;
        let id = task.id.clone();
        let outcome = self.post(task).await;
        if let Outcome::Retry { error, .. } = &outcome {
            tracing::debug!(queue = %queue, id = %id, error = %error, "webhook delivery failed");
            if let Err(e) = self.queue.note_webhook_error(error).await {
                tracing::debug!(queue = %queue, error = %e, "could not note the delivery error");
            }
        }
        outcome
    }

    async fn post(&self, task: ClaimedTask) -> Outcome {
        let w = &self.webhook;
        let id = format!("{}:{}", w.queue, task.id);
        let mut started_ms = task.started_at_ms;
        if let Some(clock) = &self.test_clock {
            // Redis time now, whatever moves the clock made since the claim; a clock that
            // cannot be read leaves the virtual time, which a receiver may refuse
            if let Ok(r) = clock.now().await {
                started_ms = r.now_ms.saturating_sub(r.offset_ms);
            }
        }
        let timestamp_s = started_ms / 1000;
        let signature = sign(
            &w.signing_keys(task.started_at_ms),
            &id,
            timestamp_s,
            &task.payload,
        );
        let mut req = self
            .http
            .post(&w.url)
            .timeout(Duration::from_millis(w.timeout_ms))
            .header(CONTENT_TYPE, content_type(&task.payload))
            .header(HEADER_WEBHOOK_ID, id)
            .header(HEADER_WEBHOOK_TIMESTAMP, timestamp_s.to_string())
            .header(HEADER_WEBHOOK_SIGNATURE, signature)
            .header(HEADER_TASK_ID, task.id.as_str())
            .header(HEADER_ATTEMPT, task.attempt.to_string())
            .header(HEADER_QUEUE, w.queue.as_str())
            .header(HEADER_DUE_AT, task.due_at_ms.to_string());
        if let Some(k) = &task.key {
            // percent-encoded text is ASCII, always a valid header value
            if let Ok(v) = HeaderValue::from_str(&percent_encode(k)) {
                req = req.header(HEADER_TASK_KEY, v);
            }
        }
        // the delivery's consumer span, when spans are exported, is the receiver's parent
        for (name, value) in dueq::trace::run_context(&task).iter() {
            if let Ok(v) = HeaderValue::from_str(value) {
                req = req.header(name, v);
            }
        }
        // headers are checked at enqueue: names are tokens, values printable ASCII
        for (name, value) in task.headers.iter() {
            if name == TRACEPARENT || name == TRACESTATE {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::try_from(format!("{HEADER_TASK_HEADER_PREFIX}{name}")),
                HeaderValue::from_str(value),
            ) {
                req = req.header(n, v);
            }
        }
        match req.body(task.payload).send().await {
            Ok(res) if res.status().is_success() => Outcome::Success,
            Ok(mut res) => {
                let status = res.status();
                let mut body = Vec::new();
                while body.len() < ERROR_BODY_BYTES {
                    match res.chunk().await {
                        Ok(Some(c)) => body.extend_from_slice(&c),
                        _ => break,
                    }
                }
                body.truncate(ERROR_BODY_BYTES);
                let note = if status.is_redirection() {
                    " (redirects are not followed)"
                } else {
                    ""
                };
                let text = String::from_utf8_lossy(&body);
                let text = text.trim();
                if text.is_empty() {
                    Outcome::retry(format!("webhook answered HTTP {status}{note}"))
                } else {
                    Outcome::retry(format!("webhook answered HTTP {status}{note}: {text}"))
                }
            }
            Err(e) if e.is_timeout() => {
                Outcome::retry(format!("webhook did not answer within {} ms", w.timeout_ms))
            }
            Err(e) => Outcome::retry(format!("webhook request failed: {}", chain(&e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_known_vector() {
        // python3 -c 'import hmac,hashlib,base64;print(base64.b64encode(hmac.new(
        //   b"0123456789abcdef01234567", b"q:000000000001.1700000000.{\"order\":42}",
        //   hashlib.sha256).digest()).decode())'
        let key = b"0123456789abcdef01234567".to_vec();
        let one = "v1,pL9loRcmkWmcPkURAea0vfCiOLha5XW5WiUsTHSxQn8=";
        assert_eq!(
            sign(
                std::slice::from_ref(&key),
                "q:000000000001",
                1_700_000_000,
                br#"{"order":42}"#
            ),
            one
        );
        // two keys during a rotation: two signatures, the new key's first
        assert_eq!(
            sign(
                &[key, b"another key".to_vec()],
                "q:000000000001",
                1_700_000_000,
                br#"{"order":42}"#
            )
            .split(' ')
            .next(),
            Some(one)
        );
    }

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(percent_encode("order:42/cancel"), "order%3A42%2Fcancel");
        assert_eq!(percent_encode("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(percent_encode("é %"), "%C3%A9%20%25");
    }

    #[test]
    fn json_payloads_are_labelled_json() {
        assert_eq!(content_type(br#"{"a":1}"#), "application/json");
        assert_eq!(content_type(b" 42 "), "application/json");
        assert_eq!(content_type(b""), "application/octet-stream");
        assert_eq!(content_type(b"hello"), "application/octet-stream");
        assert_eq!(content_type(&[0xff, 0x00]), "application/octet-stream");
    }
}
