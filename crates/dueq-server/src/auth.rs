//! Bearer-token authentication for `/v1` (and `/metrics` when protected).
//!
//! Tokens come from the environment (`DUEQ_TOKENS`, comma-separated) or a file (one per
//! line, `#` comments). With no token configured the API is open. Comparison is constant-time
//! per token (`subtle`), and every configured token is compared, so the answer time does not
//! tell which token or how many bytes matched. The check runs before the body is read, so a
//! refused request writes nothing.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Name of the environment variable holding comma-separated tokens.
pub const TOKENS_ENV: &str = "DUEQ_TOKENS";

/// The accepted bearer tokens (empty: authentication off).
#[derive(Clone, Default)]
pub struct Tokens(Arc<Vec<Vec<u8>>>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} configured)", self.0.len())
    }
}

impl Tokens {
    /// These tokens; empty strings and surrounding whitespace are dropped.
    pub fn new<I, S>(tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self(Arc::new(
            tokens
                .into_iter()
                .map(|t| t.as_ref().trim().as_bytes().to_vec())
                .filter(|t| !t.is_empty())
                .collect(),
        ))
    }

    /// Tokens from `DUEQ_TOKENS` (comma-separated); none when unset.
    pub fn from_env() -> Self {
        std::env::var(TOKENS_ENV)
            .map(|v| Self::new(v.split(',')))
            .unwrap_or_default()
    }

    /// Tokens from a file: one per line; blank lines and lines starting with `#` are skipped.
    ///
    /// # Errors
    /// The I/O error when the file cannot be read.
    pub fn from_file(path: &Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        Ok(Self::new(
            text.lines().filter(|l| !l.trim_start().starts_with('#')),
        ))
    }

    /// Both sources together.
    pub fn merge(self, other: Tokens) -> Self {
        let mut v: Vec<Vec<u8>> = self.0.as_ref().clone();
        v.extend(other.0.iter().cloned());
        Self(Arc::new(v))
    }

    /// Whether any token is configured (authentication on).
    pub fn enabled(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether `candidate` is one of the tokens, in time independent of where it differs.
    pub fn accepts(&self, candidate: &[u8]) -> bool {
        let mut ok = subtle::Choice::from(0u8);
        for t in self.0.iter() {
            ok |= t.as_slice().ct_eq(candidate);
        }
        bool::from(ok)
    }

    /// Checks an `Authorization` header value (`Bearer <token>`).
    pub fn check_header(&self, value: Option<&[u8]>) -> Result<(), ApiError> {
        if !self.enabled() {
            return Ok(());
        }
        let Some(v) = value else {
            return Err(ApiError::unauthorized(
                "missing Authorization: Bearer <token>",
            ));
        };
        let token = v
            .strip_prefix(b"Bearer ")
            .or_else(|| v.strip_prefix(b"bearer "))
            .map(|t| t.trim_ascii());
        match token {
            Some(t) if self.accepts(t) => Ok(()),
            _ => Err(ApiError::unauthorized("invalid bearer token")),
        }
    }
}

/// Middleware: refuses a request without a valid token with 401 when tokens are configured.
pub async fn require_token(State(tokens): State<Tokens>, req: Request, next: Next) -> Response {
    let value = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    match tokens.check_header(value) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked() {
        let t = Tokens::new(["alpha", " beta ", ""]);
        assert!(t.enabled());
        assert!(t.accepts(b"alpha") && t.accepts(b"beta"));
        assert!(!t.accepts(b"alph") && !t.accepts(b"") && !t.accepts(b"alphaa"));
        assert!(t.check_header(Some(b"Bearer beta")).is_ok());
        assert!(t.check_header(Some(b"Bearer gamma")).is_err());
        assert!(t.check_header(Some(b"beta")).is_err());
        assert!(t.check_header(None).is_err());
        assert!(Tokens::default().check_header(None).is_ok());
    }

    #[test]
    fn tokens_from_file() {
        let dir = std::env::temp_dir().join(format!("dueq-tokens-{}", std::process::id()));
        std::fs::write(&dir, "# comment\none\n\n two \n").unwrap();
        let t = Tokens::from_file(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(t.accepts(b"one") && t.accepts(b"two") && !t.accepts(b"# comment"));
    }
}
