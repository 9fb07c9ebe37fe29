//! The replay plan: the tasks each order yields, their expected outcome, and the
//! time-ordered steps (see the module docs of `trace`).

use std::fmt;

use serde::Serialize;

use super::orders::Order;
use super::time_map::TimeMap;

/// Delay of a cancel-unpaid task after purchase: 30 minutes.
pub const CANCEL_UNPAID_AFTER_S: i64 = 30 * 60;

/// Delay of an auto-confirm task after customer delivery: 7 days.
pub const AUTO_CONFIRM_AFTER_S: i64 = 7 * 24 * 3600;

/// The kind of a planned task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Cancel the order if still unpaid 30 minutes after purchase.
    CancelUnpaid,
    /// Confirm receipt automatically 7 days after delivery.
    AutoConfirm,
    /// Remind the customer to review, at the estimated delivery date.
    ReviewReminder,
}

impl TaskKind {
    /// The task kind name used in the queue and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::CancelUnpaid => "cancel-unpaid",
            TaskKind::AutoConfirm => "auto-confirm",
            TaskKind::ReviewReminder => "review-reminder",
        }
    }

    /// Position of this kind: 0 cancel-unpaid, 1 auto-confirm, 2 review-reminder.
    pub fn index(self) -> usize {
        match self {
            TaskKind::CancelUnpaid => 0,
            TaskKind::AutoConfirm => 1,
            TaskKind::ReviewReminder => 2,
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task the replay enqueues, with what the trace says must happen to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTask {
    /// Kind of task.
    pub kind: TaskKind,
    /// The order it comes from.
    pub order_id: String,
    /// Queue key: `order:{order_id}:cancel`, `:confirm` or `:review`.
    pub key: String,
    /// Trace time at which it is enqueued (Unix seconds).
    pub enqueue_at_s: i64,
    /// Trace time at which it is due (Unix seconds); may be earlier than `enqueue_at_s`.
    pub due_at_s: i64,
    /// Whether it must run (exactly once). `false` only for a cancel-unpaid task whose order
    /// was approved strictly before the due time (the cancel must then succeed).
    pub expected_run: bool,
}

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Enqueue `plan.tasks[task]`.
    Enqueue {
        /// Index into [`Plan::tasks`].
        task: usize,
    },
    /// Cancel the key of `plan.tasks[task]` (always a cancel-unpaid task). It must succeed iff
    /// the task's `expected_run` is false; otherwise the task has run (or is running) and the
    /// cancel answers not-found or in-progress.
    Cancel {
        /// Index into [`Plan::tasks`].
        task: usize,
    },
}

impl Action {
    /// Index into [`Plan::tasks`] of the task this action is about.
    #[cfg(test)]
    pub fn task(self) -> usize {
        match self {
            Action::Enqueue { task } | Action::Cancel { task } => task,
        }
    }

    /// Sort rank at equal times: enqueues before cancels.
    fn rank(self) -> u8 {
        match self {
            Action::Enqueue { .. } => 0,
            Action::Cancel { .. } => 1,
        }
    }
}

/// One operation of the replay, at a trace time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Trace time (Unix seconds).
    pub at_s: i64,
    /// What to do.
    pub action: Action,
}

/// Per-kind expectations computed from the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// Tasks enqueued.
    pub enqueued: u64,
    /// Tasks that must run.
    pub expected_runs: u64,
    /// Tasks that must be cancelled successfully (approval strictly before due; cancel-unpaid
    /// only). `expected_runs + expected_cancels == enqueued`.
    pub expected_cancels: u64,
}

/// Which orders to replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Keep orders purchased at or after this trace time (Unix seconds); `None` = no bound.
    pub from: Option<i64>,
    /// Keep orders purchased strictly before this trace time (Unix seconds); `None` = no bound.
    pub to: Option<i64>,
}

impl PlanOptions {
    /// Whether an order purchased at `purchase_s` is in the window `[from, to)`.
    pub fn contains(&self, purchase_s: i64) -> bool {
        self.from.is_none_or(|from| purchase_s >= from) && self.to.is_none_or(|to| purchase_s < to)
    }
}

/// The replay plan: tasks, time-ordered steps and expected counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Every task, grouped by order in CSV order (cancel-unpaid, review-reminder, then
    /// auto-confirm if delivered).
    pub tasks: Vec<PlannedTask>,
    /// Steps sorted by `at_s`; at equal times enqueues come before cancels, and otherwise the
    /// CSV order (then the order within a row, as in `tasks`) is kept.
    pub steps: Vec<Step>,
    /// Number of orders picked by the window.
    pub orders: usize,
    /// Rows whose approval is earlier than their purchase: their cancel step is moved to the
    /// purchase time (after the enqueue); `expected_run` still uses the raw times. (None in the
    /// real trace.)
    pub quirks: usize,
    /// Expected counts, indexed by [`TaskKind::index`].
    pub counts: [KindCounts; 3],
}

impl Plan {
    /// Builds the plan for the orders whose purchase is in the window of `options`. All events
    /// of a picked order are kept, even those after `options.to`.
    pub fn build(orders: &[Order], options: &PlanOptions) -> Plan {
        let mut plan = Plan::default();
        for order in orders.iter().filter(|o| options.contains(o.purchase_s)) {
            plan.add_order(order);
        }
        // Stable sort: equal (time, rank) keeps the CSV order.
        plan.steps
            .sort_by_key(|step| (step.at_s, step.action.rank()));
        plan
    }

    fn add_order(&mut self, order: &Order) {
        self.orders += 1;
        let id = &order.order_id;
        let cancel_due = order.purchase_s + CANCEL_UNPAID_AFTER_S;
        // Approved strictly before due ⇒ the cancel wins; at or after due ⇒ the task runs.
        let cancelled = order
            .approved_s
            .is_some_and(|approved| approved < cancel_due);
        let cancel_task = self.push_task(PlannedTask {
            kind: TaskKind::CancelUnpaid,
            order_id: id.clone(),
            key: format!("order:{id}:cancel"),
            enqueue_at_s: order.purchase_s,
            due_at_s: cancel_due,
            expected_run: !cancelled,
        });
        self.push_task(PlannedTask {
            kind: TaskKind::ReviewReminder,
            order_id: id.clone(),
            key: format!("order:{id}:review"),
            enqueue_at_s: order.purchase_s,
            due_at_s: order.estimated_delivery_s,
            expected_run: true,
        });
        if let Some(approved) = order.approved_s {
            if approved < order.purchase_s {
                self.quirks += 1;
            }
            self.steps.push(Step {
                at_s: approved.max(order.purchase_s),
                action: Action::Cancel { task: cancel_task },
            });
        }
        if let Some(delivered) = order.delivered_customer_s {
            self.push_task(PlannedTask {
                kind: TaskKind::AutoConfirm,
                order_id: id.clone(),
                key: format!("order:{id}:confirm"),
                enqueue_at_s: delivered,
                due_at_s: delivered + AUTO_CONFIRM_AFTER_S,
                expected_run: true,
            });
        }
    }

    /// Appends a task, its enqueue step and its counts; returns its index.
    fn push_task(&mut self, task: PlannedTask) -> usize {
        let index = self.tasks.len();
        let counts = &mut self.counts[task.kind.index()];
        counts.enqueued += 1;
        if task.expected_run {
            counts.expected_runs += 1;
        } else {
            counts.expected_cancels += 1;
        }
        self.steps.push(Step {
            at_s: task.enqueue_at_s,
            action: Action::Enqueue { task: index },
        });
        self.tasks.push(task);
        index
    }

    /// Expected counts for one kind.
    #[cfg(test)]
    pub fn counts(&self, kind: TaskKind) -> KindCounts {
        self.counts[kind.index()]
    }

    /// Every trace time the replay cares about: all step times and all due times (unsorted,
    /// with repeats).
    pub fn instants(&self) -> impl Iterator<Item = i64> + '_ {
        self.steps
            .iter()
            .map(|step| step.at_s)
            .chain(self.tasks.iter().map(|task| task.due_at_s))
    }

    /// `(first step time, latest step or due time)`, or `None` for an empty plan.
    #[cfg(test)]
    pub fn span_s(&self) -> Option<(i64, i64)> {
        let first = self.steps.first()?.at_s;
        let last = self.instants().max()?;
        Some((first, last))
    }

    /// The trace-to-real time mapping over [`Plan::instants`]; see [`TimeMap::new`].
    ///
    /// # Panics
    ///
    /// If the parameters are invalid (see [`TimeMap::check_params`]).
    pub fn time_map(&self, speedup: f64, max_gap_ms: f64) -> TimeMap {
        TimeMap::new(self.instants(), speedup, max_gap_ms)
    }

    /// The cancel step that lands closest (in mapped real time) to its task's due time:
    /// `(margin in ms between the two rounded offsets, index into steps)`. `None` if there is
    /// no cancel step. A small margin means the run-versus-cancel race in a real replay could
    /// go either way, so the exact-match check would be unreliable.
    pub fn min_cancel_margin_ms(&self, map: &TimeMap) -> Option<(u64, usize)> {
        self.steps
            .iter()
            .enumerate()
            .filter_map(|(index, step)| match step.action {
                Action::Cancel { task } => {
                    let due = map.offset_ms(self.tasks[task].due_at_s);
                    Some((due.abs_diff(map.offset_ms(step.at_s)), index))
                }
                Action::Enqueue { .. } => None,
            })
            .min()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::replay::trace::load_orders;
    use crate::replay::trace::rows::{EST, orders, t};

    fn task<'a>(plan: &'a Plan, order: &str, kind: TaskKind) -> Option<&'a PlannedTask> {
        plan.tasks
            .iter()
            .find(|task| task.order_id == order && task.kind == kind)
    }

    #[test]
    fn cancel_unpaid_outcomes() {
        let orders = orders(&[
            // approved 29:59 after purchase: strictly before due ⇒ cancelled.
            (
                "before",
                "2018-03-05 10:00:00",
                "2018-03-05 10:29:59",
                "",
                EST,
            ),
            // approved exactly at due ⇒ runs.
            ("at", "2018-03-05 10:00:00", "2018-03-05 10:30:00", "", EST),
            // approved after due ⇒ runs.
            (
                "after",
                "2018-03-05 10:00:00",
                "2018-03-06 10:00:00",
                "",
                EST,
            ),
            // never approved ⇒ runs, no cancel step.
            ("never", "2018-03-05 10:00:00", "", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let expected = [
            ("before", false),
            ("at", true),
            ("after", true),
            ("never", true),
        ];
        for (id, runs) in expected {
            let task = task(&plan, id, TaskKind::CancelUnpaid).unwrap();
            assert_eq!(task.expected_run, runs, "{id}");
            assert_eq!(task.key, format!("order:{id}:cancel"));
            assert_eq!(task.enqueue_at_s, t("2018-03-05 10:00:00"));
            assert_eq!(task.due_at_s, t("2018-03-05 10:30:00"));
        }
        let cancels: Vec<(i64, &str)> = plan
            .steps
            .iter()
            .filter_map(|step| match step.action {
                Action::Cancel { task } => Some((step.at_s, plan.tasks[task].order_id.as_str())),
                Action::Enqueue { .. } => None,
            })
            .collect();
        assert_eq!(
            cancels,
            vec![
                (t("2018-03-05 10:29:59"), "before"),
                (t("2018-03-05 10:30:00"), "at"),
                (t("2018-03-06 10:00:00"), "after"),
            ]
        );
        assert_eq!(
            plan.counts(TaskKind::CancelUnpaid),
            KindCounts {
                enqueued: 4,
                expected_runs: 3,
                expected_cancels: 1
            }
        );
        assert_eq!(
            plan.counts(TaskKind::ReviewReminder),
            KindCounts {
                enqueued: 4,
                expected_runs: 4,
                expected_cancels: 0
            }
        );
        assert_eq!(plan.counts(TaskKind::AutoConfirm), KindCounts::default());
        assert_eq!((plan.orders, plan.quirks), (4, 0));
    }

    #[test]
    fn auto_confirm_and_review_reminder() {
        let orders = orders(&[
            (
                "d",
                "2018-03-05 10:00:00",
                "2018-03-05 10:05:00",
                "2018-03-09 15:00:00",
                // estimated before purchase: due in the past, still runs.
                "2018-03-01 00:00:00",
            ),
            ("nd", "2018-03-05 11:00:00", "2018-03-05 11:05:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let confirm = task(&plan, "d", TaskKind::AutoConfirm).unwrap();
        assert_eq!(confirm.key, "order:d:confirm");
        assert_eq!(confirm.enqueue_at_s, t("2018-03-09 15:00:00"));
        assert_eq!(confirm.due_at_s, t("2018-03-16 15:00:00"));
        assert!(confirm.expected_run);
        assert!(task(&plan, "nd", TaskKind::AutoConfirm).is_none());

        let review = task(&plan, "d", TaskKind::ReviewReminder).unwrap();
        assert_eq!(review.key, "order:d:review");
        assert_eq!(review.enqueue_at_s, t("2018-03-05 10:00:00"));
        assert_eq!(review.due_at_s, t("2018-03-01"));
        assert!(review.expected_run);

        assert_eq!(plan.counts(TaskKind::AutoConfirm).enqueued, 1);
        assert_eq!(plan.counts(TaskKind::AutoConfirm).expected_runs, 1);
        assert_eq!(plan.counts(TaskKind::ReviewReminder).expected_runs, 2);
        assert_eq!(plan.tasks.len(), 5);
        // 5 enqueues + 2 cancels, sorted by time.
        assert_eq!(plan.steps.len(), 7);
        assert!(plan.steps.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        assert_eq!(
            plan.span_s(),
            Some((t("2018-03-05 10:00:00"), t("2018-03-20")))
        );
    }

    #[test]
    fn window_filtering() {
        let orders = orders(&[
            ("early", "2018-03-04 23:59:59", "", "", EST),
            (
                "first",
                "2018-03-05 00:00:00",
                "2018-03-09 00:00:00",
                "2018-03-15 12:00:00",
                EST,
            ),
            ("last", "2018-03-06 23:59:59", "", "", EST),
            ("late", "2018-03-07 00:00:00", "", "", EST),
        ]);
        let window = PlanOptions {
            from: Some(t("2018-03-05")),
            to: Some(t("2018-03-07")),
        };
        let plan = Plan::build(&orders, &window);
        assert_eq!(plan.orders, 2);
        let ids: Vec<&str> = plan.tasks.iter().map(|t| t.order_id.as_str()).collect();
        assert_eq!(ids, ["first", "first", "first", "last", "last"]);
        // Events after `to` are kept: approval on 03-09, delivery on 03-15.
        assert!(plan.steps.iter().any(|s| s.at_s == t("2018-03-09")));
        assert!(
            plan.steps
                .iter()
                .any(|s| s.at_s == t("2018-03-15 12:00:00"))
        );

        let open_end = PlanOptions {
            from: Some(t("2018-03-06")),
            to: None,
        };
        assert_eq!(Plan::build(&orders, &open_end).orders, 2);
        let open_start = PlanOptions {
            from: None,
            to: Some(t("2018-03-05")),
        };
        assert_eq!(Plan::build(&orders, &open_start).orders, 1);
        assert_eq!(Plan::build(&orders, &PlanOptions::default()).orders, 4);
    }

    #[test]
    fn equal_time_ordering() {
        let orders = orders(&[
            // Its approval coincides with the purchase of b and c.
            ("a", "2018-03-05 09:50:00", "2018-03-05 10:00:00", "", EST),
            ("b", "2018-03-05 10:00:00", "", "", EST),
            // Approved at purchase: its cancel comes after its own enqueue.
            ("c", "2018-03-05 10:00:00", "2018-03-05 10:00:00", "", EST),
            // Approval before purchase (quirk): clamped to after its enqueue.
            ("q", "2018-03-05 10:00:00", "2018-03-05 09:00:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let at_ten: Vec<(bool, &str, TaskKind)> = plan
            .steps
            .iter()
            .filter(|s| s.at_s == t("2018-03-05 10:00:00"))
            .map(|s| {
                let task = &plan.tasks[s.action.task()];
                (
                    matches!(s.action, Action::Cancel { .. }),
                    task.order_id.as_str(),
                    task.kind,
                )
            })
            .collect();
        use TaskKind::{CancelUnpaid as C, ReviewReminder as R};
        assert_eq!(
            at_ten,
            vec![
                (false, "b", C),
                (false, "b", R),
                (false, "c", C),
                (false, "c", R),
                (false, "q", C),
                (false, "q", R),
                (true, "a", C),
                (true, "c", C),
                (true, "q", C),
            ]
        );
        assert_eq!(plan.quirks, 1);
        assert!(!task(&plan, "q", C).unwrap().expected_run);
        assert!(!task(&plan, "c", C).unwrap().expected_run);
        assert!(!task(&plan, "a", C).unwrap().expected_run);
        // Every cancel comes after the enqueue of its task.
        for (i, step) in plan.steps.iter().enumerate() {
            if let Action::Cancel { task } = step.action {
                let enqueue = plan
                    .steps
                    .iter()
                    .position(|s| s.action == Action::Enqueue { task })
                    .unwrap();
                assert!(enqueue < i);
            }
        }
    }

    #[test]
    fn plan_time_map_keeps_step_order() {
        let orders = orders(&[
            (
                "a",
                "2018-03-05 10:00:00",
                "2018-03-05 10:20:00",
                "2018-03-09 15:00:00",
                EST,
            ),
            ("b", "2018-03-05 10:00:01", "2018-03-05 12:00:00", "", EST),
        ]);
        let plan = Plan::build(&orders, &PlanOptions::default());
        let map = plan.time_map(60.0, 2000.0);
        let step_offsets: Vec<u64> = plan.steps.iter().map(|s| map.offset_ms(s.at_s)).collect();
        assert!(step_offsets.windows(2).all(|w| w[0] <= w[1]));
        // Instants: 10:00:00, 10:00:01, 10:20:00, 10:30:00, 10:30:01, 12:00:00, 03-09 15:00,
        // 03-16 15:00, 03-20 00:00.
        assert_eq!(map.instants().len(), 9);
        // Two 1 s gaps of 16.67 ms (10:00:00→01 and 10:30:00→01); the six others are capped.
        assert_eq!(map.offset_ms(t("2018-03-05 10:00:01")), 17);
        assert_eq!(map.total_ms(), 2000 * 6 + 33);
        // a's cancel at 10:20 is 2000 ms before its due; b's at 12:00 is 2000 ms after.
        let (margin, step) = plan.min_cancel_margin_ms(&map).unwrap();
        assert_eq!(margin, 2000);
        assert!(matches!(plan.steps[step].action, Action::Cancel { .. }));
    }

    #[test]
    fn real_trace_counts_are_consistent() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/data/olist_orders_union_sample.csv"
        );
        if !Path::new(path).exists() {
            println!("skipping: trace file {path} does not exist");
            return;
        }
        let orders = load_orders(path).unwrap();
        assert_eq!(orders.len(), 24_553);
        let delivered = orders
            .iter()
            .filter(|o| o.delivered_customer_s.is_some())
            .count() as u64;
        assert_eq!(delivered, 21_588);
        let approved = orders.iter().filter(|o| o.approved_s.is_some()).count();

        let plan = Plan::build(&orders, &PlanOptions::default());
        assert_eq!(plan.orders, 24_553);
        let cancel = plan.counts(TaskKind::CancelUnpaid);
        let confirm = plan.counts(TaskKind::AutoConfirm);
        let review = plan.counts(TaskKind::ReviewReminder);
        assert_eq!(cancel.enqueued, 24_553);
        assert_eq!(
            cancel.expected_runs + cancel.expected_cancels,
            cancel.enqueued
        );
        assert_eq!(confirm.enqueued, delivered);
        assert_eq!(confirm.expected_runs, delivered);
        assert_eq!(review.enqueued, 24_553);
        assert_eq!(review.expected_runs, 24_553);
        assert_eq!(confirm.expected_cancels + review.expected_cancels, 0);
        // The data README: no approval precedes its purchase.
        assert_eq!(plan.quirks, 0);

        let cancel_steps = plan
            .steps
            .iter()
            .filter(|s| matches!(s.action, Action::Cancel { .. }))
            .count();
        assert_eq!(cancel_steps, approved);
        assert_eq!(plan.tasks.len() + cancel_steps, plan.steps.len());
        assert!(plan.steps.windows(2).all(|w| w[0].at_s <= w[1].at_s));
        let expected_cancels = plan.tasks.iter().filter(|t| !t.expected_run).count() as u64;
        assert_eq!(expected_cancels, cancel.expected_cancels);

        let map = plan.time_map(1_000_000.0, 100.0);
        let offsets: Vec<u64> = plan.steps.iter().map(|s| map.offset_ms(s.at_s)).collect();
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]));
    }
}
