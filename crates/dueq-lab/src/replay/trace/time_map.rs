//! Trace time to real time: long quiet stretches of the trace shortened, order kept.

/// Invalid [`TimeMap`] parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimeMapError {
    /// The speed-up is not a finite number greater than 0.
    #[error("speed-up must be a finite number > 0, got {0}")]
    Speedup(f64),
    /// The gap cap is negative or NaN.
    #[error("max gap must be >= 0 ms (or infinite), got {0}")]
    MaxGap(f64),
}

/// Maps trace times (Unix seconds) to real-time offsets (ms) from the start of a replay.
///
/// Built from a set of instants `t0 < t1 < ...` (duplicates removed): `t0` maps to 0 and each
/// gap maps to `min((t_i - t_{i-1}) * 1000 / speedup, max_gap_ms)`. The order of instants is thus
/// kept (non-strictly after rounding to whole ms), while long idle stretches are compressed to
/// at most `max_gap_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeMap {
    instants: Vec<i64>,
    /// Unrounded offset of each instant, in ms; non-decreasing.
    offsets_ms: Vec<f64>,
    speedup: f64,
    max_gap_ms: f64,
}

impl TimeMap {
    /// Checks `speedup` (finite, > 0) and `max_gap_ms` (>= 0, `f64::INFINITY` = no cap).
    pub fn check_params(speedup: f64, max_gap_ms: f64) -> Result<(), TimeMapError> {
        if !(speedup.is_finite() && speedup > 0.0) {
            return Err(TimeMapError::Speedup(speedup));
        }
        if max_gap_ms.is_nan() || max_gap_ms < 0.0 {
            return Err(TimeMapError::MaxGap(max_gap_ms));
        }
        Ok(())
    }

    /// Builds the map over `instants` (any order, repeats allowed).
    ///
    /// # Panics
    ///
    /// If [`TimeMap::check_params`] rejects `speedup` or `max_gap_ms`; check user input with it
    /// first.
    pub fn new(instants: impl IntoIterator<Item = i64>, speedup: f64, max_gap_ms: f64) -> TimeMap {
        if let Err(err) = TimeMap::check_params(speedup, max_gap_ms) {
            panic!("TimeMap::new: {err}");
        }
        let mut instants: Vec<i64> = instants.into_iter().collect();
        instants.sort_unstable();
        instants.dedup();
        let mut offsets_ms = Vec::with_capacity(instants.len());
        let mut acc = 0.0_f64;
        for (i, &t) in instants.iter().enumerate() {
            if i > 0 {
                acc += Self::gap_ms(t - instants[i - 1], speedup, max_gap_ms);
            }
            offsets_ms.push(acc);
        }
        TimeMap {
            instants,
            offsets_ms,
            speedup,
            max_gap_ms,
        }
    }

    fn gap_ms(delta_s: i64, speedup: f64, max_gap_ms: f64) -> f64 {
        (delta_s as f64 * 1000.0 / speedup).min(max_gap_ms)
    }

    /// Real-time offset of trace time `t_s`, in ms, rounded to the nearest ms.
    ///
    /// Exact for the instants the map was built from. Between two instants the offset is
    /// interpolated linearly within that segment; before the first instant it is 0; after the
    /// last one the same rule as for a gap applies (`total_ms` + the capped scaled distance).
    /// The result is non-decreasing in `t_s`.
    pub fn offset_ms(&self, t_s: i64) -> u64 {
        round_ms(self.offset_ms_f64(t_s))
    }

    fn offset_ms_f64(&self, t_s: i64) -> f64 {
        let (Some(&first), Some(&last), Some(&total)) = (
            self.instants.first(),
            self.instants.last(),
            self.offsets_ms.last(),
        ) else {
            return 0.0;
        };
        if t_s <= first {
            return 0.0;
        }
        if t_s >= last {
            return total + Self::gap_ms(t_s - last, self.speedup, self.max_gap_ms);
        }
        match self.instants.binary_search(&t_s) {
            Ok(i) => self.offsets_ms[i],
            // first < t_s < last, so 0 < i < len: both neighbours exist.
            Err(i) => {
                let (t0, t1) = (self.instants[i - 1], self.instants[i]);
                let (o0, o1) = (self.offsets_ms[i - 1], self.offsets_ms[i]);
                o0 + (o1 - o0) * ((t_s - t0) as f64 / (t1 - t0) as f64)
            }
        }
    }

    /// Real-time offset of the last instant, in ms (0 for an empty map).
    pub fn total_ms(&self) -> u64 {
        round_ms(self.offsets_ms.last().copied().unwrap_or(0.0))
    }

    /// The distinct instants, sorted.
    #[cfg(test)]
    pub fn instants(&self) -> &[i64] {
        &self.instants
    }
}

/// Rounds a non-negative offset to whole ms (the `as` cast saturates; an infinite offset, only
/// possible past the last instant with no cap, becomes `u64::MAX`).
fn round_ms(ms: f64) -> u64 {
    ms.round() as u64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn time_map_preserves_order_and_caps_gaps() {
        let map = TimeMap::new([100, 0, 10, 10, 3600 * 24, 3600 * 24 + 1], 10.0, 1000.0);
        assert_eq!(map.instants(), [0, 10, 100, 86_400, 86_401]);
        // 10 s → 1000 ms; 90 s → 9000 ms capped to 1000; 1 day capped; 1 s → 100 ms.
        let offsets: Vec<u64> = map.instants().iter().map(|&t| map.offset_ms(t)).collect();
        assert_eq!(offsets, [0, 1000, 2000, 3000, 3100]);
        assert_eq!(map.total_ms(), 3100);
        // Interpolation inside a segment and clamping outside.
        assert_eq!(map.offset_ms(5), 500);
        assert_eq!(map.offset_ms(55), 1500);
        assert_eq!(map.offset_ms(-5), 0);
        assert_eq!(map.offset_ms(86_402), 3200);
        assert_eq!(map.offset_ms(90_000), 4100);

        let uncapped = TimeMap::new([0, 10, 100], 10.0, f64::INFINITY);
        assert_eq!(uncapped.offset_ms(100), 10_000);
        assert_eq!(uncapped.total_ms(), 10_000);
        assert_eq!(uncapped.offset_ms(1000), 100_000);

        let empty = TimeMap::new([], 1.0, 1.0);
        assert_eq!((empty.total_ms(), empty.offset_ms(42)), (0, 0));

        assert!(TimeMap::check_params(0.0, 1.0).is_err());
        assert!(TimeMap::check_params(f64::NAN, 1.0).is_err());
        assert!(TimeMap::check_params(1.0, -1.0).is_err());
        assert!(TimeMap::check_params(1.0, f64::NAN).is_err());
        assert!(TimeMap::check_params(1.0, f64::INFINITY).is_ok());
    }
}
