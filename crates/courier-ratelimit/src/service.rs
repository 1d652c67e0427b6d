use crate::config::Mode;
use crate::future::{Held, Limited, ResponseFuture};
use crate::gcra::Outcome;
use crate::layer::{Shared, TokenBucketRateLimitLayer};
use crate::store::{Decision, Entry, InMemoryStore, RateLimitStore, saturating_nanos};
use courier_core::{BoxError, Deadline, HostKey, KeyFn, PerHost, RequestHead};
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower_service::Service;

/// Paces the requests to `S` per key; see [`TokenBucketRateLimitLayer`].
///
/// No token is taken in `poll_ready`, which only forwards the inner service's readiness. With
/// the in-process store the decision is taken in `call`: a request with a free slot now calls
/// the inner service (the instance that was made ready) at once, one that must wait does so
/// inside the response future and calls it after. With a store that answers through a future
/// ([`RateLimitStore::acquire`]) the decision is taken when the response future is first
/// polled, and the inner service is called after it (and after the wait, if any).
///
/// # Clone
///
/// Clones share the layer's buckets (behind an `Arc`): a clone never forks a limit.
pub struct TokenBucketRateLimit<S, KF: KeyFn = PerHost, St = InMemoryStore<HostKey>> {
    inner: S,
    /// `None` in a pass-through service.
    shared: Option<Arc<Shared<KF, St>>>,
    /// The bucket of the previous request (in-process store only): a run of requests to one
    /// key skips the key, the hash and the map.
    last: Option<Arc<Entry<KF::Key>>>,
}

// === impl TokenBucketRateLimit ===

impl<S, KF: KeyFn, St> TokenBucketRateLimit<S, KF, St> {
    /// Wraps `inner` in a limiter configured by `layer`, drawing from the buckets of every
    /// other service `layer` (or a clone of it) makes; the same as `layer.layer(inner)`.
    pub fn new(inner: S, layer: TokenBucketRateLimitLayer<KF, St>) -> Self {
        Self {
            inner,
            shared: Some(layer.shared),
            last: None,
        }
    }

    /// The layer switched off: every call goes straight to `inner`, taking no token and
    /// reading no quota header; the answer is `inner`'s. The same type as an active
    /// `TokenBucketRateLimit<S, KF, St>`, so a stack can switch it at run time.
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

    /// The store holding the buckets (shared with the layer and every clone); `None` for a
    /// pass-through service, which has none.
    pub fn store(&self) -> Option<&St> {
        self.shared.as_deref().map(|shared| &shared.store)
    }
}

impl<S: Clone, KF: KeyFn, St> Clone for TokenBucketRateLimit<S, KF, St> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            // A clone made per request (as a retry layer above does) stays warm.
            last: self.last.clone(),
        }
    }
}

impl<S: fmt::Debug, KF: KeyFn, St> fmt::Debug for TokenBucketRateLimit<S, KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucketRateLimit")
            .field("inner", &self.inner)
            .field(
                "config",
                &self.shared.as_deref().map(|shared| &shared.config),
            )
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

    #[inline]
    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(shared) = &self.shared else {
            return ResponseFuture::pass(self.inner.call(req));
        };
        let max_wait = match shared.config.mode {
            Mode::Reject => Duration::ZERO,
            Mode::Wait => match Deadline::get(req.extensions()) {
                Some(deadline) => shared.config.max_wait.min(deadline.remaining()),
                None => shared.config.max_wait,
            },
        };
        if shared.store.in_process().is_some() {
            let shared = Arc::clone(shared);
            let (entry, decision) =
                Self::decide_in_process(&shared, &mut self.last, &req, max_wait);
            let key = Held::Entry(entry);
            return match decision {
                None => {
                    ResponseFuture::limited(Limited::calling(self.inner.call(req), key, shared))
                }
                Some(decision @ Decision::Admit(_)) => {
                    let pending = Box::new((self.take_ready(), req));
                    ResponseFuture::limited(Limited::decided(decision, Some(pending), key, shared))
                }
                // Refused: the inner service is not called.
                Some(decision) => {
                    ResponseFuture::limited(Limited::decided(decision, None, key, shared))
                }
            };
        }
        let key = shared.key_fn.key(&RequestHead::new(&req));
        let acquire = shared.store.acquire(&key, shared.config.quota, max_wait);
        let shared = Arc::clone(shared);
        let pending = Box::new((self.take_ready(), req));
        // A store that answers later is raced against the deadline (in either mode).
        let deadline = Deadline::get(pending.1.extensions()).map(|d| d.instant());
        ResponseFuture::limited(Limited::acquiring(
            acquire,
            deadline,
            pending,
            Held::Key(key),
            shared,
        ))
    }
}

impl<S: Clone, KF: KeyFn, St> TokenBucketRateLimit<S, KF, St> {
    /// The instance that was made ready, leaving a fresh clone for the next `poll_ready`.
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

impl<S, KF, St> TokenBucketRateLimit<S, KF, St>
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    /// Decides now, on the previous request's bucket when the key is the same. Returns the
    /// bucket's entry and the decision, `None` when the request may start now.
    #[inline]
    fn decide_in_process<B>(
        shared: &Shared<KF, St>,
        last: &mut Option<Arc<Entry<KF::Key>>>,
        req: &Request<B>,
        max_wait: Duration,
    ) -> (Arc<Entry<KF::Key>>, Option<Decision>) {
        let store = shared
            .store
            .in_process()
            .expect("called only for a store that decides in process");
        let quota = shared.config.quota;
        let (t, tau) = (quota.interval_nanos(), quota.tolerance_nanos());
        let max_wait = saturating_nanos(max_wait);
        let now = store.now_ns();
        let req = &RequestHead::new(req);
        loop {
            if !matches!(&*last, Some(last) if is_key(&shared.key_fn, req, &last.key)) {
                *last = None;
            }
            let entry = last.get_or_insert_with(|| store.entry(&shared.key_fn.key(req), now));
            let outcome = entry.cell.reserve(now, t, tau, max_wait);
            let decision = match outcome {
                Outcome::Admit { start, .. } if start == now => None,
                outcome => match store.decision(outcome) {
                    Some(decision) => Some(decision),
                    None => {
                        // Evicted meanwhile: the map makes a fresh bucket.
                        store.forget(entry);
                        *last = None;
                        continue;
                    }
                },
            };
            return (Arc::clone(entry), decision);
        }
    }
}

/// Whether `req`'s key is `key`: told in place when the key function can, else by making it.
#[inline]
pub(crate) fn is_key<KF: KeyFn>(key_fn: &KF, req: &RequestHead<'_>, key: &KF::Key) -> bool {
    key_fn
        .is_key(req, key)
        .unwrap_or_else(|| key_fn.key(req) == *key)
}
