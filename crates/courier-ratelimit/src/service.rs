use crate::config::Mode;
use crate::future::{BeforeDeadline, Bucket, Held, Limited};
use crate::gcra::Outcome;
use crate::layer::{Shared, TokenBucketRateLimitLayer};
use crate::slot::SlotFuture;
use crate::store::{Decision, Entry, InMemoryStore, RateLimitStore, saturating_nanos};
use courier_core::{CallContext, KeyFn, RequestHead};
use http::Request;
use std::sync::Arc;
use std::time::Duration;
use tower_service::Service;

crate::slot::limiter! {
    /// Paces the requests to `S` per key; see [`TokenBucketRateLimitLayer`].
    ///
    /// No token is taken in `poll_ready`, which only forwards the inner service's readiness.
    /// With the in-process store the decision is taken in `call`: a request with a free slot
    /// now calls the inner service (the instance that was made ready) at once, one that must
    /// wait does so inside the response future and calls it after. With a store that answers
    /// through a future ([`RateLimitStore::acquire`]) the decision is taken when the response
    /// future is first polled, and the inner service is called after it (and after the wait,
    /// if any).
    ///
    /// # Clone
    ///
    /// Clones share the layer's buckets (behind an `Arc`): a clone never forks a limit.
    pub struct TokenBucketRateLimit(TokenBucketRateLimitLayer) {
        shared: Shared,
        /// The bucket of the previous request (in-process store only): a run of requests to
        /// one key skips the key, the hash and the map.
        last: Entry,
    }
    /// Decides (unless the service did), waits for the slot if there is one to wait for, then
    /// calls the inner service (unless the service did) and reads the server's hints off its
    /// response.
    ///
    /// Dropping the future before it called the inner service hands its slot back to the store
    /// (see [`RateLimitStore::cancel`]), and so does a refusal after the wait; nobody else waits
    /// longer because of it.
    ///
    /// A pass-through service's future is the inner service's, and nothing else.
    pub struct ResponseFuture(Bucket);
}

impl<S, KF: KeyFn, St> TokenBucketRateLimit<S, KF, St> {
    /// The store holding the buckets (shared with the layer and every clone); `None` for a
    /// pass-through service, which has none.
    pub fn store(&self) -> Option<&St> {
        self.shared.as_deref().map(|shared| &shared.store)
    }
}

impl<S: Clone, KF: KeyFn, St: RateLimitStore<KF::Key>> TokenBucketRateLimit<S, KF, St> {
    /// An active service's request: with the in-process store decided here, and sent at once
    /// when its slot is free now; with another store, decided in the response future.
    #[inline]
    fn limit<B>(&mut self, shared: Arc<Shared<KF, St>>, req: Request<B>) -> Limited<S, B, KF, St>
    where
        S: Service<Request<B>>,
    {
        let max_wait = match shared.config.mode {
            Mode::Reject => Duration::ZERO,
            Mode::Wait => match CallContext::get(req.extensions()).and_then(CallContext::remaining)
            {
                Some(left) => shared.config.max_wait.min(left),
                None => shared.config.max_wait,
            },
        };
        if let Some(store) = shared.store.in_process() {
            let (entry, decision) =
                Self::decide_in_process(store, &shared, &mut self.last, &req, max_wait);
            let slot = Bucket {
                key: Held::Entry(entry),
                shared,
            };
            return match decision {
                None => SlotFuture::calling(self.inner.call(req), slot),
                Some(decision @ Decision::Admit(_)) => {
                    let pending = Box::new((self.take_ready(), req));
                    SlotFuture::decided(decision, Some(pending), slot)
                }
                // Refused: the inner service is not called.
                Some(decision) => SlotFuture::decided(decision, None, slot),
            };
        }
        let key = shared.key_fn.key(&RequestHead::new(&req));
        let acquire = shared.store.acquire(&key, shared.config.quota, max_wait);
        // A store that answers later is raced against the deadline (in either mode).
        let deadline = CallContext::deadline_in(req.extensions());
        let pending = Box::new((self.take_ready(), req));
        let slot = Bucket {
            key: Held::Key(key),
            shared,
        };
        SlotFuture::acquiring(BeforeDeadline::new(acquire, deadline), pending, slot)
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
        store: &InMemoryStore<KF::Key>,
        shared: &Shared<KF, St>,
        last: &mut Option<Arc<Entry<KF::Key>>>,
        req: &Request<B>,
        max_wait: Duration,
    ) -> (Arc<Entry<KF::Key>>, Option<Decision>) {
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
