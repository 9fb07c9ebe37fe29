//! The faults of `dueq chaos`: the kinds, the seeded schedule (every kind once, in a seeded
//! order, then at random), and the Redis commands that inject them.
//!
//! The generator is SplitMix64, written out here rather than taken from `rand`, so that a
//! seed means the same schedule in every build, whatever version of `rand` the lock file
//! holds.

use std::time::Duration;

use anyhow::{Context, Result};

/// A small seeded generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi` (`lo` when `hi <= lo`); the modulo bias is immaterial here.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// SIGKILL of a worker process (with the leases it holds), then a new one starts.
    WorkerKill,
    /// `kill -9` of redis-server; the run starts it again on the same AOF and socket.
    RedisRestart,
    /// `CLIENT KILL TYPE normal`: every command connection drops.
    ClientKillNormal,
    /// `CLIENT KILL TYPE pubsub`: every wake-up subscription drops.
    ClientKillPubsub,
    /// `FUNCTION FLUSH`: the next call gets `Function not found` and loads the library.
    FunctionFlush,
    /// `DEBUG SLEEP 0.3`: the server stops answering for 300 ms.
    DebugSleep,
    /// `CLIENT PAUSE 300`: commands of every client wait 300 ms.
    ClientPause,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 7] = [
        Kind::WorkerKill,
        Kind::RedisRestart,
        Kind::ClientKillNormal,
        Kind::ClientKillPubsub,
        Kind::FunctionFlush,
        Kind::DebugSleep,
        Kind::ClientPause,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::WorkerKill => "worker_sigkill",
            Kind::RedisRestart => "redis_kill9_restart",
            Kind::ClientKillNormal => "client_kill_normal",
            Kind::ClientKillPubsub => "client_kill_pubsub",
            Kind::FunctionFlush => "function_flush",
            Kind::DebugSleep => "debug_sleep_300ms",
            Kind::ClientPause => "client_pause_300ms",
        }
    }
}

/// Which fault comes next and after what pause: the seven kinds once each in a seeded
/// order, then a kind at random each time.
#[derive(Debug)]
pub struct Schedule {
    rng: Rng,
    cycle: Vec<Kind>,
    /// Pauses between faults are drawn from `gap_min_ms..=gap_max_ms`.
    gap_min_ms: u64,
    gap_max_ms: u64,
}

impl Schedule {
    /// The schedule of a run of `duration_ms`: pauses of 150 to 600 ms, shorter for a short
    /// run (a twenty-fifth of it at most, at least 100 ms) so that a run of a few seconds
    /// still goes through every kind.
    pub fn new(mut rng: Rng, duration_ms: u64) -> Self {
        let mut cycle = Kind::ALL.to_vec();
        // Fisher-Yates, drawn from the run's generator
        for i in (1..cycle.len()).rev() {
            let j = rng.range(0, i as u64) as usize;
            cycle.swap(i, j);
        }
        cycle.reverse(); // popped from the end
        let gap_max_ms = (duration_ms / 25).clamp(100, 600);
        Self {
            rng,
            cycle,
            gap_min_ms: (gap_max_ms / 4).max(50),
            gap_max_ms,
        }
    }

    /// Whether every kind has come once.
    pub fn cycle_done(&self) -> bool {
        self.cycle.is_empty()
    }

    /// The pause before the next fault, then the fault.
    pub fn next(&mut self) -> (Duration, Kind) {
        let gap = Duration::from_millis(self.rng.range(self.gap_min_ms, self.gap_max_ms));
        let kind = match self.cycle.pop() {
            Some(k) => k,
            None => Kind::ALL[self.rng.range(0, Kind::ALL.len() as u64 - 1) as usize],
        };
        (gap, kind)
    }

    /// A number in `lo..=hi` from the same generator (which worker to kill).
    pub fn pick(&mut self, lo: u64, hi: u64) -> u64 {
        self.rng.range(lo, hi)
    }
}

/// One kind of fault of a `--cluster` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClusterKind {
    /// `kill -9` of a master; once its replica is promoted, the killed node starts again
    /// and rejoins as the new master's replica.
    MasterKill,
    /// The same kill, but the killed node starts again only at the next fault (or the end
    /// of the run): meanwhile the promoted master has no replica, so durable writes
    /// (`--replicas 1`) to its partitions fail `not_replicated`.
    MasterKillNoReplica,
}

impl ClusterKind {
    /// Every kind, in report order.
    pub const ALL: [ClusterKind; 2] = [ClusterKind::MasterKill, ClusterKind::MasterKillNoReplica];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            ClusterKind::MasterKill => "master_kill",
            ClusterKind::MasterKillNoReplica => "master_kill_no_replica",
        }
    }
}

/// The faults of a `--cluster` run: the kinds in use once each in a seeded order, then a kind
/// at random each time, with pauses of a tenth of the run (0.5 to 5 s) down to a third of
/// that between the end of one fault and the next kill.
#[derive(Debug)]
pub struct ClusterSchedule {
    rng: Rng,
    kinds: Vec<ClusterKind>,
    cycle: Vec<ClusterKind>,
    gap_min_ms: u64,
    gap_max_ms: u64,
}

impl ClusterSchedule {
    /// The schedule of a run of `duration_ms` with these kinds (at least one).
    pub fn new(mut rng: Rng, duration_ms: u64, kinds: &[ClusterKind]) -> Self {
        let mut cycle = kinds.to_vec();
        for i in (1..cycle.len()).rev() {
            let j = rng.range(0, i as u64) as usize;
            cycle.swap(i, j);
        }
        cycle.reverse(); // popped from the end
        let gap_max_ms = (duration_ms / 10).clamp(500, 5_000);
        Self {
            rng,
            kinds: kinds.to_vec(),
            cycle,
            gap_min_ms: gap_max_ms / 3,
            gap_max_ms,
        }
    }

    /// Whether every kind has come once.
    pub fn cycle_done(&self) -> bool {
        self.cycle.is_empty()
    }

    /// The pause before the next fault, then the fault.
    pub fn next(&mut self) -> (Duration, ClusterKind) {
        let gap = Duration::from_millis(self.rng.range(self.gap_min_ms, self.gap_max_ms));
        let kind = match self.cycle.pop() {
            Some(k) => k,
            None => self.kinds[self.rng.range(0, self.kinds.len() as u64 - 1) as usize],
        };
        (gap, kind)
    }

    /// A number in `lo..=hi` from the same generator (which master to kill).
    pub fn pick(&mut self, lo: u64, hi: u64) -> u64 {
        self.rng.range(lo, hi)
    }
}

/// Longest wait for a Redis fault command's answer (`DEBUG SLEEP` takes 300 ms of it).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends the Redis command of `kind` (one of the connection, script and pause faults) on a
/// fresh connection to `url`, which `CLIENT KILL` skips (`SKIPME yes` is the default).
///
/// # Errors
/// When Redis cannot be reached or refuses the command.
pub async fn redis_fault(url: &str, kind: Kind) -> Result<()> {
    let mut cmd = match kind {
        Kind::ClientKillNormal => redis::cmd("CLIENT"),
        Kind::ClientKillPubsub => redis::cmd("CLIENT"),
        Kind::FunctionFlush => redis::cmd("FUNCTION"),
        Kind::DebugSleep => redis::cmd("DEBUG"),
        Kind::ClientPause => redis::cmd("CLIENT"),
        Kind::WorkerKill | Kind::RedisRestart => {
            anyhow::bail!("{} is not a Redis command", kind.name())
        }
    };
    match kind {
        Kind::ClientKillNormal => cmd.arg("KILL").arg("TYPE").arg("normal"),
        Kind::ClientKillPubsub => cmd.arg("KILL").arg("TYPE").arg("pubsub"),
        Kind::FunctionFlush => cmd.arg("FLUSH"),
        Kind::DebugSleep => cmd.arg("SLEEP").arg("0.3"),
        _ => cmd.arg("PAUSE").arg(300),
    };
    let run = async {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        cmd.query_async::<redis::Value>(&mut conn).await
    };
    tokio::time::timeout(COMMAND_TIMEOUT, run)
        .await
        .with_context(|| format!("{}: no answer within 5 s", kind.name()))?
        .with_context(|| kind.name().to_owned())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_comes_first_once_and_a_seed_repeats_the_schedule() {
        let run = |seed| {
            let mut s = Schedule::new(Rng::new(seed), 5_000);
            (0..20).map(|_| s.next()).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        let mut first: Vec<Kind> = a[..7].iter().map(|(_, k)| *k).collect();
        first.sort();
        assert_eq!(first, Kind::ALL);
        // 5 s: pauses of 50 to 200 ms
        assert!(
            a.iter()
                .all(|(g, _)| (50..=200).contains(&(g.as_millis() as u64)))
        );
        let mut long = Schedule::new(Rng::new(1), 600_000);
        assert!((0..100).all(|_| (150..=600).contains(&(long.next().0.as_millis() as u64))));
    }

    #[test]
    fn cluster_schedule_brings_every_kind_first_and_repeats_with_the_seed() {
        let run = |seed| {
            let mut s = ClusterSchedule::new(Rng::new(seed), 30_000, &ClusterKind::ALL);
            (0..10).map(|_| s.next()).collect::<Vec<_>>()
        };
        let a = run(3);
        assert_eq!(a, run(3));
        let mut first: Vec<ClusterKind> = a[..2].iter().map(|(_, k)| *k).collect();
        first.sort();
        assert_eq!(first, ClusterKind::ALL);
        // 30 s: pauses of 1 to 3 s
        assert!(
            a.iter()
                .all(|(g, _)| (1_000..=3_000).contains(&(g.as_millis() as u64)))
        );
        let mut one = ClusterSchedule::new(Rng::new(3), 30_000, &[ClusterKind::MasterKill]);
        assert!((0..10).all(|_| one.next().1 == ClusterKind::MasterKill));
    }
}
