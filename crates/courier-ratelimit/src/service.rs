use crate::config::Mode;
use crate::future::ResponseFuture;
use crate::key::{KeyFn, PerHost};
use crate::layer::Shared;
use crate::store::{InMemoryStore, RateLimitStore};
use courier_core::{BoxError, Deadline, HostKey};
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;

/// Paces the requests to `S` per key; see [`TokenBucketRateLimitLayer`](crate::TokenBucketRateLimitLayer).
///
/// No token is taken in `poll_ready`, which only forwards the inner service's readiness. The
/// decision is taken when the response future is first polled; the wait, if any, happens
/// inside it, and only then is the inner service (the instance that was made ready) called.
///
/// # Clone
///
/// Clones share the layer's buckets (behind an `Arc`): a clone never forks a limit.
pub struct TokenBucketRateLimit<S, KF = PerHost, St = InMemoryStore<HostKey>> {
    inner: S,
    shared: Arc<Shared<KF, St>>,
}

// === impl TokenBucketRateLimit ===

impl<S, KF, St> TokenBucketRateLimit<S, KF, St> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<KF, St>>) -> Self {
        Self { inner, shared }
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

    /// The store holding the buckets (shared with the layer and every clone).
    pub fn store(&self) -> &St {
        &self.shared.store
    }
}

impl<S: Clone, KF, St> Clone for TokenBucketRateLimit<S, KF, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, KF, St> fmt::Debug for TokenBucketRateLimit<S, KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucketRateLimit")
            .field("inner", &self.inner)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl<S, B, ResB, KF, St> Service<Request<B>> for TokenBucketRateLimit<S, KF, St>
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

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let shared = &self.shared;
        let key = shared.key_fn.key(&req);
        let max_wait = match shared.config.mode {
            Mode::Reject => Duration::ZERO,
            Mode::Wait => match Deadline::get(req.extensions()) {
                Some(deadline) => shared.config.max_wait.min(deadline.remaining()),
                None => shared.config.max_wait,
            },
        };
        let acquire = shared.store.acquire(&key, shared.config.quota, max_wait);
        // Call the instance that was made ready; leave a fresh clone for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(acquire, inner, req, key, Arc::clone(shared))
    }
}
