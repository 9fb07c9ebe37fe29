//! Reading the order trace and planning the replay (no I/O besides reading the CSV).
//!
//! # Time
//!
//! The trace timestamps are `YYYY-MM-DD HH:MM:SS` with no time zone (presumably Brazil local
//! time). They are parsed as civil (naive) date-times and converted to integer Unix seconds *as
//! if they were UTC*. The result is not the true instant, but the replay only uses differences
//! between trace times and their order, and both are preserved exactly by this choice (there is
//! no DST shift to get in the way). `--from`/`--to` values ([`parse_trace_time`]) use the same
//! convention, so a window is given in the trace's own wall-clock time.
//!
//! # What the plan contains
//!
//! Each order yields (see [`Plan::build`]):
//!
//! * at purchase: enqueue [`TaskKind::CancelUnpaid`], key `order:{id}:cancel`, due purchase +
//!   [`CANCEL_UNPAID_AFTER_S`](plan::CANCEL_UNPAID_AFTER_S);
//! * at purchase: enqueue [`TaskKind::ReviewReminder`], key `order:{id}:review`, due at the
//!   estimated delivery date (possibly already in the past: it then runs at once);
//! * at approval, if any: cancel key `order:{id}:cancel`;
//! * at customer delivery, if any: enqueue [`TaskKind::AutoConfirm`], key `order:{id}:confirm`,
//!   due delivery + [`AUTO_CONFIRM_AFTER_S`](plan::AUTO_CONFIRM_AFTER_S).
//!
//! The expected outcome comes straight from the CSV: auto-confirm and review-reminder tasks always
//! run once; a cancel-unpaid task runs unless the order was approved *strictly before* its due
//! time.

mod orders;
mod plan;
mod time_map;

pub use orders::{load_orders, parse_trace_time};
#[cfg(test)]
pub use plan::PlannedTask;
pub use plan::{Action, Plan, PlanOptions, TaskKind};
pub use time_map::TimeMap;

/// Small traces written in the tests.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod rows {
    use super::orders::{Order, load_orders_from_reader, parse_trace_time};

    pub const HEADER: &str = "order_id,customer_id,order_status,order_purchase_timestamp,order_approved_at,order_delivered_carrier_date,order_delivered_customer_date,order_estimated_delivery_date\n";

    pub fn t(s: &str) -> i64 {
        parse_trace_time(s).unwrap()
    }

    /// Builds a CSV from rows `(id, purchase, approved, delivered, estimated)`.
    pub fn csv(rows: &[(&str, &str, &str, &str, &str)]) -> String {
        let mut out = HEADER.to_owned();
        for (id, purchase, approved, delivered, estimated) in rows {
            out.push_str(&format!(
                "{id},c{id},delivered,{purchase},{approved},,{delivered},{estimated}\n"
            ));
        }
        out
    }

    pub fn orders(rows: &[(&str, &str, &str, &str, &str)]) -> Vec<Order> {
        load_orders_from_reader(csv(rows).as_bytes()).unwrap()
    }

    pub const EST: &str = "2018-03-20 00:00:00";
}
