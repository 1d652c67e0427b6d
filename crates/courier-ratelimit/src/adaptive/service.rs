use super::estimate::Signal;
use super::layer::{AdaptivePacingLayer, Host, Shared};
use crate::config::{Quota, Rate};
use crate::service::is_key;
use crate::slot::{Next, Slot, SlotFuture};
use crate::store::{Decision, Denial, Grant, RateLimitStore};
use courier_core::RateLimited;
use courier_core::{BoxError, CallContext, Class, FailureKind, KeyFn, RequestHead, Verdict};
use http::{Request, Response, StatusCode};
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;

crate::slot::limiter! {
    /// Paces the requests to `S` at each key's learned capacity; see [`AdaptivePacingLayer`].
    ///
    /// `poll_ready` only forwards the inner service's readiness; a paced request waits for its
    /// slot inside the response future.
    pub struct AdaptivePacing(AdaptivePacingLayer) {
        shared: Shared,
        /// The estimate of the previous request's key: a run of requests to one key skips the
        /// map.
        last: Host,
    }
    /// Waits for the slot of a paced request (none for an unpaced one), calls the inner
    /// service, and learns from the answer.
    ///
    /// Dropping the future before the request was sent gives its slot back to the store.
    pub struct ResponseFuture(Paced);
}

impl<S: Clone, KF: KeyFn, St: RateLimitStore<KF::Key>> AdaptivePacing<S, KF, St> {
    /// An active service's request: sent at once unless its key (or its path) is paced.
    #[inline]
    fn limit<B>(
        &mut self,
        shared: Arc<Shared<KF, St>>,
        req: Request<B>,
    ) -> PacedFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
    {
        let head = RequestHead::new(&req);
        let host = match &self.last {
            Some(last) if is_key(&shared.key_fn, &head, &last.key) => Arc::clone(last),
            _ => {
                let host = shared.host(shared.key_fn.key(&head));
                self.last = Some(Arc::clone(&host));
                host
            }
        };
        let path = shared.path_of(req.uri().path());
        if !host.estimate.is_paced() || !host.estimate.paces(path) {
            // The call first, its state after: built before it, the future was copied twice
            // more on its way out.
            let fut = self.inner.call(req);
            return SlotFuture::calling(fut, Paced::new(shared, host, path));
        }
        Paced::new(shared, host, path).acquire(self.take_ready(), req)
    }
}

/// The future of an active service's request.
type PacedFuture<S, B, KF, St> = SlotFuture<S, B, Paced<KF, St>>;

/// What an active service's future holds: the layer's state and the key's estimate.
struct Paced<KF: KeyFn, St> {
    shared: Arc<Shared<KF, St>>,
    host: Arc<Host<KF::Key>>,
    /// The request's path, hashed: one path's refusals pace that path.
    path: u64,
    /// The pace its slot was reserved at; `None` for a request sent unpaced.
    quota: Option<Quota>,
}

impl<KF: KeyFn, St> fmt::Debug for Paced<KF, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paced")
            .field("key", &self.host.key)
            .field("quota", &self.quota)
            .finish()
    }
}

impl<KF: KeyFn, St> Paced<KF, St> {
    /// A request for `path` (its hash) to `host`, holding no pace yet.
    #[inline]
    fn new(shared: Arc<Shared<KF, St>>, host: Arc<Host<KF::Key>>, path: u64) -> Self {
        Self {
            shared,
            host,
            path,
            quota: None,
        }
    }
}

impl<KF: KeyFn, St: RateLimitStore<KF::Key>> Paced<KF, St> {
    /// A paced request: reserve a slot at the learned rate, then wait for it.
    #[cold]
    #[inline(never)]
    fn acquire<S, B>(mut self, mut inner: S, req: Request<B>) -> SlotFuture<S, B, Self>
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
            return SlotFuture::calling(inner.call(req), self);
        };
        self.quota = Some(quota);
        // A slot that starts at the deadline leaves the request no time: refuse it.
        let deadline = CallContext::deadline_in(req.extensions());
        let max_wait = match deadline {
            Some(deadline) => self
                .shared
                .config
                .max_wait
                .min(deadline.saturating_duration_since(Instant::now()))
                .saturating_sub(Duration::from_millis(1)),
            None => self.shared.config.max_wait,
        };
        let Some(store) = self.shared.store.in_process() else {
            let acquire = self.shared.store.acquire(&self.host.key, quota, max_wait);
            return SlotFuture::acquiring(acquire, Box::new((inner, req)), self);
        };
        // Decided here, in the order of the calls.
        match store.decide(&self.host.key, quota, max_wait) {
            Decision::Admit(grant) if grant.at() <= Instant::now() => {
                SlotFuture::calling(inner.call(req), self)
            }
            decision @ Decision::Admit(_) => {
                SlotFuture::decided(decision, Some(Box::new((inner, req))), self)
            }
            // Refused: the inner service is not called.
            decision @ Decision::Deny(_) => SlotFuture::decided(decision, None, self),
        }
    }

    /// Whether a request waiting for its slot should go now after all: pacing ended.
    fn unpaced(&self) -> bool {
        let now = self.shared.now_ns();
        self.host
            .estimate
            .rate(now, &self.shared.config.rules)
            .is_none()
    }

    /// Learns from the answer to a request by the classifier's verdict on it, as the [module
    /// docs](super#signals-and-accepts) say.
    fn observe<ResB>(&self, result: &Result<Response<ResB>, BoxError>) {
        let shared = &*self.shared;
        let verdict = shared.config.classifier.classify_result(result);
        let signal = match verdict.failure_kind() {
            _ if verdict.is_overload_signal() => true,
            Some(FailureKind::Timeout) => true,
            // A connect that timed out is a host too busy to accept (a full accept queue drops
            // the SYN). One refused, a name that does not resolve, a network out of reach: a
            // host that is down or does not exist, the breaker's to judge.
            Some(FailureKind::Connect) => result.as_ref().is_err_and(|e| is_timed_out(&**e)),
            // A reset or a broken answer is not a refusal; ours and TLS say nothing.
            Some(_) => return,
            // The server's word: the token bucket and retry obey the wait it named.
            None if is_hinted_overload(verdict, result) => return,
            None => false,
        };
        let now = shared.now_ns();
        if signal {
            overloaded(shared, &self.host, now, self.path);
        } else {
            let unpaced = self.quota.is_none();
            self.host
                .estimate
                .accepted(now, unpaced, &shared.config.rules);
        }
    }
}

/// Whether `verdict` is an overload with a hint, on an answer other than a 403 (a rate-limiting
/// 403 speaks of the caller's quota, not of the host's capacity: it counts as an accept).
fn is_hinted_overload<ResB>(verdict: Verdict, result: &Result<Response<ResB>, BoxError>) -> bool {
    verdict.class() == (Class::Overload { hinted: true })
        && result
            .as_ref()
            .is_ok_and(|resp| resp.status() != StatusCode::FORBIDDEN)
}

/// How often a request waiting for its slot looks whether pacing has ended.
const CHECK_EVERY: Duration = Duration::from_millis(250);

impl<KF: KeyFn, St: RateLimitStore<KF::Key>> Slot for Paced<KF, St> {
    type Acquire = St::Acquire;

    fn admitted(&self, grant: &Grant, now: Instant, _deadline: Option<Instant>) -> Next {
        if grant.at() <= now {
            return Next::Go;
        }
        crate::telemetry::pacing_wait(&self.host.key, grant.at() - now);
        Next::Wait(grant.at().min(now + CHECK_EVERY))
    }

    fn woke(&self, grant: &Grant, now: Instant, deadline: Option<Instant>) -> Next {
        if deadline.is_some_and(|deadline| now >= deadline) {
            // Woken past its deadline (by a late timer): never sent.
            return Next::Refuse(Denial::new(Duration::ZERO));
        }
        if now >= grant.at() {
            Next::Go
        } else if self.unpaced() {
            // Pacing ended while it waited: the slot goes back, the request goes.
            Next::Skip
        } else {
            Next::Wait(grant.at().min(now + CHECK_EVERY))
        }
    }

    fn give_back(&self, grant: &Grant) {
        if let Some(quota) = self.quota {
            self.shared.store.cancel(&self.host.key, quota, grant);
        }
    }

    #[cold]
    fn refusal(&self, denial: Denial, _gave_back: bool) -> BoxError {
        crate::telemetry::pacing_refused(&self.host.key);
        Box::new(RateLimited::new(denial.retry_in()))
    }

    #[inline]
    fn answered<ResB>(&self, result: &Result<Response<ResB>, BoxError>) {
        self.observe(result);
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
        next = courier_core::next_cause(e);
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
