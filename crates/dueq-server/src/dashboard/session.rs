//! Dashboard sessions and the CSRF defence of its POSTs.
//!
//! A session is a random 256-bit id in an `HttpOnly; SameSite=Strict; Path=/` cookie; the
//! server keeps, in memory, per id: a random 256-bit CSRF token, whether the holder logged in
//! with a configured token, and an expiry ([`SESSION_TTL`]). The raw API token never leaves
//! the login form: the cookie only names the session. Sessions end on logout, on expiry and
//! when the server restarts (the operator logs in again). A login replaces the anonymous
//! session it came from with a new id (no session fixation).
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
use subtle::ConstantTimeEq;

/// Name of the session cookie.
pub(crate) const COOKIE: &str = "dueq_session";

/// Lifetime of a session from its creation (anonymous or logged in).
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Most sessions kept; past it expired ones are dropped, then the oldest anonymous ones, then
/// the oldest of all.
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

struct Entry {
    csrf: String,
    authenticated: bool,
    expires: Instant,
}

/// The sessions of one server, in memory.
#[derive(Default)]
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Entry>>,
}

fn random_hex() -> String {
    // 32 bytes from the thread-local CSPRNG (ChaCha, seeded from the OS).
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// The live session named by `id`.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let e = map.get(id)?;
        if e.expires <= Instant::now() {
            map.remove(id);
            return None;
        }
        Some(Session {
            id: id.to_owned(),
            csrf: e.csrf.clone(),
            authenticated: e.authenticated,
        })
    }

    /// A new session.
    pub fn create(&self, authenticated: bool) -> Session {
        let s = Session {
            id: random_hex(),
            csrf: random_hex(),
            authenticated,
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_SESSIONS {
            evict(&mut map);
        }
        map.insert(
            s.id.clone(),
            Entry {
                csrf: s.csrf.clone(),
                authenticated,
                expires: Instant::now() + SESSION_TTL,
            },
        );
        s
    }

    /// Ends session `id` (if any) and starts a logged-in one.
    pub fn login(&self, old_id: &str) -> Session {
        self.remove(old_id);
        self.create(true)
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

fn evict(map: &mut HashMap<String, Entry>) {
    let now = Instant::now();
    map.retain(|_, e| e.expires > now);
    while map.len() >= MAX_SESSIONS {
        let victim = map
            .iter()
            .min_by_key(|(_, e)| (e.authenticated, e.expires))
            .map(|(k, _)| k.clone());
        match victim {
            Some(k) => map.remove(&k),
            None => break,
        };
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
        let a = s.create(false);
        assert_eq!(a.id.len(), 64);
        assert_ne!(a.id, a.csrf);
        assert!(!s.get(&a.id).unwrap().authenticated);
        let b = s.login(&a.id);
        assert!(s.get(&a.id).is_none());
        assert!(s.get(&b.id).unwrap().authenticated);
        assert!(csrf_ok(&b, Some(b.csrf.as_bytes())));
        assert!(!csrf_ok(&b, Some(a.csrf.as_bytes())));
        assert!(!csrf_ok(&b, Some(&b.csrf.as_bytes()[1..])));
        assert!(!csrf_ok(&b, None));
        s.remove(&b.id);
        assert_eq!(s.len(), 0);
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
    fn eviction_keeps_logged_in_sessions_first() {
        let s = Sessions::default();
        let kept = s.create(true);
        for _ in 0..MAX_SESSIONS {
            s.create(false);
        }
        assert!(s.len() <= MAX_SESSIONS);
        assert!(s.get(&kept.id).is_some());
    }
}
