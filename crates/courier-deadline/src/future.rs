//! The response futures of the deadline, attempt-timeout and scope services.

use crate::body::DeadlineBody;
use crate::bound::{Bound, Cause};
use courier_core::classify::{FailureKind, classify_error};
use courier_core::{Attempts, BoxError, CallFailed, DeadlineExceeded};
use http::Response;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Sleep};

pin_project! {
    /// The response future of [`Deadline`](crate::Deadline) and
    /// [`AttemptTimeout`](crate::AttemptTimeout).
    ///
    /// Polls the inner future first; while it is pending, waits on the call's one timer. When
    /// the response arrives in time its body is wrapped in a [`DeadlineBody`] that inherits the
    /// timer (when the layer bounds the body). A bound that ends with the headers keeps its
    /// timer in this future, which allocates nothing for it.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        // `None` when the bound had passed before the call: nothing was sent.
        #[pin]
        inner: Option<F>,
        // `None` once the future has completed, and from the start in a pass-through service.
        bound: Option<Bound>,
        // The timer of a bound that ends with the headers, armed on the first `Pending`. One
        // that goes on into the body is the bound's own, boxed so that it can move there.
        #[pin]
        head_timer: Option<Sleep>,
        bound_body: bool,
        // `false` when the layers below end the wait for the headers by the deadline.
        watch_headers: bool,
    }
}

// === impl ResponseFuture ===

impl<F> ResponseFuture<F> {
    pub(crate) const fn new(inner: F, bound: Bound, bound_body: bool) -> Self {
        Self {
            inner: Some(inner),
            bound: Some(bound),
            head_timer: None,
            bound_body,
            watch_headers: true,
        }
    }

    /// Whether to wait on the timer while the headers are awaited.
    pub(crate) const fn watch_headers(mut self, watch: bool) -> Self {
        self.watch_headers = watch;
        self
    }

    /// The inner future and nothing else: a pass-through service's.
    pub(crate) const fn pass(inner: F) -> Self {
        Self {
            inner: Some(inner),
            bound: None,
            head_timer: None,
            bound_body: false,
            watch_headers: false,
        }
    }

    /// A future that fails at once: the bound passed before anything was sent.
    pub(crate) const fn passed(bound: Bound) -> Self {
        Self {
            inner: None,
            bound: Some(bound),
            head_timer: None,
            bound_body: false,
            watch_headers: true,
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
    B: http_body::Body,
{
    type Output = Result<Response<DeadlineBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            let bound = this.bound.take().expect("polled after completion");
            return Poll::Ready(Err(bound.error()));
        };
        let polled = inner.poll(cx);
        if polled.is_ready() && this.head_timer.is_some() {
            // Out of the timer wheel now: the layers above may keep this future a while.
            this.head_timer.set(None);
        }
        match polled {
            Poll::Ready(Ok(res)) => {
                let bound = this.bound.take();
                let Some(mut bound) = bound.filter(|_| *this.bound_body) else {
                    return Poll::Ready(Ok(res.map(|body| DeadlineBody::new(body, None))));
                };
                // A response that came at or after the deadline would carry a body that fails
                // at its first read: the call is over, as its body's reader would find. That
                // holds whether the timer was armed or not (the header wait left to a layer
                // below, or an inner future ready at its first poll after the deadline). An
                // ended body (a 204, HEAD, 304) reads as ended at any time: that response
                // stands.
                if !res.body().is_end_stream() && bound.check_passed(cx) {
                    return Poll::Ready(Err(bound.error()));
                }
                return Poll::Ready(Ok(res.map(|body| DeadlineBody::new(body, Some(bound)))));
            }
            Poll::Ready(Err(err)) => {
                return Poll::Ready(Err(match this.bound.take() {
                    Some(mut bound) => {
                        let mut err = err.into();
                        // A failure at or past the bound is the bound's: a transport whose own
                        // timer enforces the same deadline (tonic's channel reads the
                        // `grpc-timeout` sent) must not turn our deadline into its error. A
                        // connect failure stays one: nothing was sent, whenever it is seen.
                        // Either way the call's attempts stay with the error.
                        if !is_bound_error(CallFailed::peel(&*err))
                            && classify_error(&*err) != FailureKind::Connect
                            && bound.check_passed(cx)
                        {
                            CallFailed::keep_attempts(&mut err, bound.error())
                        } else {
                            restate(err, &bound)
                        }
                    }
                    None => err.into(),
                }));
            }
            Poll::Pending if !*this.watch_headers => return Poll::Pending,
            Poll::Pending => {}
        }
        let bound = this.bound.as_mut().expect("polled after completion");
        if *this.bound_body {
            ready!(bound.poll_passed(cx));
        } else {
            if this.head_timer.is_none() {
                this.head_timer
                    .set(Some(tokio::time::sleep_until(bound.at())));
            }
            let timer = this.head_timer.as_mut().as_pin_mut();
            ready!(timer.expect("armed just above").poll(cx));
        }
        let bound = this.bound.take().expect("the bound was just polled");
        // The layers below are dropped here, not with this future, so that what they did (the
        // retry layer's attempts) comes back with the error.
        let err = match Attempts::of_dropped(|| this.inner.set(None)) {
            Some(attempts) => Box::new(CallFailed::new(bound.error(), attempts)),
            None => bound.error(),
        };
        Poll::Ready(Err(err))
    }
}

/// Whether `err` is a bound's own: a deadline or an attempt's time spent.
fn is_bound_error(err: &(dyn std::error::Error + 'static)) -> bool {
    err.is::<DeadlineExceeded>() || err.is::<courier_core::AttemptTimedOut>()
}

/// An inner layer (an attempt bounded by the time left) reports a spent deadline with what it
/// knew: the attempt's share. When this call's own deadline has passed too, report the call's
/// budget instead.
fn restate(mut err: BoxError, bound: &Bound) -> BoxError {
    if bound.cause() == Cause::Deadline
        && CallFailed::peel(&*err).is::<DeadlineExceeded>()
        && Instant::now() >= bound.at()
    {
        return CallFailed::keep_attempts(&mut err, Box::new(bound.exceeded()));
    }
    err
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("sent", &self.inner.is_some())
            .field("bound", &self.bound)
            .field("bound_body", &self.bound_body)
            .field("watch_headers", &self.watch_headers)
            .finish()
    }
}

pin_project! {
    /// The response future of [`DeadlineScope`](crate::DeadlineScope): the inner future, run
    /// inside the request's deadline scope when it has one.
    #[must_use = "futures do nothing unless polled"]
    pub struct ScopeFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Scoped { #[pin] fut: TaskLocalFuture<tokio::time::Instant, F> },
        // The request carried no deadline.
        Plain { #[pin] fut: F },
    }
}

// === impl ScopeFuture ===

impl<F> ScopeFuture<F> {
    pub(crate) const fn scoped(fut: TaskLocalFuture<tokio::time::Instant, F>) -> Self {
        Self {
            kind: Kind::Scoped { fut },
        }
    }

    pub(crate) const fn plain(fut: F) -> Self {
        Self {
            kind: Kind::Plain { fut },
        }
    }
}

impl<F: Future> Future for ScopeFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Scoped { fut } => fut.poll(cx),
            KindProj::Plain { fut } => fut.poll(cx),
        }
    }
}

impl<F> fmt::Debug for ScopeFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scoped = matches!(self.kind, Kind::Scoped { .. });
        f.debug_struct("ScopeFuture")
            .field("scoped", &scoped)
            .finish()
    }
}
