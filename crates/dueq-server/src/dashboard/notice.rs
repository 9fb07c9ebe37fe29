//! The one-line notice a page shows after an action redirected to it (`?done=...`, with
//! `&n=` and `&refused=` counts for the bulk actions). The text comes from a fixed list and
//! the counts are parsed as numbers, so a link cannot put words of its own on a page.

use serde::Deserialize;

use super::view;

/// `?done=&n=&refused=`: what an action just did, and how many tasks it touched.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Notice {
    /// Which action (a fixed list; anything else shows nothing).
    pub done: Option<String>,
    /// Tasks it acted on (bulk actions and purges).
    pub n: Option<u64>,
    /// Bulk retries refused (the task's business key is taken by another task (live, or in its
    /// unique window)).
    pub refused: Option<u64>,
}

impl Notice {
    /// The notice's text, if `done` names an action.
    pub fn text(&self) -> Option<String> {
        let n = self.n.unwrap_or(0);
        let fixed = match self.done.as_deref()? {
            "paused" => "Queue paused: no task of it is handed out until it is resumed.",
            "resumed" => "Queue resumed.",
            "retried" => "Dead task scheduled again, due now.",
            "deleted" => "Dead task deleted.",
            "schedule_paused" => "Schedule paused: no tick fires or counts until it is resumed.",
            "schedule_resumed" => "Schedule resumed at its first tick from now.",
            "schedule_deleted" => "Schedule deleted (tasks its ticks enqueued stay).",
            "cancelled" => "Task cancelled: it will never run.",
            "run_now" => "Task due now: the next free worker takes it.",
            "purged_scheduled" => {
                return Some(format!(
                    "Purged the scheduled tasks: {} cancelled.",
                    view::tasks(n)
                ));
            }
            "purged_dead" => {
                return Some(format!(
                    "Purged the dead-letter queue: {} deleted.",
                    view::tasks(n)
                ));
            }
            "purged_succeeded" => {
                return Some(format!(
                    "Purged the kept succeeded tasks: {} deleted.",
                    view::tasks(n)
                ));
            }
            "bulk_retried" => {
                let refused = match self.refused.unwrap_or(0) {
                    0 => String::new(),
                    r => format!(
                        " {} left dead: their business key is taken by another task (live, or in \
                         its unique window).",
                        view::tasks(r)
                    ),
                };
                return Some(format!(
                    "Retried {} from the dead-letter queue.{refused}",
                    view::tasks(n)
                ));
            }
            "bulk_deleted" => {
                return Some(format!(
                    "Deleted {} from the dead-letter queue.",
                    view::tasks(n)
                ));
            }
            _ => return None,
        };
        Some(fixed.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::Notice;

    fn text(done: &str, n: Option<u64>, refused: Option<u64>) -> Option<String> {
        Notice {
            done: Some(done.to_owned()),
            n,
            refused,
        }
        .text()
    }

    #[test]
    fn fixed_texts_and_counts() {
        assert_eq!(
            text("resumed", None, None).as_deref(),
            Some("Queue resumed.")
        );
        assert_eq!(text("<b>hi</b>", Some(1), None), None);
        assert_eq!(
            text("bulk_retried", Some(3), Some(1)).as_deref(),
            Some(
                "Retried 3 tasks from the dead-letter queue. 1 task left dead: their business \
                 key is taken by another task (live, or in its unique window)."
            )
        );
        assert_eq!(
            text("purged_dead", Some(1), None).as_deref(),
            Some("Purged the dead-letter queue: 1 task deleted.")
        );
        assert_eq!(Notice::default().text(), None);
    }
}
