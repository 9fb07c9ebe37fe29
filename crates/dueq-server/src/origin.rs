//! Refuses cross-origin state-changing requests on `/v1` (a CSRF guard).
//!
//! With no token configured the API is open, and a web page on any other origin could make a
//! user's browser send it writes: a body-less `POST /v1/queues/x/pause` or a `DELETE` is a
//! "simple" request that needs no CORS preflight, and the browser sends it even though the
//! page cannot read the answer. Browsers mark such requests: they send `Origin` with every
//! `POST`, `PUT`, `PATCH` and `DELETE`, and `Sec-Fetch-Site` tells cross-site from
//! same-origin. So a request with any method but `GET`, `HEAD` and `OPTIONS` is refused with
//! 403 `forbidden_origin`, before anything is read or written, when
//!
//! * `Sec-Fetch-Site` is `cross-site` or `same-site` (another origin), or
//! * `Origin` is present and its `host[:port]` is not the request's own `Host` (nor its
//!   `X-Forwarded-Host`, set by a reverse proxy; a page cannot add that header to a
//!   cross-origin request without a preflight, which this server never grants). `Origin:
//!   null` (sandboxed frames, `file:` pages) never matches.
//!
//! Requests without these headers (curl, SDKs, other servers) pass. The check applies whether
//! or not tokens are configured: it costs a header lookup, and a bearer token (which a page
//! cannot attach without a preflight anyway) is unaffected.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Middleware: 403 `forbidden_origin` for a cross-origin state-changing request (see the
/// module documentation); every other request goes on.
pub async fn same_origin_writes(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    match source(
        req.headers(),
        req.uri().authority().map(|a| a.as_str()),
        false,
    ) {
        Source::CrossOrigin(why) => {
            ApiError::new(StatusCode::FORBIDDEN, "forbidden_origin", why).into_response()
        }
        Source::SameOrigin | Source::Unknown => next.run(req).await,
    }
}

/// Where a request comes from, as far as its headers tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// `Origin` (or, for [`source`] with `use_referer`, `Referer`) names this server.
    SameOrigin,
    /// Another origin, with the reason.
    CrossOrigin(String),
    /// No header says (curl, SDKs, other servers).
    Unknown,
}

/// Classifies a request by `Sec-Fetch-Site`, then `Origin`, then (when `use_referer`, for
/// the dashboard's forms, whose browsers may leave `Origin` out) `Referer`, against the
/// request's own `Host`, URI authority or `X-Forwarded-Host`. The `/v1` API lets
/// [`Source::Unknown`] through; the dashboard requires [`Source::SameOrigin`].
pub(crate) fn source(
    headers: &HeaderMap,
    uri_authority: Option<&str>,
    use_referer: bool,
) -> Source {
    let mut from_referer = None;
    if use_referer && !headers.contains_key(header::ORIGIN) {
        from_referer = headers
            .get(header::REFERER)
            .and_then(|v| v.to_str().ok())
            .map(|r| match r.split_once("://") {
                Some((scheme, rest)) => {
                    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
                    format!("{scheme}://{authority}")
                }
                None => "null".to_owned(),
            });
    }
    match cross_origin(headers, uri_authority, from_referer.as_deref()) {
        Some(why) => Source::CrossOrigin(why),
        None if headers.contains_key(header::ORIGIN) || from_referer.is_some() => {
            Source::SameOrigin
        }
        None => Source::Unknown,
    }
}

/// Why these headers mark a cross-origin request, or `None` when they do not.
/// `uri_authority` is the request URI's authority (HTTP/2 carries the host there);
/// `fallback_origin` stands in for a missing `Origin` header.
fn cross_origin(
    headers: &HeaderMap,
    uri_authority: Option<&str>,
    fallback_origin: Option<&str>,
) -> Option<String> {
    let fetch_site = headers
        .get("sec-fetch-site")
        .map(|v| v.as_bytes().to_ascii_lowercase());
    if let Some(site) = fetch_site
        && (site == b"cross-site" || site == b"same-site")
    {
        return Some(format!(
            "cross-origin write refused (Sec-Fetch-Site: {})",
            String::from_utf8_lossy(&site)
        ));
    }
    let origin = match headers.get(header::ORIGIN) {
        Some(v) => v.to_str().unwrap_or("null"),
        None => fallback_origin?,
    };
    let Some(theirs) = origin_authority(origin) else {
        return Some(format!("cross-origin write refused (Origin: {origin})"));
    };
    let ours = [
        headers.get(header::HOST).and_then(|v| v.to_str().ok()),
        uri_authority,
        headers
            .get("x-forwarded-host")
            .and_then(|v| v.to_str().ok()),
    ];
    let matches = ours.into_iter().flatten().any(|host| {
        // X-Forwarded-Host may list several hosts; the first is the client's.
        let host = host.split(',').next().unwrap_or("").trim();
        same_authority(&theirs, host)
    });
    if matches {
        None
    } else {
        Some(format!(
            "cross-origin write refused (Origin: {origin} is not this server's host)"
        ))
    }
}

/// An origin's `(scheme, host[:port])`, lower-case, with the scheme's default port dropped;
/// `None` for `null` or anything that is not `scheme://authority`.
fn origin_authority(origin: &str) -> Option<(String, String)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let authority = strip_default_port(&scheme, &rest.to_ascii_lowercase());
    Some((scheme, authority))
}

fn strip_default_port(scheme: &str, authority: &str) -> String {
    let default = match scheme {
        "http" | "ws" => Some(":80"),
        "https" | "wss" => Some(":443"),
        _ => None,
    };
    match default.and_then(|d| authority.strip_suffix(d)) {
        Some(a) => a.to_owned(),
        None => authority.to_owned(),
    }
}

/// Whether a `Host` value names the origin's authority (ports compared after dropping the
/// origin scheme's default port on both sides).
fn same_authority((scheme, theirs): &(String, String), host: &str) -> bool {
    !host.is_empty() && strip_default_port(scheme, &host.to_ascii_lowercase()) == *theirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pairs: &[(&str, &str)]) -> Option<String> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        cross_origin(&h, None, None)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    /// The dashboard's rule: a form must say it comes from here (`Origin`, else `Referer`).
    #[test]
    fn dashboard_forms_must_come_from_this_origin() {
        let ok = |p: &[(&'static str, &str)]| source(&headers(p), None, true) == Source::SameOrigin;
        assert!(ok(&[
            ("host", "127.0.0.1:7878"),
            ("origin", "http://127.0.0.1:7878")
        ]));
        assert!(ok(&[
            ("host", "a.example"),
            ("origin", "https://A.example")
        ]));
        assert!(ok(&[
            ("host", "a:1"),
            ("referer", "http://a:1/ui/queues/q?x=1")
        ]));
        assert!(!ok(&[("host", "a:1"), ("origin", "http://a:2")]));
        assert!(!ok(&[("host", "a:1"), ("origin", "http://a:1.evil")]));
        assert!(!ok(&[("host", "a"), ("origin", "null")]));
        assert!(!ok(&[("host", "a")]));
        assert!(!ok(&[("origin", "http://a")]));
        assert!(!ok(&[("host", "a"), ("referer", "garbage")]));
        // Origin wins over a matching Referer
        assert!(!ok(&[
            ("host", "a"),
            ("origin", "http://b"),
            ("referer", "http://a/")
        ]));
        // the API lets a request that names no origin through
        assert_eq!(
            source(&headers(&[("host", "a")]), None, false),
            Source::Unknown
        );
    }

    #[test]
    fn origins_are_compared_with_the_host() {
        assert!(check(&[]).is_none());
        assert!(check(&[("host", "127.0.0.1:7878")]).is_none());
        assert!(
            check(&[
                ("host", "127.0.0.1:7878"),
                ("origin", "http://127.0.0.1:7878")
            ])
            .is_none()
        );
        assert!(
            check(&[
                ("host", "Example.com"),
                ("origin", "https://example.COM:443")
            ])
            .is_none()
        );
        assert!(check(&[("host", "example.com:80"), ("origin", "http://example.com")]).is_none());
        assert!(
            check(&[
                ("host", "127.0.0.1:7878"),
                ("x-forwarded-host", "dueq.example.com"),
                ("origin", "https://dueq.example.com")
            ])
            .is_none()
        );
        assert!(check(&[("sec-fetch-site", "same-origin")]).is_none());
        assert!(check(&[("sec-fetch-site", "none")]).is_none());

        assert!(
            check(&[
                ("host", "127.0.0.1:7878"),
                ("origin", "http://evil.example")
            ])
            .is_some()
        );
        assert!(
            check(&[
                ("host", "127.0.0.1:7878"),
                ("origin", "http://127.0.0.1:3000")
            ])
            .is_some()
        );
        assert!(
            check(&[
                ("host", "example.com"),
                ("origin", "https://example.com:8443")
            ])
            .is_some()
        );
        assert!(check(&[("host", "127.0.0.1:7878"), ("origin", "null")]).is_some());
        assert!(check(&[("origin", "http://127.0.0.1:7878")]).is_some());
        assert!(check(&[("host", "127.0.0.1:7878"), ("sec-fetch-site", "cross-site")]).is_some());
        assert!(check(&[("host", "127.0.0.1:7878"), ("sec-fetch-site", "same-site")]).is_some());
    }
}
