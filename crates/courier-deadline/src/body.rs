//! A response body that fails instead of hanging once its bound has passed.

use crate::bound::Bound;
use courier_core::BoxError;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A response body bounded by the call's deadline (or by an attempt's timeout).
    ///
    /// Frames ready before the bound pass through untouched, and a body at its end (or empty)
    /// reads as ended at any time. Once the bound has passed, reading yields
    /// the bound's error ([`DeadlineExceeded`](courier_core::DeadlineExceeded), or
    /// [`AttemptTimedOut`](courier_core::AttemptTimedOut) for an attempt bounded to the end of
    /// the body) instead of waiting for a server that sends one byte a minute. The timer is the
    /// one the response future armed, moved here; the body never creates a second one.
    ///
    /// A body whose layer bounds only the headers passes through unbounded.
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        bound: Option<Bound>,
    }
}

// === impl DeadlineBody ===

impl<B> DeadlineBody<B> {
    pub(crate) const fn new(inner: B, bound: Option<Bound>) -> Self {
        Self { inner, bound }
    }

    /// A body passed through without a bound.
    pub const fn unbounded(inner: B) -> Self {
        Self { inner, bound: None }
    }

    /// Whether reading this body is bounded in time.
    pub const fn is_bounded(&self) -> bool {
        self.bound.is_some()
    }

    /// The wrapped body.
    pub const fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The wrapped body, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped body, without its bound.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(bound) = this.bound.as_mut() else {
            return this.inner.poll_frame(cx).map_err(Into::into);
        };
        // An empty body (a 204, HEAD, 304) or one read to its end: nothing to wait for.
        if this.inner.is_end_stream() {
            *this.bound = None;
            return Poll::Ready(None);
        }
        // Past the bound, ready data does not extend it.
        if bound.check_passed(cx) {
            return Poll::Ready(Some(Err(bound.error())));
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(None) => {
                // Done: release the timer now rather than when the body is dropped.
                *this.bound = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(frame)) => Poll::Ready(Some(frame.map_err(Into::into))),
            Poll::Pending => match bound.poll_passed(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(bound.error()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: fmt::Debug> fmt::Debug for DeadlineBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineBody")
            .field("inner", &self.inner)
            .field("bound", &self.bound)
            .finish()
    }
}
