//! The one rule for payloads over HTTP and in the CLI's JSON output: a payload is stored as the
//! bytes of the JSON value the client sent (exactly as sent, so it round-trips byte for byte),
//! and shown as that JSON value when its bytes are JSON, else as a string (lossy UTF-8).
//!
//! The library itself treats payloads as opaque bytes; this is the JSON view that the HTTP API
//! (`dueq-server`) and the CLI's `--json` output share, so both show a payload the same way.
//! [`object_from_slice`] is how both read a JSON object given by a user (a request body,
//! `dueq settings set`'s patch), so a bad field gets the same message from either.

use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// Why [`object_from_slice`] refused a document.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectError {
    /// What is wrong, naming the field when one is at fault (`rate_limit.per_ms: invalid
    /// value ...`; an unknown field also names the object it is in: `rate_limit: unknown field
    /// `burst` ...`).
    pub message: String,
    /// What kind of refusal it is.
    pub kind: ObjectErrorKind,
}

/// The kinds of [`ObjectError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectErrorKind {
    /// A JSON array where an object is needed.
    Array,
    /// Not JSON at all (syntax, end of input).
    Malformed,
    /// JSON of the wrong shape: a bad or unknown field.
    Invalid,
}

/// Reads a JSON object into `T`, naming the field of a bad value. An array is refused: serde
/// would read it into a struct by field position (`[3, 5000]` as `max_attempts`, `lease_ms`),
/// which nobody means.
///
/// # Errors
/// [`ObjectError`] for an array, malformed JSON or a value `T` does not accept.
pub fn object_from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ObjectError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ObjectError {
            message: "a JSON object is needed, not an array".to_owned(),
            kind: ObjectErrorKind::Array,
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        let message = if !e.is_data() || path == "." {
            e.to_string()
        } else if e.to_string().contains("unknown field") {
            // the message names the unknown field; a nested one also gets the object it is in
            match path.rsplit_once('.') {
                Some((parent, _)) => format!("{parent}: {e}"),
                None => e.to_string(),
            }
        } else {
            format!("{path}: {e}")
        };
        let kind = if e.is_data() {
            ObjectErrorKind::Invalid
        } else {
            ObjectErrorKind::Malformed
        };
        ObjectError { message, kind }
    })?;
    // bytes after the value (`{"a":1} garbage`, a second object) make the body malformed:
    // applying the first value would act on half of what was sent
    de.end().map_err(|e| ObjectError {
        message: format!("bytes after the JSON object ({e}): send one JSON object"),
        kind: ObjectErrorKind::Invalid,
    })?;
    Ok(value)
}

/// A stored payload as raw JSON text for a response: the bytes verbatim when they are one
/// JSON value (no re-ordering of object keys, any nesting depth), else a JSON string of the
/// text (lossy UTF-8).
pub fn payload_raw(bytes: &[u8]) -> Box<RawValue> {
    if let Ok(text) = std::str::from_utf8(bytes)
        && let Ok(raw) = serde_json::from_str::<Box<RawValue>>(text)
    {
        return raw;
    }
    let text = String::from_utf8_lossy(bytes);
    // Serializing a string cannot fail; `null` is an unreachable fallback.
    serde_json::value::to_raw_value(&text).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Deepest nesting of arrays and objects accepted in a payload over HTTP. Deeper payloads
/// would be stored fine, but a response carrying one inside its envelope (3 more levels)
/// would pass serde_json's default limit of 128 and many clients' decoders could not read
/// it, so every claim returning it would fail: a poison task.
pub const MAX_PAYLOAD_DEPTH: usize = 100;

/// The nesting depth of valid JSON text (arrays and objects; strings skipped).
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The bytes stored for a payload received over HTTP: the JSON text as sent.
pub fn payload_bytes(raw: &RawValue) -> Vec<u8> {
    raw.get().as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_payloads_round_trip_verbatim() {
        let raw = payload_raw(br#"{"b": 1,"a":[true, null]}"#);
        assert_eq!(raw.get(), r#"{"b": 1,"a":[true, null]}"#);
        assert_eq!(payload_raw(b"not json").get(), r#""not json""#);
        assert_eq!(payload_raw(b"").get(), r#""""#);
        assert_eq!(payload_raw(&[0xff, b'a']).get(), "\"\u{fffd}a\"");
    }

    #[test]
    fn depth_is_measured_outside_strings() {
        assert_eq!(json_depth("1"), 0);
        assert_eq!(json_depth(r#"[{"a": [1]}, []]"#), 3);
        assert_eq!(json_depth(r#"["[[[", "\\\"[[", {"}": 1}]"#), 2);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let raw = payload_raw(deep.as_bytes());
        assert!(raw.get().len() >= 200_000);
    }
}
