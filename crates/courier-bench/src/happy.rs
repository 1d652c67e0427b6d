//! The happy-path variants, shared by the criterion bench (`benches/layers.rs`) and the
//! instruction counts (`examples/instructions.rs` under callgrind).
//!
//! Happy path: the inner service (a `service_fn`) is ready at once and its future is ready on
//! the first poll, nothing is retried, the breaker is closed, the bucket is never empty (1e9/s,
//! burst `u32::MAX`). One call = build the request, `poll_ready`, `call`, poll the future once
//! (it completes), drop the response. [`BARE`] is that with no layer, so a variant's added
//! cost is its time minus the bare one's, measured in the same run.
//!
//! The cache runs its miss path: the upstream's answer carries no validator and no freshness,
//! so nothing is ever stored and every call looks the URI up in the real `MemoryStore`,
//! misses, forwards, and wraps the answer's body.
//!
//! Every variant is boxed behind the same `dyn FnMut() -> bool`, so each pays the same
//! indirect call, the bare one included.

use bytes::Bytes;
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::EtagCacheLayer;
use courier::core::BoxError;
use courier::deadline::{AttemptTimeoutLayer, DeadlineLayer};
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;
use http::{Request, Response, Uri};
use http_body_util::Full;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::retry::Policy;
use tower::retry::budget::{Budget, TpsBudget};
use tower::{Layer, Service, ServiceBuilder, service_fn};

/// Request and response body.
pub type Body = Full<Bytes>;

/// The URI every call goes to.
pub const URI: &str = "http://api.example.com:8080/v1/items?page=2";

/// The name of the variant without any layer.
pub const BARE: &str = "bare service_fn";

/// The inner service's function: a 200 with an empty body, ready at once.
pub fn ok(_: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    ready(Ok(Response::new(Body::default())))
}

/// A GET of `uri` with an empty body.
pub fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

/// One whole call: `poll_ready`, `call`, one poll of the future; true when it answered.
pub fn one<S>(svc: &mut S, uri: &Uri) -> bool
where
    S: Service<Request<Body>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
        return false;
    }
    let fut = pin!(svc.call(request(uri)));
    matches!(fut.poll(&mut cx), Poll::Ready(Ok(_)))
}

/// A bucket that never runs dry: 1e9 per second, burst `u32::MAX`.
///
/// # Panics
///
/// Never: the rate is valid.
pub fn unlimited() -> TokenBucketRateLimitLayer {
    TokenBucketRateLimitLayer::new(
        Rate::per_second(1e9).expect("a valid rate"),
        NonZeroU32::MAX,
    )
}

/// The usual tower retry policy: retry 5xx and errors, twice at most, while the `TpsBudget`
/// allows.
#[derive(Clone)]
pub struct TpsPolicy {
    budget: Arc<TpsBudget>,
    left: usize,
}

impl fmt::Debug for TpsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TpsPolicy")
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl Default for TpsPolicy {
    fn default() -> Self {
        Self {
            budget: Arc::new(TpsBudget::default()),
            left: 2,
        }
    }
}

impl<B: Clone, RB, E> Policy<Request<B>, Response<RB>, E> for TpsPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _req: &mut Request<B>,
        result: &mut Result<Response<RB>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(res) if !res.status().is_server_error() => {
                self.budget.deposit();
                None
            }
            _ if self.left > 0 && self.budget.withdraw() => {
                self.left -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        Some(req.clone())
    }
}

/// One variant: its name and a call through it.
pub struct Variant {
    /// What it measures, e.g. `courier retry`.
    pub name: &'static str,
    /// One whole call; true when it answered on the first poll.
    pub call: Box<dyn FnMut() -> bool>,
}

impl fmt::Debug for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Variant")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn variant<S>(name: &'static str, mut svc: S) -> Variant
where
    S: Service<Request<Body>> + 'static,
{
    let uri: Uri = URI.parse().expect("a valid uri");
    Variant {
        name,
        call: Box::new(move || one(&mut svc, &uri)),
    }
}

/// Every happy-path variant, [`BARE`] first. Call it, and the variants, inside a tokio
/// runtime context (`Runtime::enter`): the timeouts need its timer.
///
/// # Panics
///
/// Outside a tokio runtime context.
pub fn variants() -> Vec<Variant> {
    let per_call = Duration::from_secs(30);
    let mut out = vec![
        variant(BARE, service_fn(ok)),
        variant(
            "courier deadline",
            DeadlineLayer::new(Duration::from_secs(90)).layer(service_fn(ok)),
        ),
        variant(
            "courier attempt_timeout",
            AttemptTimeoutLayer::new(per_call).layer(service_fn(ok)),
        ),
        variant("courier retry", RetryLayer::new().layer(service_fn(ok))),
        variant(
            "courier breaker",
            CircuitBreakerLayer::new().layer(service_fn(ok)),
        ),
        variant("courier ratelimit", unlimited().layer(service_fn(ok))),
        variant(
            "courier cache (miss)",
            EtagCacheLayer::new().layer(service_fn(ok)),
        ),
        variant(
            "courier preset (defaults, 5 layers)",
            CourierLayer::new().layer(service_fn(ok)),
        ),
        variant(
            "courier preset + ratelimit (6 layers)",
            CourierLayer::new()
                .rate_limit(unlimited())
                .layer(service_fn(ok)),
        ),
        variant(
            "tower timeout",
            tower::timeout::TimeoutLayer::new(per_call).layer(service_fn(ok)),
        ),
        variant(
            "tower retry (TpsBudget)",
            tower::retry::RetryLayer::new(TpsPolicy::default()).layer(service_fn(ok)),
        ),
        variant(
            "tower rate_limit",
            tower::limit::RateLimitLayer::new(u64::MAX, Duration::from_secs(1))
                .layer(service_fn(ok)),
        ),
        variant(
            "tower concurrency_limit",
            tower::limit::ConcurrencyLimitLayer::new(1024).layer(service_fn(ok)),
        ),
        variant(
            "tower timeout+retry+concurrency_limit",
            ServiceBuilder::new()
                .timeout(per_call)
                .retry(TpsPolicy::default())
                .concurrency_limit(1024)
                .service_fn(ok),
        ),
        variant(
            "tower-resilience circuit breaker",
            tower_resilience_circuitbreaker::CircuitBreakerLayer::builder()
                .build()
                .expect("the default config is valid")
                .layer(service_fn(ok)),
        ),
    ];
    out.push({
        use failsafe::futures::CircuitBreaker as _;
        let breaker = failsafe::Config::new().build();
        let mut svc = service_fn(ok);
        let uri: Uri = URI.parse().expect("a valid uri");
        Variant {
            name: "failsafe circuit breaker",
            call: Box::new(move || {
                let mut cx = Context::from_waker(Waker::noop());
                if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
                    return false;
                }
                let fut = pin!(breaker.call(svc.call(request(&uri))));
                matches!(fut.poll(&mut cx), Poll::Ready(Ok(_)))
            }),
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_answers_on_the_first_poll_again_and_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _rt = rt.enter();
        let mut variants = variants();
        assert_eq!(variants[0].name, BARE);
        assert_eq!(variants.len(), 16);
        for v in &mut variants {
            for _ in 0..1000 {
                assert!((v.call)(), "{} left the happy path", v.name);
            }
        }
    }
}
