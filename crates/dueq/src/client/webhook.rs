//! Push delivery targets (webhooks) on a [`Queue`]: set, read, clear.
//!
//! A queue with a webhook has its due tasks POSTed to a URL by any running `dueq serve`
//! (crate `dueq-server`, module `push`): body = the payload bytes, a 2xx answer acknowledges,
//! anything else is a failed attempt. The target lives in the queue's own `webhook` hash
//! (same hash tag as its other keys), so every server and tool sees the same one.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::{Client, Queue};
use crate::error::{Error, Result};
use crate::protocol::webhook::{self, Stored};

/// Longest webhook URL, in bytes.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;
/// Prefix of a signing secret (Standard Webhooks): `whsec_` and the key in base64.
pub const WEBHOOK_SECRET_PREFIX: &str = "whsec_";
/// Shortest signing key, in bytes (after base64 decoding).
pub const MIN_WEBHOOK_SECRET_BYTES: usize = 24;
/// Longest signing key, in bytes (after base64 decoding).
pub const MAX_WEBHOOK_SECRET_BYTES: usize = 64;
/// How long deliveries stay signed with a replaced secret as well as the new one, ms (24 h).
pub const WEBHOOK_ROTATION_MS: u64 = 86_400_000;
/// Most replaced secrets that sign at once: each change within [`WEBHOOK_ROTATION_MS`] keeps
/// the secret it replaced, up to this many (the oldest goes first), so a delivery carries at
/// most this many signatures beside the current one.
pub const MAX_PREVIOUS_WEBHOOK_SECRETS: usize = 8;
/// Most deliveries in flight per queue and server.
pub const MAX_WEBHOOK_CONCURRENCY: u32 = 1000;
/// Longest time a delivery may take, ms (5 minutes).
pub const MAX_WEBHOOK_TIMEOUT_MS: u64 = 300_000;
/// Default deliveries in flight per queue and server.
pub const DEFAULT_WEBHOOK_CONCURRENCY: u32 = 10;
/// Default time a delivery may take, ms.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 10_000;

/// A push delivery target to store with [`Queue::set_webhook`].
///
/// Built with [`WebhookConfig::new`] and the setters; checked in full by
/// [`WebhookConfig::validate`] before anything is written.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Where tasks are POSTed: an absolute `http://` or `https://` URL with a host, at most
    /// 2 048 bytes. Redirects are not followed (a 3xx answer is a failed attempt).
    pub url: String,
    /// Signing secret, as Standard Webhooks writes it: `whsec_` and the base64 of a key of
    /// 24 to 64 bytes. `None` keeps the queue's current secret, or generates one (a 32-byte
    /// key) when the queue has no webhook yet. A new secret replaces the current one, which
    /// keeps signing deliveries beside it for [`WEBHOOK_ROTATION_MS`].
    pub secret: Option<String>,
    /// Most deliveries in flight at once, per queue and per server process: 1 to 1 000.
    /// Default 10.
    pub concurrency: u32,
    /// Time limit of one delivery (connect, send, answer), ms: 1 to 300 000. Default 10 000.
    /// Past it the attempt counts as failed.
    pub timeout_ms: u64,
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &self.url)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("concurrency", &self.concurrency)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl WebhookConfig {
    /// A target at `url` with the defaults (secret kept or generated, concurrency 10,
    /// timeout 10 000 ms).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            secret: None,
            concurrency: DEFAULT_WEBHOOK_CONCURRENCY,
            timeout_ms: DEFAULT_WEBHOOK_TIMEOUT_MS,
        }
    }

    /// Signs with this secret (16 to 256 visible ASCII characters).
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Most deliveries in flight (1 to 1 000).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = n;
        self
    }

    /// Time limit of one delivery, ms (1 to 300 000).
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms;
        self
    }

    /// Checks every field and returns the URL in normalized form (what is stored).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) naming the first bad field.
    pub fn validate(&self) -> Result<String> {
        if self.url.len() > MAX_WEBHOOK_URL_BYTES {
            return Err(Error::invalid(format!(
                "url: is {} bytes; the limit is {MAX_WEBHOOK_URL_BYTES}",
                self.url.len()
            )));
        }
        let url = url::Url::parse(&self.url)
            .map_err(|e| Error::invalid(format!("url: {:?} is not a URL: {e}", self.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(format!(
                "url: {:?} must start with http:// or https://",
                self.url
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Error::invalid(format!("url: {:?} has no host", self.url)));
        }
        if let Some(s) = &self.secret {
            let key = s
                .strip_prefix(WEBHOOK_SECRET_PREFIX)
                .and_then(|b64| BASE64.decode(b64).ok());
            if !key.is_some_and(|k| {
                (MIN_WEBHOOK_SECRET_BYTES..=MAX_WEBHOOK_SECRET_BYTES).contains(&k.len())
            }) {
                return Err(Error::invalid(format!(
                    "secret: must be {WEBHOOK_SECRET_PREFIX} and the base64 of \
                     {MIN_WEBHOOK_SECRET_BYTES} to {MAX_WEBHOOK_SECRET_BYTES} bytes"
                )));
            }
        }
        if self.concurrency == 0 || self.concurrency > MAX_WEBHOOK_CONCURRENCY {
            return Err(Error::invalid(format!(
                "concurrency: must be 1 to {MAX_WEBHOOK_CONCURRENCY}"
            )));
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_WEBHOOK_TIMEOUT_MS {
            return Err(Error::invalid(format!(
                "timeout_ms: must be 1 to {MAX_WEBHOOK_TIMEOUT_MS}"
            )));
        }
        Ok(url.into())
    }
}

/// A queue's stored push delivery target.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Webhook {
    /// Queue name.
    pub queue: String,
    /// Target URL (normalized: lower-case scheme and host, a path of at least `/`).
    pub url: String,
    /// Signing secret (`whsec_` and the key in base64). Its `Debug` output is redacted.
    pub secret: String,
    /// The secrets that changes replaced within the last [`WEBHOOK_ROTATION_MS`], newest
    /// first (at most [`MAX_PREVIOUS_WEBHOOK_SECRETS`]), each with the end of its window
    /// (epoch ms, Redis clock): deliveries are signed with them too until then. Their `Debug`
    /// output is redacted.
    pub previous_secrets: Vec<(String, u64)>,
    /// Most deliveries in flight per server process.
    pub concurrency: u32,
    /// Time limit of one delivery, ms.
    pub timeout_ms: u64,
    /// When it was last set, Unix epoch ms (Redis clock).
    pub updated_at_ms: u64,
    /// The error of the last failed delivery since then, and when (epoch ms, Redis clock).
    pub last_error: Option<(String, u64)>,
}

impl Webhook {
    /// The URL with its password replaced by `***` (`http://alice:***@host/`), for showing a
    /// stored webhook ([`redact_url`](crate::redact_url)).
    pub fn redacted_url(&self) -> String {
        crate::redact_url(&self.url)
    }

    /// The keys a delivery at `now_ms` (Redis clock) is signed with: the secret's, then each
    /// replaced secret's while its window lasts, newest first.
    pub fn signing_keys(&self, now_ms: u64) -> Vec<Vec<u8>> {
        let replaced = self
            .previous_secrets
            .iter()
            .filter(|(_, until)| now_ms < *until)
            .map(|(old, _)| signing_key(old));
        std::iter::once(signing_key(&self.secret))
            .chain(replaced)
            .collect()
    }
}

/// The HMAC key of a stored secret: the base64 after `whsec_`, else the text's own bytes
/// (a secret stored before secrets took the Standard Webhooks form).
pub fn signing_key(secret: &str) -> Vec<u8> {
    secret
        .strip_prefix(WEBHOOK_SECRET_PREFIX)
        .and_then(|b64| BASE64.decode(b64).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("queue", &self.queue)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field(
                "previous_secrets",
                &self
                    .previous_secrets
                    .iter()
                    .map(|(_, until)| ("<redacted>", until))
                    .collect::<Vec<_>>(),
            )
            .field("concurrency", &self.concurrency)
            .field("timeout_ms", &self.timeout_ms)
            .field("updated_at_ms", &self.updated_at_ms)
            .field("last_error", &self.last_error)
            .finish()
    }
}

/// What [`Queue::set_webhook`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebhookSet {
    /// The webhook now in force (with its secret: the only answer that carries a generated one).
    pub webhook: Webhook,
    /// Whether the secret was generated by this call.
    pub secret_generated: bool,
    /// Whether it replaced an earlier webhook.
    pub replaced: bool,
}

/// `whsec_` and the base64 of 32 random bytes from the operating system's generator (the
/// thread-local CSPRNG seeded from it if the OS call fails).
fn random_secret() -> String {
    use rand::TryRng;
    let mut bytes = [0u8; 32];
    if rand::rngs::SysRng.try_fill_bytes(&mut bytes).is_err() {
        bytes = rand::random();
    }
    format!("{WEBHOOK_SECRET_PREFIX}{}", BASE64.encode(bytes))
}

impl Queue {
    /// Gives the queue a push delivery target (replacing any earlier one): from then on every
    /// running `dueq serve` POSTs its due tasks there. Omitting the secret keeps the current
    /// one (or generates one for a new webhook), so changing the URL or the limits does not
    /// break receivers' signature checks; give a secret to rotate it.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) for a bad field (nothing written),
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn set_webhook(&self, config: WebhookConfig) -> Result<WebhookSet> {
        let url = config.validate()?;
        let candidate = random_secret();
        let given = config.secret.as_deref().unwrap_or("");
        self.client().register(self.name()).await?;
        let r = webhook::set(
            &mut self.client().conn(),
            self.keys(),
            &webhook::SetArgs {
                url: &url,
                secret: given,
                new_secret: &candidate,
                concurrency: config.concurrency,
                timeout_ms: config.timeout_ms,
                rotation_ms: WEBHOOK_ROTATION_MS,
                max_previous: MAX_PREVIOUS_WEBHOOK_SECRETS,
            },
        )
        .await?;
        Ok(WebhookSet {
            secret_generated: given.is_empty() && r.secret == candidate,
            replaced: r.existed,
            webhook: Webhook {
                queue: self.name().to_owned(),
                url,
                secret: r.secret,
                concurrency: config.concurrency,
                timeout_ms: config.timeout_ms,
                updated_at_ms: r.now_ms,
                last_error: None,
                previous_secrets: r.previous_secrets,
            },
        })
    }

    /// The queue's push delivery target, or `None`.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails,
    /// [`ErrorKind::Protocol`](crate::ErrorKind) when the stored fields were damaged by hand.
    pub async fn webhook(&self) -> Result<Option<Webhook>> {
        let stored = webhook::get(&mut self.client().conn(), self.keys()).await?;
        Ok(stored.map(|s: Stored| Webhook {
            queue: self.name().to_owned(),
            url: s.url,
            secret: s.secret,
            concurrency: s.concurrency,
            timeout_ms: s.timeout_ms,
            updated_at_ms: s.updated_at_ms,
            last_error: s.last_error,
            previous_secrets: s.previous_secrets,
        }))
    }

    /// Notes the error of a failed push delivery on the queue's webhook, shown by
    /// [`webhook`](Self::webhook) until the next failure or until the webhook is set again
    /// (cut to [`MAX_ERROR_BYTES`](crate::MAX_ERROR_BYTES)). Nothing when the queue has no
    /// webhook.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn note_webhook_error(&self, error: &str) -> Result<()> {
        let cut = super::queue::cut_error(error);
        webhook::failed(&mut self.client().conn(), self.keys(), cut).await
    }

    /// Removes the queue's push delivery target; `true` when there was one. Servers stop
    /// delivering within about a second (deliveries in flight have their leases handed back).
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn clear_webhook(&self) -> Result<bool> {
        webhook::clear(&mut self.client().conn(), self.keys()).await
    }
}

impl Client {
    /// Names of the queues whose webhook was ever set, sorted: a superset of the queues that
    /// have one now ([`Queue::webhook`] tells). Push delivery servers poll this.
    ///
    /// # Errors
    /// [`ErrorKind::Redis`](crate::ErrorKind) when Redis fails.
    pub async fn webhook_queues(&self) -> Result<Vec<String>> {
        webhook::list(&mut self.conn()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_configs_pass_and_urls_are_normalized() {
        let c = WebhookConfig::new("HTTPS://Example.COM:8443?a=1")
            .secret("whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3")
            .concurrency(1000)
            .timeout_ms(300_000);
        assert_eq!(c.validate().unwrap(), "https://example.com:8443/?a=1");
        let c = WebhookConfig::new("http://127.0.0.1:9/hook")
            .concurrency(1)
            .timeout_ms(1);
        assert_eq!(c.validate().unwrap(), "http://127.0.0.1:9/hook");
    }

    #[test]
    fn bad_configs_are_refused_naming_the_field() {
        let ok = || WebhookConfig::new("http://h/");
        let long = format!("http://h/{}", "x".repeat(MAX_WEBHOOK_URL_BYTES));
        let cases = [
            (WebhookConfig::new("ftp://h/"), "http:// or https://"),
            (
                WebhookConfig::new("file:///etc/passwd"),
                "http:// or https://",
            ),
            (WebhookConfig::new("h/path"), "not a URL"),
            (WebhookConfig::new(""), "not a URL"),
            (WebhookConfig::new("http://"), "not a URL"),
            (WebhookConfig::new(long), "limit"),
            (ok().secret("short"), "secret"),
            (ok().secret("0123456789abcdef0123456789abcdef"), "secret"),
            (ok().secret("whsec_not base64!"), "secret"),
            // 23 and 65 bytes
            (
                ok().secret(format!("whsec_{}", BASE64.encode([7u8; 23]))),
                "secret",
            ),
            (
                ok().secret(format!("whsec_{}", BASE64.encode([7u8; 65]))),
                "secret",
            ),
            (ok().concurrency(0), "concurrency"),
            (ok().concurrency(1001), "concurrency"),
            (ok().timeout_ms(0), "timeout_ms"),
            (ok().timeout_ms(300_001), "timeout_ms"),
        ];
        for (c, needle) in cases {
            let e = c.validate().expect_err(&format!("{c:?} accepted"));
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(needle), "{c:?}: {e}");
            // the message starts with the field's name
            let field = e.to_string().split(':').next().unwrap_or("").to_owned();
            assert!(
                ["url", "secret", "concurrency", "timeout_ms"].contains(&field.as_str()),
                "{c:?}: {e}"
            );
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = WebhookConfig::new("http://h/").secret("supersecretvalue123");
        assert!(!format!("{c:?}").contains("supersecret"));
        let w = Webhook {
            queue: "q".into(),
            url: "http://h/".into(),
            secret: "supersecretvalue123".into(),
            concurrency: 1,
            timeout_ms: 1,
            updated_at_ms: 0,
            last_error: None,
            previous_secrets: vec![("oldsupersecret".into(), 5)],
        };
        assert!(!format!("{w:?}").contains("supersecret"));
    }

    #[test]
    fn each_replaced_secret_signs_until_its_own_window_ends() {
        let w = Webhook {
            queue: "q".into(),
            url: "http://h/".into(),
            secret: "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3".into(),
            concurrency: 1,
            timeout_ms: 1,
            updated_at_ms: 0,
            last_error: None,
            previous_secrets: vec![
                ("a newer plain secret".into(), 2_000),
                ("an older plain secret".into(), 1_000),
            ],
        };
        let new = b"0123456789abcdef01234567".to_vec();
        let (newer, older) = (
            b"a newer plain secret".to_vec(),
            b"an older plain secret".to_vec(),
        );
        assert_eq!(w.signing_keys(999), vec![new.clone(), newer.clone(), older]);
        assert_eq!(w.signing_keys(1_000), vec![new.clone(), newer]);
        assert_eq!(w.signing_keys(2_000), vec![new]);
    }

    #[test]
    fn generated_secrets_are_standard_webhooks_secrets_of_32_bytes_and_differ() {
        let (a, b) = (random_secret(), random_secret());
        assert_eq!(signing_key(&a).len(), 32, "{a}");
        assert!(a.starts_with("whsec_"), "{a}");
        assert_ne!(a, b);
        assert!(WebhookConfig::new("http://h/").secret(a).validate().is_ok());
    }
}
