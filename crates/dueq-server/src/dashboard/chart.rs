//! The dashboard's bar charts as plain geometry that `templates/chart.html` draws as inline
//! SVG: a queue's last hour (throughput and lateness, from [`dueq::MinuteStats`]) and what is
//! coming (tasks falling due per minute for the next hour and per hour for the next day, from
//! [`dueq::DueHistogram`]). No chart library, no script.

use super::view;

/// Width and height of a chart's SVG viewBox.
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 150.0;
/// Plot area inside the viewBox: room on the left for y labels, at the bottom for x labels.
const LEFT: f64 = 52.0;
const RIGHT: f64 = 6.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 20.0;

/// One minute of activity, as the charts need it (from [`dueq::MinuteStats`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Minute {
    pub start_ms: u64,
    pub claimed: u64,
    pub succeeded: u64,
    pub dead: u64,
    pub lateness_sum_ms: u64,
    pub lateness_max_ms: u64,
}

impl From<&dueq::MinuteStats> for Minute {
    fn from(m: &dueq::MinuteStats) -> Self {
        Self {
            start_ms: m.minute_start_ms,
            claimed: m.claimed,
            succeeded: m.succeeded,
            dead: m.dead,
            lateness_sum_ms: m.lateness_sum_ms,
            lateness_max_ms: m.lateness_max_ms,
        }
    }
}

/// A filled rectangle with a hover title.
#[derive(Debug)]
pub(super) struct Bar {
    pub x: String,
    pub y: String,
    pub w: String,
    pub h: String,
    /// CSS class (colour).
    pub class: &'static str,
    pub title: String,
}

/// A label at a position.
#[derive(Debug)]
pub(super) struct Tick {
    pub x: String,
    pub y: String,
    pub label: String,
    /// SVG `text-anchor`: `start`, `middle` or `end`.
    pub anchor: &'static str,
}

/// A legend entry.
#[derive(Debug)]
pub(super) struct Legend {
    pub class: &'static str,
    pub label: &'static str,
}

/// One chart, ready to draw.
#[derive(Debug)]
pub(super) struct Chart {
    pub title: &'static str,
    /// One line under the title, e.g. totals of the hour.
    pub summary: String,
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right_x: f64,
    pub base_y: f64,
    pub y_ticks: Vec<Tick>,
    pub x_ticks: Vec<Tick>,
    pub bars: Vec<Bar>,
    pub legend: Vec<Legend>,
    /// Nothing to show: `empty_text` is drawn instead.
    pub empty: bool,
    /// What an empty chart says instead of bars.
    pub empty_text: &'static str,
}

/// Smallest 1, 2 or 5 times a power of ten that is at least `v` (at least 1).
fn nice_ceil(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

fn n(v: f64) -> String {
    format!("{v:.1}")
}

struct Frame {
    slot: f64,
    scale: f64,
    base: f64,
}

impl Frame {
    fn new(count: usize, y_max: f64) -> Self {
        Self {
            slot: (WIDTH - LEFT - RIGHT) / count.max(1) as f64,
            scale: (HEIGHT - TOP - BOTTOM) / y_max,
            base: HEIGHT - BOTTOM,
        }
    }

    /// The bar of slot `i` (a minute or an hour) from value `from` up to value `to`.
    fn bar(&self, i: usize, from: f64, to: f64, class: &'static str, title: String) -> Bar {
        let x = LEFT + i as f64 * self.slot + 0.5;
        let w = (self.slot - 1.0).max(0.5);
        let y_top = self.base - to * self.scale;
        let h = (to - from) * self.scale;
        Bar {
            x: n(x),
            y: n(y_top),
            w: n(w),
            h: n(h.max(0.0)),
            class,
            title,
        }
    }
}

/// What a chart says besides its bars.
struct Text {
    title: &'static str,
    summary: String,
    /// Labels under the first, middle and last slot.
    x_labels: [String; 3],
    legend: Vec<Legend>,
    /// `Some`: nothing to show, this is drawn instead.
    empty: Option<&'static str>,
}

/// Labels of a chart of the last `len` minutes, the last one now.
fn past_minutes(len: usize) -> [String; 3] {
    let ago = |i: usize| format!("−{} min", len.saturating_sub(i + 1));
    [ago(0), ago(len / 2), "now".to_owned()]
}

fn chart(text: Text, len: usize, y_max: f64, y_label: impl Fn(f64) -> String) -> (Chart, Frame) {
    let frame = Frame::new(len, y_max);
    let y_ticks = [0.0, y_max / 2.0, y_max]
        .into_iter()
        .map(|v| Tick {
            x: n(LEFT - 6.0),
            y: n(frame.base - v * frame.scale + 4.0),
            label: y_label(v),
            anchor: "end",
        })
        .collect();
    let [first, middle, last] = text.x_labels;
    let x_ticks = [
        (LEFT, first, "start"),
        (
            LEFT + ((len / 2) as f64 + 0.5) * frame.slot,
            middle,
            "middle",
        ),
        (WIDTH - RIGHT, last, "end"),
    ]
    .into_iter()
    .map(|(x, label, anchor)| Tick {
        x: n(x),
        y: n(HEIGHT - 5.0),
        label,
        anchor,
    })
    .collect();
    (
        Chart {
            title: text.title,
            summary: text.summary,
            width: WIDTH,
            height: HEIGHT,
            left: LEFT,
            right_x: WIDTH - RIGHT,
            base_y: frame.base,
            y_ticks,
            x_ticks,
            bars: Vec::new(),
            legend: text.legend,
            empty: text.empty.is_some(),
            empty_text: text.empty.unwrap_or(""),
        },
        frame,
    )
}

/// What a chart of the last hour says when nothing happened in it.
const NO_ACTIVITY: &str = "no activity in the last hour";

/// Succeeded and dead tasks per minute, stacked.
pub(super) fn throughput(minutes: &[Minute]) -> Chart {
    let peak = minutes
        .iter()
        .map(|m| m.succeeded.saturating_add(m.dead))
        .max()
        .unwrap_or(0);
    let succeeded: u64 = minutes.iter().map(|m| m.succeeded).sum();
    let dead: u64 = minutes.iter().map(|m| m.dead).sum();
    let text = Text {
        title: "Throughput per minute",
        summary: format!("{succeeded} succeeded, {dead} dead in the last hour"),
        x_labels: past_minutes(minutes.len()),
        legend: vec![
            Legend {
                class: "c-ok",
                label: "succeeded",
            },
            Legend {
                class: "c-dead",
                label: "dead",
            },
        ],
        empty: (peak == 0).then_some(NO_ACTIVITY),
    };
    let (mut c, f) = chart(text, minutes.len(), nice_ceil(peak as f64), |v| {
        format!("{v:.0}")
    });
    for (i, m) in minutes.iter().enumerate() {
        let title = format!(
            "{} UTC: {} succeeded, {} dead",
            view::clock(m.start_ms),
            m.succeeded,
            m.dead
        );
        let ok = m.succeeded as f64;
        if m.succeeded > 0 {
            c.bars.push(f.bar(i, 0.0, ok, "c-ok", title.clone()));
        }
        if m.dead > 0 {
            c.bars
                .push(f.bar(i, ok, ok + m.dead as f64, "c-dead", title));
        }
    }
    c
}

/// Mean and max lateness (claim time minus due time) per minute: the max as a light bar, the
/// mean as a dark bar in front of it.
pub(super) fn lateness(minutes: &[Minute]) -> Chart {
    let peak = minutes.iter().map(|m| m.lateness_max_ms).max().unwrap_or(0);
    let claimed: u64 = minutes.iter().map(|m| m.claimed).sum();
    let sum: u64 = minutes.iter().map(|m| m.lateness_sum_ms).sum();
    let summary = match sum.checked_div(claimed) {
        None => "nothing claimed in the last hour".to_owned(),
        Some(mean) => format!(
            "{claimed} claimed, mean {} late, max {}",
            view::duration(mean),
            view::duration(peak)
        ),
    };
    let text = Text {
        title: "Lateness (claim − due)",
        summary,
        x_labels: past_minutes(minutes.len()),
        legend: vec![
            Legend {
                class: "c-max",
                label: "max",
            },
            Legend {
                class: "c-mean",
                label: "mean",
            },
        ],
        empty: (claimed == 0).then_some(NO_ACTIVITY),
    };
    let (mut c, f) = chart(text, minutes.len(), nice_ceil(peak as f64), |v| {
        if v < 10.0 && v.fract() != 0.0 {
            format!("{v:.1} ms")
        } else {
            view::duration(v as u64)
        }
    });
    for (i, m) in minutes.iter().enumerate() {
        let Some(mean) = m.lateness_sum_ms.checked_div(m.claimed) else {
            continue;
        };
        let title = format!(
            "{} UTC: {} claimed, mean {}, max {}",
            view::clock(m.start_ms),
            m.claimed,
            view::duration(mean),
            view::duration(m.lateness_max_ms)
        );
        c.bars
            .push(f.bar(i, 0.0, m.lateness_max_ms as f64, "c-max", title.clone()));
        c.bars.push(f.bar(i, 0.0, mean as f64, "c-mean", title));
    }
    c
}

/// Slots of `width_ms` from `start_ms`, each with its count of tasks falling due (a bucket
/// includes its end, like [`dueq::DueHistogram`]'s).
struct Coming<'a> {
    counts: &'a [u64],
    start_ms: u64,
    width_ms: u64,
    /// What one slot is, for the x labels ("min", "h").
    unit: &'static str,
}

/// A chart of tasks falling due in the slots of `coming`.
fn coming(title: &'static str, summary: String, coming: &Coming<'_>) -> Chart {
    let len = coming.counts.len();
    let peak = coming.counts.iter().copied().max().unwrap_or(0);
    let unit = coming.unit;
    let text = Text {
        title,
        summary,
        x_labels: [
            "now".to_owned(),
            format!("+{} {unit}", len / 2),
            format!("+{len} {unit}"),
        ],
        legend: vec![Legend {
            class: "c-sched",
            label: "falling due",
        }],
        empty: (peak == 0).then_some("nothing falls due in this time"),
    };
    let (mut c, f) = chart(text, len, nice_ceil(peak as f64), |v| format!("{v:.0}"));
    for (i, &count) in coming.counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let from = coming.start_ms + i as u64 * coming.width_ms;
        let title = format!(
            "in {i}–{} {unit} ({}–{} UTC): {count} falling due",
            i + 1,
            view::clock(from),
            view::clock(from + coming.width_ms)
        );
        c.bars.push(f.bar(i, 0.0, count as f64, "c-sched", title));
    }
    c
}

/// Tasks falling due in each minute of the next hour.
pub(super) fn due_minutes(h: &dueq::DueHistogram) -> Chart {
    let hour: u64 = h.minutes.iter().sum();
    coming(
        "Falling due per minute, next hour",
        format!("{hour} in the next hour; {} due now", h.due),
        &Coming {
            counts: &h.minutes,
            start_ms: h.now_ms,
            width_ms: 60_000,
            unit: "min",
        },
    )
}

/// Tasks falling due in each hour of the next day.
pub(super) fn due_hours(h: &dueq::DueHistogram) -> Chart {
    let day: u64 = h.hours.iter().sum();
    coming(
        "Falling due per hour, next 24 hours",
        format!("{day} in the next 24 h; {} later", h.later),
        &Coming {
            counts: &h.hours,
            start_ms: h.now_ms,
            width_ms: 3_600_000,
            unit: "h",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour() -> Vec<Minute> {
        (0..60)
            .map(|i| Minute {
                start_ms: 1_700_000_040_000 + i * 60_000,
                ..Minute::default()
            })
            .collect()
    }

    #[test]
    fn nice_scale() {
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(3.0), 5.0);
        assert_eq!(nice_ceil(7.0), 10.0);
        assert_eq!(nice_ceil(10.0), 10.0);
        assert_eq!(nice_ceil(11.0), 20.0);
        assert_eq!(nice_ceil(1234.0), 2000.0);
    }

    #[test]
    fn empty_hour() {
        let h = hour();
        let t = throughput(&h);
        assert!(t.empty && t.bars.is_empty());
        assert_eq!(t.x_ticks.len(), 3);
        let l = lateness(&h);
        assert!(l.empty && l.bars.is_empty());
        assert_eq!(l.summary, "nothing claimed in the last hour");
    }

    #[test]
    fn bars_stack_and_fit() {
        let mut h = hour();
        h[59].succeeded = 6;
        h[59].dead = 4;
        h[10].claimed = 2;
        h[10].lateness_sum_ms = 300;
        h[10].lateness_max_ms = 250;
        let t = throughput(&h);
        assert!(!t.empty);
        assert_eq!(t.bars.len(), 2);
        let top: f64 = t.bars[1].y.parse().unwrap();
        assert!((top - TOP).abs() < 0.11, "peak reaches the top: {top}");
        let ok_top: f64 = t.bars[0].y.parse().unwrap();
        let dead_bottom: f64 =
            t.bars[1].y.parse::<f64>().unwrap() + t.bars[1].h.parse::<f64>().unwrap();
        assert!((ok_top - dead_bottom).abs() < 0.11);
        assert_eq!(t.summary, "6 succeeded, 4 dead in the last hour");
        let l = lateness(&h);
        assert_eq!(l.bars.len(), 2);
        assert!(l.bars[0].title.contains("mean 150 ms, max 250 ms"));
        assert_eq!(l.y_ticks[2].label, "500 ms");
    }

    #[test]
    fn coming_charts() {
        let mut h = dueq::DueHistogram::default();
        h.now_ms = 12 * 3_600_000 + 30 * 60_000;
        h.minutes = vec![0; 60];
        h.hours = vec![0; 24];
        let m = due_minutes(&h);
        assert!(m.empty && m.bars.is_empty());
        assert_eq!(m.empty_text, "nothing falls due in this time");
        h.due = 4;
        h.minutes[0] = 3;
        h.minutes[59] = 6;
        h.hours[0] = 9;
        h.hours[23] = 2;
        h.later = 5;
        let m = due_minutes(&h);
        assert!(!m.empty);
        assert_eq!(m.summary, "9 in the next hour; 4 due now");
        assert_eq!(m.bars.len(), 2);
        assert_eq!(
            m.bars[0].title,
            "in 0–1 min (12:30–12:31 UTC): 3 falling due"
        );
        assert_eq!(
            m.bars[1].title,
            "in 59–60 min (13:29–13:30 UTC): 6 falling due"
        );
        let top: f64 = m.bars[1].y.parse().unwrap();
        assert!(top > TOP, "6 of 10 stays below the top: {top}");
        let labels: Vec<&str> = m.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["now", "+30 min", "+60 min"]);
        let d = due_hours(&h);
        assert_eq!(d.summary, "11 in the next 24 h; 5 later");
        assert_eq!(d.bars.len(), 2);
        assert!(d.bars[1].title.starts_with("in 23–24 h (11:30–12:30 UTC)"));
        let labels: Vec<&str> = d.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["now", "+12 h", "+24 h"]);
        // the charts of the past keep their labels
        let t = throughput(&hour());
        let labels: Vec<&str> = t.x_ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["−59 min", "−29 min", "now"]);
    }
}
