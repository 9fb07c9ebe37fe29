//! The targets of DESIGN section 6, printed beside the figures they judge, and the ratios
//! that some targets are (computed from the medians of one session, so both sides come from
//! the same machine state).

use std::collections::BTreeMap;

/// The target of `metric` of `workload`, if DESIGN section 6 sets one.
pub(super) fn of(workload: &str, metric: &str) -> Option<&'static str> {
    Some(match (workload, metric) {
        ("W1", "tasks_per_s") => ">= 250000",
        ("W1", "redis_cpu_us_per_task") => "<= 4",
        ("W2", "tasks_per_s") => ">= 150000",
        ("W2", "redis_cpu_us_per_task") => "<= 4",
        ("W3", "p50_ms") => "<= 1",
        ("W3", "p99_ms") => "<= 5",
        ("W3", "max_ms") => "<= 25",
        ("W3", "min_ms") => ">= 0 (never early)",
        ("IDLE", "redis_commands_per_s") => "<= 2",
        ("W5", "bytes_per_task") => "<= 250",
        ("W7", "a_started_before_last_b") => "< 2000",
        ("W7", "tasks_per_s") => ">= 0.80 x W7-REF (W7/W7-REF)",
        ("W7T", "tasks_per_s") => ">= 0.60 x W2 (W7T/W2)",
        ("W7T", "most_active_in_a_group") => "<= 10",
        (w, "due_to_100th_ms") if w.starts_with("W4-") => "<= 5",
        _ => return None,
    })
}

/// A figure computed from two medians.
pub(super) struct Ratio {
    /// `NUM/DEN`.
    pub workload: String,
    /// The two workloads.
    pub of: [&'static str; 2],
    pub metric: &'static str,
    pub value: f64,
    pub target: &'static str,
}

/// The ratio targets whose both sides were measured: W7's drain against W7-REF's, W7T's
/// against W2's, and W9's Redis CPU per task at 6 partitions against 1.
pub(super) fn ratios(medians: &BTreeMap<(String, &'static str), f64>) -> Vec<Ratio> {
    let get = |w: &str, m: &'static str| medians.get(&(w.to_owned(), m)).copied();
    let mut out = Vec::new();
    for (num, den, metric, target) in [
        ("W7", "W7-REF", "tasks_per_s", ">= 0.80"),
        ("W7T", "W2", "tasks_per_s", ">= 0.60"),
        ("W9-P6-W2", "W9-P1-W2", "redis_cpu_us_per_task", "<= 1.30"),
    ] {
        if let (Some(a), Some(b)) = (get(num, metric), get(den, metric))
            && b > 0.0
        {
            out.push(Ratio {
                workload: format!("{num}/{den}"),
                of: [num, den],
                metric,
                value: a / b,
                target,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_is_given_only_when_both_sides_were_measured() {
        let mut m = BTreeMap::new();
        m.insert(("W7".to_owned(), "tasks_per_s"), 40.0);
        assert!(ratios(&m).is_empty());
        m.insert(("W7-REF".to_owned(), "tasks_per_s"), 50.0);
        let r = ratios(&m);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].workload.as_str(), r[0].value), ("W7/W7-REF", 0.8));
        assert_eq!(of("W4-1000000", "due_to_100th_ms"), Some("<= 5"));
        assert_eq!(of("W2", "client_cpu_us_per_task"), None);
    }
}
