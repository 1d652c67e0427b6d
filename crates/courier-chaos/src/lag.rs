//! How late the runtime's timers fire: a call can only return by its deadline if the process
//! gets the CPU when the deadline comes. A soak starved by other work on the machine shows it
//! here, next to any call that returned late.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How often the monitor asks to be woken.
const TICK: Duration = Duration::from_millis(10);

/// The latest wake-up of each second of the run.
#[derive(Debug, Default)]
pub(crate) struct Lag {
    /// Worst lateness in each second since the start, in microseconds.
    per_second: Mutex<Vec<u64>>,
}

impl Lag {
    fn record(&self, second: usize, late: Duration) {
        let mut per_second = self.per_second.lock().unwrap_or_else(|p| p.into_inner());
        if per_second.len() <= second {
            per_second.resize(second + 1, 0);
        }
        let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        per_second[second] = per_second[second].max(micros);
    }

    /// The worst lateness seen over the seconds `from..=to` since the start.
    pub(crate) fn worst_between(&self, from: usize, to: usize) -> Duration {
        let per_second = self.per_second.lock().unwrap_or_else(|p| p.into_inner());
        let end = to.saturating_add(1).min(per_second.len());
        let worst = per_second
            .get(from.min(end)..end)
            .and_then(|s| s.iter().max().copied());
        Duration::from_micros(worst.unwrap_or(0))
    }

    /// The worst lateness over the whole run.
    pub(crate) fn worst(&self) -> Duration {
        self.worst_between(0, usize::MAX - 1)
    }
}

/// Wakes every [`TICK`] until `running` turns false, recording how late each wake-up came.
pub(crate) async fn monitor(lag: Arc<Lag>, began: Instant, running: Arc<AtomicBool>) {
    let mut due = Instant::now() + TICK;
    while running.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due).await;
        let now = Instant::now();
        lag.record(
            now.duration_since(began).as_secs() as usize,
            now.duration_since(due),
        );
        due = now + TICK;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_per_second_and_over_a_span() {
        let lag = Lag::default();
        lag.record(0, Duration::from_millis(2));
        lag.record(0, Duration::from_millis(1));
        lag.record(3, Duration::from_millis(40));
        assert_eq!(lag.worst_between(0, 0), Duration::from_millis(2));
        assert_eq!(lag.worst_between(1, 2), Duration::ZERO);
        assert_eq!(lag.worst_between(2, 9), Duration::from_millis(40));
        assert_eq!(lag.worst_between(7, 9), Duration::ZERO);
        assert_eq!(lag.worst(), Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_shows_no_lag() {
        let lag = Arc::new(Lag::default());
        let running = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn(monitor(
            Arc::clone(&lag),
            Instant::now(),
            Arc::clone(&running),
        ));
        tokio::time::sleep(Duration::from_secs(3)).await;
        running.store(false, Ordering::Relaxed);
        task.await.unwrap();
        assert_eq!(lag.worst(), Duration::ZERO);
        assert!(lag.per_second.lock().unwrap().len() >= 3);
    }
}
