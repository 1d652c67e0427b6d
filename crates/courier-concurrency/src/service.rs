//! [`ConcurrencyLimit`]: the service.

use crate::future::ResponseFuture;
use crate::handle::ConcurrencyHandle;
use crate::layer::ConcurrencyLimitLayer;
use crate::limiter::{Admission, Limiter, Permit, Shared};
use courier_core::{BoxError, CallContext, KeyFn, PerHost, RequestHead};
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

/// Bounds the calls in flight to `S` per key; see [`ConcurrencyLimitLayer`].
///
/// `poll_ready` only forwards the inner service's readiness: a call that finds its key's
/// limit full waits in the response future (when the layer has a queue), or fails there.
///
/// # Clone
///
/// Clones share the layer's limits (behind an `Arc`): a clone never forks a limit.
pub struct ConcurrencyLimit<S, K: KeyFn = PerHost> {
    inner: S,
    /// `None` in a pass-through service.
    active: Option<Active<K>>,
    /// The previous call's limiter and the eviction generation it was found in: a run of
    /// calls to one key skips the key and the map.
    last: Option<(u64, Arc<Limiter<K::Key>>)>,
}

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

impl<S, K: KeyFn> ConcurrencyLimit<S, K> {
    /// Wraps `inner` in the limit configured by `layer`, sharing the limits of every other
    /// service `layer` (or a clone of it) makes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: ConcurrencyLimitLayer<K>) -> Self {
        let (key_fn, shared) = layer.into_parts();
        Self {
            inner,
            active: Some(Active { key_fn, shared }),
            last: None,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, holding no permit, and
    /// nothing is learned from its answer. The same type as an active
    /// `ConcurrencyLimit<S, K>`, so a stack can switch it at run time.
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

    /// A handle on the limits this service shares with its layer; `None` for a pass-through
    /// service, which has none.
    pub fn handle(&self) -> Option<ConcurrencyHandle<K::Key>> {
        let active = self.active.as_ref()?;
        Some(ConcurrencyHandle {
            shared: active.shared.clone(),
        })
    }
}

impl<S: Clone, K: KeyFn + Clone> Clone for ConcurrencyLimit<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            active: self.active.clone(),
            last: self.last.clone(),
        }
    }
}

impl<S: fmt::Debug, K: KeyFn + fmt::Debug> fmt::Debug for ConcurrencyLimit<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("ConcurrencyLimit");
        f.field("inner", &self.inner);
        match &self.active {
            Some(active) => f
                .field("key_fn", &active.key_fn)
                .field("config", &active.shared.config)
                .field("keys", &active.shared.len()),
            None => f.field("pass_through", &true),
        };
        f.finish()
    }
}

impl<S, K, B, ResB> Service<Request<B>> for ConcurrencyLimit<S, K>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
    K: KeyFn,
{
    type Response = Response<crate::ConcurrencyBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B, K::Key>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(active) = &self.active else {
            return ResponseFuture::pass(self.inner.call(req));
        };
        let head = RequestHead::new(&req);
        // Read before the lookup: an eviction that removes what the lookup finds bumps it after.
        let generation = active.shared.generation();
        let limiter = match &self.last {
            Some((g, last)) if *g == generation && is_key(&active.key_fn, &head, &last.key) => {
                last.clone()
            }
            _ => {
                let limiter = active.shared.limiter(active.key_fn.key(&head));
                self.last = Some((generation, limiter.clone()));
                limiter
            }
        };
        let shared = active.shared.clone();
        let config = &shared.config;
        // The longest this call may wait: the maximum wait, never past its deadline (with no
        // queue, no call waits: neither is read).
        let wait = match config.max_queue {
            0 => std::time::Duration::ZERO,
            _ => match CallContext::get(req.extensions()).and_then(CallContext::remaining) {
                Some(left) => config.max_wait.min(left),
                None => config.max_wait,
            },
        };
        match limiter.admit(!wait.is_zero()) {
            Admission::Now(before) => {
                // The permit exists before the call: a panicking inner service gives it back.
                let permit = Permit::new(limiter.clone());
                let fut = self.inner.call(req);
                ResponseFuture::calling(fut, permit, shared, limiter, before)
            }
            Admission::Queued(ticket) => {
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                let now = Instant::now();
                // A wait too long to add is one that never ends before the deadline.
                let until = now.checked_add(wait).unwrap_or_else(|| now + FAR);
                ResponseFuture::waiting(ticket, until, Box::new((ready, req)), shared, limiter)
            }
            Admission::Refused(err) => ResponseFuture::refused(err, shared, limiter),
        }
    }
}

/// A wait that outlasts any call: about thirty years.
const FAR: std::time::Duration = std::time::Duration::from_secs(86_400 * 365 * 30);

/// Whether `req`'s key is `key`: told in place when the key function can, else by making it.
#[inline]
fn is_key<K: KeyFn>(key_fn: &K, req: &RequestHead<'_>, key: &K::Key) -> bool {
    key_fn
        .is_key(req, key)
        .unwrap_or_else(|| key_fn.key(req) == *key)
}
