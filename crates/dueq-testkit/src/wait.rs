//! Polling helpers with a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// Interval between two evaluations of the condition.
const POLL: Duration = Duration::from_millis(5);

/// Polls `f` every 5 ms until it returns `true`.
///
/// `f` is evaluated at least once. Panics with a message containing `what`
/// if `f` has not returned `true` within `deadline` (measured from the call).
pub fn wait_until(deadline: Duration, what: &str, f: impl FnMut() -> bool) {
    if !poll_until(deadline, f) {
        panic!("{}", crate::Error::timeout(deadline, what));
    }
}

/// Polls `f` every 5 ms until it returns `true` (then `true`) or `deadline` passes (then
/// `false`). `f` is evaluated at least once.
pub(crate) fn poll_until(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Async version of [`wait_until`]: awaits `f()` every 5 ms (sleeping with
/// `tokio::time::sleep`) until it yields `true`.
///
/// The deadline is measured in real (`std::time::Instant`) time, so a paused
/// tokio clock does not make it expire early. Panics with a message containing
/// `what` if the deadline passes. Must be called inside a tokio runtime with
/// the time driver enabled.
pub async fn wait_until_async<F, Fut>(deadline: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return;
        }
        if start.elapsed() >= deadline {
            panic!("timed out after {deadline:?} waiting until {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_returns_when_condition_holds() {
        let mut n = 0;
        wait_until(Duration::from_secs(5), "counter reaches 3", || {
            n += 1;
            n >= 3
        });
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "never true")]
    fn wait_until_panics_with_what() {
        wait_until(Duration::from_millis(20), "never true", || false);
    }

    #[tokio::test]
    async fn wait_until_async_returns_when_condition_holds() {
        let mut n = 0;
        wait_until_async(Duration::from_secs(5), "counter reaches 3", || {
            n += 1;
            let done = n >= 3;
            async move { done }
        })
        .await;
        assert_eq!(n, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "async never true")]
    async fn wait_until_async_panics_with_what() {
        wait_until_async(Duration::from_millis(20), "async never true", || async {
            false
        })
        .await;
    }
}
