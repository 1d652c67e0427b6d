//! The refusals that courier's layers add, and helpers over `source()` chains.
//!
//! Layers that can fail on their own return [`BoxError`]; callers test the cause with
//! [`is_caused_by`] or `err.is::<CircuitOpen>()`. An HTTP status is never turned into an error.
//! A setting that cannot work is refused when it is built, with [`InvalidConfig`].

use crate::extensions::Attempts;
use std::error::Error;
use std::fmt;
use std::time::Duration;

/// The error type of layers that add failures of their own.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// Returns the first error in `err`'s `source()` chain (`err` itself included) that is an `E`.
///
/// An `io::Error` that wraps another error is looked through: `io::Error::source()` skips its
/// payload, so the walk goes to `get_ref()` instead, and a refusal wrapped in an `io::Error` (a
/// body turned into an async reader, say) is still found.
///
/// ```
/// use courier_core::{BoxError, RateLimited, cause_ref};
/// use std::time::Duration;
///
/// let err: BoxError = Box::new(RateLimited::new(Duration::from_secs(2)));
/// assert_eq!(cause_ref::<RateLimited>(&*err).unwrap().retry_in(), Duration::from_secs(2));
/// ```
pub fn cause_ref<'a, E: Error + 'static>(err: &'a (dyn Error + 'static)) -> Option<&'a E> {
    let mut next: Option<&'a (dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = next_cause(e);
    }
    None
}

/// The next error in a chain: an `io::Error`'s payload when it has one, else `source()`.
pub fn next_cause<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    match err
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        Some(inner) => Some(inner),
        None => err.source(),
    }
}

/// Whether an `E` stands anywhere in `err`'s `source()` chain, `err` itself included.
pub fn is_caused_by<E: Error + 'static>(err: &(dyn Error + 'static)) -> bool {
    cause_ref::<E>(err).is_some()
}

/// A call that failed, with the record of every attempt it made: the error of the retry layer
/// (and of the deadline layer above it) whenever the call made attempts.
///
/// Transparent: `Display` is the original error's, `source()` is the original error, so
/// [`cause_ref`] and [`is_caused_by`] find the original's type through it. Test the failure with
/// those (or [`get_ref`](Self::get_ref)), not with `err.is::<CircuitOpen>()` on the outer
/// error; reach the records of any error with [`attempts_of`].
///
/// ```
/// use courier_core::{Attempts, BoxError, CallFailed, CircuitOpen, attempts_of, is_caused_by};
/// use std::time::Duration;
///
/// let err: BoxError = Box::new(CallFailed::new(
///     Box::new(CircuitOpen::new(Duration::from_secs(3))),
///     Attempts::new(),
/// ));
/// assert!(is_caused_by::<CircuitOpen>(&*err));
/// assert_eq!(attempts_of(&*err).map(Attempts::count), Some(0));
/// ```
#[derive(Debug)]
pub struct CallFailed {
    source: BoxError,
    attempts: Attempts,
}

impl CallFailed {
    /// The call failed with `source` after `attempts`.
    pub fn new(source: BoxError, attempts: Attempts) -> Self {
        Self { source, attempts }
    }

    /// Every attempt of the call, the first first; the last holds the reason it stopped.
    pub fn attempts(&self) -> &Attempts {
        &self.attempts
    }

    /// The error the call failed with.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.source
    }

    /// The error the call failed with, unwrapped.
    pub fn into_inner(self) -> BoxError {
        self.source
    }

    /// The error and the records.
    pub fn into_parts(self) -> (BoxError, Attempts) {
        (self.source, self.attempts)
    }

    /// `err` with the records of `from` when `from` carried some: for a layer that replaces
    /// the error of a call (with its own refusal) and keeps what the call did.
    #[doc(hidden)]
    pub fn keep_attempts(from: &mut BoxError, err: BoxError) -> BoxError {
        match from.downcast_mut::<Self>() {
            Some(failed) => Box::new(Self::new(err, std::mem::take(&mut failed.attempts))),
            None => err,
        }
    }

    /// `err` without its records: the error the call failed with when `err` is a
    /// `CallFailed`, else `err` itself.
    #[doc(hidden)]
    pub fn peel<'a>(err: &'a (dyn Error + 'static)) -> &'a (dyn Error + 'static) {
        match err.downcast_ref::<Self>() {
            Some(failed) => &*failed.source,
            None => err,
        }
    }
}

impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl Error for CallFailed {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

/// The attempts of a failed call: those of the first [`CallFailed`] in `err`'s chain.
pub fn attempts_of<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a Attempts> {
    cause_ref::<CallFailed>(err).map(CallFailed::attempts)
}

/// The call's total budget was spent: by waiting, by attempts, or while reading the body.
///
/// Never retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineExceeded {
    budget: Duration,
    elapsed: Duration,
}

impl DeadlineExceeded {
    /// A deadline of `budget` was passed after `elapsed`.
    pub const fn new(budget: Duration, elapsed: Duration) -> Self {
        Self { budget, elapsed }
    }

    /// The budget the call had in all.
    pub const fn budget(&self) -> Duration {
        self.budget
    }

    /// How long the call had run when the deadline fired.
    pub const fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deadline exceeded: the call's budget of {} ms was spent after {} ms; raise the deadline or make the upstream faster",
            self.budget.as_millis(),
            self.elapsed.as_millis()
        )
    }
}

impl Error for DeadlineExceeded {}

/// One attempt took longer than its attempt timeout. The retry layer may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptTimedOut {
    timeout: Duration,
}

impl AttemptTimedOut {
    /// An attempt was bounded to `timeout` and did not finish in it.
    pub const fn new(timeout: Duration) -> Self {
        Self { timeout }
    }

    /// The bound the attempt had.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attempt timed out after {} ms; the request may have reached the server",
            self.timeout.as_millis()
        )
    }
}

impl Error for AttemptTimedOut {}

/// The circuit for this host is open: the call failed at once, without touching the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitOpen {
    retry_in: Duration,
}

impl CircuitOpen {
    /// The circuit lets a trial call through in `retry_in`.
    pub const fn new(retry_in: Duration) -> Self {
        Self { retry_in }
    }

    /// How long until the circuit lets a trial call through.
    pub const fn retry_in(&self) -> Duration {
        self.retry_in
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit open: the host failed repeatedly; try again in {} ms",
            self.retry_in.as_millis()
        )
    }
}

impl Error for CircuitOpen {}

/// The rate limiter refused the call: no slot was free soon enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    retry_in: Duration,
}

impl RateLimited {
    /// A slot frees up in `retry_in`.
    pub const fn new(retry_in: Duration) -> Self {
        Self { retry_in }
    }

    /// How long until a slot frees up.
    pub const fn retry_in(&self) -> Duration {
        self.retry_in
    }
}

impl fmt::Display for RateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limited: no slot for this host; try again in {} ms",
            self.retry_in.as_millis()
        )
    }
}

impl Error for RateLimited {}

/// The concurrency limit refused the call: as many calls as the limit allows were in flight to
/// its key, and no permit came free within the wait allowed (none, by default).
///
/// Nothing was sent. Like [`RateLimited`] it is a local refusal: it says nothing about the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyLimited {
    in_flight: usize,
    limit: usize,
}

impl ConcurrencyLimited {
    /// `in_flight` calls were under way when the call was refused, against a limit of `limit`.
    pub const fn new(in_flight: usize, limit: usize) -> Self {
        Self { in_flight, limit }
    }

    /// How many calls to the key were in flight.
    pub const fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The limit at the time of the refusal.
    pub const fn limit(&self) -> usize {
        self.limit
    }
}

impl fmt::Display for ConcurrencyLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "concurrency limited: {} calls in flight to this host, limit {}",
            self.in_flight, self.limit
        )
    }
}

impl Error for ConcurrencyLimited {}

/// A setting that cannot work, refused when it is built, with what to use instead.
///
/// Every layer's fallible setting answers this one type, so a caller handles a bad rate, a bad
/// failure-rate threshold and the like alike.
///
/// ```
/// use courier_core::InvalidConfig;
///
/// let err = InvalidConfig::new("a threshold must be in (0, 1]", 1.5, "0.5 for half the calls");
/// assert_eq!(err.requirement(), "a threshold must be in (0, 1]");
/// assert_eq!(err.given(), "1.5");
/// assert_eq!(
///     err.to_string(),
///     "invalid setting: a threshold must be in (0, 1], got 1.5; use 0.5 for half the calls"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConfig {
    requirement: &'static str,
    given: String,
    instead: &'static str,
}

impl InvalidConfig {
    /// `given` does not meet `requirement`; `instead` is what to use (a value or a way to
    /// pick one), printed after "use".
    pub fn new(requirement: &'static str, given: impl fmt::Display, instead: &'static str) -> Self {
        Self {
            requirement,
            given: given.to_string(),
            instead,
        }
    }

    /// What the setting must be.
    pub fn requirement(&self) -> &str {
        self.requirement
    }

    /// The value that was given, as text.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// What to use instead.
    pub fn instead(&self) -> &str {
        self.instead
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid setting: {}, got {}; use {}",
            self.requirement, self.given, self.instead
        )
    }
}

impl Error for InvalidConfig {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(BoxError);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapped")
        }
    }
    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn cause_ref_walks_the_chain() {
        let err = Wrap(Box::new(Wrap(Box::new(CircuitOpen::new(
            Duration::from_secs(3),
        )))));
        let found = cause_ref::<CircuitOpen>(&err).expect("circuit open is in the chain");
        assert_eq!(found.retry_in(), Duration::from_secs(3));
        assert!(is_caused_by::<CircuitOpen>(&err));
        assert!(!is_caused_by::<RateLimited>(&err));
    }

    #[test]
    fn cause_ref_looks_inside_io_errors() {
        let err = Wrap(Box::new(std::io::Error::other(RateLimited::new(
            Duration::from_secs(4),
        ))));
        assert_eq!(
            cause_ref::<RateLimited>(&err).map(RateLimited::retry_in),
            Some(Duration::from_secs(4))
        );
    }

    #[test]
    fn invalid_config_gives_back_each_part_it_was_made_with() {
        let err = InvalidConfig::new("a rate must be above zero", -2.5, "10 for ten a second");
        assert_eq!(err.requirement(), "a rate must be above zero");
        assert_eq!(err.given(), "-2.5");
        assert_eq!(err.instead(), "10 for ten a second");
        assert_eq!(
            err.to_string(),
            "invalid setting: a rate must be above zero, got -2.5; use 10 for ten a second"
        );
    }

    #[test]
    fn display_is_lowercase_and_says_what_next() {
        let texts = [
            DeadlineExceeded::new(Duration::from_secs(1), Duration::from_secs(1)).to_string(),
            CircuitOpen::new(Duration::from_secs(1)).to_string(),
            RateLimited::new(Duration::from_secs(1)).to_string(),
            AttemptTimedOut::new(Duration::from_secs(1)).to_string(),
            InvalidConfig::new("a rate must be above zero", 0, "10 for ten a second").to_string(),
        ];
        for t in texts {
            assert!(t.chars().next().unwrap().is_lowercase(), "{t}");
        }
        assert!(
            CircuitOpen::new(Duration::from_millis(1500))
                .to_string()
                .contains("1500 ms")
        );
    }
}
