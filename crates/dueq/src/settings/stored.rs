//! How a queue's settings are stored: the fields of its `meta` hash, read back into
//! [`QueueSettings`].

use super::limits::{BackoffSettings, RateLimit};
use super::{OnExpire, QueueSettings};

/// The `meta` fields [`QueueSettings::from_fields`] reads, in its order.
pub(crate) const STORED_FIELDS: [&str; 18] = [
    "max_attempts",
    "lease_ms",
    "backoff_base_ms",
    "backoff_factor",
    "backoff_max_ms",
    "dead_max",
    "done_max",
    "rate_max",
    "rate_per_ms",
    "group_rate_max",
    "group_rate_per_ms",
    "concurrency",
    "group_concurrency",
    "alert_due_age_ms",
    "alert_due_count",
    "on_expire",
    "partitions",
    "unique_for_ms",
];

impl QueueSettings {
    /// Reads the values of [`STORED_FIELDS`], in order (`None` = absent). A value that does
    /// not parse (written by hand) reads as absent.
    pub(crate) fn from_fields(v: &[Option<String>]) -> Self {
        let get = |i: usize| v.get(i).and_then(|s| s.as_deref());
        let n = |i: usize| get(i).and_then(|s| s.parse::<u64>().ok());
        let n32 = |i: usize| get(i).and_then(|s| s.parse::<u32>().ok());
        let rate = |a: usize, b: usize| Some(RateLimit::new(n(a)?, n(b)?));
        Self {
            max_attempts: n32(0),
            lease_ms: n(1),
            backoff: (|| {
                Some(BackoffSettings::new(
                    n(2)?,
                    get(3)?.parse::<f64>().ok()?,
                    n(4)?,
                ))
            })(),
            dead_max: n(5),
            succeeded_max: n(6),
            rate_limit: rate(7, 8),
            group_rate_limit: rate(9, 10),
            concurrency: n32(11),
            group_concurrency: n32(12),
            alert_due_age_ms: n(13),
            alert_due_count: n(14),
            on_expire: match get(15) {
                Some("dead") => Some(OnExpire::Dead),
                Some("drop") => Some(OnExpire::Drop),
                _ => None,
            },
            partitions: get(16).and_then(|s| s.parse::<u16>().ok()),
            unique_for_ms: n(17),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SettingsPatch;

    #[test]
    fn stored_fields_round_trip() {
        let p = SettingsPatch::default()
            .max_attempts(Some(3))
            .lease_ms(Some(5_000))
            .backoff(Some(BackoffSettings::new(100, 1.5, 10_000)))
            .dead_max(Some(7))
            .succeeded_max(Some(8))
            .rate_limit(Some(RateLimit::new(100, 1_000)))
            .group_rate_limit(Some(RateLimit::new(5, 200)))
            .concurrency(Some(9))
            .group_concurrency(Some(2))
            .alert_due_age_ms(Some(60_000))
            .alert_due_count(Some(1_000))
            .on_expire(Some(OnExpire::Dead));
        p.validate().unwrap();
        let (set, clear) = p.fields();
        assert!(clear.is_empty());
        let values: Vec<Option<String>> = STORED_FIELDS
            .iter()
            .map(|f| set.iter().find(|(n, _)| n == f).map(|(_, v)| v.clone()))
            .collect();
        assert_eq!(
            QueueSettings::from_fields(&values),
            QueueSettings::default().patched(&p)
        );
    }
}
