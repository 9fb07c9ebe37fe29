//! Reading the trace CSV into [`Order`]s, and the `--from`/`--to` times in the trace's
//! convention (civil time read as UTC; see the module docs of `trace`).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use jiff::civil::DateTime;
use jiff::fmt::strtime;
use jiff::tz::TimeZone;
use serde::Deserialize;

/// Format of every timestamp in the trace.
const TRACE_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S";

/// One row of the order trace, with timestamps as Unix seconds (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// `order_id` (32 hex characters in the real trace).
    pub order_id: String,
    /// `customer_id`.
    pub customer_id: String,
    /// `order_status` (final status: delivered, shipped, canceled, ...).
    pub status: String,
    /// `order_purchase_timestamp`.
    pub purchase_s: i64,
    /// `order_approved_at`; `None` = never approved.
    pub approved_s: Option<i64>,
    /// `order_delivered_carrier_date`; `None` = absent.
    pub delivered_carrier_s: Option<i64>,
    /// `order_delivered_customer_date`; `None` = absent.
    pub delivered_customer_s: Option<i64>,
    /// `order_estimated_delivery_date`.
    pub estimated_delivery_s: i64,
}

/// An error while reading the trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened.
    #[error("cannot open trace file {}: {source}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The CSV is malformed (I/O error, bad quoting, missing column, ...). The message carries
    /// the position.
    #[error("malformed trace CSV: {0}")]
    Csv(#[from] csv::Error),
    /// A timestamp cell does not hold `YYYY-MM-DD HH:MM:SS`.
    #[error(
        "line {line}, column `{column}`: bad timestamp `{value}` (expected YYYY-MM-DD HH:MM:SS): {source}"
    )]
    BadTimestamp {
        /// 1-based line in the file (the header is line 1).
        line: u64,
        /// Column name.
        column: &'static str,
        /// The cell as found.
        value: String,
        /// Why jiff rejected it.
        source: jiff::Error,
    },
    /// A cell that must not be empty is empty.
    #[error("line {line}, column `{column}`: value is required but the cell is empty")]
    MissingValue {
        /// 1-based line in the file (the header is line 1).
        line: u64,
        /// Column name.
        column: &'static str,
    },
    /// The same `order_id` occurs twice (its task keys would collide).
    #[error("line {line}: duplicate order_id `{order_id}` (first seen on line {first_line})")]
    DuplicateOrderId {
        /// 1-based line of the second occurrence.
        line: u64,
        /// The repeated id.
        order_id: String,
        /// 1-based line of the first occurrence.
        first_line: u64,
    },
}

/// A CSV row as it comes, before timestamp parsing. Columns are matched by header name.
#[derive(Debug, Deserialize)]
struct RawOrder<'a> {
    order_id: &'a str,
    customer_id: &'a str,
    order_status: &'a str,
    order_purchase_timestamp: &'a str,
    order_approved_at: &'a str,
    order_delivered_carrier_date: &'a str,
    order_delivered_customer_date: &'a str,
    order_estimated_delivery_date: &'a str,
}

/// Reads the trace CSV at `path`. See [`load_orders_from_reader`].
///
/// Errors other than [`TraceError::Open`] do not repeat the path; callers should add it as
/// context.
pub fn load_orders(path: impl AsRef<Path>) -> Result<Vec<Order>, TraceError> {
    let path = path.as_ref();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Open {
        path: path.to_owned(),
        source,
    })?;
    load_orders_from_reader(io::BufReader::new(file))
}

/// Reads a trace CSV (with header row) from `reader`, keeping the row order.
///
/// Columns are matched by name; extra columns are ignored. Empty cells mean "absent" for the
/// approval and delivery columns; `order_id`, `order_purchase_timestamp` and
/// `order_estimated_delivery_date` are required. Cells are trimmed of surrounding whitespace.
pub fn load_orders_from_reader<R: io::Read>(reader: R) -> Result<Vec<Order>, TraceError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::All)
        .from_reader(reader);
    let headers = rdr.headers()?.clone();
    let mut record = csv::StringRecord::new();
    let mut orders = Vec::new();
    let mut first_line_of: HashMap<String, u64> = HashMap::new();
    while rdr.read_record(&mut record)? {
        let line = record.position().map_or(0, csv::Position::line);
        let raw: RawOrder<'_> = record.deserialize(Some(&headers))?;
        let order = parse_order(&raw, line)?;
        if let Some(&first_line) = first_line_of.get(&order.order_id) {
            return Err(TraceError::DuplicateOrderId {
                line,
                order_id: order.order_id,
                first_line,
            });
        }
        first_line_of.insert(order.order_id.clone(), line);
        orders.push(order);
    }
    Ok(orders)
}

fn parse_order(raw: &RawOrder<'_>, line: u64) -> Result<Order, TraceError> {
    let required = |column: &'static str, value: &str| -> Result<i64, TraceError> {
        parse_cell(column, value, line)?.ok_or(TraceError::MissingValue { line, column })
    };
    if raw.order_id.is_empty() {
        return Err(TraceError::MissingValue {
            line,
            column: "order_id",
        });
    }
    Ok(Order {
        order_id: raw.order_id.to_owned(),
        customer_id: raw.customer_id.to_owned(),
        status: raw.order_status.to_owned(),
        purchase_s: required("order_purchase_timestamp", raw.order_purchase_timestamp)?,
        approved_s: parse_cell("order_approved_at", raw.order_approved_at, line)?,
        delivered_carrier_s: parse_cell(
            "order_delivered_carrier_date",
            raw.order_delivered_carrier_date,
            line,
        )?,
        delivered_customer_s: parse_cell(
            "order_delivered_customer_date",
            raw.order_delivered_customer_date,
            line,
        )?,
        estimated_delivery_s: required(
            "order_estimated_delivery_date",
            raw.order_estimated_delivery_date,
        )?,
    })
}

/// Parses one timestamp cell; empty means absent.
fn parse_cell(column: &'static str, value: &str, line: u64) -> Result<Option<i64>, TraceError> {
    if value.is_empty() {
        return Ok(None);
    }
    parse_with(TRACE_TIME_FORMAT, value)
        .map(Some)
        .map_err(|source| TraceError::BadTimestamp {
            line,
            column,
            value: value.to_owned(),
            source,
        })
}

/// Parses `value` with the strftime-style `format` (which must consume the whole input) as a
/// civil date-time, and returns its Unix seconds as if it were UTC.
fn parse_with(format: &str, value: &str) -> Result<i64, jiff::Error> {
    let parsed = strtime::parse(format, value)?;
    let dt: DateTime = if format.contains("%H") {
        parsed.to_datetime()?
    } else {
        parsed.to_date()?.to_datetime(jiff::civil::Time::midnight())
    };
    Ok(TimeZone::UTC.to_timestamp(dt)?.as_second())
}

/// A `--from`/`--to` value that is not a recognised trace time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid trace time `{value}`: expected `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` or \
     `YYYY-MM-DDTHH:MM:SS` (trace wall-clock time, no time zone)"
)]
pub struct TraceTimeError {
    /// The value given.
    pub value: String,
}

/// Parses a `--from`/`--to` value: `YYYY-MM-DD` (midnight), `YYYY-MM-DD HH:MM:SS` or
/// `YYYY-MM-DDTHH:MM:SS`, into Unix seconds with the same convention as the trace (civil time
/// read as UTC; see the module docs). Surrounding whitespace is ignored. Usable as a clap
/// `value_parser`.
pub fn parse_trace_time(value: &str) -> Result<i64, TraceTimeError> {
    let trimmed = value.trim();
    ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]
        .into_iter()
        .find_map(|format| parse_with(format, trimmed).ok())
        .ok_or_else(|| TraceTimeError {
            value: value.to_owned(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::replay::trace::rows::{EST, HEADER, csv, t};

    #[test]
    fn parses_rows_and_empty_cells() {
        let text = format!(
            "{HEADER}a1,c1,shipped,2018-03-05 10:00:00,2018-03-05 10:10:00,2018-03-06 09:00:00,,2018-03-20 00:00:00\n"
        );
        let orders = load_orders_from_reader(text.as_bytes()).unwrap();
        assert_eq!(
            orders,
            vec![Order {
                order_id: "a1".into(),
                customer_id: "c1".into(),
                status: "shipped".into(),
                purchase_s: 1_520_244_000,
                approved_s: Some(1_520_244_600),
                delivered_carrier_s: Some(1_520_326_800),
                delivered_customer_s: None,
                estimated_delivery_s: 1_521_504_000,
            }]
        );
    }

    #[test]
    fn bad_timestamp_reports_line_and_column() {
        let text = csv(&[
            ("a", "2018-03-05 10:00:00", "", "", EST),
            ("b", "2018-03-05 10:00:00", "2018-03-05 25:00:00", "", EST),
        ]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        match &err {
            TraceError::BadTimestamp {
                line,
                column,
                value,
                ..
            } => {
                assert_eq!((*line, *column), (3, "order_approved_at"));
                assert_eq!(value, "2018-03-05 25:00:00");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("line 3") && message.contains("order_approved_at"));

        let text = csv(&[("a", "", "", "", EST)]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(
            err,
            TraceError::MissingValue {
                line: 2,
                column: "order_purchase_timestamp"
            }
        ));

        let text = csv(&[("a", "2018-03-05T10:00:00", "", "", EST)]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(err, TraceError::BadTimestamp { line: 2, .. }));
    }

    #[test]
    fn structural_errors() {
        let err = load_orders("/nonexistent/trace.csv").unwrap_err();
        assert!(matches!(err, TraceError::Open { .. }));
        assert!(err.to_string().contains("/nonexistent/trace.csv"));

        let err = load_orders_from_reader("order_id,customer_id\na,b\n".as_bytes()).unwrap_err();
        assert!(matches!(err, TraceError::Csv(_)), "{err}");

        let text = csv(&[
            ("a", "2018-03-05 10:00:00", "", "", EST),
            ("a", "2018-03-05 11:00:00", "", "", EST),
        ]);
        let err = load_orders_from_reader(text.as_bytes()).unwrap_err();
        assert!(matches!(
            err,
            TraceError::DuplicateOrderId {
                line: 3,
                first_line: 2,
                ..
            }
        ));
    }

    #[test]
    fn load_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.csv");
        std::fs::write(&path, csv(&[("a", "2018-03-05 10:00:00", "", "", EST)])).unwrap();
        assert_eq!(load_orders(&path).unwrap().len(), 1);
    }

    #[test]
    fn trace_time_arguments() {
        assert_eq!(t("1970-01-01"), 0);
        assert_eq!(t("1970-01-02 00:00:01"), 86_401);
        assert_eq!(t("1970-01-02T00:00:01"), 86_401);
        assert_eq!(t(" 2018-03-05 "), 1_520_208_000);
        for bad in [
            "",
            "2018-03",
            "2018-03-05 10:00",
            "2018-02-30",
            "yesterday",
            "2018-03-05Z",
        ] {
            let err = parse_trace_time(bad).unwrap_err();
            assert!(err.to_string().contains("YYYY-MM-DD"), "{err}");
        }
    }
}
