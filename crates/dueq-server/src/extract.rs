//! Extractors that turn every rejection into an [`ApiError`] with the API's error body:
//! [`ApiJson`] (JSON bodies), [`ApiPath`] (percent-decoded path segments), [`ApiQuery`].
//!
//! axum's own extractors answer rejections with plain text; wrapping them here keeps the error
//! shape of DESIGN 4.2 on every route.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use dueq::json::ObjectErrorKind;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body. Needs `Content-Type: application/json` (415 otherwise: a plain
/// cross-site form cannot send it), is bounded by the route's body limit (413 before anything
/// is parsed or written), and refuses malformed JSON and wrong or unknown fields with 400.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
        .unwrap_or(false)
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(&req) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e: BytesRejection| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::too_large("request body is larger than the limit")
                } else {
                    ApiError::invalid(format!("could not read the body: {e}"))
                }
            })?;
        // the one reading of a user's JSON object (dueq::json), shared with the CLI
        dueq::json::object_from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| match e.kind {
                ObjectErrorKind::Array => {
                    ApiError::invalid("the body must be a JSON object, not an array")
                }
                ObjectErrorKind::Malformed => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    format!("malformed JSON: {}", e.message),
                ),
                _ => ApiError::invalid(e.message),
            })
    }
}

/// Path parameters, percent-decoded (a business key may hold `/`, `%`, spaces, any UTF-8).
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| ApiPath(v))
            .map_err(|e| ApiError::invalid(format!("bad path: {}", e.body_text())))
    }
}

/// Query parameters.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| ApiError::invalid(format!("bad query: {}", e.body_text())))
    }
}
