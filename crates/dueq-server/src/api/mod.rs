//! The routes of DESIGN 4.2, one file per resource, registered together with their OpenAPI
//! description (`utoipa-axum`), so a route cannot exist without being documented.
//!
//! Routes are grouped by the layers they need: single-task `/v1` routes (body limit = payload
//! limit + 64 KiB), the batch routes (their own limit), both behind the token check; and the
//! open operational routes.

pub mod acks;
pub mod browse;
pub mod claim;
pub mod cleanup;
pub mod dead;
mod durable;
mod options;
pub mod paging;
pub mod queues;
pub mod schedules;
pub mod settings;
pub mod system;
pub mod tasks;
pub mod test_clock;
pub mod webhook;
pub mod workers;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// `/v1` routes whose bodies hold at most one payload.
pub(crate) fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(tasks::enqueue, browse::browse))
        .routes(routes!(
            tasks::get_by_id,
            tasks::cancel_by_id,
            tasks::reschedule_by_id
        ))
        .routes(routes!(
            tasks::get_by_key,
            tasks::cancel_by_key,
            tasks::reschedule_by_key
        ))
        .routes(routes!(claim::ack))
        .routes(routes!(claim::nack))
        .routes(routes!(claim::extend))
        .routes(routes!(queues::list))
        .routes(routes!(queues::get, cleanup::delete_queue))
        .routes(routes!(cleanup::purge))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(settings::get, settings::update))
        .routes(routes!(dead::list))
        .routes(routes!(dead::retry))
        .routes(routes!(dead::delete))
        .routes(routes!(cleanup::retry_matching))
        .routes(routes!(cleanup::delete_matching))
        .routes(routes!(webhook::set, webhook::get, webhook::delete))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::set, schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(schedules::backfill))
        .routes(routes!(workers::list))
        .routes(routes!(workers::beat, workers::remove))
        .routes(routes!(test_clock::get, test_clock::advance))
}

/// The claim route (its time limit includes `wait_ms`).
pub(crate) fn claim_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(claim::claim))
}

/// The batch routes (up to 1000 items a request).
pub(crate) fn batch_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(tasks::enqueue_batch))
        .routes(routes!(acks::acks))
        .routes(routes!(acks::nacks))
        .routes(routes!(acks::releases))
}

/// Open operational routes.
pub(crate) fn system_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(system::healthz))
        .routes(routes!(system::readyz))
        .routes(routes!(system::metrics))
        .routes(routes!(system::openapi_json))
}
