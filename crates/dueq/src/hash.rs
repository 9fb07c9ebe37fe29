//! FNV-1a, 64 bit: a hash that is the same in every build and on every host (std's is not),
//! for what several processes must agree on: the partition of a business key, a schedule's
//! fingerprint, the function library's name.

/// The FNV-1a 64-bit hash of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
