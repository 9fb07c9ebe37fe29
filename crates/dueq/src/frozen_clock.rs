//! A frozen Redis clock for tests: the model test of the queue protocol
//! (`tests/it/protocol_model.rs`) moves time by hand instead of waiting for it.
//!
//! It exists only in a **debug** build with the **`frozen-clock`** feature; a release build
//! compiles none of it, even with the feature on (so benchmarks and shipped binaries run the
//! scripts exactly as written). `dueq`'s own tests turn the feature on through a
//! dev-dependency on the crate itself. With it compiled in, every script call carries one
//! more argument, the clock (0 = Redis `TIME`), which `protocol/frozen_clock.lua` takes off
//! `ARGV` before the script runs and uses as "now" when it is not 0. A client uses a frozen
//! clock only when built with [`ClientBuilder::frozen_clock`](crate::ClientBuilder::frozen_clock).
//!
//! Only "now" inside the scripts follows it (due checks, lease deadlines, delays, stats);
//! plain commands (`TIME` of the schedule firer) and the worker's local timers do not, so a
//! frozen client suits direct `Queue` calls, not a running `Worker` or `DueClaimer`.
//! Users' tests have the test clock instead ([`TestClock`](crate::TestClock)): time that runs
//! and jumps forward, on one Redis, for every process on it; this one stands still, per
//! client, for dueq's own tests of what happens at an exact millisecond.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A clock shared by the clients built with it: "now" for their script calls, epoch ms, or
/// Redis `TIME` while it is 0 ([`FrozenClock::default`]). Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct FrozenClock(Arc<AtomicU64>);

impl FrozenClock {
    /// A clock stopped at `ms` (epoch ms; 0 follows Redis `TIME`).
    pub fn frozen_at(ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(ms)))
    }

    /// Sets "now" to `ms` (0: Redis `TIME` again).
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }

    /// Moves a frozen clock `ms` forward and returns the new time (no effect on a clock that
    /// follows Redis `TIME`, which returns 0).
    pub fn advance_ms(&self, ms: u64) -> u64 {
        let mut now = self.0.load(Ordering::SeqCst);
        while now != 0 {
            match self
                .0
                .compare_exchange(now, now + ms, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return now + ms,
                Err(seen) => now = seen,
            }
        }
        0
    }

    /// The frozen time, epoch ms, or `None` while it follows Redis `TIME`.
    pub fn now_ms(&self) -> Option<u64> {
        Some(self.0.load(Ordering::SeqCst)).filter(|&t| t != 0)
    }

    /// The value sent as the scripts' last argument (0 = Redis `TIME`).
    pub(crate) fn arg(&self) -> Vec<u8> {
        self.0.load(Ordering::SeqCst).to_string().into_bytes()
    }
}
