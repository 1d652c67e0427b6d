//! What trips a breaker, how long it stays open, and what counts as a failure.

use courier_core::{Classifier, InvalidConfig};
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

/// Trip on the failure rate over a sliding time window instead of on consecutive failures.
///
/// The window is kept as ten buckets, so it slides in steps of a tenth of its length. The
/// breaker trips when, over the window, at least `min_calls` calls ended with a verdict and
/// the share of failures among them is at least `threshold`.
///
/// ```
/// use courier_breaker::FailureRate;
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// let rate = FailureRate::new(0.5, Duration::from_secs(10), NonZeroU32::new(20).unwrap()).unwrap();
/// assert_eq!(rate.threshold(), 0.5);
/// assert!(FailureRate::new(1.5, Duration::from_secs(10), NonZeroU32::MIN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureRate {
    threshold: f64,
    window: Duration,
    min_calls: NonZeroU32,
}

impl FailureRate {
    /// Trip when at least `threshold` (a share in `(0, 1]`) of the calls over `window` failed,
    /// counting only windows with at least `min_calls` calls.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`](courier_core::InvalidConfig) when `threshold` is not in `(0, 1]` or `window` is shorter than 10 ms.
    pub fn new(
        threshold: f64,
        window: Duration,
        min_calls: NonZeroU32,
    ) -> Result<Self, InvalidConfig> {
        if !(threshold > 0.0 && threshold <= 1.0) {
            return Err(InvalidConfig::new(
                "a failure rate threshold must be in (0, 1]",
                threshold,
                "0.5 for half the calls",
            ));
        }
        if window < Duration::from_millis(10) {
            return Err(InvalidConfig::new(
                "a failure rate window must be at least 10 ms",
                format_args!("{window:?}"),
                "a few seconds",
            ));
        }
        Ok(Self {
            threshold,
            window,
            min_calls,
        })
    }

    /// The share of failed calls that trips the breaker.
    pub const fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The length of the sliding window.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The fewest calls in the window for the rate to count.
    pub const fn min_calls(&self) -> NonZeroU32 {
        self.min_calls
    }
}

/// An open duration that grows with consecutive trips: it doubles on every trip that follows
/// a failed trial, up to `cap`, and is then shortened by a random share of up to `jitter` so
/// that many clients do not probe together.
///
/// The `n`-th trip in a row stays open for `d * (1 - jitter * u)`, where
/// `d = min(cap, open_duration * 2^(n-1))` and `u` is uniform in `[0, 1)`. A successful trial
/// starts the count again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenBackoff {
    cap: Duration,
    jitter: f64,
}

impl OpenBackoff {
    /// Doubling up to `cap`, with a jitter of 0.5.
    pub const fn new(cap: Duration) -> Self {
        Self { cap, jitter: 0.5 }
    }

    /// The largest share taken off at random; clamped to `[0, 1]`, NaN counts as 0.
    ///
    /// Defaults to 0.5.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The longest open duration before jitter.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The largest share taken off at random.
    pub const fn jitter_share(&self) -> f64 {
        self.jitter
    }
}

/// Everything the layer's setters configure.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) consecutive_failures: NonZeroU32,
    pub(crate) failure_rate: Option<FailureRate>,
    pub(crate) open_duration: Duration,
    pub(crate) open_backoff: Option<OpenBackoff>,
    pub(crate) half_open_trials: NonZeroU32,
    /// What each answer means: its verdict says whether it counts against the host.
    pub(crate) classifier: Classifier,
    pub(crate) slow_call: Option<Duration>,
    /// Failing answers open the circuit only once their run has lasted this long (ms); 0:
    /// the count alone decides.
    pub(crate) answers_for_ms: u64,
    pub(crate) max_hosts: NonZeroUsize,
    pub(crate) seed: Option<u64>,
}

pub(crate) const DEFAULT_CONSECUTIVE_FAILURES: NonZeroU32 = NonZeroU32::new(5).expect("5 > 0");
pub(crate) const DEFAULT_OPEN_DURATION: Duration = Duration::from_secs(30);
pub(crate) const DEFAULT_MAX_HOSTS: NonZeroUsize = NonZeroUsize::new(4096).expect("4096 > 0");

impl Default for Config {
    fn default() -> Self {
        Self {
            consecutive_failures: DEFAULT_CONSECUTIVE_FAILURES,
            failure_rate: None,
            open_duration: DEFAULT_OPEN_DURATION,
            open_backoff: None,
            half_open_trials: NonZeroU32::MIN,
            classifier: Classifier::new(),
            slow_call: None,
            answers_for_ms: 0,
            max_hosts: DEFAULT_MAX_HOSTS,
            seed: None,
        }
    }
}

impl Config {
    /// The open duration in ms for the `trips`-th trip in a row; `u` is uniform in `[0, 1)`.
    pub(crate) fn open_ms(&self, trips: u32, u: f64) -> u64 {
        let base = self.open_duration.as_millis().min(u128::from(u64::MAX)) as u64;
        let Some(backoff) = self.open_backoff else {
            return base.max(1);
        };
        let cap = backoff.cap.as_millis().min(u128::from(u64::MAX)) as u64;
        let doublings = trips.saturating_sub(1).min(63);
        let grown = base.saturating_mul(1u64 << doublings).min(cap.max(base));
        let cut = (grown as f64 * backoff.jitter * u.clamp(0.0, 1.0)) as u64;
        grown.saturating_sub(cut).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn failure_rate_refuses_what_cannot_work_and_says_what_to_use() {
        let window = Duration::from_secs(10);
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            let err = FailureRate::new(bad, window, NonZeroU32::MIN).unwrap_err();
            assert_eq!(
                err.requirement(),
                "a failure rate threshold must be in (0, 1]"
            );
            assert_eq!(err.given(), bad.to_string());
            assert!(err.to_string().contains("; use 0.5"), "{err}");
        }
        let err = FailureRate::new(0.5, Duration::from_millis(9), NonZeroU32::MIN).unwrap_err();
        assert_eq!(err.given(), "9ms");
        assert!(FailureRate::new(1.0, Duration::from_millis(10), NonZeroU32::MIN).is_ok());
    }

    #[test]
    fn fixed_open_duration_ignores_trips() {
        let c = Config::default();
        assert_eq!(c.open_ms(1, 0.9), 30_000);
        assert_eq!(c.open_ms(7, 0.1), 30_000);
    }

    proptest! {
        #[test]
        fn growing_open_duration_stays_in_bounds(
            base_ms in 1u64..100_000,
            cap_ms in 1u64..10_000_000,
            trips in 1u32..40,
            jitter in 0.0f64..=1.0,
            u in 0.0f64..1.0,
        ) {
            let c = Config {
                open_duration: Duration::from_millis(base_ms),
                open_backoff: Some(OpenBackoff::new(Duration::from_millis(cap_ms)).jitter(jitter)),
                ..Config::default()
            };
            let ms = c.open_ms(trips, u);
            let ceiling = base_ms.saturating_mul(1 << (trips - 1).min(62)).min(cap_ms.max(base_ms));
            prop_assert!(ms >= 1);
            prop_assert!(ms <= ceiling);
            prop_assert!(ms as f64 >= (ceiling as f64 * (1.0 - jitter)).floor() - 1.0);
        }
    }
}
