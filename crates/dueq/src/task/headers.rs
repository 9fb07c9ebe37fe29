//! [`Headers`]: a task's small string map, carried with it and never read by the queue except
//! for the trace context (`traceparent`, `tracestate`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Most entries a task's headers may hold.
pub const MAX_HEADERS: usize = 32;

/// Longest header name, in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 64;

/// Longest header value, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;

/// Most bytes of names and values together.
pub const MAX_HEADERS_BYTES: usize = 4096;

/// The W3C trace context header that names the producer's span.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C trace context header with vendor-specific trace state.
pub const TRACESTATE: &str = "tracestate";

/// A task's headers: names of `[A-Za-z0-9_.-]`, compared case-insensitively and kept in
/// lower case, values of printable ASCII. Set at enqueue, returned by get, claim and push
/// delivery, kept across retries, replaced with the payload on a replace or debounce.
///
/// The limits ([`MAX_HEADERS`] entries, names up to [`MAX_HEADER_NAME_BYTES`], values up to
/// [`MAX_HEADER_VALUE_BYTES`], [`MAX_HEADERS_BYTES`] in all) are checked by
/// [`TaskOptions::check`](crate::TaskOptions::check) at enqueue.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Headers(BTreeMap<String, String>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `name` (lower-cased) to `value`, replacing what it held.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0
            .insert(name.into().to_ascii_lowercase(), value.into());
    }

    /// Headers from `(name, value)` pairs, names lower-cased.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind) when two names differ only in case:
    /// names are compared case-insensitively, so they would be one header.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        Self::distinct(pairs).map_err(|e| Error::invalid(format!("headers: {e}")))
    }

    /// [`Headers::from_pairs`], its error without the field's name.
    fn distinct<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> std::result::Result<Self, String> {
        let mut h = Self::new();
        for (k, v) in pairs {
            let lower = k.into().to_ascii_lowercase();
            if h.0.contains_key(&lower) {
                return Err(format!(
                    "name {lower:?} is given twice (names are compared case-insensitively)"
                ));
            }
            h.0.insert(lower, v.into());
        }
        Ok(h)
    }

    /// The value of `name` (any case).
    pub fn get(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(v) => Some(v),
            None => self.0.get(&name.to_ascii_lowercase()).map(String::as_str),
        }
    }

    /// Removes `name` (any case); answers its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.0.remove(&name.to_ascii_lowercase())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The entries, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The producer's W3C `traceparent`, if it was given.
    pub fn traceparent(&self) -> Option<&str> {
        self.0.get(TRACEPARENT).map(String::as_str)
    }

    /// Checks the limits; the message starts with `headers:`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the first entry
    /// over a limit.
    pub fn check(&self) -> Result<()> {
        if self.0.len() > MAX_HEADERS {
            return Err(Error::invalid(format!(
                "headers: at most {MAX_HEADERS} entries, got {}",
                self.0.len()
            )));
        }
        let mut total = 0;
        for (name, value) in &self.0 {
            if name.is_empty()
                || name.len() > MAX_HEADER_NAME_BYTES
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
            {
                return Err(Error::invalid(format!(
                    "headers: name {name:?} must be 1 to {MAX_HEADER_NAME_BYTES} of the \
                     characters A-Z a-z 0-9 _ . -"
                )));
            }
            if value.len() > MAX_HEADER_VALUE_BYTES {
                return Err(Error::invalid(format!(
                    "headers: value of {name:?} must be at most {MAX_HEADER_VALUE_BYTES} bytes, \
                     got {}",
                    value.len()
                )));
            }
            if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                return Err(Error::invalid(format!(
                    "headers: value of {name:?} must be printable ASCII (0x20 to 0x7e)"
                )));
            }
            total += name.len() + value.len();
        }
        if total > MAX_HEADERS_BYTES {
            return Err(Error::invalid(format!(
                "headers: names and values must be at most {MAX_HEADERS_BYTES} bytes in all, \
                 got {total}"
            )));
        }
        Ok(())
    }

    /// The stored form: per entry `u8` name length, name, `u16` value length (little-endian),
    /// value. Only called on checked headers (names up to 64 bytes, values up to 1 KiB).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        for (name, value) in &self.0 {
            out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
            out.extend(name.as_bytes());
            out.extend(u16::try_from(value.len()).unwrap_or(u16::MAX).to_le_bytes());
            out.extend(value.as_bytes());
        }
    }

    /// Reads the stored form ([`encode_into`](Self::encode_into)); `None` when it is cut short.
    pub(crate) fn decode(mut b: &[u8]) -> Option<Self> {
        let mut map = BTreeMap::new();
        while let Some((&nlen, rest)) = b.split_first() {
            let nlen = usize::from(nlen);
            let name = rest.get(..nlen)?;
            let vlen = rest.get(nlen..nlen + 2)?;
            let vlen = usize::from(u16::from_le_bytes([vlen[0], vlen[1]]));
            let value = rest.get(nlen + 2..nlen + 2 + vlen)?;
            map.insert(
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            );
            b = &rest[nlen + 2 + vlen..];
        }
        Some(Self(map))
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

/// Collects `(name, value)` pairs as [`Headers::insert`] does: a later name replaces an earlier
/// one that differs only in case. [`Headers::from_pairs`] refuses them instead.
impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut h = Self::new();
        for (k, v) in iter {
            h.insert(k, v);
        }
        h
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Reads a JSON object (or `null`, no headers); names are lower-cased, and two names that
/// differ only in case are refused.
impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Option::<BTreeMap<String, String>>::deserialize(d)?.unwrap_or_default();
        Self::distinct(raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lower_case_and_compared_so() {
        let mut h = Headers::new();
        h.insert("TraceParent", "00-x");
        assert_eq!(h.traceparent(), Some("00-x"));
        assert_eq!(h.get("TRACEPARENT"), Some("00-x"));
        let e = serde_json::from_str::<Headers>(r#"{"A":"1","a":"2"}"#).unwrap_err();
        assert!(e.to_string().contains("name \"a\" is given twice"), "{e}");
        let e = Headers::from_pairs([("A", "1"), ("a", "2")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("headers: name \"a\" is given twice"),
            "{e}"
        );
        let h = Headers::from_pairs([("A", "1"), ("b", "2")]).unwrap();
        assert_eq!((h.get("a"), h.get("B")), (Some("1"), Some("2")));
        let h: Headers = serde_json::from_str(r#"{"X-Tenant":"7"}"#).unwrap();
        assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"x-tenant":"7"}"#);
        assert!(serde_json::from_str::<Headers>("null").unwrap().is_empty());
    }

    #[test]
    fn limits_name_the_field() {
        let over = |h: Headers| h.check().unwrap_err().to_string();
        let many: Headers = (0..=MAX_HEADERS).map(|i| (format!("h{i}"), "v")).collect();
        assert!(over(many).starts_with("headers: at most 32 entries, got 33"));
        for bad in ["", "a b", "é", &"n".repeat(65)] {
            let h: Headers = [(bad, "v")].into_iter().collect();
            assert!(over(h).starts_with("headers: name"), "{bad:?}");
        }
        let h: Headers = [("a", "x".repeat(1025))].into_iter().collect();
        assert!(over(h).contains("at most 1024 bytes, got 1025"));
        for bad in ["tab\t", "nl\n", "ü"] {
            let h: Headers = [("a", bad)].into_iter().collect();
            assert!(over(h).contains("printable ASCII"), "{bad:?}");
        }
        let big: Headers = (0..5)
            .map(|i| (format!("h{i}"), "x".repeat(1000)))
            .collect();
        assert!(over(big).contains("4096 bytes in all, got 5010"));
        let ok: Headers = (0..MAX_HEADERS)
            .map(|i| (format!("h{i:02}"), "x".repeat(120)))
            .collect();
        ok.check().unwrap();
    }

    #[test]
    fn the_stored_form_reads_back() {
        let h: Headers = [
            ("traceparent", "00-ab-cd-01"),
            ("e", ""),
            ("t.x_y-z", "~ !"),
        ]
        .into_iter()
        .collect();
        let mut b = Vec::new();
        h.encode_into(&mut b);
        assert_eq!(Headers::decode(&b), Some(h));
        assert_eq!(Headers::decode(&b[..b.len() - 1]), None);
        assert_eq!(Headers::decode(&[]), Some(Headers::new()));
    }
}
