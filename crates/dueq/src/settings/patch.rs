//! A change to a queue's settings ([`SettingsPatch`]): which fields it sets or clears, its
//! validation, and the `meta` fields it writes.

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::limits::{BackoffSettings, MAX_BACKOFF_MS, MAX_LIMIT, RateLimit};
use super::{MAX_RETENTION, OnExpire};
use crate::error::{Error, Result};
use crate::task::{MAX_ATTEMPTS, validate_lease_ms};

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
    /// See [`QueueSettings::max_attempts`](crate::QueueSettings::max_attempts).
    #[serde(default, deserialize_with = "present")]
    pub max_attempts: Option<Option<u32>>,
    /// See [`QueueSettings::lease_ms`](crate::QueueSettings::lease_ms).
    #[serde(default, deserialize_with = "present")]
    pub lease_ms: Option<Option<u64>>,
    /// See [`QueueSettings::backoff`](crate::QueueSettings::backoff).
    #[serde(default, deserialize_with = "present_object")]
    pub backoff: Option<Option<BackoffSettings>>,
    /// See [`QueueSettings::dead_max`](crate::QueueSettings::dead_max).
    #[serde(default, deserialize_with = "present")]
    pub dead_max: Option<Option<u64>>,
    /// See [`QueueSettings::succeeded_max`](crate::QueueSettings::succeeded_max).
    #[serde(default, deserialize_with = "present")]
    pub succeeded_max: Option<Option<u64>>,
    /// See [`QueueSettings::rate_limit`](crate::QueueSettings::rate_limit).
    #[serde(default, deserialize_with = "present_object")]
    pub rate_limit: Option<Option<RateLimit>>,
    /// See [`QueueSettings::group_rate_limit`](crate::QueueSettings::group_rate_limit).
    #[serde(default, deserialize_with = "present_object")]
    pub group_rate_limit: Option<Option<RateLimit>>,
    /// See [`QueueSettings::concurrency`](crate::QueueSettings::concurrency).
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<Option<u32>>,
    /// See [`QueueSettings::group_concurrency`](crate::QueueSettings::group_concurrency).
    #[serde(default, deserialize_with = "present")]
    pub group_concurrency: Option<Option<u32>>,
    /// See [`QueueSettings::alert_due_age_ms`](crate::QueueSettings::alert_due_age_ms).
    #[serde(default, deserialize_with = "present")]
    pub alert_due_age_ms: Option<Option<u64>>,
    /// See [`QueueSettings::alert_due_count`](crate::QueueSettings::alert_due_count).
    #[serde(default, deserialize_with = "present")]
    pub alert_due_count: Option<Option<u64>>,
    /// See [`QueueSettings::on_expire`](crate::QueueSettings::on_expire).
    #[serde(default, deserialize_with = "present")]
    pub on_expire: Option<Option<OnExpire>>,
    /// See [`QueueSettings::partitions`](crate::QueueSettings::partitions).
    #[serde(default, deserialize_with = "present")]
    pub partitions: Option<Option<u16>>,
    /// See [`QueueSettings::unique_for_ms`](crate::QueueSettings::unique_for_ms).
    #[serde(default, deserialize_with = "present")]
    pub unique_for_ms: Option<Option<u64>>,
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
    partitions: u16, unique_for_ms: u64,
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
        if let Some(Some(ms)) = self.unique_for_ms {
            crate::task::validate_unique_for_ms(ms)?;
        }
        if let Some(Some(n)) = self.partitions {
            check_range(
                "partitions",
                u64::from(n),
                1,
                u64::from(super::MAX_PARTITIONS),
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
        one("unique_for_ms", s(self.unique_for_ms));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
