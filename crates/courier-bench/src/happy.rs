//! The happy-path variants, shared by the criterion bench (`benches/layers.rs`) and the
//! instruction counts (`benches/instructions.rs`, under callgrind).
//!
//! Happy path: the inner service (a `service_fn`) is ready at once and its future is ready on
//! the first poll, nothing is retried, the breaker is closed, the bucket is never empty (1e9/s,
//! burst `u32::MAX`). One call = build the request, `poll_ready`, `call`, poll the future once
//! (it completes), read the response body to its end, drop the response. [`BARE`] is that with no layer, so a variant's added
//! cost is its time minus the bare one's, measured in the same run.
//!
//! The cache runs its miss path: the upstream's answer carries no validator and no freshness,
//! so nothing is ever stored and every call looks the URI up in the real `MemoryStore`,
//! misses, forwards, and wraps the answer's body. Its hit path (a fresh entry served from
//! memory) and revalidation path (a 304 merged into the stored entry) have variants of their
//! own, and so do the global breaker and bucket, a bucket whose host changes on every call,
//! and the timeouts over an inner future that is pending once before it answers; and the bare
//! service over a URI parsed from a string on every call, as `courier::Client` parses it
//! ([`URL_PARSED`]).
//!
//! Every variant is boxed behind the same `dyn FnMut() -> bool`, so each pays the same
//! indirect call, the bare one included.

use crate::peer::PeerPolicy;
use crate::{floors, peer};
use bytes::Bytes;
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::EtagCacheLayer;
use courier::core::BoxError;
use courier::deadline::{AttemptTimeoutLayer, DeadlineLayer};
use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
use courier::retry::RetryLayer;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service, service_fn};

/// Request and response body.
pub type Body = Full<Bytes>;

/// The URI every call goes to.
pub const URI: &str = "http://api.example.com:8080/v1/items?page=2";

/// The name of the variant without any layer.
pub const BARE: &str = "bare service_fn";

/// [`BARE`] with the URI made from the string [`URI`] on every call, as `courier::Client`
/// makes it: `url::Url::parse`, the scheme checked, the fragment dropped, then an
/// `http::Uri` from the URL's text. Its "added" is that parsing alone.
pub const URL_PARSED: &str = "bare service_fn, URI parsed from a string (as courier::Client)";

/// The name of the variant whose inner future yields once, without any layer.
pub const YIELD_BASE: &str = "inner yields once";

/// The inner service's function: a 200 with an empty body, ready at once.
pub fn ok(_: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    ready(Ok(Response::new(Body::default())))
}

/// The entity tag of [`fresh`] and [`validated`].
const TAG: HeaderValue = HeaderValue::from_static("\"v1\"");

/// A 200 that the cache stores and serves for an hour.
fn fresh(_: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"hello")));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    headers.insert(ETAG, TAG);
    headers.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
    ready(Ok(response))
}

/// A 200 the cache must revalidate each time (`no-cache`), then a 304 for its tag.
fn validated(req: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    let mut response = if req.headers().get(IF_NONE_MATCH) == Some(&TAG) {
        let mut r = Response::new(Body::default());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"hello")));
        let headers = r.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        r
    };
    let headers = response.headers_mut();
    headers.insert(ETAG, TAG);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    ready(Ok(response))
}

/// An inner service whose future is pending once (waking itself) before it answers 200.
#[derive(Debug, Clone, Copy)]
pub struct YieldOnce;

/// The future of [`YieldOnce`].
#[derive(Debug)]
pub struct YieldOnceFuture {
    yielded: bool,
}

impl Future for YieldOnceFuture {
    type Output = Result<Response<Body>, BoxError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.yielded {
            return Poll::Ready(Ok(Response::new(Body::default())));
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Service<Request<Body>> for YieldOnce {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = YieldOnceFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        YieldOnceFuture { yielded: false }
    }
}

/// A GET of `uri` with an empty body.
pub fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

/// One whole call: `poll_ready`, `call`, one poll of the future, the response body read to
/// its end; true when it answered and its body ended.
pub fn one<S, RB>(svc: &mut S, uri: &Uri) -> bool
where
    S: Service<Request<Body>, Response = Response<RB>>,
    RB: http_body::Body,
{
    let mut cx = Context::from_waker(Waker::noop());
    if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
        return false;
    }
    let fut = pin!(svc.call(request(uri)));
    match fut.poll(&mut cx) {
        Poll::Ready(Ok(response)) => body_to_end(response.into_body(), &mut cx),
        _ => false,
    }
}

/// Polls `body` to its end; true when it ended within a few frames without an error.
pub fn body_to_end<RB: http_body::Body>(body: RB, cx: &mut Context<'_>) -> bool {
    let mut body = pin!(body);
    // Bounded: a whole body of this bench is a frame or two.
    for _ in 0..8 {
        match body.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(None) => return true,
            _ => return false,
        }
    }
    false
}

/// [`one`] for an inner service that yields once: the future is polled until it answers (twice
/// when nothing but the inner future is in the way).
pub fn one_yielding<S>(svc: &mut S, uri: &Uri) -> bool
where
    S: Service<Request<Body>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
        return false;
    }
    let mut fut = pin!(svc.call(request(uri)));
    for _ in 0..2 {
        if let Poll::Ready(res) = fut.as_mut().poll(&mut cx) {
            return res.is_ok();
        }
    }
    false
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

/// The variant whose time a variant's "added" counts from: [`YIELD_BASE`] for the variants
/// whose inner future yields once, else [`BARE`].
pub fn base_of(variant: &str) -> &'static str {
    if variant.contains("yields once") {
        YIELD_BASE
    } else {
        BARE
    }
}

/// The peer a courier variant is held against: the peer doing the same job, or for the
/// preset the same stack built from peers ([`crate::peer`]).
pub fn best_peer(variant: &str) -> Option<&'static str> {
    Some(match variant {
        "courier deadline" | "courier attempt_timeout" => "tower timeout",
        "courier retry" => "tower retry (peer policy)",
        "courier breaker" | "courier breaker (the preset's rule)" => "failsafe per host",
        "courier breaker (global)" => "failsafe circuit breaker",
        "courier ratelimit" => "governor per host",
        "courier ratelimit (global)" => "tower rate_limit",
        "courier cache (miss)" => "http-cache-tower (no validator)",
        "courier cache (hit)" => "http-cache-tower (hit)",
        "courier preset (defaults, 5 layers)"
        | "courier preset, adaptive pacing off"
        | "courier preset, concurrency limit off"
        | "courier preset, 50 rules (none matches)" => PEER_STACK,
        "courier preset + ratelimit (6 layers)" => PEER_STACK_GOVERNOR,
        PRESET_WITHOUT_CACHE => PEER_STACK_WITHOUT_CACHE,
        "courier deadline, inner yields once" | "courier attempt_timeout, inner yields once" => {
            "tower timeout, inner yields once"
        }
        _ => return None,
    })
}

/// The floor a courier variant is held against: the least any layer doing its job and
/// keeping its contract does ([`crate::floors`]).
pub fn floor_of(variant: &str) -> Option<&'static str> {
    Some(match variant {
        "courier deadline" => "floor deadline (extension only)",
        "courier attempt_timeout" => "tower timeout",
        "courier retry" => "floor retry (head kept, one record)",
        "courier breaker" | "courier breaker (the preset's rule)" => "floor breaker (per host)",
        "courier breaker (global)" => "floor breaker (shared state)",
        "courier ratelimit" | "courier adaptive pacing (healthy host)" => "floor bucket (per host)",
        "courier cache (miss)" => MISS_FLOOR,
        PRESET_WITHOUT_CACHE => PRESET_FLOOR,
        _ => return None,
    })
}

/// The peer stack's variant ([`crate::peer::stack`] without a limiter).
pub const PEER_STACK: &str = "peer stack (5 features)";

/// The peer stack with governor's limiter.
pub const PEER_STACK_GOVERNOR: &str = "peer stack + governor (6 features)";

/// The cache's floor on a miss that keeps the whole contract ([`floors::MissFloor`]).
pub const MISS_FLOOR: &str = "floor cache (miss, flight probed, URI kept)";

/// The preset without its cache at its floor ([`floors::preset_floor`]).
const PRESET_FLOOR: &str = "floor stack (the preset's contracts, no cache)";

/// The preset without its cache, most users' case.
pub const PRESET_WITHOUT_CACHE: &str = "courier preset without its cache (4 layers)";

/// The peer stack without its cache ([`crate::peer::stack_without_cache`]).
pub const PEER_STACK_WITHOUT_CACHE: &str = "peer stack without its cache (4 features)";

/// A governor quota that never runs dry.
fn governor_unlimited() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::MAX).allow_burst(NonZeroU32::MAX)
}

/// One whole call through a variant; true when it answered on the first poll.
pub type Call = Box<dyn FnMut() -> bool>;

/// One variant: its name, and how to build it. Built only when it is to be called, so that a
/// process that counts one variant holds nothing of the others: the heap its calls allocate
/// from is the same whichever variants the list has beside it.
pub struct Variant {
    /// What it measures, e.g. `courier retry`.
    pub name: &'static str,
    build: Box<dyn FnOnce() -> Call>,
}

impl Variant {
    /// A variant that `build` makes.
    fn lazy(name: &'static str, build: impl FnOnce() -> Call + 'static) -> Self {
        Self {
            name,
            build: Box::new(build),
        }
    }

    /// Builds the variant's stack (a cache variant makes its priming call then): a call
    /// through it.
    pub fn build(self) -> Call {
        (self.build)()
    }
}

impl fmt::Debug for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Variant")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A variant calling the service `make` builds.
fn variant<S, RB>(name: &'static str, make: impl FnOnce() -> S + 'static) -> Variant
where
    S: Service<Request<Body>, Response = Response<RB>> + 'static,
    RB: http_body::Body,
{
    Variant::lazy(name, move || {
        let mut svc = make();
        let uri: Uri = URI.parse().expect("a valid uri");
        Box::new(move || one(&mut svc, &uri))
    })
}

/// A variant over [`YieldOnce`].
fn yielding<S>(name: &'static str, make: impl FnOnce() -> S + 'static) -> Variant
where
    S: Service<Request<Body>> + 'static,
{
    Variant::lazy(name, move || {
        let mut svc = make();
        let uri: Uri = URI.parse().expect("a valid uri");
        Box::new(move || one_yielding(&mut svc, &uri))
    })
}

/// A cache variant whose first call (which stores the entry) is made when it is built, before
/// it is measured.
fn primed<S, RB>(name: &'static str, make: impl FnOnce() -> S + 'static) -> Variant
where
    S: Service<Request<Body>, Response = Response<RB>> + 'static,
    RB: http_body::Body,
{
    Variant::lazy(name, move || {
        let mut svc = make();
        let uri: Uri = URI.parse().expect("a valid uri");
        assert!(one(&mut svc, &uri), "{name}: the priming call answers");
        Box::new(move || one(&mut svc, &uri))
    })
}

/// The preset with 50 rules by host ahead of the default, none of which takes the bench's
/// calls: every call is matched against all 50, then goes through the default's stack.
pub fn fifty_rules() -> CourierLayer {
    (0..50).fold(CourierLayer::new(), |layer, i| {
        layer.route(
            courier::routes::Route::new().host(&format!("upstream-{i}.example")),
            |l| l.deadline(Duration::from_secs(5)),
        )
    })
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
        variant(BARE, move || service_fn(ok)),
        variant("courier deadline", move || {
            DeadlineLayer::new(Duration::from_secs(90)).layer(service_fn(ok))
        }),
        variant("courier attempt_timeout", move || {
            AttemptTimeoutLayer::new(per_call).layer(service_fn(ok))
        }),
        variant("courier retry", move || {
            RetryLayer::new().layer(service_fn(ok))
        }),
        variant("courier breaker", move || {
            CircuitBreakerLayer::new().layer(service_fn(ok))
        }),
        variant("courier breaker (the preset's rule)", move || {
            courier::preset::preset_breaker().layer(service_fn(ok))
        }),
        variant("courier ratelimit", move || {
            unlimited().layer(service_fn(ok))
        }),
        variant("courier cache (miss)", move || {
            EtagCacheLayer::new().layer(service_fn(ok))
        }),
        variant("courier adaptive pacing (healthy host)", move || {
            courier::ratelimit::AdaptivePacingLayer::new().layer(service_fn(ok))
        }),
        variant("courier preset (defaults, 5 layers)", move || {
            CourierLayer::new().layer(service_fn(ok))
        }),
        variant("courier preset, adaptive pacing off", move || {
            CourierLayer::new()
                .adaptive_pacing(None)
                .layer(service_fn(ok))
        }),
        variant("courier preset, concurrency limit off", move || {
            CourierLayer::new()
                .concurrency_limit(None)
                .layer(service_fn(ok))
        }),
        variant("courier preset, 50 rules (none matches)", move || {
            fifty_rules().layer(service_fn(ok))
        }),
        variant("courier concurrency limit (fixed)", move || {
            courier::concurrency::ConcurrencyLimitLayer::new()
                .fixed(std::num::NonZeroUsize::new(1000).unwrap())
                .layer(service_fn(ok))
        }),
        variant("courier concurrency limit (adaptive)", move || {
            courier::concurrency::ConcurrencyLimitLayer::new().layer(service_fn(ok))
        }),
        variant("courier preset + ratelimit (6 layers)", move || {
            CourierLayer::new()
                .rate_limit(unlimited())
                .layer(service_fn(ok))
        }),
        variant("tower timeout", move || {
            tower::timeout::TimeoutLayer::new(per_call).layer(service_fn(ok))
        }),
        variant("tower retry (peer policy)", move || {
            tower::retry::RetryLayer::new(PeerPolicy::default()).layer(service_fn(ok))
        }),
        variant("tower rate_limit", move || {
            tower::limit::RateLimitLayer::new(u64::MAX, Duration::from_secs(1))
                .layer(service_fn(ok))
        }),
        variant(PEER_STACK, move || peer::stack(service_fn(ok), None)),
        variant(PEER_STACK_GOVERNOR, move || {
            peer::stack(service_fn(ok), Some(governor_unlimited()))
        }),
        variant("failsafe per host", move || {
            peer::FailsafeLayer::default().layer(service_fn(ok))
        }),
        variant("governor per host", move || {
            peer::GovernorLayer::new(governor_unlimited()).layer(service_fn(ok))
        }),
        variant("http-cache-tower (no validator)", move || {
            peer::cache_layer().layer(service_fn(ok))
        }),
        variant("floor deadline (extension only)", move || {
            floors::deadline_only(Duration::from_secs(90), service_fn(ok))
        }),
        variant("floor retry (head kept, one record)", move || {
            floors::AttemptsFloor::new(service_fn(ok))
        }),
        variant("floor breaker (shared state)", move || {
            floors::Floor::new(service_fn(ok))
        }),
        variant("floor breaker (per host)", move || {
            floors::FloorPerHost::new(service_fn(ok))
        }),
        variant("floor bucket (per host)", move || {
            floors::FloorPerHost::with_clock(service_fn(ok))
        }),
        variant("floor cache (lookup, status)", move || {
            floors::LookupFloor::new(service_fn(ok))
        }),
        variant("tower-resilience circuit breaker", move || {
            tower_resilience_circuitbreaker::CircuitBreakerLayer::builder()
                .build()
                .expect("the default config is valid")
                .layer(service_fn(ok))
        }),
    ];
    out.push(Variant::lazy("failsafe circuit breaker", || {
        use failsafe::futures::CircuitBreaker as _;
        let breaker = failsafe::Config::new().build();
        let mut svc = service_fn(ok);
        let uri: Uri = URI.parse().expect("a valid uri");
        Box::new(move || {
            let mut cx = Context::from_waker(Waker::noop());
            if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
                return false;
            }
            let fut = pin!(breaker.call(svc.call(request(&uri))));
            match fut.poll(&mut cx) {
                Poll::Ready(Ok(response)) => body_to_end(response.into_body(), &mut cx),
                _ => false,
            }
        })
    }));
    out.extend([
        variant("courier breaker (global)", move || {
            CircuitBreakerLayer::new().global().layer(service_fn(ok))
        }),
        variant("courier ratelimit (global)", move || {
            unlimited().global().layer(service_fn(ok))
        }),
        Variant::lazy("courier ratelimit (2 hosts in turn)", || {
            let mut svc = unlimited().layer(service_fn(ok));
            let uris: [Uri; 2] = [
                URI.parse().expect("a valid uri"),
                "http://other.example.com:8080/v1/items?page=2"
                    .parse()
                    .expect("a valid uri"),
            ];
            let mut turn = 0;
            Box::new(move || {
                turn ^= 1;
                one(&mut svc, &uris[turn])
            })
        }),
        primed("courier cache (hit)", move || {
            EtagCacheLayer::new().layer(service_fn(fresh))
        }),
        primed("http-cache-tower (hit)", move || {
            peer::cache_layer().layer(service_fn(fresh))
        }),
        primed("courier cache (304 revalidated)", move || {
            EtagCacheLayer::new().layer(service_fn(validated))
        }),
        yielding(YIELD_BASE, move || YieldOnce),
        yielding("courier deadline, inner yields once", move || {
            DeadlineLayer::new(Duration::from_secs(90)).layer(YieldOnce)
        }),
        yielding("courier attempt_timeout, inner yields once", move || {
            AttemptTimeoutLayer::new(per_call).layer(YieldOnce)
        }),
        yielding("tower timeout, inner yields once", move || {
            tower::timeout::TimeoutLayer::new(per_call).layer(YieldOnce)
        }),
    ]);
    out.push(Variant::lazy(URL_PARSED, || {
        let mut svc = service_fn(ok);
        Box::new(move || {
            let Ok(mut url) = courier::client::Url::parse(std::hint::black_box(URI)) else {
                return false;
            };
            if !matches!(url.scheme(), "http" | "https") {
                return false;
            }
            url.set_fragment(None);
            let Ok(uri) = Uri::try_from(url.as_str()) else {
                return false;
            };
            one(&mut svc, &uri)
        })
    }));
    // Last, so that the variants above keep their indices from build to build.
    out.extend([
        variant(PRESET_WITHOUT_CACHE, move || {
            CourierLayer::new().cache(None).layer(service_fn(ok))
        }),
        variant(PEER_STACK_WITHOUT_CACHE, move || {
            peer::stack_without_cache(service_fn(ok))
        }),
        variant(MISS_FLOOR, move || floors::MissFloor::new(service_fn(ok))),
        variant(PRESET_FLOOR, move || floors::preset_floor(service_fn(ok))),
    ]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier::core::CacheStatus;
    use http_body::Body as _;

    #[test]
    fn the_cache_variants_take_the_path_they_are_named_for() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _rt = rt.enter();
        let uri: Uri = URI.parse().unwrap();
        let status = |svc: &mut dyn FnMut() -> Option<CacheStatus>| svc();
        for (upstream, want) in [
            (fresh as fn(_) -> _, CacheStatus::Hit),
            (validated, CacheStatus::Revalidated),
            (ok, CacheStatus::Miss),
        ] {
            let mut svc = EtagCacheLayer::new().layer(service_fn(upstream));
            let mut call = || {
                let mut cx = Context::from_waker(Waker::noop());
                let fut = pin!(svc.call(request(&uri)));
                let Poll::Ready(Ok(res)) = fut.poll(&mut cx) else {
                    return None;
                };
                let status = res.extensions().get::<CacheStatus>().copied();
                let mut body = pin!(res.into_body());
                while let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut cx) {
                    frame.ok()?;
                }
                status
            };
            assert_eq!(status(&mut call), Some(CacheStatus::Miss), "the first call");
            for _ in 0..3 {
                assert_eq!(status(&mut call), Some(want));
            }
        }
    }

    #[test]
    fn every_variant_answers_again_and_again() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _rt = rt.enter();
        let variants = variants();
        assert_eq!(variants[0].name, BARE);
        assert_eq!(variants.len(), 47);
        for v in variants {
            let name = v.name;
            let mut call = v.build();
            for _ in 0..1000 {
                assert!(call(), "{name} left the happy path");
            }
        }
    }
}
