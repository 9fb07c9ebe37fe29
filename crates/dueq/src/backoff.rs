//! Retry delays: capped exponential backoff with jitter, overflow-safe.
//!
//! The policy lives here, in Rust, and nowhere else: before each call that may fail an attempt
//! (nack, recover) the caller sends Redis a short table of delays by attempt
//! ([`Backoff::table_ms`]), so the Lua scripts only look values up.
//!
//! Jitter follows the "full/equal jitter" discussion of the AWS Architecture Blog
//! ("Exponential Backoff And Jitter", 2015): a random part of the delay is taken off so that
//! tasks failing together do not retry together.

/// Capped exponential backoff: the delay after failed attempt `n` (1-based) is
/// `min(cap_ms, base_ms * factor^(n-1))`, then reduced by up to `jitter` of itself at random,
/// and never below 1 ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base_ms: u64,
    factor: f64,
    cap_ms: u64,
    jitter: f64,
}

impl Default for Backoff {
    /// 1 s, doubling, capped at 1 hour, 20 % jitter.
    fn default() -> Self {
        Self {
            base_ms: 1_000,
            factor: 2.0,
            cap_ms: 3_600_000,
            jitter: 0.2,
        }
    }
}

/// Longest table sent to Redis; later attempts reuse its last value.
const TABLE_MAX: u32 = 64;

impl Backoff {
    /// A policy with no jitter (exact, repeatable delays).
    ///
    /// `base_ms` is clamped to at least 1, `factor` to at least 1.0 (a NaN factor counts as 1.0),
    /// and `cap_ms` to at least `base_ms`.
    pub fn new(base_ms: u64, factor: f64, cap_ms: u64) -> Self {
        let base_ms = base_ms.max(1);
        Self {
            base_ms,
            factor: if factor.is_nan() {
                1.0
            } else {
                factor.max(1.0)
            },
            cap_ms: cap_ms.max(base_ms),
            jitter: 0.0,
        }
    }

    /// The share of each delay (0.0 to 1.0) that may be taken off at random. Default 0.2;
    /// 0 makes delays exact.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The delay after failed attempt `attempt` (1-based; 0 counts as 1), without jitter.
    /// Non-decreasing in `attempt`, at least 1 ms, at most `cap_ms`, for every `u32`.
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let exp = attempt.saturating_sub(1);
        // f64 overflows to +inf for huge exponents, which the cap absorbs; powi takes i32.
        let exp = i32::try_from(exp).unwrap_or(i32::MAX);
        let raw = self.base_ms as f64 * self.factor.powi(exp);
        if raw.is_nan() || raw >= self.cap_ms as f64 {
            self.cap_ms
        } else {
            (raw as u64).clamp(1, self.cap_ms)
        }
    }

    /// The delay after failed attempt `attempt` with jitter from `unit` (a number in [0, 1)).
    pub fn delay_with_jitter_ms(&self, attempt: u32, unit: f64) -> u64 {
        let d = self.delay_ms(attempt);
        let cut = (d as f64 * self.jitter * unit.clamp(0.0, 1.0)) as u64;
        d.saturating_sub(cut).max(1)
    }

    /// Delays after attempts 1, 2, ... up to where the cap is reached (at most 64 entries), with
    /// fresh jitter: what the nack and recover scripts look up by attempt.
    pub fn table_ms(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for attempt in 1..=TABLE_MAX {
            let unit: f64 = rand::random();
            out.push(self.delay_with_jitter_ms(attempt, unit));
            if self.delay_ms(attempt) >= self.cap_ms {
                break;
            }
        }
        out
    }
}

/// A pause before trying Redis again after a failed call or a lost connection, with equal
/// jitter: a random time in `[pause / 2, pause]`, so that the processes and duties that lost
/// Redis at the same instant do not all come back at the same instant either.
pub fn jittered(pause: std::time::Duration) -> std::time::Duration {
    let unit: f64 = rand::random();
    pause.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jittered_stays_within_half_and_whole() {
        let p = std::time::Duration::from_millis(400);
        for _ in 0..1000 {
            let j = jittered(p);
            assert!(j >= p / 2 && j <= p, "{j:?}");
        }
    }

    /// C15 backoff arithmetic: base 1 s, factor 2, cap 1 h.
    #[test]
    fn c15_backoff_arithmetic() {
        let b = Backoff::new(1_000, 2.0, 3_600_000);
        let attempts = [
            0,
            1,
            2,
            30,
            31,
            62,
            63,
            64,
            200,
            1_000,
            u32::MAX - 1,
            u32::MAX,
        ];
        let mut last = 0;
        for a in attempts {
            let d = b.delay_ms(a);
            assert!(d >= 1, "attempt {a}: zero delay");
            assert!(d <= 3_600_000, "attempt {a}: over cap");
            assert!(d >= last, "attempt {a}: decreased");
            last = d;
        }
        assert_eq!(b.delay_ms(1), 1_000);
        assert_eq!(b.delay_ms(2), 2_000);
        assert_eq!(b.delay_ms(12), 2_048_000);
        assert_eq!(b.delay_ms(13), 3_600_000);
        assert_eq!(b.delay_ms(u32::MAX), 3_600_000);
    }

    #[test]
    fn odd_policies_stay_sane() {
        for b in [
            Backoff::new(0, 0.0, 0),
            Backoff::new(u64::MAX, f64::INFINITY, u64::MAX),
            Backoff::new(5, f64::NAN, 1),
        ] {
            for a in [0, 1, 2, 64, u32::MAX] {
                let d = b.delay_ms(a);
                assert!(d >= 1);
            }
        }
    }

    #[test]
    fn jitter_only_shortens() {
        let b = Backoff::new(1_000, 2.0, 60_000).jitter(0.5);
        for a in 1..20 {
            let full = b.delay_ms(a);
            assert_eq!(b.delay_with_jitter_ms(a, 0.0), full);
            let j = b.delay_with_jitter_ms(a, 0.999);
            assert!(j >= full / 2 && j <= full, "{a}: {j} vs {full}");
        }
    }

    #[test]
    fn table_stops_at_cap() {
        let t = Backoff::new(1_000, 2.0, 3_600_000).table_ms();
        assert_eq!(t.len(), 13);
        assert_eq!(*t.last().unwrap(), 3_600_000);
        assert_eq!(Backoff::new(10, 1.0, 10).table_ms(), vec![10]);
    }
}
