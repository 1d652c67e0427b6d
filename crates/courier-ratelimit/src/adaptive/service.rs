use super::estimate::Signal;
use super::layer::{AdaptivePacingLayer, Host, Shared};
use crate::config::{Quota, Rate};
use crate::error::RateLimited;
use crate::future::{deadline_of, start};
use crate::service::is_key;
use crate::store::{Decision, Grant, InMemoryStore, RateLimitStore};
use courier_core::classify::classify_error;
use courier_core::grpc::{GRPC_RETRY_PUSHBACK_MS, GrpcCode};
use courier_core::{BoxError, Deadline, FailureKind, HostKey, KeyFn, PerHost, RequestHead};
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// Paces the requests to `S` at each key's learned capacity; see [`AdaptivePacingLayer`].
///
/// `poll_ready` only forwards the inner service's readiness; a paced request waits for its
/// slot inside the response future.
pub struct AdaptivePacing<S, KF: KeyFn = PerHost, St = InMemoryStore<HostKey>> {
    inner: S,
    /// `None` in a pass-through service.
    shared: Option<Arc<Shared<KF, St>>>,
    /// The estimate of the previous request's key: a run of requests to one key skips the map.
    last: Option<Arc<Host<KF::Key>>>,
}

impl<S, KF: KeyFn, St> AdaptivePacing<S, KF, St> {
    /// Wraps `inner`, learning and pacing with every other service `layer` (or a clone) makes.
    pub fn new(inner: S, layer: AdaptivePacingLayer<KF, St>) -> Self {
        Self {
            inner,
            shared: Some(layer.shared),
            last: None,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, learning nothing. The same
    /// type as an active `AdaptivePacing<S, KF, St>`.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            shared: None,
            last: None,
        }
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.shared.is_none()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, KF: KeyFn, St> Clone for AdaptivePacing<S, KF, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            last: self.last.clone(),
        }
    }
}

impl<S: fmt::Debug, KF: KeyFn, St> fmt::Debug for AdaptivePacing<S, KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdaptivePacing")
            .field("inner", &self.inner)
            .field("pass_through", &self.shared.is_none())
            .finish()
    }
}

impl<S, B, ResB, KF, St> Service<Request<B>> for AdaptivePacing<S, KF, St>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B, KF, St>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(shared) = &self.shared else {
            return ResponseFuture::new(State::pass(self.inner.call(req)), None);
        };
        let head = RequestHead::new(&req);
        let host = match &self.last {
            Some(last) if is_key(&shared.key_fn, &head, &last.key) => Arc::clone(last),
            _ => {
                let host = shared.host(shared.key_fn.key(&head));
                self.last = Some(Arc::clone(&host));
                host
            }
        };
        let paced = Paced {
            path: shared.path_of(req.uri().path()),
            shared: Arc::clone(shared),
            host,
        };
        if !paced.host.estimate.is_paced() || !paced.host.estimate.paces(paced.path) {
            return ResponseFuture::new(State::calling(self.inner.call(req), true), Some(paced));
        }
        paced.acquire(self.take_ready(), req)
    }
}

impl<S: Clone, KF: KeyFn, St> AdaptivePacing<S, KF, St> {
    /// The instance that was made ready, leaving a fresh clone for the next `poll_ready`.
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// What an active service's future holds: the layer's state and the key's estimate.
struct Paced<KF: KeyFn, St> {
    shared: Arc<Shared<KF, St>>,
    host: Arc<Host<KF::Key>>,
    /// The request's path, hashed: one path's refusals pace that path.
    path: u64,
}

impl<KF: KeyFn, St: RateLimitStore<KF::Key>> Paced<KF, St> {
    /// A paced request: reserve a slot at the learned rate, then wait for it.
    #[cold]
    #[inline(never)]
    fn acquire<S, B>(self, inner: S, req: Request<B>) -> ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
    {
        let rules = &self.shared.config.rules;
        let quota = self
            .host
            .estimate
            .rate(self.shared.now_ns(), rules)
            .and_then(|rps| Rate::per_second(rps).ok())
            .map(|rate| Quota::new(rate, NonZeroU32::MIN));
        let Some(quota) = quota else {
            // Recovered just now.
            let mut inner = inner;
            return ResponseFuture::new(State::calling(inner.call(req), true), Some(self));
        };
        // A slot that starts at the deadline leaves the request no time: refuse it.
        let deadline = Deadline::get(req.extensions()).map(|d| d.instant());
        let max_wait = match deadline {
            Some(deadline) => self
                .shared
                .config
                .max_wait
                .min(deadline.saturating_duration_since(Instant::now()))
                .saturating_sub(Duration::from_millis(1)),
            None => self.shared.config.max_wait,
        };
        let state = match self.shared.store.in_process() {
            // Decided here, so that a future dropped before its first poll holds no slot.
            Some(store) => match store.decide(&self.host.key, quota, max_wait) {
                Decision::Admit(grant) if grant.at() > Instant::now() => {
                    self.waiting(grant.at() - Instant::now());
                    State::sleeping(grant, quota)
                }
                Decision::Admit(_) => {
                    let mut inner = inner;
                    return ResponseFuture::new(State::calling(inner.call(req), false), Some(self));
                }
                Decision::Deny(denial) => {
                    crate::telemetry::pacing_refused(&self.host.key);
                    State::Refused {
                        retry_in: denial.retry_in(),
                    }
                }
            },
            None => State::Acquire {
                fut: self.shared.store.acquire(&self.host.key, quota, max_wait),
                quota,
            },
        };
        let mut fut = ResponseFuture::new(state, Some(self));
        fut.pending = Some(Box::new((inner, req)));
        fut
    }

    /// A paced request waits `wait` for its slot.
    fn waiting(&self, wait: Duration) {
        crate::telemetry::pacing_wait(&self.host.key, wait);
    }

    /// Whether a request waiting for its slot should go now after all: pacing ended.
    fn unpaced(&self) -> bool {
        let now = self.shared.now_ns();
        self.host
            .estimate
            .rate(now, &self.shared.config.rules)
            .is_none()
    }

    /// Learns from the answer to a request sent `unpaced` or after a paced wait.
    fn observe<ResB>(&self, result: &Result<Response<ResB>, BoxError>, unpaced: bool) {
        let (shared, estimate) = (&*self.shared, &self.host.estimate);
        let rules = &shared.config.rules;
        let signal = match result {
            Ok(resp) => match resp.status() {
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                    if shared.hints.parse(resp.headers()).is_some() {
                        return; // the server's word: the bucket and retry obey it
                    }
                    true
                }
                // A gRPC refusal with the headers: UNAVAILABLE or RESOURCE_EXHAUSTED is gRPC's
                // 503 and 429, and its pushback the server's word.
                StatusCode::OK if resp.version() == http::Version::HTTP_2 => {
                    match courier_core::grpc::status_in_headers(resp.headers()) {
                        Some(GrpcCode::UNAVAILABLE | GrpcCode::RESOURCE_EXHAUSTED) => {
                            if resp.headers().contains_key(GRPC_RETRY_PUSHBACK_MS) {
                                return;
                            }
                            true
                        }
                        _ => false,
                    }
                }
                _ => false,
            },
            Err(e) => match classify_error(&**e) {
                FailureKind::Timeout => true,
                // A connect that timed out is a host too busy to accept (a full accept queue
                // drops the SYN). One refused, a name that does not resolve, a network out of
                // reach: a host that is down or does not exist, the breaker's to judge.
                FailureKind::Connect => is_timed_out(&**e),
                // A reset or a broken answer is not a refusal; ours and TLS say nothing.
                _ => return,
            },
        };
        let now = shared.now_ns();
        if signal {
            overloaded(shared, &self.host, now, self.path);
        } else {
            estimate.accepted(now, unpaced, rules);
        }
    }
}

/// Whether a connect failure timed out: an I/O timeout anywhere in its chain of causes.
fn is_timed_out(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = courier_core::error::next_cause(e);
    }
    false
}

#[cold]
#[inline(never)]
fn overloaded<KF: KeyFn, St: RateLimitStore<KF::Key>>(
    shared: &Shared<KF, St>,
    host: &Host<KF::Key>,
    now: u64,
    path: u64,
) {
    let was_paced = host.estimate.is_paced();
    match host.estimate.overloaded(now, path, &shared.config.rules) {
        Signal::Ignored => return,
        Signal::Unhelped => {
            tracing::info!(
                host = ?host.key,
                "adaptive pacing: the host refuses as much while paced; pacing does not help, \
                 so it stops for a while"
            );
            return;
        }
        Signal::Paced => {}
    }
    let rate = host.estimate.base().unwrap_or_default();
    if !was_paced {
        // A new stretch of pacing starts from a fresh bucket, not behind the slots the last
        // one left booked.
        shared.store.reset(&host.key);
    }
    if was_paced {
        tracing::debug!(host = ?host.key, rate, "adaptive pacing: overload signal");
    } else {
        tracing::info!(
            host = ?host.key,
            rate,
            "adaptive pacing: the host signals overload; pacing it at what it accepted"
        );
    }
}

/// How often a request waiting for its slot looks whether pacing has ended.
const CHECK_EVERY: Duration = Duration::from_millis(250);

pin_project! {
    #[project = StateProj]
    enum State<A, F> {
        Acquire { #[pin] fut: A, quota: Quota },
        Sleeping { sleep: Pin<Box<Sleep>>, grant: Grant, quota: Quota },
        Refused { retry_in: Duration },
        Calling { #[pin] fut: F, unpaced: bool },
        Passing { #[pin] fut: F },
        Done,
    }
}

impl<A, F> State<A, F> {
    fn pass(fut: F) -> Self {
        Self::Passing { fut }
    }

    fn calling(fut: F, unpaced: bool) -> Self {
        Self::Calling { fut, unpaced }
    }

    /// Waits for `grant`, looking every [`CHECK_EVERY`] whether pacing has ended.
    fn sleeping(grant: Grant, quota: Quota) -> Self {
        let wake = grant.at().min(Instant::now() + CHECK_EVERY);
        Self::Sleeping {
            sleep: Box::pin(tokio::time::sleep_until(wake)),
            grant,
            quota,
        }
    }
}

pin_project! {
    /// Waits for the slot of a paced request (none for an unpaced one), calls the inner
    /// service, and learns from the answer.
    ///
    /// Dropping the future before the request was sent gives its slot back to the store.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        #[pin]
        state: State<St::Acquire, S::Future>,
        // The instance made ready and the request, while a paced request waits.
        pending: Option<Box<(S, Request<B>)>>,
        paced: Option<Paced<KF, St>>,
    }

    impl<S, B, KF, St> PinnedDrop for ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (StateProj::Sleeping { grant, quota, .. }, Some(paced)) =
                (this.state.project(), this.paced.as_ref())
            {
                // Never sent: the slot goes back.
                paced.shared.store.cancel(&paced.host.key, *quota, grant);
            }
        }
    }
}

impl<S, B, KF, St> ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    fn new(state: State<St::Acquire, S::Future>, paced: Option<Paced<KF, St>>) -> Self {
        Self {
            state,
            pending: None,
            paced,
        }
    }
}

impl<S, B, ResB, KF, St> Future for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Output = Result<Response<ResB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Passing { fut } => return fut.poll(cx).map_err(Into::into),
                StateProj::Calling { fut, unpaced } => {
                    let result = ready!(fut.poll(cx)).map_err(Into::into);
                    if let Some(paced) = this.paced.as_ref() {
                        paced.observe(&result, *unpaced);
                    }
                    this.state.set(State::Done);
                    return Poll::Ready(result);
                }
                StateProj::Acquire { fut, quota } => {
                    let quota = *quota;
                    let decision = ready!(fut.poll(cx));
                    match decision {
                        Ok(Decision::Admit(grant)) if grant.at() > Instant::now() => {
                            if let Some(paced) = this.paced.as_ref() {
                                paced.waiting(grant.at() - Instant::now());
                            }
                            this.state.set(State::sleeping(grant, quota));
                        }
                        Ok(Decision::Admit(_)) => {
                            this.state.set(State::Done);
                            this.state.set(State::calling(start(this.pending), false));
                        }
                        Ok(Decision::Deny(denial)) => {
                            if let Some(paced) = this.paced.as_ref() {
                                crate::telemetry::pacing_refused(&paced.host.key);
                            }
                            this.state.set(State::Refused {
                                retry_in: denial.retry_in(),
                            });
                        }
                        Err(e) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                StateProj::Refused { retry_in } => {
                    let retry_in = *retry_in;
                    this.state.set(State::Done);
                    return Poll::Ready(Err(Box::new(RateLimited::new(retry_in))));
                }
                StateProj::Sleeping {
                    sleep,
                    grant,
                    quota,
                } => {
                    ready!(sleep.as_mut().poll(cx));
                    let (grant, quota) = (*grant, *quota);
                    let now = Instant::now();
                    let paced = this.paced.as_ref().expect("only a paced request sleeps");
                    let past_deadline = deadline_of(this.pending).is_some_and(|d| now >= d);
                    if past_deadline {
                        // Woken past its deadline (by a late timer): never sent, and the slot
                        // goes back.
                        this.state.set(State::Done);
                        paced.shared.store.cancel(&paced.host.key, quota, &grant);
                        return Poll::Ready(Err(Box::new(RateLimited::new(Duration::ZERO))));
                    }
                    if now < grant.at() {
                        if !paced.unpaced() {
                            let wake = grant.at().min(now + CHECK_EVERY);
                            sleep.as_mut().reset(wake);
                            continue;
                        }
                        // Pacing ended while it waited: the slot goes back, the request goes.
                        paced.shared.store.cancel(&paced.host.key, quota, &grant);
                    }
                    // Out of Sleeping first: from the call on, the slot is spent.
                    this.state.set(State::Done);
                    this.state.set(State::calling(start(this.pending), false));
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            }
        }
    }
}

impl<S, B, KF, St> fmt::Debug for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Acquire { .. } => "acquire",
            State::Sleeping { .. } => "sleeping",
            State::Refused { .. } => "refused",
            State::Calling { .. } => "calling",
            State::Passing { .. } => "passing",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
