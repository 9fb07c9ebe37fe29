//! The report of a `dueq chaos` run: its figures, per fault kind, and with `--cluster` the
//! cluster section (the fault log and the per-partition figures of [`super::windows`]).

use std::collections::BTreeMap;

use serde::Serialize;

use super::check::Check;
use super::ledger::Event;
use super::windows::{DuplicateCause, Lateness, WindowFigures};

/// One kind of fault in the report.
#[derive(Debug, Default, Clone, Serialize)]
pub struct FaultStats {
    /// Injected (the command answered, the process was killed).
    pub injected: u64,
    /// Tries that failed (the command was refused or timed out).
    pub failed: u64,
    /// From the fault's end to the next successful ack by any worker, ms: median. With
    /// `--cluster`: from the kill to the first successful ack of a task of the killed
    /// master's partitions claimed after the kill.
    pub recover_ms_p50: Option<u64>,
    /// The same, largest.
    pub recover_ms_max: Option<u64>,
    /// Faults after which no ack came within 5 s (with `--cluster`: before the next fault or
    /// the end of the run; not in the figures above).
    pub not_recovered: u64,
    #[serde(skip)]
    pub(super) recover_ms: Vec<u64>,
}

impl FaultStats {
    /// Fills the median and largest time to recover from the times collected.
    pub(super) fn summarize(&mut self) {
        self.recover_ms.sort_unstable();
        self.recover_ms_p50 = self.recover_ms.get(self.recover_ms.len() / 2).copied();
        self.recover_ms_max = self.recover_ms.last().copied();
    }
}

/// The report of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seed of the run (`--seed` repeats its schedule).
    pub seed: u64,
    /// Fault and producer window, ms.
    pub duration_ms: u64,
    /// Tasks the producer enqueued (tried).
    pub tasks: u64,
    /// Worker processes running at a time.
    pub workers: u32,
    /// Worker processes started in all (one more per `worker_sigkill`).
    pub worker_processes: u32,
    /// Lease of each claim, ms.
    pub lease_ms: u64,
    /// The ledger's counts.
    #[serde(flatten)]
    pub check: Check,
    /// Per fault kind.
    pub faults: BTreeMap<&'static str, FaultStats>,
    /// From the start of the producer to the end of the last fault, ms (more than
    /// `duration_ms` when the last faults of the cycle came after the window).
    pub faults_ms: u64,
    /// How long the producer took, ms (more than `duration_ms` when enqueues were slower
    /// than its pace; faults stop at the end of the window all the same).
    pub producer_ms: u64,
    /// Whether the queue drained before the deadline (30 s).
    pub drained: bool,
    /// From the end of the faults and the producer to an empty queue, ms.
    pub drain_ms: u64,
    /// The whole run, ms.
    pub elapsed_ms: u64,
    /// Ledger lines cut short (a worker killed in the middle of a write) or unreadable.
    pub torn_lines: u64,
    /// Every ledger line of the example keys, so that a failure can be read without
    /// re-running.
    pub example_events: BTreeMap<String, Vec<Event>>,
    /// `--cluster`: the cluster, its faults and the per-partition figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
    /// Whether lost, duplicated, unexpected and early are all 0 (with `--cluster`:
    /// duplicates are allowed when each is a task of a killed master's partition, claimed
    /// and acked within a lease before the kill, `cluster.duplicated_unexplained` 0).
    pub ok: bool,
}

/// The cluster section of a `--cluster` report.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// Masters at a time.
    pub masters: usize,
    /// Replicas of each master.
    pub replicas_per_master: usize,
    /// `cluster-node-timeout`, ms.
    pub node_timeout_ms: u64,
    /// Partitions of the queue.
    pub partitions: u16,
    /// Durable writes of producer and workers (`--replicas`).
    pub replicas: u8,
    /// What a lateness figure measures and by which clock.
    pub lateness_clock: &'static str,
    /// Node (start order; nodes 0 to 2 were the masters at the start) serving each partition
    /// at the start.
    pub partition_masters: Vec<usize>,
    /// Every fault, in order.
    pub fault_log: Vec<ClusterFault>,
    /// Lateness of the healthy partitions' tasks due during the faults, all faults together.
    pub healthy_during_faults: Lateness,
    /// The same for the failed partitions' tasks.
    pub failed_during_faults: Lateness,
    /// Tasks due outside every fault (the baseline).
    pub outside_faults: Lateness,
    /// Enqueue and ack errors before the first fault (expected 0).
    pub errors_before_faults: u64,
    /// Duplicates that a fault explains (the `cluster` module's docs).
    pub duplicated_explained: u64,
    /// Duplicates that no fault explains (must be 0).
    pub duplicated_unexplained: u64,
    /// Every duplicate, with its partition and the fault that explains it.
    pub duplicates: Vec<DuplicateCause>,
}

/// One fault of a `--cluster` run.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterFault {
    /// `master_kill` or `master_kill_no_replica`.
    pub kind: &'static str,
    /// The node killed (start order).
    pub node: usize,
    /// Whether it is the first node of the seed list (every client's wake-up subscription
    /// is on that node).
    pub first_seed: bool,
    /// The partitions it served: the failed ones.
    pub partitions: Vec<u16>,
    /// When it was killed (epoch ms, host clock).
    pub kill_at_ms: u64,
    /// From the kill to its replica's promotion as the driver saw it (polling every 20 ms),
    /// ms.
    pub promoted_after_ms: u64,
    /// The node promoted.
    pub promoted: usize,
    /// From the kill to the killed node's restart, ms.
    pub restarted_after_ms: u64,
    /// From the kill to the killed node back as a replica with its link up, ms.
    pub rejoined_after_ms: u64,
    /// The fault's window, from the kill: until 1 s after the killed node is back, ms.
    pub window_ms: u64,
    /// The fault's figures (windows docs).
    #[serde(flatten)]
    pub figures: WindowFigures,
}
