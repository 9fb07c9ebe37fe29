//! `/v1/test/clock`: the test clock of a server started with `dueq serve --test-clock`, read and
//! moved forward by integration tests (see `dueq::TestClock`). On any other server both routes
//! answer 404.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use dueq::{ClockReading, TestClock};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// The test clock at one moment.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[non_exhaustive]
pub struct ClockResponse {
    /// The virtual time, Unix epoch ms: what every queue on this Redis takes as now.
    pub now_ms: u64,
    /// How far the virtual time is ahead of the Redis server's own clock, ms.
    pub offset_ms: u64,
}

impl From<ClockReading> for ClockResponse {
    fn from(r: ClockReading) -> Self {
        Self {
            now_ms: r.now_ms,
            offset_ms: r.offset_ms,
        }
    }
}

/// A move of the test clock: exactly one of `advance_ms` and `set_ms`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ClockMove {
    /// Move forward by this many ms (1 to 100 years).
    #[schema(minimum = 1, maximum = 3_153_600_000_000_u64)]
    pub advance_ms: Option<u64>,
    /// Move forward to this time, Unix epoch ms (not before the clock's now; at most
    /// 3000-01-01).
    #[schema(minimum = 0, maximum = 32_503_680_000_000_u64)]
    pub set_ms: Option<u64>,
}

fn clock(st: &AppState) -> ApiResult<TestClock> {
    st.client().test_clock().ok_or_else(|| {
        ApiError::not_found(
            "this server does not run the test clock; start one for tests with dueq serve \
             --test-clock, on a Redis of its own",
        )
    })
}

/// Read the test clock.
///
/// The virtual time every queue runs on, on a server started with `dueq serve --test-clock`.
/// 404 on any other server.
#[utoipa::path(get, path = "/v1/test/clock", tag = "test", operation_id = "get_test_clock",
    responses(
        (status = 200, description = "The test clock", body = ClockResponse),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "The server does not run the test clock", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn get(State(st): State<AppState>) -> ApiResult<Json<ClockResponse>> {
    Ok(Json(clock(&st)?.now().await?.into()))
}

/// Move the test clock forward.
///
/// By `advance_ms`, or to `set_ms`; never back. Every process on the Redis looks at once:
/// tasks that became due are handed to waiting workers, leases and expiries that passed end,
/// and schedules fire or skip the ticks crossed by their misfire policy. 404 on a server
/// without the test clock.
#[utoipa::path(post, path = "/v1/test/clock", tag = "test", operation_id = "move_test_clock",
    request_body = ClockMove,
    responses(
        (status = 200, description = "The clock as moved", body = ClockResponse),
        (status = 400, description = "Neither or both fields, out of range, or backwards", body = ErrorBody),
        (status = 401, description = "No or bad token", body = ErrorBody),
        (status = 404, description = "The server does not run the test clock", body = ErrorBody),
        (status = 503, description = "Redis unavailable", body = ErrorBody),
    ))]
pub async fn advance(
    State(st): State<AppState>,
    ApiJson(body): ApiJson<ClockMove>,
) -> ApiResult<Json<ClockResponse>> {
    let moved = match (body.advance_ms, body.set_ms) {
        (Some(ms), None) => clock(&st)?.advance(Duration::from_millis(ms)).await?,
        (None, Some(ms)) => clock(&st)?.set_ms(ms).await?,
        _ => {
            return Err(ApiError::invalid(
                "advance_ms: give exactly one of advance_ms (how far to move the clock) and \
                 set_ms (the time to move it to)",
            ));
        }
    };
    Ok(Json(moved.into()))
}
