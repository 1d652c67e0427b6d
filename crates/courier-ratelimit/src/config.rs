//! The settings of a bucket: its [`Rate`], its burst (a [`Quota`]) and what to do when it is
//! empty ([`Mode`]).

use courier_core::InvalidConfig;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

/// The longest interval between two requests a [`Rate`] may have: one a year.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

const NANOS_PER_SEC: f64 = 1e9;

/// How fast a bucket refills: a number of requests per unit of time, never zero.
///
/// Kept as the interval between two requests (the GCRA's emission interval) in whole
/// nanoseconds, between 1 ns and [`MAX_INTERVAL`], rounded up: the bucket never runs faster
/// than asked (3 per second is one every 333 333 334 ns).
///
/// ```
/// use courier_ratelimit::Rate;
/// use std::num::NonZeroU32;
/// use std::time::Duration;
///
/// let r = Rate::per_second(0.25).unwrap();
/// assert_eq!(r.interval(), Duration::from_secs(4));
/// let r = Rate::new(NonZeroU32::new(600).unwrap(), Duration::from_secs(60)).unwrap();
/// assert_eq!(r.interval(), Duration::from_millis(100));
/// assert!(Rate::per_second(0.0).is_err());
/// assert!(Rate::per_second(f64::NAN).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    interval_ns: NonZeroU64,
}

impl Rate {
    /// `rps` requests per second.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`](courier_core::InvalidConfig) unless `rps` is finite, above zero, at most 1e9 and at least one a
    /// year.
    pub fn per_second(rps: f64) -> Result<Self, InvalidConfig> {
        const WHAT: &str = "a rate must be a finite number of requests per second above zero, \
                            at most 1e9 and at least one a year";
        const INSTEAD: &str = "a number in that range, such as 10.0 for ten requests a second";
        if !rps.is_finite() || rps <= 0.0 || rps > NANOS_PER_SEC {
            return Err(InvalidConfig::new(WHAT, rps, INSTEAD));
        }
        // Rounded up, so the bucket never runs faster than asked (a rate of 3/s is not let
        // through as one every 333 333 333 ns, four in a second); a quotient within float
        // noise of a whole number is that number.
        let exact = NANOS_PER_SEC / rps;
        let ns = if (exact - exact.round()).abs() <= exact * 1e-12 {
            exact.round()
        } else {
            exact.ceil()
        };
        if !(1.0..=MAX_INTERVAL.as_nanos() as f64).contains(&ns) {
            return Err(InvalidConfig::new(WHAT, rps, INSTEAD));
        }
        Self::from_interval_ns(ns as u64).ok_or_else(|| InvalidConfig::new(WHAT, rps, INSTEAD))
    }

    /// `count` requests every `per`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`](courier_core::InvalidConfig) when `per / count` is below 1 ns or above [`MAX_INTERVAL`].
    pub fn new(count: NonZeroU32, per: Duration) -> Result<Self, InvalidConfig> {
        let (per_ns, count) = (per.as_nanos(), u128::from(count.get()));
        // Rounded up, so the bucket never runs faster than asked; below 1 ns is refused.
        let ns = if per_ns < count {
            0
        } else {
            per_ns.div_ceil(count)
        };
        u64::try_from(ns)
            .ok()
            .filter(|ns| *ns <= MAX_INTERVAL.as_nanos() as u64)
            .and_then(Self::from_interval_ns)
            .ok_or_else(|| {
                InvalidConfig::new(
                    "the interval between two requests (per / count) must be between 1 ns and a year",
                    format_args!("{count} per {per:?}"),
                    "a count and a period whose quotient is in that range, such as 10 per second",
                )
            })
    }

    /// One request every `interval`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`](courier_core::InvalidConfig) when `interval` is below 1 ns or above [`MAX_INTERVAL`].
    pub fn every(interval: Duration) -> Result<Self, InvalidConfig> {
        Self::new(NonZeroU32::MIN, interval)
    }

    fn from_interval_ns(ns: u64) -> Option<Self> {
        NonZeroU64::new(ns).map(|interval_ns| Self { interval_ns })
    }

    /// The time between two requests at this rate.
    pub const fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns.get())
    }

    /// The interval in nanoseconds.
    pub(crate) const fn interval_nanos(&self) -> u64 {
        self.interval_ns.get()
    }

    /// Requests per second.
    pub fn as_per_second(&self) -> f64 {
        NANOS_PER_SEC / self.interval_ns.get() as f64
    }
}

/// A rate and a burst: how many requests may start at once on a full bucket, and how fast the
/// bucket refills after.
///
/// `burst` requests may start together; after that one every [`Rate::interval`]. In any window
/// of length `d`, at most `burst + rate * d` requests start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    rate: Rate,
    burst: NonZeroU32,
}

impl Quota {
    /// A bucket of `burst` tokens refilled at `rate`.
    pub const fn new(rate: Rate, burst: NonZeroU32) -> Self {
        Self { rate, burst }
    }

    /// The refill rate.
    pub const fn rate(&self) -> Rate {
        self.rate
    }

    /// How many requests may start at once on a full bucket.
    pub const fn burst(&self) -> NonZeroU32 {
        self.burst
    }

    /// The emission interval `T = 1 / rate` in nanoseconds.
    pub(crate) const fn interval_nanos(&self) -> u64 {
        self.rate.interval_nanos()
    }

    /// The GCRA tolerance `(burst - 1) * T` in nanoseconds: how far ahead of now the bucket's
    /// theoretical arrival time may run before a request has to wait. Saturates far below
    /// `u64::MAX`, so that adding one interval never wraps.
    pub(crate) const fn tolerance_nanos(&self) -> u64 {
        let tau = (self.burst.get() as u64 - 1).saturating_mul(self.rate.interval_nanos());
        if tau > MAX_TOLERANCE_NS {
            MAX_TOLERANCE_NS
        } else {
            tau
        }
    }
}

/// About 146 years: no bucket needs more, and sums stay far from overflow.
const MAX_TOLERANCE_NS: u64 = 1 << 62;

/// What a request does when its bucket has no token for it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Reserve the next free slot and sleep until it, inside the response future. Fails with
    /// `RateLimited` instead when the wait is longer than `max_wait` or would end past the
    /// request's deadline (its `CallContext`).
    #[default]
    Wait,
    /// Fail at once with `RateLimited { retry_in }`.
    Reject,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_refuses_what_cannot_work() {
        for bad in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e10,
            1e-12,
        ] {
            let err = Rate::per_second(bad).unwrap_err();
            assert!(
                err.to_string().starts_with("invalid setting: a rate"),
                "{err}"
            );
            assert!(err.requirement().starts_with("a rate must be"), "{err}");
            assert_eq!(err.given(), bad.to_string());
        }
        assert!(Rate::new(NonZeroU32::MAX, Duration::from_nanos(1)).is_err());
        assert!(Rate::every(Duration::ZERO).is_err());
        assert!(Rate::every(MAX_INTERVAL + Duration::from_secs(1)).is_err());
        assert_eq!(Rate::every(MAX_INTERVAL).unwrap().interval(), MAX_INTERVAL);
        assert_eq!(Rate::per_second(1e9).unwrap().interval_nanos(), 1);
    }

    #[test]
    fn tolerance_saturates() {
        let q = Quota::new(Rate::every(MAX_INTERVAL).unwrap(), NonZeroU32::MAX);
        assert_eq!(q.tolerance_nanos(), MAX_TOLERANCE_NS);
        let q = Quota::new(Rate::per_second(1.0).unwrap(), NonZeroU32::new(3).unwrap());
        assert_eq!(q.tolerance_nanos(), 2_000_000_000);
        assert!((q.rate().as_per_second() - 1.0).abs() < 1e-12);
    }
}
