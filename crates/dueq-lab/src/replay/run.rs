//! The replay driver: plays a [`Plan`] against a real queue with real workers and checks the
//! outcome against what the trace says must happen.
//!
//! Time: the driver reads the Redis clock once, then every trace instant `t` maps to the Redis
//! time `base + time_map.offset_ms(t)`. Tasks are enqueued with that absolute due time, so
//! what decides "due" is Redis's clock, exactly as in production; the driver only has to issue
//! each event (enqueue, cancel) when the Redis clock reaches its mapped time.
//!
//! Producers: the driver writes to the queue directly, or, with `--postgres`, through the
//! PostgreSQL outbox (`outbox.rs`: rows in transactions, a relay carrying them into Redis,
//! optionally a `FLUSHALL` midway that the reconciler repairs); the checks are the same.
//!
//! Checking: every task records its runs (Redis claim time, handler start, due time); every
//! cancel records its outcome and the Redis time it was applied; `check.rs` compares them with
//! the trace.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use dueq::{CancelOutcome, Client, EnqueueOutcome, Outcome, TaskRef, TaskSpec, Worker};
use tokio::time::Instant;

use super::check::{Report, check};
use super::outbox::OutboxSink;
use super::records::{CancelRecord, NewTask, ReplayConfig, Run};
use super::trace::{Action, Plan};

type Runs = Arc<Mutex<HashMap<usize, Vec<Run>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Plays `plan` on `url` and checks it.
pub async fn replay(url: &str, plan: &Plan, cfg: &ReplayConfig) -> Result<Report> {
    let map = plan.time_map(cfg.speedup, cfg.max_gap_ms);
    let client = Client::connect(url).await?;
    let queue = client.queue(&cfg.queue)?;
    if cfg.partitions > 1 {
        queue
            .update_settings(&dueq::SettingsPatch::default().partitions(Some(cfg.partitions)))
            .await
            .context("--partitions")?;
    }
    let runs: Runs = Arc::new(Mutex::new(HashMap::new()));

    let mut workers = Vec::new();
    for _ in 0..cfg.workers.max(1) {
        let runs = runs.clone();
        let c = Client::connect(url).await?;
        let w = Worker::builder(c)
            .concurrency(cfg.concurrency)
            .handle(&cfg.queue, move |task| {
                let runs = runs.clone();
                async move {
                    let idx = serde_json::from_slice::<serde_json::Value>(&task.payload)
                        .ok()
                        .and_then(|v| v["task"].as_u64());
                    let Some(idx) = idx else {
                        return Outcome::fail("payload without a task index");
                    };
                    lock(&runs).entry(idx as usize).or_default().push(Run {
                        due_at_ms: task.due_at_ms,
                        claimed_at_ms: task.claimed_at_ms,
                        started_at_ms: task.started_at_ms,
                    });
                    Outcome::Success
                }
            })
            .build()?
            .start();
        workers.push(w);
    }

    // The Redis clock, read once; a short lead lets the workers go idle first.
    let t0 = queue.stats().await?.now_ms;
    let i0 = Instant::now();
    let base = t0 + 300;
    let redis_now = || t0 + i0.elapsed().as_millis() as u64;
    let local = |redis_ms: u64| i0 + Duration::from_millis(redis_ms.saturating_sub(t0));
    let mapped = |t_s: i64| base + map.offset_ms(t_s);

    let mut sink = match &cfg.outbox {
        None => None,
        Some(o) => {
            // the reconciler looks at every row of the replay; the queue keeps every
            // acknowledged task, so none is taken for lost before the relay records it
            let horizon_ms = map.total_ms().saturating_add(3_600_000);
            let retention = plan.tasks.len() as u64 + 10_000;
            let s = OutboxSink::start(
                &o.postgres,
                client.clone(),
                &cfg.queue,
                horizon_ms,
                retention,
            );
            Some(s.await?)
        }
    };
    let flush_midway = cfg.outbox.as_ref().is_some_and(|o| o.flush_midway);

    let started = Instant::now();
    let mut cancels: HashMap<usize, CancelRecord> = HashMap::new();
    let mut created = vec![false; plan.tasks.len()];
    let mut driver_lag_max_ms = 0;
    let mut pending: Vec<NewTask> = Vec::new();
    let mut i = 0;
    while i < plan.steps.len() {
        let target = mapped(plan.steps[i].at_s);
        tokio::time::sleep_until(local(target)).await;
        let now = redis_now();
        driver_lag_max_ms = driver_lag_max_ms.max(now.saturating_sub(target));
        // every step whose time has come, in order; consecutive enqueues go as one batch
        while i < plan.steps.len() && mapped(plan.steps[i].at_s) <= now {
            match plan.steps[i].action {
                Action::Enqueue { task } => {
                    let t = &plan.tasks[task];
                    let payload = serde_json::json!({
                        "kind": t.kind.as_str(), "order_id": t.order_id, "task": task,
                    });
                    pending.push(NewTask {
                        idx: task,
                        key: t.key.clone(),
                        payload: payload.to_string().into_bytes(),
                        due_at_ms: mapped(t.due_at_s),
                    });
                }
                Action::Cancel { task } => {
                    flush(&queue, sink.as_mut(), &mut pending, &mut created).await?;
                    let key = &plan.tasks[task].key;
                    match sink.as_mut() {
                        Some(s) => s.cancel(task, key, &redis_now).await?,
                        None => {
                            let r = queue.cancel_report(&TaskRef::key(key.clone())?).await?;
                            cancels.insert(
                                task,
                                CancelRecord {
                                    outcome: r.outcome,
                                    at_ms: r.now_ms,
                                },
                            );
                        }
                    }
                }
            }
            i += 1;
        }
        flush(&queue, sink.as_mut(), &mut pending, &mut created).await?;
        if let Some(s) = sink.as_mut()
            && flush_midway
            && s.wiped_at_ms().is_none()
            && i >= plan.steps.len() / 2
        {
            s.wipe_redis(url, redis_now()).await?;
        }
    }
    let flushed_at_ms = sink.as_ref().and_then(OutboxSink::wiped_at_ms);
    if let Some(s) = sink.as_mut() {
        // the cancels' outcomes are known once the relay has applied them
        cancels = s.settle().await?;
    }

    // Wait until every task that was not cancelled has run (or a generous deadline passes:
    // what is still missing then is reported as lost).
    let must_run: Vec<usize> = (0..plan.tasks.len())
        .filter(|t| {
            created[*t]
                && !cancels
                    .get(t)
                    .is_some_and(|c| c.outcome == CancelOutcome::Cancelled)
        })
        .collect();
    let last_due = plan
        .tasks
        .iter()
        .map(|t| mapped(t.due_at_s))
        .max()
        .unwrap_or(base);
    let deadline = local(last_due) + Duration::from_secs(10);
    loop {
        let missing = {
            let runs = lock(&runs);
            must_run.iter().filter(|t| !runs.contains_key(t)).count()
        };
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let duration = started.elapsed();
    for w in workers {
        w.shutdown().await?;
    }
    let outbox = match sink {
        Some(s) => Some(s.finish().await?),
        None => None,
    };
    let runs = lock(&runs).clone();
    let due_ms: Vec<u64> = plan.tasks.iter().map(|t| mapped(t.due_at_s)).collect();
    let restored: HashSet<usize> = outbox.as_ref().map_or_else(HashSet::new, |o| {
        (0..plan.tasks.len())
            .filter(|&i| o.restored_keys.contains(&plan.tasks[i].key))
            .collect()
    });
    let mut report = check(
        plan,
        cfg,
        &runs,
        &cancels,
        &created,
        &due_ms,
        duration,
        driver_lag_max_ms,
        flushed_at_ms,
        &restored,
    );
    report.outbox = outbox;
    Ok(report)
}

/// Enqueues the pending tasks as one batch: one script call, or one PostgreSQL transaction.
async fn flush(
    queue: &dueq::Queue,
    sink: Option<&mut OutboxSink>,
    pending: &mut Vec<NewTask>,
    created: &mut [bool],
) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let made: Vec<bool> = match sink {
        Some(s) => s.enqueue(pending).await?,
        None => {
            let specs: Vec<TaskSpec> = pending.iter().map(NewTask::spec).collect();
            queue
                .enqueue_batch(&specs)
                .await
                .context("enqueueing replay tasks")?
                .into_iter()
                .map(|r| r.outcome == EnqueueOutcome::Created)
                .collect()
        }
    };
    for (t, made) in pending.iter().zip(made) {
        if made {
            created[t.idx] = true;
        } else {
            tracing::error!(task = t.idx, "replay key was already live in the queue");
        }
    }
    pending.clear();
    Ok(())
}
