//! Name-ordered pages (`GET /v1/queues`, `GET /v1/queues/{queue}/schedules`, and the
//! dashboard pages that show them): `limit` and an `after` name cursor, answered with the
//! page, the `total` and the `next` cursor.

use serde::Deserialize;
use utoipa::IntoParams;

use crate::error::ApiError;

/// Default page size.
pub const DEFAULT_PAGE_LIMIT: usize = 100;
/// Largest page size.
pub const MAX_PAGE_LIMIT: usize = 1000;

/// Which page of a list sorted by name.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
#[non_exhaustive]
pub struct PageQuery {
    /// At most this many, 1 to 1000. Default 100.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// The page starts after this name (the `next` of the previous page; any name works:
    /// the page starts at the first name sorted after it). Absent: from the start.
    #[param(max_length = 128)]
    pub after: Option<String>,
}

impl PageQuery {
    /// The page size, checked (400 `invalid_input` naming `limit`).
    pub(crate) fn limit(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_PAGE_LIMIT),
            Some(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => Ok(n),
            Some(n) => Err(ApiError::invalid(format!(
                "limit: must be 1 to {MAX_PAGE_LIMIT}, not {n}"
            ))),
        }
    }

    /// The cursor, checked by `valid` (a name of the listed kind; an empty `after` is the
    /// start), the error naming `after`.
    pub(crate) fn after(
        &self,
        valid: impl Fn(&str) -> dueq::Result<()>,
    ) -> Result<Option<&str>, ApiError> {
        match self.after.as_deref() {
            None | Some("") => Ok(None),
            Some(a) => valid(a).map(|()| Some(a)).map_err(|e| {
                let e = e.to_string();
                ApiError::invalid(format!("after: {}", e.trim_start_matches("name: ")))
            }),
        }
    }
}

/// The page of sorted, distinct `names` after `after` with at most `limit` entries, and the
/// `next` cursor (its last name when more follow, else `None`).
pub(crate) fn page<'a>(
    names: &'a [String],
    after: Option<&str>,
    limit: usize,
) -> (&'a [String], Option<String>) {
    let start = after.map_or(0, |a| names.partition_point(|n| n.as_str() <= a));
    let end = start.saturating_add(limit).min(names.len());
    let shown = &names[start..end];
    let next = (end < names.len()).then(|| shown.last().cloned()).flatten();
    (shown, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("q{i:03}")).collect()
    }

    #[test]
    fn pages_walk_the_names_once() {
        let all = names(250);
        let mut after = None;
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let (p, next) = page(&all, after.as_deref(), 100);
            sizes.push(p.len());
            seen.extend(p.iter().cloned());
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(sizes, [100, 100, 50]);
        assert_eq!(seen, all);
    }

    #[test]
    fn a_cursor_between_or_past_names() {
        let all = names(10);
        let (p, next) = page(&all, Some("q004x"), 3);
        assert_eq!(p, ["q005", "q006", "q007"]);
        assert_eq!(next.as_deref(), Some("q007"));
        let (p, next) = page(&all, Some("zzz"), 3);
        assert!(p.is_empty());
        assert_eq!(next, None);
        let (p, next) = page(&all, None, 10);
        assert_eq!(p.len(), 10);
        assert_eq!(next, None, "an exact last page has no next");
    }
}
