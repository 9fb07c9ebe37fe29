//! Queue settings: stored in Redis beside the queue (the `meta` hash), read by every producer,
//! worker and server, so one change applies everywhere at the next claim, without restarts.
//!
//! [`QueueSettings`] is what is stored (every field optional: absent means the built-in
//! default); [`SettingsPatch`] is a change (fields left out stay, `null` clears). Both are
//! the JSON bodies of `GET` / `PATCH /v1/queues/{queue}/settings`, so the HTTP API and the
//! library share one definition and one validation.
//!
//! Where each setting applies:
//! * `max_attempts`, `lease_ms`: to every task enqueued without its own value, read when the
//!   value is used (a claim takes the queue's `lease_ms`, a failure compares with its
//!   `max_attempts`), so a change applies to tasks already waiting too;
//! * `backoff`: to the next failed attempt (nack without a delay, expired lease), replacing
//!   the backoff a worker was built with;
//! * `dead_max`, `succeeded_max`: retention caps, at the next death or ack;
//! * `rate_limit`, `concurrency`, `group_rate_limit`, `group_concurrency`: inside the claim
//!   script (DESIGN 2.12), for every process at once;
//! * `alert_due_age_ms`, `alert_due_count`: when [`QueueStats::behind`](crate::QueueStats) is
//!   set;
//! * `on_expire`: when a task's expiry passes before it started (claim or recovery).

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::task::{MAX_ATTEMPTS, validate_lease_ms};

/// Longest rate-limit window, ms (1 day).
pub const MAX_RATE_WINDOW_MS: u64 = 86_400_000;
/// Largest `max` of a rate limit and largest concurrency limit.
pub const MAX_LIMIT: u64 = 1_000_000;
/// Longest backoff delay, ms (30 days).
pub const MAX_BACKOFF_MS: u64 = 30 * 86_400_000;
/// Largest retention cap (`dead_max`, `succeeded_max`).
pub const MAX_RETENTION: u64 = 100_000_000;

/// At most `max` tasks handed out in any window of `per_ms` milliseconds (sliding, by the
/// Redis clock, counted over every process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RateLimit {
    /// Tasks per window, 1 to 1 000 000.
    pub max: u64,
    /// Window length, 1 ms to 1 day.
    pub per_ms: u64,
}

impl RateLimit {
    /// `max` tasks per `per_ms` ms.
    pub fn new(max: u64, per_ms: u64) -> Self {
        Self { max, per_ms }
    }

    fn validate(&self, field: &str) -> Result<()> {
        if self.max == 0 || self.max > MAX_LIMIT {
            return Err(Error::invalid(format!(
                "{field}.max must be 1 to {MAX_LIMIT}"
            )));
        }
        if self.per_ms == 0 || self.per_ms > MAX_RATE_WINDOW_MS {
            return Err(Error::invalid(format!(
                "{field}.per_ms must be 1 to {MAX_RATE_WINDOW_MS}"
            )));
        }
        Ok(())
    }
}

/// Retry delays of a queue: `min(max_ms, base_ms * factor^(attempt-1))`, with 20 % jitter
/// (see [`Backoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackoffSettings {
    /// Delay after the first failed attempt, 1 ms to 30 days.
    pub base_ms: u64,
    /// Growth per attempt, 1.0 to 100.0.
    pub factor: f64,
    /// Longest delay, `base_ms` to 30 days.
    pub max_ms: u64,
}

impl BackoffSettings {
    /// `base_ms`, growing by `factor`, capped at `max_ms`.
    pub fn new(base_ms: u64, factor: f64, max_ms: u64) -> Self {
        Self {
            base_ms,
            factor,
            max_ms,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.base_ms == 0 || self.base_ms > MAX_BACKOFF_MS {
            return Err(Error::invalid(format!(
                "backoff.base_ms must be 1 to {MAX_BACKOFF_MS}"
            )));
        }
        if !(1.0..=100.0).contains(&self.factor) {
            return Err(Error::invalid("backoff.factor must be 1.0 to 100.0"));
        }
        if self.max_ms < self.base_ms || self.max_ms > MAX_BACKOFF_MS {
            return Err(Error::invalid(format!(
                "backoff.max_ms must be base_ms ({}) to {MAX_BACKOFF_MS}",
                self.base_ms
            )));
        }
        Ok(())
    }

    /// The retry policy these settings describe.
    pub fn policy(&self) -> Backoff {
        Backoff::new(self.base_ms, self.factor, self.max_ms).jitter(0.2)
    }
}

/// A queue's stored settings; `None` is the built-in default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueSettings {
    /// Attempts for tasks enqueued without their own. Default 5.
    pub max_attempts: Option<u32>,
    /// Lease for tasks enqueued without their own, ms. Default 30 000.
    pub lease_ms: Option<u64>,
    /// Retry delays. Default: the worker's ([`Backoff::default`]: 1 s doubling to 1 h).
    pub backoff: Option<BackoffSettings>,
    /// Dead-letter cap: the newest this many dead tasks are kept. Default 10 000.
    pub dead_max: Option<u64>,
    /// Succeeded tasks kept for lookup. Default 0 (an ack leaves nothing behind).
    pub succeeded_max: Option<u64>,
    /// Tasks handed out per window, over the whole queue. Default none.
    pub rate_limit: Option<RateLimit>,
    /// Tasks handed out per window, for each group on its own. Default none.
    pub group_rate_limit: Option<RateLimit>,
    /// Most tasks active at once over the whole queue. Default none.
    pub concurrency: Option<u32>,
    /// Most tasks of one group active at once. Default none.
    pub group_concurrency: Option<u32>,
    /// The queue is behind when its oldest due task has waited this long, ms. Default none.
    pub alert_due_age_ms: Option<u64>,
    /// The queue is behind when this many tasks are due. Default none.
    pub alert_due_count: Option<u64>,
    /// What happens to a task whose expiry passed before it started. Default
    /// [`OnExpire::Drop`].
    pub on_expire: Option<OnExpire>,
    /// Partitions the queue is split into, each under its own hash tag (DESIGN 3), 1 to
    /// [`MAX_PARTITIONS`](crate::MAX_PARTITIONS). Default 1. Changed only while the queue
    /// holds no task; every limit is then split over the partitions (see
    /// docs/SCALING.md).
    pub partitions: Option<u16>,
}

/// What happens to a task not started before its expiry (`expires_at_ms` / `ttl_ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnExpire {
    /// Dropped with its record; its key is free again. The default.
    #[default]
    Drop,
    /// Kept in the dead-letter queue with the error `expired` (its key is free again).
    Dead,
}

impl OnExpire {
    /// The name used in JSON and in the `meta` hash.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drop => "drop",
            Self::Dead => "dead",
        }
    }
}

/// Deserializes a present field (value or `null`) as `Some`, so a missing one stays `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// As [`present`], for a value that must be an object (or `null`): serde's derive would also
/// read an array by field position (`[7, 1000]` as `{"max": 7, "per_ms": 1000}`), which
/// nobody means.
fn present_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    struct ObjectOrNull<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOrNull<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(
            self,
            d: D2,
        ) -> std::result::Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(
            self,
            map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            T::deserialize(MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_option(ObjectOrNull(std::marker::PhantomData))
        .map(Some)
}

/// A change to a queue's settings: `None` leaves a field as it is, `Some(None)` clears it
/// (back to the default), `Some(Some(v))` sets it. In JSON: leave a field out, give `null`,
/// or give a value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
#[allow(clippy::option_option)]
pub struct SettingsPatch {
    /// See [`QueueSettings::max_attempts`].
    #[serde(default, deserialize_with = "present")]
    pub max_attempts: Option<Option<u32>>,
    /// See [`QueueSettings::lease_ms`].
    #[serde(default, deserialize_with = "present")]
    pub lease_ms: Option<Option<u64>>,
    /// See [`QueueSettings::backoff`].
    #[serde(default, deserialize_with = "present_object")]
    pub backoff: Option<Option<BackoffSettings>>,
    /// See [`QueueSettings::dead_max`].
    #[serde(default, deserialize_with = "present")]
    pub dead_max: Option<Option<u64>>,
    /// See [`QueueSettings::succeeded_max`].
    #[serde(default, deserialize_with = "present")]
    pub succeeded_max: Option<Option<u64>>,
    /// See [`QueueSettings::rate_limit`].
    #[serde(default, deserialize_with = "present_object")]
    pub rate_limit: Option<Option<RateLimit>>,
    /// See [`QueueSettings::group_rate_limit`].
    #[serde(default, deserialize_with = "present_object")]
    pub group_rate_limit: Option<Option<RateLimit>>,
    /// See [`QueueSettings::concurrency`].
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<Option<u32>>,
    /// See [`QueueSettings::group_concurrency`].
    #[serde(default, deserialize_with = "present")]
    pub group_concurrency: Option<Option<u32>>,
    /// See [`QueueSettings::alert_due_age_ms`].
    #[serde(default, deserialize_with = "present")]
    pub alert_due_age_ms: Option<Option<u64>>,
    /// See [`QueueSettings::alert_due_count`].
    #[serde(default, deserialize_with = "present")]
    pub alert_due_count: Option<Option<u64>>,
    /// See [`QueueSettings::on_expire`].
    #[serde(default, deserialize_with = "present")]
    pub on_expire: Option<Option<OnExpire>>,
    /// See [`QueueSettings::partitions`].
    #[serde(default, deserialize_with = "present")]
    pub partitions: Option<Option<u16>>,
}

macro_rules! setters {
    ($($field:ident: $t:ty),* $(,)?) => {
        impl SettingsPatch {
            $(
                #[doc = concat!("Sets (`Some`) or clears (`None`) `", stringify!($field), "`.")]
                pub fn $field(mut self, v: Option<$t>) -> Self {
                    self.$field = Some(v);
                    self
                }
            )*
        }
    };
}

setters! {
    max_attempts: u32, lease_ms: u64, backoff: BackoffSettings, dead_max: u64,
    succeeded_max: u64, rate_limit: RateLimit, group_rate_limit: RateLimit, concurrency: u32,
    group_concurrency: u32, alert_due_age_ms: u64, alert_due_count: u64, on_expire: OnExpire,
    partitions: u16,
}

fn check_range(field: &str, v: u64, min: u64, max: u64) -> Result<()> {
    if v < min || v > max {
        return Err(Error::invalid(format!("{field} must be {min} to {max}")));
    }
    Ok(())
}

impl SettingsPatch {
    /// Checks every value given; the error names the field.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
    pub fn validate(&self) -> Result<()> {
        if let Some(Some(n)) = self.max_attempts {
            check_range("max_attempts", u64::from(n), 1, u64::from(MAX_ATTEMPTS))?;
        }
        if let Some(Some(ms)) = self.lease_ms {
            validate_lease_ms(ms)?;
        }
        if let Some(Some(b)) = self.backoff {
            b.validate()?;
        }
        if let Some(Some(n)) = self.dead_max {
            // 0 would delete every task the moment it dies, unseen (DESIGN 2.18)
            check_range("dead_max", n, 1, MAX_RETENTION)?;
        }
        if let Some(Some(n)) = self.succeeded_max {
            check_range("succeeded_max", n, 0, MAX_RETENTION)?;
        }
        if let Some(Some(r)) = self.rate_limit {
            r.validate("rate_limit")?;
        }
        if let Some(Some(r)) = self.group_rate_limit {
            r.validate("group_rate_limit")?;
        }
        if let Some(Some(n)) = self.concurrency {
            check_range("concurrency", u64::from(n), 1, MAX_LIMIT)?;
        }
        if let Some(Some(n)) = self.group_concurrency {
            check_range("group_concurrency", u64::from(n), 1, MAX_LIMIT)?;
        }
        if let Some(Some(n)) = self.alert_due_age_ms {
            check_range("alert_due_age_ms", n, 1, MAX_BACKOFF_MS)?;
        }
        if let Some(Some(n)) = self.alert_due_count {
            check_range("alert_due_count", n, 1, u64::MAX >> 11)?;
        }
        if let Some(Some(n)) = self.partitions {
            check_range(
                "partitions",
                u64::from(n),
                1,
                u64::from(crate::protocol::keys::MAX_PARTITIONS),
            )?;
        }
        Ok(())
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The `meta` fields to set and to clear (the storage layout; see `settings_set.lua`).
    pub(crate) fn fields(&self) -> (Vec<(&'static str, String)>, Vec<&'static str>) {
        let mut set = Vec::new();
        let mut clear = Vec::new();
        let mut one = |name: &'static str, v: Option<Option<String>>| match v {
            Some(Some(v)) => set.push((name, v)),
            Some(None) => clear.push(name),
            None => {}
        };
        let s = |v: Option<Option<u64>>| v.map(|o| o.map(|n| n.to_string()));
        let s32 = |v: Option<Option<u32>>| v.map(|o| o.map(|n| n.to_string()));
        one("max_attempts", s32(self.max_attempts));
        one("lease_ms", s(self.lease_ms));
        one("dead_max", s(self.dead_max));
        one("done_max", s(self.succeeded_max));
        one("concurrency", s32(self.concurrency));
        one("group_concurrency", s32(self.group_concurrency));
        one("alert_due_age_ms", s(self.alert_due_age_ms));
        one("alert_due_count", s(self.alert_due_count));
        one(
            "on_expire",
            self.on_expire.map(|o| o.map(|e| e.as_str().to_owned())),
        );
        one(
            "partitions",
            self.partitions.map(|o| o.map(|n| n.to_string())),
        );
        let b = self.backoff;
        one(
            "backoff_base_ms",
            b.map(|o| o.map(|b| b.base_ms.to_string())),
        );
        one("backoff_factor", b.map(|o| o.map(|b| b.factor.to_string())));
        one("backoff_max_ms", b.map(|o| o.map(|b| b.max_ms.to_string())));
        for (max, per, r) in [
            ("rate_max", "rate_per_ms", self.rate_limit),
            ("group_rate_max", "group_rate_per_ms", self.group_rate_limit),
        ] {
            one(max, r.map(|o| o.map(|r| r.max.to_string())));
            one(per, r.map(|o| o.map(|r| r.per_ms.to_string())));
        }
        (set, clear)
    }
}

/// The `meta` fields [`QueueSettings::from_fields`] reads, in its order.
pub(crate) const STORED_FIELDS: [&str; 17] = [
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
        }
    }

    /// These settings with `patch` applied.
    pub fn patched(mut self, patch: &SettingsPatch) -> Self {
        macro_rules! apply {
            ($($f:ident),*) => { $( if let Some(v) = patch.$f { self.$f = v; } )* };
        }
        apply!(
            max_attempts,
            lease_ms,
            backoff,
            dead_max,
            succeeded_max,
            rate_limit,
            group_rate_limit,
            concurrency,
            group_concurrency,
            alert_due_age_ms,
            alert_due_count,
            on_expire,
            partitions
        );
        self
    }

    /// The number of partitions (1 when not set).
    pub fn partition_count(&self) -> u16 {
        self.partitions.unwrap_or(1).max(1)
    }

    /// Checks that every limit can be split over `n` partitions: each partition enforces
    /// its share ([`limit_share`]), so a limit below `n` would leave a partition none.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the limit.
    pub(crate) fn check_split(&self, n: u16) -> Result<()> {
        if n <= 1 {
            return Ok(());
        }
        let limits = [
            ("concurrency", self.concurrency.map(u64::from)),
            ("group_concurrency", self.group_concurrency.map(u64::from)),
            ("rate_limit.max", self.rate_limit.map(|r| r.max)),
            ("group_rate_limit.max", self.group_rate_limit.map(|r| r.max)),
        ];
        for (name, v) in limits {
            if let Some(v) = v
                && v < u64::from(n)
            {
                return Err(Error::invalid(format!(
                    "{name} must be at least partitions ({n}): each partition enforces its \
                     share of the limit"
                )));
            }
        }
        Ok(())
    }

    /// The settings partition `p` of `n` stores: these, with every limit cut to the
    /// partition's share.
    pub(crate) fn share_for(&self, p: u16, n: u16) -> Self {
        let mut s = *self;
        let cut = |v: u64| limit_share(v, p, n);
        s.concurrency = s.concurrency.map(|v| cut(u64::from(v)) as u32);
        s.group_concurrency = s.group_concurrency.map(|v| cut(u64::from(v)) as u32);
        s.rate_limit = s.rate_limit.map(|r| RateLimit::new(cut(r.max), r.per_ms));
        s.group_rate_limit = s
            .group_rate_limit
            .map(|r| RateLimit::new(cut(r.max), r.per_ms));
        s
    }

    /// The whole patch that turns any stored settings into these: every field set or cleared.
    pub(crate) fn as_patch(&self) -> SettingsPatch {
        SettingsPatch {
            max_attempts: Some(self.max_attempts),
            lease_ms: Some(self.lease_ms),
            backoff: Some(self.backoff),
            dead_max: Some(self.dead_max),
            succeeded_max: Some(self.succeeded_max),
            rate_limit: Some(self.rate_limit),
            group_rate_limit: Some(self.group_rate_limit),
            concurrency: Some(self.concurrency),
            group_concurrency: Some(self.group_concurrency),
            alert_due_age_ms: Some(self.alert_due_age_ms),
            alert_due_count: Some(self.alert_due_count),
            on_expire: Some(self.on_expire),
            partitions: Some(self.partitions),
        }
    }
}

/// Partition `p`'s share of a limit `total` split over `n` partitions: `total / n`, one more
/// for the first `total % n` partitions, so the shares add up to `total` exactly.
pub(crate) fn limit_share(total: u64, p: u16, n: u16) -> u64 {
    let n = u64::from(n.max(1));
    total / n + u64::from(u64::from(p) < total % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_split_exactly_over_partitions() {
        for total in [6u64, 7, 100, 1_000_000] {
            for n in [1u16, 2, 3, 6, 1024] {
                if total < u64::from(n) {
                    continue;
                }
                let shares: Vec<u64> = (0..n).map(|p| limit_share(total, p, n)).collect();
                assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {n}");
                assert!(shares.iter().all(|&s| s >= 1));
                let (lo, hi) = (shares.iter().min(), shares.iter().max());
                assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{shares:?}");
            }
        }
        let s = QueueSettings {
            concurrency: Some(5),
            ..QueueSettings::default()
        };
        assert!(s.check_split(5).is_ok());
        let e = s.check_split(6).unwrap_err().to_string();
        assert!(
            e.contains("concurrency must be at least partitions (6)"),
            "{e}"
        );
        assert_eq!(s.share_for(4, 5).concurrency, Some(1));
        assert_eq!(s.share_for(0, 2).concurrency, Some(3));
    }

    #[test]
    fn json_patch_tells_missing_from_null() {
        let p: SettingsPatch =
            serde_json::from_str(r#"{"concurrency": 7, "rate_limit": null}"#).unwrap();
        assert_eq!(p.concurrency, Some(Some(7)));
        assert_eq!(p.rate_limit, Some(None));
        assert_eq!(p.lease_ms, None);
        let (set, clear) = p.fields();
        assert_eq!(set, vec![("concurrency", "7".to_owned())]);
        assert_eq!(clear, vec!["rate_max", "rate_per_ms"]);
    }

    #[test]
    fn a_limit_given_as_an_array_is_refused() {
        for json in [
            r#"{"rate_limit": [7, 1000]}"#,
            r#"{"group_rate_limit": [7, 1000]}"#,
            r#"{"backoff": [10, 2.0, 100]}"#,
        ] {
            let e = serde_json::from_str::<SettingsPatch>(json).unwrap_err();
            assert!(e.to_string().contains("an object or null"), "{json}: {e}");
        }
        let p: SettingsPatch =
            serde_json::from_str(r#"{"backoff": {"base_ms": 10, "factor": 2.0, "max_ms": 100}}"#)
                .unwrap();
        assert_eq!(p.backoff, Some(Some(BackoffSettings::new(10, 2.0, 100))));
    }

    #[test]
    fn nonsense_is_refused_naming_the_field() {
        for (json, field) in [
            (
                r#"{"rate_limit": {"max": 10, "per_ms": 0}}"#,
                "rate_limit.per_ms",
            ),
            (
                r#"{"group_rate_limit": {"max": 0, "per_ms": 10}}"#,
                "group_rate_limit.max",
            ),
            (r#"{"concurrency": 0}"#, "concurrency"),
            (r#"{"group_concurrency": 2000000}"#, "group_concurrency"),
            (r#"{"max_attempts": 0}"#, "max_attempts"),
            (r#"{"lease_ms": 0}"#, "lease_ms"),
            (
                r#"{"backoff": {"base_ms": 10, "factor": 0.5, "max_ms": 100}}"#,
                "backoff.factor",
            ),
            (
                r#"{"backoff": {"base_ms": 100, "factor": 2, "max_ms": 10}}"#,
                "backoff.max_ms",
            ),
            (r#"{"alert_due_age_ms": 0}"#, "alert_due_age_ms"),
        ] {
            let p: SettingsPatch = serde_json::from_str(json).unwrap();
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{json}: {e}");
        }
        for json in [
            r#"{"concurency": 1}"#,
            r#"{"rate_limit": {"max": 1, "per_ms": 1, "burst": 2}}"#,
            r#"{"concurrency": -1}"#,
        ] {
            assert!(
                serde_json::from_str::<SettingsPatch>(json).is_err(),
                "{json}"
            );
        }
    }

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
