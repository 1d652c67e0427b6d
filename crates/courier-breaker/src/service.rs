//! [`CircuitBreaker`]: the service.

use crate::future::{Guard, ResponseFuture};
use crate::handle::BreakerHandle;
use crate::layer::CircuitBreakerLayer;
use crate::registry::{Breaker, Shared};
use courier_core::{BoxError, KeyFn, PerHost, RequestHead};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// Fails calls at once while their key's circuit is open, without calling the inner service.
///
/// Made by [`CircuitBreakerLayer`]; see the [crate docs](crate).
///
/// # Clone
///
/// Clones share the breakers (behind an `Arc`) and clone the inner service.
pub struct CircuitBreaker<S, K: KeyFn = PerHost> {
    inner: S,
    key_fn: K,
    shared: Arc<Shared<K::Key>>,
    /// The previous call's breaker and the eviction generation it was found in: a run of
    /// calls to one host skips the key, the hash and the map.
    last: Option<(u64, Arc<Breaker<K::Key>>)>,
}

impl<S> CircuitBreaker<S> {
    /// The layer with the defaults (see [`CircuitBreakerLayer::new`]).
    pub fn layer() -> CircuitBreakerLayer {
        CircuitBreakerLayer::new()
    }
}

impl<S, K: KeyFn> CircuitBreaker<S, K> {
    /// Wraps `inner` in a breaker configured by `layer`, sharing the breakers of every other
    /// service `layer` (or a clone of it) makes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: CircuitBreakerLayer<K>) -> Self {
        let (key_fn, shared) = layer.into_parts();
        Self {
            inner,
            key_fn,
            shared,
            last: None,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
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

    /// A handle on the breakers this service shares with its layer.
    pub fn handle(&self) -> BreakerHandle<K::Key> {
        BreakerHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<S, K: KeyFn> CircuitBreaker<S, K> {
    /// The breaker of `req`: the previous call's when the key is the same and no eviction ran
    /// since, else from the shared map.
    #[inline]
    fn breaker_for(&mut self, req: &RequestHead<'_>) -> Arc<Breaker<K::Key>> {
        if K::SINGLE {
            return self.shared.breaker(self.key_fn.key(req));
        }
        // Read before the lookup: an eviction that removes what the lookup finds bumps it after.
        let generation = self.shared.generation();
        if let Some((g, b)) = &self.last
            && *g == generation
            && self.key_fn.is_key(req, &b.key) == Some(true)
        {
            return b.clone();
        }
        self.lookup(req, generation)
    }

    /// The breaker of `req` from the shared map, kept for the next call.
    #[cold]
    #[inline(never)]
    fn lookup(&mut self, req: &RequestHead<'_>, generation: u64) -> Arc<Breaker<K::Key>> {
        let key = self.key_fn.key(req);
        if let Some((g, b)) = &self.last
            && *g == generation
            && key == b.key
        {
            return b.clone();
        }
        let breaker = self.shared.breaker(key);
        self.last = Some((generation, breaker.clone()));
        breaker
    }
}

impl<S: Clone, K: KeyFn + Clone> Clone for CircuitBreaker<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            key_fn: self.key_fn.clone(),
            shared: self.shared.clone(),
            // A clone made per request (as a retry layer above makes) starts warm: one
            // reference count instead of a map lookup on its first call.
            last: self.last.clone(),
        }
    }
}

impl<S: fmt::Debug, K: KeyFn + fmt::Debug> fmt::Debug for CircuitBreaker<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("key_fn", &self.key_fn)
            .field("keys", &self.shared.len())
            .finish()
    }
}

impl<S, K, B, ResB> Service<http::Request<B>> for CircuitBreaker<S, K>
where
    S: Service<http::Request<B>, Response = http::Response<ResB>>,
    S::Error: Into<BoxError>,
    K: KeyFn,
{
    type Response = http::Response<ResB>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, K::Key>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    #[inline]
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let breaker = self.breaker_for(&RequestHead::new(&req));
        match breaker.admit() {
            Ok(ticket) => {
                // The guard exists before the call, so even a panicking inner service gives a
                // trial permit back.
                let guard = Guard::new(breaker, ticket);
                let fut = self.inner.call(req);
                ResponseFuture::called(fut, guard)
            }
            // Open: the inner service is not called and spends nothing.
            Err(open) => ResponseFuture::rejected(open),
        }
    }
}
