//! The Redis clock as seen from this process: every script reply carries the server's time,
//! and the worker turns "due at T" into "sleep for T minus Redis-now" with it (DESIGN 2.6), so
//! the host's wall clock never decides anything.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The latest Redis time reading and the local monotonic instant it arrived at.
#[derive(Debug)]
pub(crate) struct RedisClock {
    reading: Mutex<(u64, Instant)>,
}

impl RedisClock {
    pub fn new() -> Self {
        Self {
            reading: Mutex::new((0, Instant::now())),
        }
    }

    fn get(&self) -> (u64, Instant) {
        match self.reading.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }

    /// Records that Redis said `now_ms` in a reply received at `at`.
    pub fn update(&self, now_ms: u64, at: Instant) {
        match self.reading.lock() {
            Ok(mut g) => *g = (now_ms, at),
            Err(p) => *p.into_inner() = (now_ms, at),
        }
    }

    /// Estimated Redis time now, epoch ms. Never ahead of the real Redis time by more than the
    /// drift between the two clocks since the last reading (the reading itself lags).
    pub fn now_ms(&self) -> u64 {
        let (ms, at) = self.get();
        ms + at.elapsed().as_millis() as u64
    }

    /// The local instant at which Redis time reaches `redis_ms` (now if already past).
    pub fn instant_of(&self, redis_ms: u64) -> Instant {
        let (ms, at) = self.get();
        let now = Instant::now();
        let t = at + Duration::from_millis(redis_ms.saturating_sub(ms));
        t.max(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn maps_redis_time_to_local_instants() {
        let c = RedisClock::new();
        let t0 = Instant::now();
        c.update(1_000_000, t0);
        assert_eq!(c.instant_of(1_000_250), t0 + Duration::from_millis(250));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(c.now_ms(), 1_000_100);
        // a time already past maps to now, never to an instant before now
        assert!(c.instant_of(999_000) >= Instant::now());
    }
}
