//! The settings of a [`ConcurrencyLimitLayer`](crate::ConcurrencyLimitLayer).

use crate::algorithm::Algorithm;
use courier_core::Classifier;
use std::num::NonZeroUsize;
use std::time::Duration;

/// How a key's limit is set: fixed, or learned from latency within bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Fixed(NonZeroUsize),
    Adaptive(AdaptiveLimit),
}

/// The bounds and the rule of an adaptive limit
/// ([`ConcurrencyLimitLayer::adaptive`](crate::ConcurrencyLimitLayer::adaptive)).
///
/// Every key starts at [`initial`](Self::initial) and is learned within
/// [`min`](Self::min) and [`max`](Self::max); a maximum below the minimum is raised to it,
/// and the initial limit is brought within the two.
///
/// ```
/// use courier_concurrency::AdaptiveLimit;
/// use std::num::NonZeroUsize;
///
/// let n = |n| NonZeroUsize::new(n).unwrap();
/// let limit = AdaptiveLimit::new().min(n(4)).max(n(200)).initial(n(16));
/// assert_eq!((limit.get_min(), limit.get_max(), limit.get_initial()), (4, 200, 16));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveLimit {
    initial: NonZeroUsize,
    min: NonZeroUsize,
    max: NonZeroUsize,
    algorithm: Algorithm,
}

impl AdaptiveLimit {
    /// The defaults: start at 20, learn within 1 and 1000.
    pub const fn new() -> Self {
        Self {
            initial: NonZeroUsize::new(20).unwrap(),
            min: NonZeroUsize::MIN,
            max: NonZeroUsize::new(1000).unwrap(),
            algorithm: Algorithm::LatencyAimd,
        }
    }

    /// The limit of a key seen for the first time.
    ///
    /// Defaults to 20.
    pub const fn initial(mut self, n: NonZeroUsize) -> Self {
        self.initial = n;
        self
    }

    /// The lowest the limit goes, however slow the host.
    ///
    /// Defaults to 1.
    pub const fn min(mut self, n: NonZeroUsize) -> Self {
        self.min = n;
        self
    }

    /// The highest the limit goes, however fast the host.
    ///
    /// Defaults to 1000.
    pub const fn max(mut self, n: NonZeroUsize) -> Self {
        self.max = n;
        self
    }

    /// The rule that learns the limit (feature `compare`: for courier-bench's comparison).
    ///
    /// Defaults to [`Algorithm::LatencyAimd`].
    #[cfg(feature = "compare")]
    pub const fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The lowest limit.
    pub const fn get_min(&self) -> usize {
        self.min.get()
    }

    /// The highest limit (never below the lowest).
    pub const fn get_max(&self) -> usize {
        if self.max.get() < self.min.get() {
            self.min.get()
        } else {
            self.max.get()
        }
    }

    /// The limit a key starts at, within the bounds.
    pub const fn get_initial(&self) -> usize {
        let n = self.initial.get();
        if n < self.get_min() {
            self.get_min()
        } else if n > self.get_max() {
            self.get_max()
        } else {
            n
        }
    }

    /// The rule that learns the limit.
    pub(crate) const fn get_algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

impl Default for AdaptiveLimit {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything a layer was set to.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) limit: Limit,
    pub(crate) max_queue: usize,
    pub(crate) max_wait: Duration,
    pub(crate) release_at_headers: bool,
    pub(crate) classifier: Classifier,
    pub(crate) max_keys: NonZeroUsize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            limit: Limit::Adaptive(AdaptiveLimit::new()),
            max_queue: 0,
            max_wait: Duration::from_secs(1),
            release_at_headers: false,
            classifier: Classifier::new(),
            max_keys: NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
        }
    }
}
