//! Flow control: queue settings, rate and concurrency limits and groups, a property test of the
//! limiter against a model, and the regressions reviews found.

mod limits;
mod model;
mod regressions;
