//! The firing step that [`ScheduleFirer`](crate::ScheduleFirer) drives: every due tick of a
//! queue's schedules fired (or counted as skipped) in bounded script calls.
//!
//! Fire times are computed here from the schedule's grid and a Redis time
//! ([`crate::schedule`]); `schedule_fire.lua` claims each tick atomically.

use super::Queue;
use super::schedules::decode;
use crate::error::Result;
use crate::protocol::record;
use crate::protocol::schedules::{self, FireItem, Raw};
use crate::schedule::timing::{self, Grid};
use crate::schedule::{MAX_TICKS_AHEAD, Misfire, Overlap};

/// Schedules one firing step looks at and fires (in calls of at most [`FIRE_TICKS`] ticks).
pub(crate) const FIRE_BATCH: usize = 200;
/// Most ticks one fire script call creates (one call does bounded work): a step
/// fires the schedules it read in as many calls as that takes (schedules fire up to twelve
/// ticks ahead, so a batch of new schedules would be 2 400 in one call).
const FIRE_TICKS: usize = 1_000;
/// Most bytes of definitions and tick records one fire call carries and writes (beyond its
/// first schedule): with the 1 MiB payload limit, 200 schedules of twelve ticks would
/// otherwise be gigabytes in one call, Redis blocked for seconds. A step still fires every
/// schedule it read, in more calls.
const FIRE_BYTES: usize = 4 << 20;

/// What one firing step did on a queue.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FireReport {
    /// Redis time of the step, ms.
    pub now_ms: u64,
    /// When the queue's schedules next need a step (a tick due, or one that may fire
    /// ahead), after this one.
    pub next_fire_at_ms: Option<u64>,
    /// Schedules due were found (look again at once: more may be due).
    pub busy: bool,
    /// Schedules were due but the fire script applied none of them (another process was
    /// first, or a state it cannot move on): look again after a pause, not at once.
    pub stalled: bool,
    pub fired: u64,
    pub skipped: u64,
}

impl Queue {
    /// One firing step: fires (or counts as skipped) every tick of this queue's schedules
    /// that is due, up to [`FIRE_BATCH`] schedules, and says when to look again.
    pub(crate) async fn fire_due_schedules(&self) -> Result<FireReport> {
        let mut conn = self.client().conn();
        let due = schedules::due(&mut conn, self.keys(), FIRE_BATCH).await?;
        let mut report = FireReport {
            now_ms: due.now_ms,
            next_fire_at_ms: due.earliest_ms,
            busy: !due.due.is_empty(),
            ..FireReport::default()
        };
        if due.due.is_empty() {
            return Ok(report);
        }
        let mut planned: Vec<Planned<'_>> = Vec::with_capacity(due.due.len());
        for raw in &due.due {
            match plan_one(raw, due.now_ms) {
                Ok(Some(p)) => planned.push(p),
                Ok(None) => {}
                Err(e) => tracing::warn!(queue = self.name(), schedule = raw.name, error = %e,
                    "schedule cannot be fired; fix or delete it"),
            }
        }
        if planned.is_empty() {
            // nothing can be fired: do not spin on them
            report.busy = false;
            return Ok(report);
        }
        report.stalled = true;
        // every schedule read is fired, in calls of at most FIRE_TICKS ticks and FIRE_BYTES
        for chunk in fire_calls(&planned, FIRE_TICKS, FIRE_BYTES) {
            let items: Vec<FireItem<'_>> = chunk.iter().map(|p| p.item()).collect();
            let (_, fired) = schedules::fire(&mut conn, self.keys(), &items).await?;
            for f in &fired {
                if f.code == 1 {
                    report.stalled = false;
                    report.fired += f.created;
                    report.skipped += f.skipped;
                }
            }
        }
        Ok(report)
    }
}

/// `planned` in runs of at most `max_ticks` ticks and `max_bytes` of definitions and tick
/// records (one schedule at least: a schedule with more, which a step never plans for its
/// ticks, makes a run of its own).
fn fire_calls<'p, 'a>(
    planned: &'p [Planned<'a>],
    max_ticks: usize,
    max_bytes: usize,
) -> impl Iterator<Item = &'p [Planned<'a>]> {
    let mut rest = planned;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut ticks, mut bytes) = (0, 0);
        let end = rest
            .iter()
            .position(|p| {
                ticks += p.ticks.len();
                bytes += p.bytes();
                ticks > max_ticks || bytes > max_bytes
            })
            .unwrap_or(rest.len())
            .max(1);
        let (run, after) = rest.split_at(end);
        rest = after;
        Some(run)
    })
}

/// A schedule's planned step, owning what its [`FireItem`] borrows but the definition, which
/// it borrows from the read it was planned from.
struct Planned<'a> {
    name: String,
    expect_next: i64,
    skipped: u64,
    /// The ticks to fire.
    ticks: Vec<u64>,
    /// Their tasks' spec, with an empty key (the script puts each tick's in).
    spec: Vec<u8>,
    /// The stored definition planned from.
    def: &'a [u8],
    next: Option<u64>,
    overlap_skip: bool,
    group: Option<String>,
    lead_ms: u64,
    fire_once: bool,
    grace_ms: u64,
    unique_for_ms: Option<u64>,
}

impl Planned<'_> {
    /// What its fire step carries and writes: the definition and the spec, and a record per
    /// tick.
    fn bytes(&self) -> usize {
        self.def.len() + (1 + self.ticks.len()) * self.spec.len()
    }

    fn item(&self) -> FireItem<'_> {
        FireItem {
            name: &self.name,
            expect_next: self.expect_next,
            missed: self.skipped,
            ticks: &self.ticks,
            spec: &self.spec,
            def: self.def,
            next: self.next,
            overlap_skip: self.overlap_skip,
            group: self.group.as_deref().unwrap_or(""),
            lead_ms: self.lead_ms,
            fire_once: self.fire_once,
            grace_ms: self.grace_ms,
            unique_for_ms: self.unique_for_ms,
        }
    }
}

fn plan_one(raw: &Raw, now_ms: u64) -> Result<Option<Planned<'_>>> {
    let (spec, st) = decode(raw)?;
    let grid: Grid = spec.grid()?;
    let Some(next) = st.next else {
        return Ok(None);
    };
    // ticks after now fire ahead up to the look-ahead, while fewer than MAX_TICKS_AHEAD wait
    let room = MAX_TICKS_AHEAD.saturating_sub(st.waiting(now_ms));
    let Some(plan) = timing::plan_ticks(
        &grid,
        next,
        now_ms,
        spec.misfire_grace_ms,
        spec.misfire == Misfire::FireOnce,
        now_ms + spec.lead_ms(),
        room,
    ) else {
        return Ok(None);
    };
    Ok(Some(Planned {
        name: spec.name.clone(),
        expect_next: st.next_raw,
        skipped: plan.skipped,
        ticks: plan.fire,
        spec: record::tick_spec(&spec.tick_options(), "", &spec.payload),
        def: &raw.def,
        next: plan.next,
        overlap_skip: spec.overlap == Overlap::Skip,
        group: spec.task.group.clone(),
        lead_ms: spec.lead_ms(),
        fire_once: spec.misfire == Misfire::FireOnce,
        grace_ms: spec.misfire_grace_ms,
        unique_for_ms: spec.task.unique_for_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Client, ScheduleSpec};

    fn planned(ticks: usize, payload: usize) -> Planned<'static> {
        Planned {
            name: "s".into(),
            expect_next: 0,
            skipped: 0,
            ticks: (0..ticks as u64).collect(),
            spec: vec![0; payload],
            def: vec![0; payload].leak(),
            next: None,
            overlap_skip: false,
            group: None,
            lead_ms: 0,
            fire_once: false,
            grace_ms: 1_000,
            unique_for_ms: None,
        }
    }

    fn sizes(p: &[Planned], ticks: usize, bytes: usize) -> Vec<usize> {
        fire_calls(p, ticks, bytes).map(<[Planned]>::len).collect()
    }

    #[test]
    fn fire_calls_end_at_the_tick_cap_or_the_byte_cap_with_one_schedule_at_least() {
        let small: Vec<Planned> = (0..25).map(|_| planned(10, 100)).collect();
        assert_eq!(sizes(&small, 100, usize::MAX), [10, 10, 5]);
        // 1 200 bytes a schedule (definition, spec, ten records): three fit 4 000
        assert_eq!(sizes(&small[..7], usize::MAX, 4_000), [3, 3, 1]);
        // one larger than the cap still goes, alone
        let big = vec![planned(12, 5_000), planned(1, 10), planned(12, 5_000)];
        assert_eq!(sizes(&big, 1_000, 4_000), [1, 1, 1]);
        assert!(sizes(&[], 10, 10).is_empty());
    }

    #[tokio::test]
    async fn a_step_fires_every_large_schedule_it_read_in_calls_under_the_byte_cap() {
        let server = dueq_testkit::RedisServer::start();
        let client = Client::connect(&server.url()).await.unwrap();
        let q = client.queue("big").unwrap();
        // 40 schedules of 100 KiB: about 1.3 MB a schedule with its twelve ticks, so a step
        // fires them three to a call
        for i in 0..40 {
            let spec = ScheduleSpec::new(format!("s{i}"), vec![b'x'; 100 << 10]).every_ms(1_000);
            q.set_schedule(&spec).await.unwrap();
        }
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for (k, v) in [("slowlog-max-len", 100_000), ("slowlog-log-slower-than", 0)] {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(k)
                .arg(v)
                .exec_async(&mut conn)
                .await
                .unwrap();
        }
        let r = q.fire_due_schedules().await.unwrap();
        assert!(r.fired >= 40, "{r:?}");
        for i in 0..40 {
            let s = q.schedule(&format!("s{i}")).await.unwrap().unwrap();
            assert!(s.fired_total >= 1, "s{i} never fired: {s:?}");
        }
        // the fire calls: several, none writing more than the cap allows
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        // each entry: id, time, duration, [command, args...], ...
        let fires = log
            .iter()
            .filter(|e| {
                let redis::Value::Array(e) = e else {
                    return false;
                };
                let Some(redis::Value::Array(cmd)) = e.get(3) else {
                    return false;
                };
                matches!(cmd.get(1), Some(redis::Value::BulkString(f))
                    if f.ends_with(b"_schedule_fire"))
            })
            .count();
        assert!(
            fires >= 40 / 3,
            "{fires} fire calls for 40 schedules of 1.3 MB"
        );
    }
}
