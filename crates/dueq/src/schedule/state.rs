//! A schedule's stored firing state: next and last fire times, counts, and the ticks fired
//! ahead whose tasks still wait.

use crate::error::{Error, Result};

/// The state string of a schedule (see `protocol/schedules/schedule_set.lua`), with its fired
/// ticks (`schedule_fired`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    pub next: Option<u64>,
    pub next_raw: i64,
    /// The latest fired tick; after now while ticks fired ahead wait.
    pub last: Option<u64>,
    pub skipped: u64,
    pub paused: bool,
    pub fired: u64,
    /// The tick fired before `last` (`None` when unknown).
    pub prev: Option<u64>,
    /// The newest fired ticks, ascending (every tick fired ahead among them; `prev` and
    /// `last` merged in, as `sched_ticks` in `protocol/lib/schedules.lua` reads them).
    pub ticks: Vec<u64>,
}

impl State {
    /// Reads a state and its fired ticks (`ticks`, '' for none).
    pub(crate) fn parse(name: &str, raw: &str, ticks: &str) -> Result<Self> {
        let bad = || Error::protocol(format!("schedule {name}: unreadable state {raw:?}"));
        let mut it = raw.split(' ');
        let mut num = || -> Result<i64> { it.next().and_then(|s| s.parse().ok()).ok_or_else(bad) };
        let next_raw = num()?;
        let last = num()?;
        let skipped = num()?;
        let paused = num()?;
        let fired = num()?;
        // the fingerprint, then after a '/' `prev` (absent in states written before ticks
        // fired ahead)
        let prev: i64 = match it.next().and_then(|fp| fp.split_once('/')) {
            Some((_, prev)) => prev.parse().map_err(|_| bad())?,
            None => -1,
        };
        let mut list = Vec::new();
        for t in ticks.split(' ').filter(|t| !t.is_empty()) {
            list.push(t.parse::<u64>().map_err(|_| bad())?);
        }
        let last = u64::try_from(last).ok();
        let prev = u64::try_from(prev).ok();
        for t in [prev, last].into_iter().flatten() {
            if list.last().is_none_or(|&newest| t > newest) {
                list.push(t);
            }
        }
        Ok(Self {
            next: u64::try_from(next_raw).ok(),
            next_raw,
            last,
            skipped: skipped.max(0) as u64,
            paused: paused == 1,
            fired: fired.max(0) as u64,
            prev,
            ticks: list,
        })
    }

    /// How many fired ticks are after `now_ms` (waiting, fired ahead).
    pub(crate) fn waiting(&self, now_ms: u64) -> usize {
        self.ticks.iter().rev().take_while(|&&t| t > now_ms).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_reads_with_and_without_the_tick_fired_before_last() {
        let st = State::parse(
            "a",
            "1796191389000 1796191388000 0 0 2 da61/1796191387000",
            "",
        )
        .unwrap();
        assert_eq!(
            (st.next, st.last, st.fired, st.prev),
            (
                Some(1_796_191_389_000),
                Some(1_796_191_388_000),
                2,
                Some(1_796_191_387_000)
            )
        );
        // no list of fired ticks (written by an older version): `prev` and `last` are it
        assert_eq!(st.ticks, vec![1_796_191_387_000, 1_796_191_388_000]);
        assert_eq!(st.waiting(1_796_191_387_500), 1);
        // written before ticks fired ahead: no `prev`
        let st = State::parse("a", "1796191389000 -1 3 1 0 da61", "").unwrap();
        assert_eq!(
            (st.last, st.skipped, st.paused, st.prev),
            (None, 3, true, None)
        );
        assert!(st.ticks.is_empty());
        assert!(State::parse("a", "1 2 3 0 0 fp/x", "").is_err());
        assert!(State::parse("a", "1 2 3 0 0 fp/1", "1 x").is_err());
    }

    #[test]
    fn state_merges_its_fired_ticks_with_last() {
        let st = State::parse("a", "60 50 0 0 6 fp/40", "10 20 30 40 50").unwrap();
        assert_eq!(st.ticks, vec![10, 20, 30, 40, 50]);
        assert_eq!((st.waiting(25), st.waiting(50)), (3, 0));
        // a process of an older version fired a tick the list does not know
        let st = State::parse("a", "70 60 0 0 7 fp/50", "10 20 30 40 50").unwrap();
        assert_eq!(st.ticks, vec![10, 20, 30, 40, 50, 60]);
    }
}
