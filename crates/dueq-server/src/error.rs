//! [`ApiError`]: every failure of the HTTP API as a status code and the body
//! `{"error": {"code": "...", "message": "..."}}` (DESIGN 4.2).
//!
//! It is separate so that every handler and extractor maps failures the same way: a
//! [`dueq::Error`] becomes 400, 409, 413 or 503 by its kind, never a bare 500 with a text body.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dueq::ErrorKind;
use serde::Serialize;
use utoipa::ToSchema;

/// An API failure: an HTTP status, a stable machine-readable `code` and a message for people.
///
/// Codes: `invalid_input` (400), `invalid_json` (400), `unauthorized` (401), `not_found` (404),
/// `method_not_allowed` (405), `conflict`, `in_progress`, `lease_lost` (409),
/// `request_timeout` (408), `payload_too_large` (413), `unsupported_media_type` (415), `redis_unavailable` and
/// `not_replicated` (503), `internal` (500).
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

/// The error body: `{"error": {"code", "message"}}`.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The inside of an error answer: its code and message.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ErrorDetail {
    /// Stable code, e.g. `invalid_input`, `not_found`, `lease_lost`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 `invalid_input`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409 with the given code (`conflict`, `in_progress`, `lease_lost`).
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 413 `payload_too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<dueq::Error> for ApiError {
    fn from(e: dueq::Error) -> Self {
        let (status, code) = match e.kind() {
            ErrorKind::InvalidInput => (StatusCode::BAD_REQUEST, "invalid_input"),
            ErrorKind::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ErrorKind::Conflict => (StatusCode::CONFLICT, "conflict"),
            ErrorKind::Redis => (StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable"),
            ErrorKind::NotReplicated => (StatusCode::SERVICE_UNAVAILABLE, "not_replicated"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        if status.is_server_error() {
            tracing::warn!(error = %e, code, "request failed");
        }
        Self::new(status, code, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthorized = self.status == StatusCode::UNAUTHORIZED;
        let too_large = self.status == StatusCode::PAYLOAD_TOO_LARGE;
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        let mut res = (self.status, Json(body)).into_response();
        if unauthorized {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if too_large {
            // The rest of the body was not read, so the server closes the connection after
            // this answer; saying so lets a keep-alive client open a new one for its next
            // request instead of failing it.
            res.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        res
    }
}

/// Handler result.
pub type ApiResult<T> = Result<T, ApiError>;

impl From<ApiError> for ErrorBody {
    fn from(e: ApiError) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: e.code().to_owned(),
                message: e.message().to_owned(),
            },
        }
    }
}

/// One answer per item of a batch whose items a partition's failure can fail on their own:
/// the library's answers, or, when every item failed, the first error (as for a single call:
/// a queue of one partition fails whole or not at all).
pub(crate) fn per_item<T>(
    answers: Vec<Result<T, dueq::Error>>,
) -> ApiResult<Vec<Result<T, ErrorBody>>> {
    if !answers.is_empty() && answers.iter().all(Result::is_err) {
        if let Some(Err(e)) = answers.into_iter().next() {
            return Err(e.into());
        }
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "empty batch answer",
        ));
    }
    Ok(answers
        .into_iter()
        .map(|a| a.map_err(|e| ApiError::from(e).into()))
        .collect())
}
