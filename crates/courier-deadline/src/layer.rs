//! The layers: [`DeadlineLayer`], [`AttemptTimeoutLayer`] and [`DeadlineScopeLayer`].

use crate::propagate::{DEFAULT_HEADER, DEFAULT_MAX_INCOMING};
use crate::service::{AttemptTimeout, Deadline, DeadlineScope};
use http::HeaderName;
use std::time::Duration;
use tower_layer::Layer;

/// Gives every call a total time budget, retries, waits and the response body included.
///
/// See [`Deadline`] for what the service does.
#[derive(Debug, Clone)]
pub struct DeadlineLayer {
    budget: Duration,
    header: Option<HeaderName>,
    headers_bounded_below: bool,
}

// === impl DeadlineLayer ===

impl DeadlineLayer {
    /// Each call gets `budget` from the moment it is made (less, when an earlier deadline is
    /// already in force). A budget of zero fails every call at once, without sending it.
    pub const fn new(budget: Duration) -> Self {
        Self {
            budget,
            header: None,
            headers_bounded_below: false,
        }
    }

    /// Sends the time left to the server in this header, as whole milliseconds (see
    /// [`propagate`](crate::propagate); [`DEFAULT_HEADER`] is the usual choice). The value is
    /// taken when the call is made; a stack that retries should rather set it on the
    /// [`AttemptTimeoutLayer`], which writes it afresh for every attempt. Defaults to `None`:
    /// the deadline stays local.
    pub fn propagate(mut self, header: impl Into<Option<HeaderName>>) -> Self {
        self.header = header.into();
        self
    }

    /// Leaves the wait for the response headers to the layers below, for a stack in which
    /// every wait below ends by the deadline on its own: an [`AttemptTimeoutLayer`] bounds
    /// each attempt to the time left, and courier's retry, in-process rate limiter and cache
    /// (waiting on another caller's revalidation) never wait past the deadline. The layer then arms no timer of its own before the headers
    /// arrive (a timer costs a registration and an allocation per call); it still puts the
    /// deadline into the request, reports a spent deadline with the call's budget, and bounds
    /// the body. The `courier` preset sets this when its attempt timeout is on and its rate
    /// limiter keeps its buckets in process. Defaults to `false`: the layer enforces the
    /// deadline itself.
    pub const fn headers_bounded_below(mut self, bounded: bool) -> Self {
        self.headers_bounded_below = bounded;
        self
    }

    /// The budget each call gets.
    pub const fn budget(&self) -> Duration {
        self.budget
    }
    /// What a [`Deadline`] keeps: the budget, the header, and whether the layers below bound
    /// the wait for the headers.
    pub(crate) fn into_parts(self) -> (Duration, Option<HeaderName>, bool) {
        (self.budget, self.header, self.headers_bounded_below)
    }
}

/// A budget of `budget`: the same as [`DeadlineLayer::new`].
impl From<Duration> for DeadlineLayer {
    fn from(budget: Duration) -> Self {
        Self::new(budget)
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline::new(inner, self.clone())
    }
}

/// Bounds one attempt to `min(per_attempt, time left before the deadline)`.
///
/// See [`AttemptTimeout`] for what the service does.
#[derive(Debug, Clone)]
pub struct AttemptTimeoutLayer {
    per_attempt: Duration,
    through_body: bool,
    header: Option<HeaderName>,
}

// === impl AttemptTimeoutLayer ===

impl AttemptTimeoutLayer {
    /// Each attempt gets at most `per_attempt`, and never more than the call's deadline leaves.
    /// A value of zero fails every attempt at once, without sending it.
    pub const fn new(per_attempt: Duration) -> Self {
        Self {
            per_attempt,
            through_body: false,
            header: None,
        }
    }

    /// Whether the bound covers the response body to its end, not only the wait for the
    /// headers. Defaults to `false`: the attempt ends when the headers arrive, and the body is
    /// bounded by the call's [`DeadlineLayer`].
    pub const fn through_body(mut self, through_body: bool) -> Self {
        self.through_body = through_body;
        self
    }

    /// Sends this attempt's bound (how long the caller waits for it) to the server in this
    /// header, as whole milliseconds, written afresh for every attempt (see
    /// [`propagate`](crate::propagate); [`DEFAULT_HEADER`] is the usual choice). Defaults to
    /// `None`: the bound stays local.
    pub fn propagate(mut self, header: impl Into<Option<HeaderName>>) -> Self {
        self.header = header.into();
        self
    }

    /// The bound each attempt gets when the deadline is further away.
    pub const fn per_attempt(&self) -> Duration {
        self.per_attempt
    }
    /// What an [`AttemptTimeout`] keeps: the bound, whether it covers the body, the header.
    pub(crate) fn into_parts(self) -> (Duration, bool, Option<HeaderName>) {
        (self.per_attempt, self.through_body, self.header)
    }
}

/// A bound of `per_attempt`: the same as [`AttemptTimeoutLayer::new`].
impl From<Duration> for AttemptTimeoutLayer {
    fn from(per_attempt: Duration) -> Self {
        Self::new(per_attempt)
    }
}

impl<S> Layer<S> for AttemptTimeoutLayer {
    type Service = AttemptTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptTimeout::new(inner, self.clone())
    }
}

/// Server side: makes an incoming request's deadline header the deadline of the calls made
/// while handling it.
///
/// See [`DeadlineScope`] for what the service does.
#[derive(Debug, Clone)]
pub struct DeadlineScopeLayer {
    header: HeaderName,
    max: Duration,
    default_budget: Option<Duration>,
}

// === impl DeadlineScopeLayer ===

impl DeadlineScopeLayer {
    /// Reads [`DEFAULT_HEADER`], capped at [`DEFAULT_MAX_INCOMING`], with no deadline for a
    /// request without the header.
    pub const fn new() -> Self {
        Self {
            header: DEFAULT_HEADER,
            max: DEFAULT_MAX_INCOMING,
            default_budget: None,
        }
    }

    /// The header to read. Defaults to [`DEFAULT_HEADER`] (`x-request-deadline-ms`).
    pub fn header(mut self, header: HeaderName) -> Self {
        self.header = header;
        self
    }

    /// The longest deadline accepted from a caller; longer values are read as this. Defaults
    /// to [`DEFAULT_MAX_INCOMING`] (one hour).
    pub const fn max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// The deadline of a request that arrives without the header. Defaults to `None`: such a
    /// request runs without a deadline.
    pub const fn default_budget(mut self, budget: Option<Duration>) -> Self {
        self.default_budget = budget;
        self
    }
    /// What a [`DeadlineScope`] keeps: the header, the cap, the default budget.
    pub(crate) fn into_parts(self) -> (HeaderName, Duration, Option<Duration>) {
        (self.header, self.max, self.default_budget)
    }
}

impl Default for DeadlineScopeLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for DeadlineScopeLayer {
    type Service = DeadlineScope<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineScope::new(inner, self.clone())
    }
}
