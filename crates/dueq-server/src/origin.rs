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
//!
//! # DNS rebinding
//!
//! Comparing `Origin` with `Host` does not stop DNS rebinding: a page at
//! `http://evil.example:7878` whose name the attacker then points at 127.0.0.1 is same-origin
//! with the server as far as the browser knows, and sends `Host: evil.example:7878` and the
//! matching `Origin`, reads included. So a server listening on a loopback address (127.0.0.0/8
//! or `::1`; the default) also runs [`loopback_hosts_only`] on every route, reads included: a
//! request whose `Host` (or, in HTTP/2, URI authority) is present and is not `localhost`, a
//! `127.x.x.x` address or `[::1]` (any port) gets 403 `forbidden_host`. A rebound name can
//! never pass (it is none of these), while every way to reach a loopback listener directly
//! does. A server on another address is not checked (whoever exposes it does so on purpose
//! and should configure tokens); a reverse proxy in front of a loopback listener must send
//! one of these names as `Host` (nginx does by default; the client's own host can go in
//! `X-Forwarded-Host`).

use std::net::{Ipv4Addr, Ipv6Addr};

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

/// Middleware for a server listening on a loopback address: 403 `forbidden_host` for a
/// request whose `Host` is not a loopback name (the DNS-rebinding guard of the module
/// documentation); a request naming no host at all goes on. [`serve`](crate::serve) adds it
/// when its listener's address is a loopback one.
pub async fn loopback_hosts_only(req: Request, next: Next) -> Response {
    let host = match req.headers().get(header::HOST) {
        Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
        None => req.uri().authority().map(|a| a.as_str().to_owned()),
    };
    match host {
        Some(h) if !is_loopback_host(&h) => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!(
                "Host {h:?} refused: this server listens on a loopback address and answers \
                 only to localhost, 127.x.x.x and [::1] (a DNS-rebinding guard)"
            ),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

/// Whether a `Host` value (`host[:port]`) is `localhost`, a `127.x.x.x` address or `[::1]`.
fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let bracketed = host.starts_with('[');
    // `port` is "" or ":digits"
    let (name, port) = if bracketed {
        match host[1..].split_once(']') {
            Some(parts) => parts,
            None => return false,
        }
    } else {
        host.split_at(host.find(':').unwrap_or(host.len()))
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    let name_ok = if bracketed {
        name.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback())
    } else {
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
    };
    port_ok && name_ok
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
    fn loopback_host_names() {
        for ok in [
            "localhost",
            "LocalHost:7878",
            "127.0.0.1",
            "127.0.0.1:7878",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:7878",
            "[0:0:0:0:0:0:0:1]:80",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:7878",
            "localhost.evil.example",
            "localhost.",
            "app.localhost",
            "0.0.0.0:7878",
            "128.0.0.1",
            "10.0.0.1:7878",
            "127.0.0.1.evil.example",
            "127.0.0.1:80:80",
            "127.0.0.1:x",
            "[::2]:7878",
            "[::1",
            "[::1]x",
            "::1",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
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
