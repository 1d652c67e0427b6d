//! [`CircuitBreaker`]: the service.

use crate::future::{Guard, ResponseFuture};
use crate::handle::BreakerHandle;
use crate::layer::CircuitBreakerLayer;
use crate::outcome::Role;
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
    /// `None` in a pass-through service.
    active: Option<Active<K>>,
    /// The previous call's breaker and the eviction generation it was found in: a run of
    /// calls to one host skips the key, the hash and the map.
    last: Option<(u64, Arc<Breaker<K::Key>>)>,
}

/// What an active breaker service holds.
struct Active<K: KeyFn> {
    key_fn: K,
    shared: Arc<Shared<K::Key>>,
}

impl<K: KeyFn + Clone> Clone for Active<K> {
    fn clone(&self) -> Self {
        Self {
            key_fn: self.key_fn.clone(),
            shared: self.shared.clone(),
        }
    }
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
            active: Some(Active { key_fn, shared }),
            last: None,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, counted by no breaker and
    /// refused by none; the answer is `inner`'s. The same type as an active
    /// `CircuitBreaker<S, K>`, so a stack can switch it at run time.
    pub const fn pass_through(inner: S) -> Self {
        Self {
            inner,
            active: None,
            last: None,
        }
    }

    /// Whether this service was made by [`pass_through`](Self::pass_through).
    pub const fn is_pass_through(&self) -> bool {
        self.active.is_none()
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

    /// A handle on the breakers this service shares with its layer; `None` for a
    /// pass-through service, which has none.
    pub fn handle(&self) -> Option<BreakerHandle<K::Key>> {
        let active = self.active.as_ref()?;
        Some(BreakerHandle {
            shared: active.shared.clone(),
        })
    }
}

impl<S, K: KeyFn> CircuitBreaker<S, K> {
    /// The breaker of `req`: the previous call's when the key is the same and no eviction ran
    /// since, else from the shared map.
    #[inline]
    fn breaker_for(
        active: &Active<K>,
        last: &mut Option<(u64, Arc<Breaker<K::Key>>)>,
        req: &RequestHead<'_>,
    ) -> Arc<Breaker<K::Key>> {
        if K::SINGLE {
            return active.shared.breaker(active.key_fn.key(req));
        }
        // Read before the lookup: an eviction that removes what the lookup finds bumps it after.
        let generation = active.shared.generation();
        if let Some((g, b)) = last
            && *g == generation
            && active.key_fn.is_key(req, &b.key) == Some(true)
        {
            return b.clone();
        }
        Self::lookup(active, last, req, generation)
    }

    /// The breaker of `req` from the shared map, kept for the next call.
    #[cold]
    #[inline(never)]
    fn lookup(
        active: &Active<K>,
        last: &mut Option<(u64, Arc<Breaker<K::Key>>)>,
        req: &RequestHead<'_>,
        generation: u64,
    ) -> Arc<Breaker<K::Key>> {
        let key = active.key_fn.key(req);
        if let Some((g, b)) = last
            && *g == generation
            && key == b.key
        {
            return b.clone();
        }
        let breaker = active.shared.breaker(key);
        *last = Some((generation, breaker.clone()));
        breaker
    }
}

impl<S: Clone, K: KeyFn + Clone> Clone for CircuitBreaker<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            active: self.active.clone(),
            // A clone made per request (as a retry layer above makes) starts warm: one
            // reference count instead of a map lookup on its first call.
            last: self.last.clone(),
        }
    }
}

impl<S: fmt::Debug, K: KeyFn + fmt::Debug> fmt::Debug for CircuitBreaker<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("CircuitBreaker");
        f.field("inner", &self.inner);
        match &self.active {
            Some(active) => f
                .field("key_fn", &active.key_fn)
                .field("keys", &active.shared.len()),
            None => f.field("pass_through", &true),
        };
        f.finish()
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
        let Some(active) = &self.active else {
            return ResponseFuture::pass(self.inner.call(req));
        };
        let breaker = Self::breaker_for(active, &mut self.last, &RequestHead::new(&req));
        match breaker.admit() {
            Ok(ticket) => {
                let role = Role::of(req.extensions(), &breaker.core.config);
                // The guard exists before the call, so even a panicking inner service gives a
                // trial permit back.
                let guard = Guard::new(breaker, ticket, role);
                let fut = self.inner.call(req);
                ResponseFuture::called(fut, guard)
            }
            // Open: the inner service is not called and spends nothing.
            Err(open) => ResponseFuture::rejected(open),
        }
    }
}
