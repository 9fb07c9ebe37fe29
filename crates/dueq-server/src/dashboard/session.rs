//! Dashboard sessions and the CSRF defence of its POSTs.
//!
//! A session is a random 256-bit id in an `HttpOnly; SameSite=Strict; Path=/` cookie, with a
//! 256-bit CSRF token. The raw API token never leaves the login form: the cookie only names
//! the session. Only logged-in sessions are kept in server memory (the id, its own random
//! CSRF token and an expiry, [`SESSION_TTL`]); they end on logout, on expiry and when the
//! server restarts (the operator logs in again). A login starts a new id (no session
//! fixation).
//!
//! An anonymous session (the login form's, or every visitor's when no token is configured)
//! is not stored: its CSRF token is HMAC-SHA256 of its id under a random key of this
//! process, so only who holds the cookie knows the token. A flood of new visitors therefore
//! costs no memory and cannot push anyone's session out; an anonymous session grants
//! nothing a new visitor does not get by loading a page. When [`MAX_SESSIONS`] logged-in
//! sessions exist, a new login drops the expired ones and then the oldest, down to 90 % in
//! one pass (so the scan is paid once per [`MAX_SESSIONS`] / 10 logins).
//!
//! Every non-GET request to the dashboard (login and logout included) must:
//! 1. come from this origin: its `Origin` header (else its `Referer`) names the request's
//!    `Host`; a missing or `null` origin is refused;
//! 2. carry the session's CSRF token in the form field `csrf` or the header `X-CSRF-Token`,
//!    compared in constant time.
//!
//! Anything else is refused with 403 before the handler runs, so nothing is written.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Name of the session cookie.
pub(crate) const COOKIE: &str = "dueq_session";

/// Lifetime of a logged-in session from its login; also the cookie's `Max-Age`.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Most logged-in sessions kept; past it expired ones are dropped, then the oldest, down to
/// 90 %.
const MAX_SESSIONS: usize = 10_000;

/// Header that may carry the CSRF token (htmx requests: `hx-headers`).
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// What a request knows about its session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The id (cookie value).
    pub id: String,
    /// The CSRF token to put in forms.
    pub csrf: String,
    /// Logged in with a configured token.
    pub authenticated: bool,
}

/// A logged-in session.
struct Entry {
    csrf: String,
    expires: Instant,
}

/// The sessions of one server, in memory.
pub(crate) struct Sessions {
    /// Logged-in sessions by id.
    map: Mutex<HashMap<String, Entry>>,
    /// Key of the CSRF tokens of anonymous sessions.
    key: [u8; 32],
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            map: Mutex::default(),
            // from the thread-local CSPRNG (ChaCha, seeded from the OS)
            key: rand::random(),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex() -> String {
    // 32 bytes from the thread-local CSPRNG (ChaCha, seeded from the OS).
    let bytes: [u8; 32] = rand::random();
    hex(&bytes)
}

/// Whether `id` has the form of a session id (64 lower-case hex digits).
fn is_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Sessions {
    /// The session named by `id`: the logged-in one if it is live, else the anonymous one
    /// (`None` when `id` is not a session id at all).
    pub fn get(&self, id: &str) -> Option<Session> {
        if !is_id(id) {
            return None;
        }
        {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(e) = map.get(id) {
                if e.expires > Instant::now() {
                    return Some(Session {
                        id: id.to_owned(),
                        csrf: e.csrf.clone(),
                        authenticated: true,
                    });
                }
                map.remove(id);
            }
        }
        Some(self.anonymous(id))
    }

    /// A new anonymous session (nothing is stored).
    pub fn create(&self) -> Session {
        self.anonymous(&random_hex())
    }

    fn anonymous(&self, id: &str) -> Session {
        let csrf = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mut mac) => {
                mac.update(b"dueq-csrf:");
                mac.update(id.as_bytes());
                hex(&mac.finalize().into_bytes())
            }
            // HMAC takes keys of any length, so this cannot happen; a fresh random token
            // (which no form carries) keeps the function total and fails closed.
            Err(_) => random_hex(),
        };
        Session {
            id: id.to_owned(),
            csrf,
            authenticated: false,
        }
    }

    /// Ends session `old_id` (if any) and starts a logged-in one with a new id.
    pub fn login(&self, old_id: &str) -> Session {
        let s = Session {
            id: random_hex(),
            csrf: random_hex(),
            authenticated: true,
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        map.remove(old_id);
        if map.len() >= MAX_SESSIONS {
            evict(&mut map, Instant::now());
        }
        map.insert(
            s.id.clone(),
            Entry {
                csrf: s.csrf.clone(),
                expires: Instant::now() + SESSION_TTL,
            },
        );
        s
    }

    /// Ends session `id`.
    pub fn remove(&self, id: &str) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Drops the expired sessions, then the oldest ones until 90 % of [`MAX_SESSIONS`] are left:
/// one pass over the table, done once per tenth of the table's size of logins.
fn evict(map: &mut HashMap<String, Entry>, now: Instant) {
    map.retain(|_, e| e.expires > now);
    let keep = MAX_SESSIONS - MAX_SESSIONS / 10;
    if map.len() <= keep {
        return;
    }
    let mut by_age: Vec<(Instant, String)> =
        map.iter().map(|(k, e)| (e.expires, k.clone())).collect();
    let drop_n = by_age.len() - keep;
    by_age.select_nth_unstable(drop_n - 1);
    for (_, k) in &by_age[..drop_n] {
        map.remove(k);
    }
}

/// The session id in the request's cookies, if any.
pub(crate) fn cookie_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim().to_owned())
}

/// `Set-Cookie` value for session `id`.
pub(crate) fn set_cookie(id: &str) -> HeaderValue {
    let v = format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    // The id is lower-case hex, so the value is visible ASCII.
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static("dueq_session=; Path=/"))
}

/// `Set-Cookie` value that deletes the session cookie.
pub(crate) fn clear_cookie() -> HeaderValue {
    HeaderValue::from_static("dueq_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

/// The `csrf` field of an `application/x-www-form-urlencoded` body (tokens are hex, so no
/// decoding is needed: an encoded value cannot match anyway).
pub(crate) fn form_csrf(body: &[u8]) -> Option<&[u8]> {
    body.split(|b| *b == b'&')
        .find_map(|kv| kv.strip_prefix(b"csrf="))
}

/// Whether `candidate` is the session's CSRF token, in time independent of where it differs.
pub(crate) fn csrf_ok(session: &Session, candidate: Option<&[u8]>) -> bool {
    candidate.is_some_and(|c| bool::from(session.csrf.as_bytes().ct_eq(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn sessions_and_tokens() {
        let s = Sessions::default();
        let a = s.create();
        assert_eq!(a.id.len(), 64);
        assert_ne!(a.id, a.csrf);
        assert_eq!(s.len(), 0, "anonymous sessions are not stored");
        let again = s.get(&a.id).unwrap();
        assert!(!again.authenticated);
        assert_eq!(
            again.csrf, a.csrf,
            "an anonymous token is derived from its id"
        );
        assert_ne!(s.create().csrf, a.csrf);
        assert_ne!(Sessions::default().get(&a.id).unwrap().csrf, a.csrf);
        assert!(s.get("not-an-id").is_none());
        assert!(s.get(&a.id.to_uppercase()).is_none());
        let b = s.login(&a.id);
        assert_ne!(b.id, a.id);
        assert!(!s.get(&a.id).unwrap().authenticated);
        let b2 = s.get(&b.id).unwrap();
        assert!(b2.authenticated);
        assert_eq!(b2.csrf, b.csrf);
        assert!(csrf_ok(&b, Some(b.csrf.as_bytes())));
        assert!(!csrf_ok(&b, Some(a.csrf.as_bytes())));
        assert!(!csrf_ok(&b, Some(&b.csrf.as_bytes()[1..])));
        assert!(!csrf_ok(&b, None));
        s.remove(&b.id);
        assert_eq!(s.len(), 0);
        assert!(!s.get(&b.id).unwrap().authenticated);
    }

    #[test]
    fn cookie_and_form_parsing() {
        let h = headers(&[("cookie", "a=1; dueq_session=abc ; b=2")]);
        assert_eq!(cookie_id(&h).as_deref(), Some("abc"));
        assert_eq!(cookie_id(&headers(&[("cookie", "x=1")])), None);
        assert_eq!(form_csrf(b"a=1&csrf=ff00&b=2"), Some(&b"ff00"[..]));
        assert_eq!(form_csrf(b"xcsrf=1"), None);
    }

    #[test]
    fn eviction_drops_the_oldest_tenth_in_one_pass() {
        let s = Sessions::default();
        let oldest = s.login("");
        let mut ids = Vec::new();
        for _ in 1..MAX_SESSIONS {
            ids.push(s.login("").id);
        }
        for _ in 0..1000 {
            s.create();
        }
        assert_eq!(s.len(), MAX_SESSIONS, "anonymous visitors evict nobody");
        let newest = s.login("");
        assert_eq!(s.len(), MAX_SESSIONS - MAX_SESSIONS / 10 + 1);
        assert!(!s.get(&oldest.id).unwrap().authenticated);
        assert!(s.get(&newest.id).unwrap().authenticated);
        assert!(s.get(ids.last().unwrap()).unwrap().authenticated);
        // the next logins do not scan again until the table is full again
        for _ in 0..MAX_SESSIONS / 10 - 1 {
            s.login("");
        }
        assert_eq!(s.len(), MAX_SESSIONS);
    }

    #[test]
    fn expired_sessions_go_first() {
        let mut map = HashMap::new();
        let now = Instant::now();
        for i in 0..MAX_SESSIONS {
            let expires = if i % 2 == 0 {
                now - Duration::from_secs(1)
            } else {
                now + SESSION_TTL
            };
            map.insert(
                format!("{i}"),
                Entry {
                    csrf: String::new(),
                    expires,
                },
            );
        }
        evict(&mut map, now);
        assert_eq!(map.len(), MAX_SESSIONS / 2);
        assert!(map.values().all(|e| e.expires > now));
    }
}
