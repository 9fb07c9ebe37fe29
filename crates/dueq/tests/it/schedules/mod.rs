//! Recurring schedules beyond the cases of `cases_schedules.rs`: ticks fired ahead, races of
//! firers against changes, daylight saving time, misfire of ticks fired ahead, tick records
//! made from the template, and the regressions reviews found.

mod ahead;
mod check;
mod races;
mod regressions;
// the frozen test clock they run on exists in debug builds only (dueq::FrozenClock)
#[cfg(debug_assertions)]
mod dst;
#[cfg(debug_assertions)]
mod misfire;
#[cfg(debug_assertions)]
mod replace_during_fire;
#[cfg(debug_assertions)]
mod templates;
