//! The two per-queue charts (throughput and lateness over the last hour) as plain geometry
//! that `templates/chart.html` draws as inline SVG. No chart library, no script.

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
    /// No activity in the hour.
    pub empty: bool,
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

    /// The bar of minute `i` from value `from` up to value `to`.
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

fn chart(
    title: &'static str,
    summary: String,
    minutes: &[Minute],
    y_max: f64,
    y_label: impl Fn(f64) -> String,
    legend: Vec<Legend>,
    empty: bool,
) -> (Chart, Frame) {
    let frame = Frame::new(minutes.len(), y_max);
    let y_ticks = [0.0, y_max / 2.0, y_max]
        .into_iter()
        .map(|v| Tick {
            x: n(LEFT - 6.0),
            y: n(frame.base - v * frame.scale + 4.0),
            label: y_label(v),
            anchor: "end",
        })
        .collect();
    let mut x_ticks = Vec::new();
    let len = minutes.len();
    for i in 0..len {
        if i == 0 || i + 1 == len || i == len / 2 {
            x_ticks.push(Tick {
                x: n(if i == 0 {
                    LEFT
                } else if i + 1 == len {
                    WIDTH - RIGHT
                } else {
                    LEFT + (i as f64 + 0.5) * frame.slot
                }),
                y: n(HEIGHT - 5.0),
                label: if i + 1 == len {
                    "now".to_owned()
                } else {
                    format!("−{} min", len - i - 1)
                },
                anchor: if i == 0 {
                    "start"
                } else if i + 1 == len {
                    "end"
                } else {
                    "middle"
                },
            });
        }
    }
    (
        Chart {
            title,
            summary,
            width: WIDTH,
            height: HEIGHT,
            left: LEFT,
            right_x: WIDTH - RIGHT,
            base_y: frame.base,
            y_ticks,
            x_ticks,
            bars: Vec::new(),
            legend,
            empty,
        },
        frame,
    )
}

/// Succeeded and dead tasks per minute, stacked.
pub(super) fn throughput(minutes: &[Minute]) -> Chart {
    let peak = minutes
        .iter()
        .map(|m| m.succeeded.saturating_add(m.dead))
        .max()
        .unwrap_or(0);
    let succeeded: u64 = minutes.iter().map(|m| m.succeeded).sum();
    let dead: u64 = minutes.iter().map(|m| m.dead).sum();
    let (mut c, f) = chart(
        "Throughput per minute",
        format!("{succeeded} succeeded, {dead} dead in the last hour"),
        minutes,
        nice_ceil(peak as f64),
        |v| format!("{v:.0}"),
        vec![
            Legend {
                class: "c-ok",
                label: "succeeded",
            },
            Legend {
                class: "c-dead",
                label: "dead",
            },
        ],
        peak == 0,
    );
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
    let (mut c, f) = chart(
        "Lateness (claim − due)",
        summary,
        minutes,
        nice_ceil(peak as f64),
        |v| {
            if v < 10.0 && v.fract() != 0.0 {
                format!("{v:.1} ms")
            } else {
                view::duration(v as u64)
            }
        },
        vec![
            Legend {
                class: "c-max",
                label: "max",
            },
            Legend {
                class: "c-mean",
                label: "mean",
            },
        ],
        claimed == 0,
    );
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
}
