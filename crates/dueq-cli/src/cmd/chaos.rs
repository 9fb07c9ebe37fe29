//! `dueq chaos`: runs the fault-injection run of [`crate::chaos`] and prints its report
//! (text, or one JSON object with `--json`); fails (exit 1) unless lost, duplicated,
//! unexpected and early are 0.

use anyhow::{Result, bail};

use crate::args::ChaosArgs;
use crate::chaos::{self, Config, Report};

/// Tasks per second of the window when `--tasks` is not given.
const DEFAULT_TASKS_PER_S: u64 = 250;

/// Runs the command.
pub async fn run(redis: Option<&str>, replicas: u8, a: &ChaosArgs, json_out: bool) -> Result<()> {
    if redis.is_some() {
        // faults kill and restart the server: never someone else's Redis
        bail!(
            "dueq chaos starts and breaks its own redis-server; it does not take --redis (or \
             DUEQ_REDIS_URL)"
        );
    }
    if replicas > 0 {
        bail!("dueq chaos runs one redis-server without replicas; it does not take --replicas");
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let cfg = Config {
        duration_ms: a.duration_ms,
        tasks: a
            .tasks
            .unwrap_or((a.duration_ms * DEFAULT_TASKS_PER_S / 1_000).max(1)),
        workers: a.workers,
        seed,
        ledger_dir: a.ledger_dir.clone(),
    };
    if !json_out {
        eprintln!(
            "dueq chaos: {} tasks over {} ms, {} worker processes, seed {seed}",
            cfg.tasks, cfg.duration_ms, cfg.workers
        );
    }
    let report = chaos::run(&cfg).await?;
    if json_out {
        outln!("{}", serde_json::json!(report));
    } else {
        print_report(&report);
    }
    if !report.ok {
        let c = &report.check;
        bail!(
            "chaos check failed: lost {}, duplicated {}, unexpected {}, early {} (seed {})",
            c.lost,
            c.duplicated,
            c.unexpected,
            c.early,
            report.seed
        );
    }
    Ok(())
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn print_report(r: &Report) {
    let c = &r.check;
    outln!(
        "dueq chaos: seed {}, {} ms of faults, {} tasks, {} worker processes at a time ({} \
         started), lease {} ms",
        r.seed,
        r.duration_ms,
        r.tasks,
        r.workers,
        r.worker_processes,
        r.lease_ms
    );
    outln!(
        "  enqueues: {} confirmed, {} answered with an error",
        c.confirmed,
        c.unknown
    );
    outln!(
        "  lost {}  duplicated {}  unexpected {}  early {}  recovered {}",
        c.lost,
        c.duplicated,
        c.unexpected,
        c.early,
        c.recovered
    );
    outln!(
        "  acked {}, acked with the answer lost {}, dead {}, unknown enqueues still live {}",
        c.acked,
        c.ack_answer_lost,
        c.dead,
        c.unknown_pending
    );
    outln!(
        "  deliveries {}, redelivered before an ack (lease expiry, crash) {}",
        c.deliveries,
        c.redelivered
    );
    outln!(
        "  {:<22} {:>8} {:>6} {:>14} {:>8} {:>14}",
        "fault",
        "injected",
        "failed",
        "recover p50 ms",
        "max ms",
        "not recovered"
    );
    for (name, f) in &r.faults {
        outln!(
            "  {name:<22} {:>8} {:>6} {:>14} {:>8} {:>14}",
            f.injected,
            f.failed,
            opt(f.recover_ms_p50),
            opt(f.recover_ms_max),
            f.not_recovered
        );
    }
    outln!("  (recover: from the fault's end to the next successful ack by any worker)");
    outln!(
        "  faults for {} ms, producer {} ms; {} in {} ms after both; {} ms in all; {} torn \
         ledger lines",
        r.faults_ms,
        r.producer_ms,
        if r.drained { "drained" } else { "NOT drained" },
        r.drain_ms,
        r.elapsed_ms,
        r.torn_lines
    );
    for (kind, keys) in &c.examples {
        outln!("  {kind}: {}", keys.join(", "));
    }
    for (key, evs) in &r.example_events {
        outln!("  ledger of {key}:");
        for e in evs {
            outln!("    {}", serde_json::json!(e));
        }
    }
    outln!("  {}", if r.ok { "OK" } else { "FAILED" });
}
