//! `dueq chaos --cluster`: the chaos run on a local Redis Cluster of 3 masters and 3 replicas
//! ([`crate::servers::chaos_cluster`], AOF on, `cluster-node-timeout` 1 000 ms,
//! `cluster-require-full-coverage no`), the queue split into 6 partitions (2 on each master),
//! producer and worker processes connected with the `redis+cluster://` seed list of every
//! node.
//!
//! The faults are master failovers ([`ClusterKind`]), one at a time: `kill -9` of a master
//! picked by the seeded generator, a wait until its replica is promoted (every running node
//! reports `cluster_state:ok` with all slots ok and no longer names the killed node in
//! `CLUSTER SLOTS`), then the killed node started again on its port, directory and AOF, and a
//! wait until it is the new master's replica with its link up; the fault's window (for the
//! figures) ends 1 s after that, and the next kill comes no sooner. With
//! `--replicas 1` the faults include the same kill with the node started again only at the
//! next fault (or at the end of the run), so that the promoted master has no replica and
//! durable writes to its partitions answer `not_replicated` meanwhile.
//!
//! The check is the ledger check of a single-server run, except that a duplicate is allowed
//! when a fault explains it ([`windows`]): Redis replicates asynchronously, so an ack the
//! killed master answered but had not yet sent to its replica is undone by the failover, and
//! the task runs again once its lease expires on the new master (`--replicas 1` closes that
//! gap: an ack answers `acked` only once a replica has it).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{Client, QueueKeys, SettingsPatch};
use dueq_testkit::RedisCluster;
use tokio::time::Instant;

use super::config::{Config, LEASE_MS, MAX_FAULTS, QUEUE};
use super::driver::{AbortOnDrop, Ledgers, examples, finish, ledger_dir, produce};
use super::faults::{ClusterKind, ClusterSchedule, Rng};
use super::ledger::now_ms;
use super::procs::Workers;
use super::report::{ClusterFault, ClusterReport, FaultStats, Report};
use super::windows::{self, Window};
use crate::servers::{self, blocking};

/// Masters of the cluster (each with one replica).
pub const MASTERS: usize = 3;
/// Partitions of the queue (2 per master).
pub const PARTITIONS: u16 = 6;
/// Longest wait for a killed master's replica to be promoted.
const PROMOTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a restarted node to be a replica with its link up.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Enqueues waiting for their answer at a time: a failed partition's enqueues wait up to the
/// response timeout (or the `WAIT` timeout), and must not hold up the others'.
const PRODUCER_IN_FLIGHT: usize = 256;
/// Response timeout of every client of the run, ms (also the `WAIT` of a durable write).
const RESPONSE_TIMEOUT_MS: u64 = 1_000;
/// A fault's window goes on this long after the killed node is back as a replica (what its
/// return sets off: clients reconnecting, a wake-up subscription made again), and the next
/// kill comes no sooner, so that one fault's tail is never counted in the next one's window.
const SETTLE: Duration = Duration::from_secs(1);

/// A fault as it runs, before its figures.
struct Injected {
    kind: ClusterKind,
    node: usize,
    partitions: Vec<u16>,
    kill_at_ms: u64,
    promoted_at_ms: u64,
    promoted: usize,
    restarted_at_ms: u64,
    rejoined_at_ms: u64,
}

/// Runs `cfg` on a local cluster of its own (module docs).
///
/// # Errors
/// As [`super::run`], and when a failover does not complete (no promotion, or the killed
/// node does not rejoin, within 30 s).
pub async fn run(cfg: &Config) -> Result<Report> {
    let mut cluster = servers::chaos_cluster(MASTERS)?;
    let r = tokio::select! {
        r = drive(&mut cluster, cfg) => r,
        () = crate::shutdown_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    drop(cluster);
    r
}

/// Starts killed node `node` again and waits until it is a replica with its link up; when.
fn bring_back(cluster: &mut RedisCluster, node: usize) -> Result<(u64, u64)> {
    blocking(|| cluster.try_restart(node))
        .with_context(|| format!("restarting cluster node {node}"))?;
    let restarted = now_ms();
    blocking(|| cluster.try_wait_for_rejoin(node, REJOIN_TIMEOUT))?;
    Ok((restarted, now_ms()))
}

async fn drive(cluster: &mut RedisCluster, cfg: &Config) -> Result<Report> {
    let t0 = Instant::now();
    let url = cluster.cluster_url();
    let (dir, _temp) = ledger_dir(cfg)?;
    let mut ledgers = Ledgers::new();
    let producer_ledger = dir.join("producer.jsonl");
    ledgers.reader.add(producer_ledger.clone());

    let client = Client::builder(&url)
        .response_timeout_ms(RESPONSE_TIMEOUT_MS)
        .replicas(cfg.replicas)
        .connect()
        .await
        .context("connecting to the run's Redis Cluster")?;
    let q = client.queue(QUEUE)?;
    // before any worker: a worker reads the count at its first claim
    q.update_settings(&SettingsPatch::default().partitions(Some(PARTITIONS)))
        .await
        .context("splitting the queue into partitions")?;
    let mut owner = Vec::with_capacity(usize::from(PARTITIONS));
    for p in 0..PARTITIONS {
        let slot = dueq::slot_of(&QueueKeys::partition(QUEUE, p, PARTITIONS)?.sched);
        owner.push(
            blocking(|| cluster.try_master_of_slot(slot))
                .with_context(|| format!("no node serves slot {slot}"))?,
        );
    }
    let partition_masters = owner.clone();

    let mut workers = Workers {
        exe: std::env::current_exe().context("finding this executable")?,
        url: url.clone(),
        dir: dir.clone(),
        procs: Vec::new(),
        started: 0,
        replicas: cfg.replicas,
        partitions: PARTITIONS,
    };
    for _ in 0..cfg.workers {
        let w = workers.spawn(&mut ledgers.reader)?;
        workers.procs.push(w);
    }

    let started = Instant::now();
    let producer = AbortOnDrop(tokio::spawn(produce(
        q.clone(),
        producer_ledger,
        cfg.clone(),
        Rng::new(cfg.seed ^ 0x5eed_f00d_7a5c),
        started,
        PRODUCER_IN_FLIGHT,
    )));

    let kinds: &[ClusterKind] = if cfg.replicas > 0 {
        &ClusterKind::ALL
    } else {
        &[ClusterKind::MasterKill]
    };
    let mut schedule = ClusterSchedule::new(Rng::new(cfg.seed), cfg.duration_ms, kinds);
    let window = Duration::from_millis(cfg.duration_ms);
    let mut stats: BTreeMap<&'static str, FaultStats> = kinds
        .iter()
        .map(|k| (k.name(), FaultStats::default()))
        .collect();
    let mut log: Vec<Injected> = Vec::new();
    // a node killed by `master_kill_no_replica`, down until the next fault: (node, its fault)
    let mut down: Option<(usize, usize)> = None;
    let mut count = 0u64;
    while (started.elapsed() < window || !schedule.cycle_done()) && count < MAX_FAULTS {
        count += 1;
        let (gap, kind) = schedule.next();
        if started.elapsed() < window {
            tokio::time::sleep(gap).await;
        }
        // the node left down by the last fault comes back first: that fault ends here
        if let Some((node, i)) = down.take() {
            let (restarted, back) = bring_back(cluster, node)?;
            log[i].restarted_at_ms = restarted;
            log[i].rejoined_at_ms = back;
        }
        // the last fault's tail stays its own
        if let Some(last) = log.last() {
            let settled = last.rejoined_at_ms + SETTLE.as_millis() as u64;
            tokio::time::sleep(Duration::from_millis(settled.saturating_sub(now_ms()))).await;
        }
        // no fault once the producer is done and every kind came (no task would see it)
        if started.elapsed() >= window && schedule.cycle_done() {
            break;
        }
        let masters = cluster.masters_with_replica();
        if masters.is_empty() {
            anyhow::bail!("no master with a replica left to kill");
        }
        let node = masters[schedule.pick(0, masters.len() as u64 - 1) as usize];
        let partitions: Vec<u16> = (0..PARTITIONS)
            .filter(|&p| owner[usize::from(p)] == node)
            .collect();
        let kill_at_ms = now_ms();
        blocking(|| cluster.kill9(node));
        let promoted = blocking(|| cluster.try_wait_for_promotion(node, PROMOTE_TIMEOUT))?;
        let promoted_at_ms = now_ms();
        for o in &mut owner {
            if *o == node {
                *o = promoted;
            }
        }
        let mut f = Injected {
            kind,
            node,
            partitions,
            kill_at_ms,
            promoted_at_ms,
            promoted,
            restarted_at_ms: 0,
            rejoined_at_ms: 0,
        };
        match kind {
            ClusterKind::MasterKill => {
                let (restarted, back) = bring_back(cluster, node)?;
                f.restarted_at_ms = restarted;
                f.rejoined_at_ms = back;
            }
            ClusterKind::MasterKillNoReplica => down = Some((node, log.len())),
        }
        stats.entry(kind.name()).or_default().injected += 1;
        log.push(f);
        tracing::info!(
            kind = kind.name(),
            node,
            promoted,
            "a master was killed and its replica promoted"
        );
    }
    // the last fault left a node down: it stays down for a pause, as it would until a next
    // fault
    if let Some((node, i)) = down.take() {
        tokio::time::sleep(schedule.next().0).await;
        let (restarted, back) = bring_back(cluster, node)?;
        log[i].restarted_at_ms = restarted;
        log[i].rejoined_at_ms = back;
    }
    let faults_ms = started.elapsed().as_millis() as u64;
    let mut producer = producer;
    let producer_ms = (&mut producer.0).await.context("the producer panicked")??;

    let end = finish(&q, &mut ledgers, &mut workers).await?;
    let c = end.check;
    let spans: Vec<Window> = log
        .iter()
        .map(|f| Window {
            kill_at_ms: f.kill_at_ms,
            end_at_ms: f.rejoined_at_ms + SETTLE.as_millis() as u64,
            failed: f.partitions.clone(),
        })
        .collect();
    let fig = windows::figures(&ledgers.events, &spans, &c.duplicates, PARTITIONS, LEASE_MS);
    for (f, w) in log.iter().zip(&fig.windows) {
        let s = stats.entry(f.kind.name()).or_default();
        match w.acks_back_ms {
            Some(ms) => s.recover_ms.push(ms),
            None => s.not_recovered += 1,
        }
    }
    for s in stats.values_mut() {
        s.summarize();
    }
    let fault_log = log
        .iter()
        .zip(fig.windows)
        .map(|(f, figures)| ClusterFault {
            kind: f.kind.name(),
            node: f.node,
            first_seed: f.node == 0,
            partitions: f.partitions.clone(),
            kill_at_ms: f.kill_at_ms,
            promoted_after_ms: f.promoted_at_ms - f.kill_at_ms,
            promoted: f.promoted,
            restarted_after_ms: f.restarted_at_ms.saturating_sub(f.kill_at_ms),
            rejoined_after_ms: f.rejoined_at_ms.saturating_sub(f.kill_at_ms),
            window_ms: (f.rejoined_at_ms + SETTLE.as_millis() as u64).saturating_sub(f.kill_at_ms),
            figures,
        })
        .collect();
    let ok = c.lost == 0 && c.unexpected == 0 && c.early == 0 && fig.duplicated_unexplained == 0;
    let example_events = examples(&c, &ledgers.events);
    Ok(Report {
        seed: cfg.seed,
        duration_ms: cfg.duration_ms,
        tasks: cfg.tasks,
        workers: cfg.workers,
        worker_processes: workers.started,
        lease_ms: LEASE_MS,
        ok,
        check: c,
        faults: stats,
        faults_ms,
        producer_ms,
        drained: end.drained,
        drain_ms: end.drain_ms,
        elapsed_ms: t0.elapsed().as_millis() as u64,
        torn_lines: ledgers.reader.torn_lines() + ledgers.reader.bad_lines,
        example_events,
        cluster: Some(ClusterReport {
            masters: MASTERS,
            replicas_per_master: servers::CHAOS_REPLICAS_PER_MASTER,
            node_timeout_ms: servers::CHAOS_NODE_TIMEOUT_MS,
            partitions: PARTITIONS,
            replicas: cfg.replicas,
            lateness_clock: "first hand-out minus due time: the worker's wall clock when the \
                             claim answered minus the partition master's Redis TIME at the \
                             enqueue plus the delay (one host, one clock); *_claim: the \
                             claim's Redis time minus the due time",
            partition_masters,
            fault_log,
            healthy_during_faults: fig.healthy_during_faults,
            failed_during_faults: fig.failed_during_faults,
            outside_faults: fig.outside_faults,
            errors_before_faults: fig.errors_before_faults,
            duplicated_explained: fig.duplicated_explained,
            duplicated_unexplained: fig.duplicated_unexplained,
            duplicates: fig.duplicates,
        }),
    })
}
