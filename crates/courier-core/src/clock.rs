//! The wall clock, read only where an HTTP date must be compared with now.
//!
//! Every duration in courier is measured with `tokio::time`, so tests can pause time. An HTTP
//! date (`Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`, `x-ratelimit-reset: 1700000000`) is the one
//! thing that has to be compared with the calendar; it goes through a [`WallClock`] so that tests
//! can set the calendar too.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// A source of the current calendar time.
pub trait WallClock: fmt::Debug + Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that stands still until told to move. Clones share the same time.
///
/// ```
/// use courier_core::{ManualClock, WallClock};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_700_000_005));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// A clock showing `now`.
    pub fn new(now: SystemTime) -> Self {
        Self {
            now: Arc::new(Mutex::new(now)),
        }
    }

    /// Sets the time.
    pub fn set(&self, now: SystemTime) {
        *self.lock() = now;
    }

    /// Moves the time forward by `by`, saturating at the far future.
    pub fn advance(&self, by: Duration) {
        let mut now = self.lock();
        *now = now.checked_add(by).unwrap_or(*now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SystemTime> {
        // A poisoned clock still holds a valid time.
        self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl WallClock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.lock()
    }
}

impl<C: WallClock + ?Sized> WallClock for Arc<C> {
    fn now(&self) -> SystemTime {
        (**self).now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_manual_clock_shows_the_time_it_is_set_to_in_every_clone() {
        let clock = ManualClock::new(at(1_700_000_000));
        let clone = clock.clone();
        clone.set(at(1_000));
        assert_eq!(clock.now(), at(1_000), "set moves it back too");
        clock.set(at(2_000_000_000));
        assert_eq!(clone.now(), at(2_000_000_000));
    }

    #[test]
    fn a_manual_clock_advances_by_the_given_time_and_saturates() {
        let clock = ManualClock::new(at(1_700_000_000));
        let shared: Arc<dyn WallClock> = Arc::new(clock.clone());
        clock.advance(Duration::from_secs(5));
        clock.advance(Duration::from_millis(500));
        let want = at(1_700_000_005) + Duration::from_millis(500);
        assert_eq!(clock.now(), want);
        assert_eq!(shared.now(), want);
        clock.advance(Duration::MAX);
        assert_eq!(
            clock.now(),
            want,
            "a step past the far future leaves it where it was"
        );
    }
}
