//! The services: [`Deadline`], [`AttemptTimeout`] and [`DeadlineScope`].

use crate::bound::{Bound, Cause, saturating_after};
use crate::future::{ResponseFuture, ScopeFuture};
use crate::layer::{AttemptTimeoutLayer, DeadlineLayer, DeadlineScopeLayer};
use crate::propagate::{read_grpc_timeout, read_header, write_grpc_timeout_with, write_header};
use crate::scope::{earliest, effective_deadline, scoped, sync_scoped};
use courier_core::{BoxError, CallContext};
use http::{HeaderName, Request, Response};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

/// A total time budget for each call: retries, waits and the response body included.
///
/// On every call it:
///
/// 1. works out the deadline: `now + budget` (the budget of the call's
///    [`CallOptions::deadline`](courier_core::CallOptions::deadline) when the caller set one,
///    shorter or longer, else the layer's), or earlier when the request already carries a
///    deadline in its [`CallContext`] or a [server-side scope](crate::scope) is active; a
///    deadline only ever shrinks;
/// 2. puts it into the request's extensions, for the layers below (retry never sleeps past
///    it, the rate limiter never waits past it, the attempt timeout shrinks to it);
/// 3. optionally writes the time left to a request header for the server
///    ([`DeadlineLayer::propagate`](crate::DeadlineLayer::propagate));
/// 4. fails the response future with [`DeadlineExceeded`](courier_core::DeadlineExceeded) when
///    the deadline passes before the headers arrive, and wraps the body in a
///    [`DeadlineBody`](crate::DeadlineBody) that fails the same way when reading it outlasts
///    the deadline.
///
/// A call whose deadline has already passed is not sent at all.
///
/// # Errors
///
/// `Error = BoxError`: the inner service's errors, passed on, or a
/// [`DeadlineExceeded`](courier_core::DeadlineExceeded) (never retried; `classify_error` calls
/// it `Local`). An inner `DeadlineExceeded` reported after this call's own deadline passed is
/// restated with this call's budget. Either way the attempts of the call stay with the error:
/// an inner [`CallFailed`](courier_core::CallFailed) keeps its records when its error is
/// replaced, and when the deadline passes while the layers below still wait, they are dropped
/// before the error is returned, so that a retry layer below hands its records over
/// ([`Attempts::of_dropped`](courier_core::Attempts::of_dropped)) and the `DeadlineExceeded`
/// comes in a `CallFailed` with them.
///
/// # Clone
///
/// Clones share nothing but their configuration; every call has its own deadline and timer.
///
/// # Differences from `tower::timeout::Timeout`
///
/// - The body is bounded too, not only the wait for the headers.
/// - The deadline is shared with the layers below as an extension, and inherited from the
///   layers above and from the server-side scope.
/// - The timer is armed only when the inner future is pending, and moves into the body.
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    budget: Duration,
    header: Option<HeaderName>,
    /// Arms a timer while waiting for the headers; see
    /// [`DeadlineLayer::headers_bounded_below`](crate::DeadlineLayer::headers_bounded_below).
    watch_headers: bool,
    /// Off: calls go straight to `inner`.
    pass_through: bool,
}

// === impl Deadline ===

impl<S> Deadline<S> {
    /// Wraps `inner` in the deadline `layer` describes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: DeadlineLayer) -> Self {
        let (budget, header, headers_bounded_below) = layer.into_parts();
        Self {
            inner,
            budget,
            header,
            watch_headers: !headers_bounded_below,
            pass_through: false,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, with no deadline, no
    /// extension and no timer; the response is `inner`'s, its body wrapped in an unbounded
    /// [`DeadlineBody`](crate::DeadlineBody). The same type as an active `Deadline<S>`, so a
    /// stack can switch it at run time.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            budget: Duration::ZERO,
            header: None,
            watch_headers: false,
            pass_through: true,
        }
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.pass_through
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Deadline<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
{
    type Response = Response<crate::DeadlineBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        if self.pass_through {
            return ResponseFuture::pass(self.inner.call(req));
        }
        let start = Instant::now();
        let ctx = CallContext::get_or_insert(&mut req);
        let budget = ctx.options().budget().unwrap_or(self.budget);
        let own = saturating_after(start, budget);
        let own = earliest(Some(own), crate::scope::current_deadline()).unwrap_or(own);
        let deadline = ctx.shrink_deadline(own);
        let bound = Bound::new(deadline, start, Cause::Deadline);
        if deadline <= start {
            return ResponseFuture::passed(bound);
        }
        if let Some(name) = &self.header {
            write_header(req.headers_mut(), name, deadline - start);
        }
        write_grpc_timeout_with(&mut req, || deadline - start);
        ResponseFuture::new(self.inner.call(req), bound, true).watch_headers(self.watch_headers)
    }
}

/// Bounds one attempt to `min(per_attempt, time left before the deadline)`.
///
/// The deadline is the one in the request's [`CallContext`] or the active
/// [server-side scope](crate::scope), whichever is earlier. By default the bound covers the wait
/// for the response headers; with
/// [`through_body(true)`](crate::AttemptTimeoutLayer::through_body) it covers the body to its
/// end. An attempt whose deadline has already passed is not sent.
///
/// Put it innermost, right above the transport, so that each attempt the retry layer makes is
/// bounded on its own.
///
/// # Errors
///
/// `Error = BoxError`: the inner service's errors, passed on, or:
///
/// - [`AttemptTimedOut`](courier_core::AttemptTimedOut) when the per-attempt value ran out
///   (`classify_error` calls it `Timeout`: a retry layer may try again);
/// - [`DeadlineExceeded`](courier_core::DeadlineExceeded) when the bound was the time left
///   before the deadline (`Local`: never retried). Its budget is the time this attempt had.
///
/// # Clone
///
/// Clones share nothing but their configuration.
///
/// # Differences from `tower::timeout::Timeout`
///
/// The bound shrinks to what the deadline leaves, fails with a deadline error when that is what
/// ran out, can extend to the end of the body, and can be sent to the server.
#[derive(Debug, Clone)]
pub struct AttemptTimeout<S> {
    inner: S,
    per_attempt: Duration,
    through_body: bool,
    header: Option<HeaderName>,
    /// Off: calls go straight to `inner`.
    pass_through: bool,
}

// === impl AttemptTimeout ===

impl<S> AttemptTimeout<S> {
    /// Wraps `inner` in the attempt bound `layer` describes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: AttemptTimeoutLayer) -> Self {
        let (per_attempt, through_body, header) = layer.into_parts();
        Self {
            inner,
            per_attempt,
            through_body,
            header,
            pass_through: false,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, unbounded; the response is
    /// `inner`'s, its body wrapped in an unbounded [`DeadlineBody`](crate::DeadlineBody). The
    /// same type as an active `AttemptTimeout<S>`, so a stack can switch it at run time.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            per_attempt: Duration::ZERO,
            through_body: false,
            header: None,
            pass_through: true,
        }
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.pass_through
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for AttemptTimeout<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
{
    type Response = Response<crate::DeadlineBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        if self.pass_through {
            return ResponseFuture::pass(self.inner.call(req));
        }
        let start = Instant::now();
        let own = saturating_after(start, self.per_attempt);
        let bound = match effective_deadline(req.extensions()) {
            Some(deadline) if deadline <= own => Bound::new(deadline, start, Cause::Deadline),
            _ => Bound::new(own, start, Cause::Attempt(self.per_attempt)),
        };
        if bound.at() <= start {
            return ResponseFuture::passed(bound);
        }
        if let Some(name) = &self.header {
            write_header(req.headers_mut(), name, bound.at() - start);
        }
        write_grpc_timeout_with(&mut req, || bound.at() - start);
        ResponseFuture::new(self.inner.call(req), bound, self.through_body)
    }
}

/// Server side: an incoming request's deadline header becomes the deadline of the outgoing
/// calls made while handling it.
///
/// For each request it reads the header (garbage is ignored, absurd values are capped; see
/// [`propagate`](crate::propagate)), makes `now + value` the deadline (or the configured
/// default when the header is absent), and then:
///
/// - sets it as the deadline of the request's [`CallContext`], for the handler to read
///   (axum: `Extension<CallContext>`, then [`CallContext::deadline`]);
/// - runs the inner service's `call` and its future inside a [task-local scope](crate::scope),
///   so that [`DeadlineLayer`](crate::DeadlineLayer) and
///   [`AttemptTimeoutLayer`](crate::AttemptTimeoutLayer) on outgoing calls inherit what is
///   left.
///
/// A handler passes the deadline on in one of two ways:
///
/// - **implicitly**: outgoing calls made from the handler's own task go through a client with
///   `DeadlineLayer` or `AttemptTimeoutLayer`, which read the scope;
/// - **explicitly**: put the deadline (or [`current_deadline`](crate::current_deadline)) into
///   the outgoing request's context: `CallContext::get_or_insert(&mut req).shrink_deadline(at)`.
///   This also works from a spawned task, which the scope does not follow.
///
/// The scope covers producing the response; a streaming response body polled after the handler
/// returned runs outside it.
///
/// # Clone
///
/// Clones share nothing but their configuration.
#[derive(Debug, Clone)]
pub struct DeadlineScope<S> {
    inner: S,
    header: HeaderName,
    max: Duration,
    default_budget: Option<Duration>,
}

// === impl DeadlineScope ===

impl<S> DeadlineScope<S> {
    /// Wraps `inner` in the scope `layer` describes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: DeadlineScopeLayer) -> Self {
        let (header, max, default_budget) = layer.into_parts();
        Self {
            inner,
            header,
            max,
            default_budget,
        }
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for DeadlineScope<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ScopeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let now = Instant::now();
        let incoming = read_header(req.headers(), &self.header, self.max)
            .or_else(|| {
                courier_core::grpc::is_grpc(req.headers())
                    .then(|| read_grpc_timeout(req.headers(), self.max))
                    .flatten()
            })
            .or(self.default_budget)
            .map(|left| saturating_after(now, left));
        match earliest(incoming, effective_deadline(req.extensions())) {
            Some(deadline) => {
                let deadline = CallContext::get_or_insert(&mut req).shrink_deadline(deadline);
                let inner = &mut self.inner;
                let fut = sync_scoped(deadline, || inner.call(req));
                ScopeFuture::scoped(scoped(deadline, fut))
            }
            None => ScopeFuture::plain(self.inner.call(req)),
        }
    }
}
