//! A response body that holds its call's permit until it ends or is dropped.

use crate::limiter::Permit;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// A response body holding its call's concurrency permit: the permit is given back when
    /// the body ends (its last frame read, or an error read), when it is dropped, or at once
    /// when it is empty. Frames pass through untouched.
    ///
    /// A pass-through service's body, and the body of a layer set to
    /// [`release_at_headers`](crate::ConcurrencyLimitLayer::release_at_headers), holds no
    /// permit.
    pub struct ConcurrencyBody<B> {
        #[pin]
        inner: B,
        permit: Option<Permit>,
    }
}

impl<B: Body> ConcurrencyBody<B> {
    /// `inner`, holding `permit` until it ends; an empty body gives it back now.
    pub(crate) fn new(inner: B, permit: Option<Permit>) -> Self {
        let permit = permit.filter(|_| !inner.is_end_stream());
        Self { inner, permit }
    }
}

impl<B> ConcurrencyBody<B> {
    /// A body that holds no permit.
    pub const fn unlimited(inner: B) -> Self {
        Self {
            inner,
            permit: None,
        }
    }

    /// Whether this body still holds a permit.
    pub const fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }

    /// The wrapped body.
    pub const fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The wrapped body, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped body; its permit, if it held one, is given back.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body> Body for ConcurrencyBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None | Some(Err(_))) => true,
            // The last frame: nothing more will be read.
            Poll::Ready(Some(Ok(_))) => inner.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            *this.permit = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: fmt::Debug> fmt::Debug for ConcurrencyBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyBody")
            .field("inner", &self.inner)
            .field("holds_permit", &self.permit.is_some())
            .finish()
    }
}
