//! The one timer a call owns, shared by its response future and then its body.

use crate::propagate::whole_millis;
use courier_core::{AttemptTimedOut, BoxError, DeadlineExceeded};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// About thirty years: far enough to be "never", near enough not to overflow.
const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + budget`, saturating at the far future instead of overflowing.
pub(crate) fn saturating_after(now: Instant, budget: Duration) -> Instant {
    now.checked_add(budget.min(FAR)).unwrap_or(now)
}

/// Why a bound exists, which decides the error it fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The call's deadline: fails with [`DeadlineExceeded`](courier_core::DeadlineExceeded), never retried.
    Deadline,
    /// An attempt's own timeout: fails with [`AttemptTimedOut`](courier_core::AttemptTimedOut), which retry may retry.
    Attempt(Duration),
}

/// A moment by which something must be done, and the single `Sleep` that waits for it.
///
/// The `Sleep` is created on the first `Pending` (a call whose inner future is ready at once never
/// touches the timer) and boxed so that it can move from the response future into the body: a
/// bound creates at most one. A bound that ends with the headers does not use this one: the
/// response future keeps that timer in place (see [`ResponseFuture`](crate::ResponseFuture)).
pub(crate) struct Bound {
    at: Instant,
    start: Instant,
    cause: Cause,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl fmt::Debug for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bound")
            .field("at", &self.at)
            .field("start", &self.start)
            .field("cause", &self.cause)
            .field("armed", &self.sleep.is_some())
            .finish()
    }
}

impl Bound {
    pub(crate) const fn new(at: Instant, start: Instant, cause: Cause) -> Self {
        Self {
            at,
            start,
            cause,
            sleep: None,
        }
    }

    pub(crate) const fn cause(&self) -> Cause {
        self.cause
    }

    pub(crate) const fn at(&self) -> Instant {
        self.at
    }

    /// Registers the waker with the timer (arming it on first use); ready once the bound passed.
    pub(crate) fn poll_passed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
            .poll(cx)
    }

    /// Whether the bound has passed, without registering anything when the timer is not armed.
    pub(crate) fn check_passed(&mut self, cx: &mut Context<'_>) -> bool {
        match self.sleep.as_mut() {
            Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
            None => Instant::now() >= self.at,
        }
    }

    pub(crate) fn exceeded(&self) -> DeadlineExceeded {
        DeadlineExceeded::new(
            self.at.saturating_duration_since(self.start),
            Instant::now().saturating_duration_since(self.start),
        )
    }

    /// The error this bound fails with once passed.
    pub(crate) fn error(&self) -> BoxError {
        match self.cause {
            Cause::Deadline => {
                let err = self.exceeded();
                crate::telemetry::expired(true);
                tracing::debug!(
                    budget_ms = whole_millis(err.budget()),
                    elapsed_ms = whole_millis(err.elapsed()),
                    "deadline exceeded"
                );
                Box::new(err)
            }
            Cause::Attempt(timeout) => {
                crate::telemetry::expired(false);
                tracing::debug!(timeout_ms = whole_millis(timeout), "attempt timed out");
                Box::new(AttemptTimedOut::new(timeout))
            }
        }
    }
}
