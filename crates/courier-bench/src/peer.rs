//! The preset's features assembled from crates.io, as a careful user would: the stack courier's
//! preset is measured against (BENCHMARKS.md, "The preset against the same stack built from peers").
//!
//! Outermost first, the same order as the preset:
//!
//! | courier | peer |
//! | --- | --- |
//! | `Deadline` (90 s for the whole call) | tower `Timeout` (90 s) |
//! | `EtagCache` (64 MiB in memory) | http-cache-tower over moka, 64 MiB |
//! | `Retry` (safe methods, `Retry-After`, full jitter, budget) | tower `Retry` with [`PeerPolicy`] and a `TpsBudget` |
//! | `CircuitBreaker` per host | failsafe, one breaker per host ([`FailsafePerHost`]) |
//! | `TokenBucketRateLimit` per host (optional) | governor's keyed limiter ([`GovernorPerHost`]) |
//! | `AttemptTimeout` (30 s per attempt) | tower `Timeout` (30 s) |
//!
//! What the peers cannot do, and the tables say so: the timeout covers a body only where the
//! cache buffers it (a cacheable answer; never for an unsafe method), the retry policy neither
//! reads an HTTP-date `Retry-After` nor `x-ratelimit-reset` nor hands the caller a record of its
//! attempts, failsafe counts errors only (a 503 is a success to it), the per-host maps of the
//! breaker and the limiter grow without bound, the limiter does not read the server's quota
//! headers, and nothing paces an overloaded host.

use courier::core::BoxError;
use courier::core::idempotency::has_idempotency_key;
use dashmap::DashMap;
use failsafe::backoff::EqualJittered;
use failsafe::failure_policy::ConsecutiveFailures;
use failsafe::futures::CircuitBreaker as _;
use governor::{DefaultKeyedRateLimiter, Quota};
use http::header::RETRY_AFTER;
use http::uri::Authority;
use http::{Request, Response, StatusCode};
use http_cache::MokaManager;
use http_cache_tower::{HttpCacheLayer, HttpCacheService};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::{Policy, Retry};
use tower::timeout::Timeout;
use tower::util::Either;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// The peer cache's capacity, the preset cache's: 64 MiB.
pub const CACHE_BYTES: u64 = 64 << 20;

/// Failures in a row that open a host's breaker: the preset's count.
pub const BREAKER_FAILURES: u32 = 5;

/// The whole peer stack over `S`, outermost first: total timeout, cache, retry, breaker per
/// host, governor per host (or nothing), attempt timeout.
pub type PeerStack<S> = Timeout<
    HttpCacheService<
        Retry<PeerPolicy, FailsafePerHost<Either<GovernorPerHost<Timeout<S>>, Timeout<S>>>>,
        MokaManager,
    >,
>;

/// The peer stack over `transport`: the preset's timeouts (90 s in all, 30 s per attempt), a
/// 64 MiB http-cache-tower cache over moka, tower's `Retry` with [`PeerPolicy`], failsafe per
/// host, and governor per host when `quota` is given.
pub fn stack<S>(transport: S, quota: Option<Quota>) -> PeerStack<S> {
    ServiceBuilder::new()
        .timeout(courier::preset::DEFAULT_DEADLINE)
        .layer(cache_layer())
        .retry(PeerPolicy::default())
        .layer(FailsafeLayer::default())
        .option_layer(quota.map(GovernorLayer::new))
        .timeout(courier::preset::DEFAULT_ATTEMPT_TIMEOUT)
        .service(transport)
}

/// The peer stack without its cache, most users' case.
pub type PeerStackWithoutCache<S> = Timeout<Retry<PeerPolicy, FailsafePerHost<Timeout<S>>>>;

/// The peer stack over `transport` without the cache and the limiter: the preset's timeouts,
/// tower's `Retry` with [`PeerPolicy`], failsafe per host. What the preset without its cache
/// is held against.
pub fn stack_without_cache<S>(transport: S) -> PeerStackWithoutCache<S> {
    ServiceBuilder::new()
        .timeout(courier::preset::DEFAULT_DEADLINE)
        .retry(PeerPolicy::default())
        .layer(FailsafeLayer::default())
        .timeout(courier::preset::DEFAULT_ATTEMPT_TIMEOUT)
        .service(transport)
}

/// http-cache-tower over moka, bounded at [`CACHE_BYTES`] (entries weighed by their key and
/// stored bytes).
pub fn cache_layer() -> HttpCacheLayer<MokaManager> {
    let cache = moka::future::Cache::builder()
        .max_capacity(CACHE_BYTES)
        .weigher(|key: &String, value: &Arc<Vec<u8>>| {
            u32::try_from(key.len() + value.len()).unwrap_or(u32::MAX)
        })
        .build();
    HttpCacheLayer::new(MokaManager::new(cache))
}

/// The retry policy a careful user writes for tower's `Retry`, deciding what courier's retry
/// decides where a policy can: only requests safe to repeat (an idempotent method, or a
/// non-empty `Idempotency-Key`), on a 408, 429, 500, 502, 503, 504 or an error (not on the
/// breaker's refusal); at most 3 attempts; `Retry-After` in seconds (giving up when it asks
/// for more than a minute), else full jitter doubling from 0.5 s, or from 2 s after a 429 or
/// 503 without one, up to 30 s; and a `TpsBudget` of 10 % of the calls plus 1 retry a second
/// over 10 s (each call deposits once), shared by every clone.
#[derive(Clone)]
pub struct PeerPolicy {
    budget: Arc<TpsBudget>,
    retries: u32,
}

impl fmt::Debug for PeerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerPolicy")
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl Default for PeerPolicy {
    fn default() -> Self {
        Self {
            budget: Arc::new(TpsBudget::new(Duration::from_secs(10), 1, 0.1)),
            retries: 0,
        }
    }
}

impl PeerPolicy {
    /// Retries after the first attempt.
    pub const MAX_RETRIES: u32 = 2;
    /// The first backoff's ceiling.
    pub const BASE: Duration = Duration::from_millis(500);
    /// The first backoff's ceiling after a 429 or 503 without `Retry-After`.
    pub const OVERLOAD_BASE: Duration = Duration::from_secs(2);
    /// The longest `Retry-After` obeyed; a longer one ends the call with the answer.
    pub const MAX_WAIT: Duration = Duration::from_secs(60);
    /// The largest backoff.
    pub const CAP: Duration = Duration::from_secs(30);
}

/// Whether `req` may be sent again.
fn safe_to_repeat<B>(req: &Request<B>) -> bool {
    req.method().is_idempotent() || has_idempotency_key(req.headers())
}

/// A `Retry-After` in whole seconds.
fn retry_after<B>(res: &Response<B>) -> Option<Duration> {
    let value = res.headers().get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse().ok().map(Duration::from_secs)
}

impl<B: Clone, RB> Policy<Request<B>, Response<RB>, BoxError> for PeerPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<RB>, BoxError>,
    ) -> Option<Self::Future> {
        let (hint, overload) = match result {
            Ok(res)
                if matches!(
                    res.status(),
                    StatusCode::REQUEST_TIMEOUT
                        | StatusCode::TOO_MANY_REQUESTS
                        | StatusCode::INTERNAL_SERVER_ERROR
                        | StatusCode::BAD_GATEWAY
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                ) =>
            {
                let overload = matches!(
                    res.status(),
                    StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
                );
                (retry_after(res), overload)
            }
            Ok(_) => return None,
            Err(e) if e.is::<CircuitOpen>() => return None,
            Err(_) => (None, false),
        };
        if hint.is_some_and(|h| h > Self::MAX_WAIT)
            || self.retries >= Self::MAX_RETRIES
            || !safe_to_repeat(req)
            || !self.budget.withdraw()
        {
            return None;
        }
        self.retries += 1;
        let wait = hint.unwrap_or_else(|| {
            let base = if overload {
                Self::OVERLOAD_BASE
            } else {
                Self::BASE
            };
            let ceiling = base.saturating_mul(1 << (self.retries - 1)).min(Self::CAP);
            ceiling.mul_f64(rand::random::<f64>())
        });
        Some(tokio::time::sleep(wait))
    }

    /// Called once before the first attempt (where the call deposits into the budget) and
    /// once before each retry.
    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        if self.retries == 0 {
            self.budget.deposit();
        }
        safe_to_repeat(req).then(|| req.clone())
    }
}

/// failsafe's refusal: the host's circuit is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitOpen;

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("circuit open")
    }
}

impl std::error::Error for CircuitOpen {}

/// One failsafe breaker: open after [`BREAKER_FAILURES`] failures in a row, for 5 s to 60 s
/// (jittered).
type Breaker = failsafe::StateMachine<ConsecutiveFailures<EqualJittered>, ()>;

fn breaker() -> Breaker {
    failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            BREAKER_FAILURES,
            failsafe::backoff::equal_jittered(Duration::from_secs(5), Duration::from_secs(60)),
        ))
        .build()
}

/// The breakers of [`FailsafePerHost`], one per authority, and one for a request without.
#[derive(Clone)]
struct Breakers {
    by_host: Arc<DashMap<Authority, Breaker>>,
    no_host: Breaker,
}

/// failsafe's breaker as a tower layer, one breaker per authority (`host:port`). failsafe
/// counts errors as failures: a 5xx answer is a success to it.
#[derive(Clone)]
pub struct FailsafeLayer {
    breakers: Breakers,
}

impl Default for FailsafeLayer {
    fn default() -> Self {
        Self {
            breakers: Breakers {
                by_host: Arc::new(DashMap::new()),
                no_host: breaker(),
            },
        }
    }
}

impl fmt::Debug for FailsafeLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailsafeLayer")
            .field("hosts", &self.breakers.by_host.len())
            .finish()
    }
}

impl<S> Layer<S> for FailsafeLayer {
    type Service = FailsafePerHost<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FailsafePerHost {
            inner,
            breakers: self.breakers.clone(),
        }
    }
}

/// The service of [`FailsafeLayer`].
#[derive(Clone)]
pub struct FailsafePerHost<S> {
    inner: S,
    breakers: Breakers,
}

impl<S> fmt::Debug for FailsafePerHost<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailsafePerHost").finish_non_exhaustive()
    }
}

impl<S, B> Service<Request<B>> for FailsafePerHost<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BreakerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let breaker = match req.uri().authority() {
            Some(host) => match self.breakers.by_host.get(host) {
                Some(b) => b.clone(),
                None => self
                    .breakers
                    .by_host
                    .entry(host.clone())
                    .or_insert_with(breaker)
                    .clone(),
            },
            None => self.breakers.no_host.clone(),
        };
        if !breaker.is_call_permitted() {
            return BreakerFuture::Rejected;
        }
        BreakerFuture::Called {
            inner: breaker.call(self.inner.call(req)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`FailsafePerHost`]: failsafe's, with its error as a [`BoxError`], or
    /// the refusal when the host's circuit is open (the call below is then never made).
    #[project = BreakerProj]
    #[allow(missing_docs)]
    pub enum BreakerFuture<F> {
        Called {
            #[pin]
            inner: failsafe::futures::ResponseFuture<F, ConsecutiveFailures<EqualJittered>, (), failsafe::Any>,
        },
        Rejected,
    }
}

impl<F> fmt::Debug for BreakerFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Called { .. } => "BreakerFuture::Called",
            Self::Rejected => "BreakerFuture::Rejected",
        })
    }
}

impl<F, T, E> Future for BreakerFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = match self.project() {
            BreakerProj::Called { inner } => inner,
            BreakerProj::Rejected => return Poll::Ready(Err(CircuitOpen.into())),
        };
        Poll::Ready(match ready!(inner.poll(cx)) {
            Ok(res) => Ok(res),
            Err(failsafe::Error::Inner(e)) => Err(e.into()),
            Err(failsafe::Error::Rejected) => Err(CircuitOpen.into()),
        })
    }
}

/// governor's keyed limiter as a tower layer, one bucket per authority: a request the
/// bucket refuses waits until it allows (`until_key_ready`).
#[derive(Clone)]
pub struct GovernorLayer {
    limiter: Arc<DefaultKeyedRateLimiter<Authority>>,
}

impl GovernorLayer {
    /// A bucket of `quota` per authority.
    pub fn new(quota: Quota) -> Self {
        Self {
            limiter: Arc::new(governor::RateLimiter::keyed(quota)),
        }
    }
}

impl fmt::Debug for GovernorLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernorLayer").finish_non_exhaustive()
    }
}

impl<S> Layer<S> for GovernorLayer {
    type Service = GovernorPerHost<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GovernorPerHost {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

/// The service of [`GovernorLayer`].
#[derive(Clone)]
pub struct GovernorPerHost<S> {
    inner: S,
    limiter: Arc<DefaultKeyedRateLimiter<Authority>>,
}

impl<S> fmt::Debug for GovernorPerHost<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernorPerHost").finish_non_exhaustive()
    }
}

/// A request that waited for its bucket.
type Waited<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S, B> Service<Request<B>> for GovernorPerHost<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = GovernorFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(host) = req.uri().authority() else {
            return GovernorFuture::Now {
                inner: self.inner.call(req),
            };
        };
        if self.limiter.check_key(host).is_ok() {
            return GovernorFuture::Now {
                inner: self.inner.call(req),
            };
        }
        let (limiter, host) = (self.limiter.clone(), host.clone());
        let inner = self.inner.clone();
        GovernorFuture::Waited {
            inner: Box::pin(async move {
                limiter.until_key_ready(&host).await;
                inner.oneshot(req).await.map_err(Into::into)
            }),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`GovernorPerHost`]: the call at once, or after its wait.
    #[project = GovernorProj]
    #[allow(missing_docs)]
    pub enum GovernorFuture<F, T> {
        /// The bucket allowed the request at once.
        Now {
            #[pin]
            inner: F,
        },
        /// The request waited for its bucket.
        Waited {
            inner: Waited<T>,
        },
    }
}

impl<F, T> fmt::Debug for GovernorFuture<F, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Now { .. } => "GovernorFuture::Now",
            Self::Waited { .. } => "GovernorFuture::Waited",
        })
    }
}

impl<F, T, E> Future for GovernorFuture<F, T>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            GovernorProj::Now { inner } => inner.poll(cx).map_err(Into::into),
            GovernorProj::Waited { inner } => inner.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::Method;
    use http_body_util::{BodyExt, Full};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::service_fn;

    type Body = Full<Bytes>;

    /// A host answering `status` (with `Retry-After: 1` when `hint`), counting its requests.
    fn host(
        status: StatusCode,
        hint: bool,
        calls: &Arc<AtomicUsize>,
    ) -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = BoxError,
        Future = std::future::Ready<Result<Response<Body>, BoxError>>,
    > + Clone
    + Send
    + 'static {
        let calls = calls.clone();
        service_fn(move |_req: Request<Body>| {
            calls.fetch_add(1, Ordering::Relaxed);
            let mut res = Response::new(Body::default());
            *res.status_mut() = status;
            if hint {
                res.headers_mut()
                    .insert(RETRY_AFTER, http::HeaderValue::from_static("1"));
            }
            std::future::ready(Ok(res))
        })
    }

    fn req(method: Method, key: bool) -> Request<Body> {
        let mut req = Request::builder()
            .method(method)
            .uri("http://api.example.com/v1/items");
        if key {
            req = req.header("idempotency-key", "k1");
        }
        req.body(Body::default()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_policy_retries_only_what_is_safe_and_waits_what_the_host_says() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = tower::retry::RetryLayer::new(PeerPolicy::default()).layer(host(
            StatusCode::SERVICE_UNAVAILABLE,
            true,
            &calls,
        ));
        let start = tokio::time::Instant::now();
        let res = svc.clone().oneshot(req(Method::GET, false)).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(calls.swap(0, Ordering::Relaxed), 3, "three attempts");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "Retry-After: 1, twice"
        );

        svc.clone().oneshot(req(Method::POST, false)).await.unwrap();
        assert_eq!(calls.swap(0, Ordering::Relaxed), 1, "a POST is sent once");
        svc.clone().oneshot(req(Method::POST, true)).await.unwrap();
        assert!(
            calls.swap(0, Ordering::Relaxed) > 1,
            "a POST with an Idempotency-Key is retried"
        );
        let mut empty = req(Method::POST, false);
        empty
            .headers_mut()
            .insert("idempotency-key", http::HeaderValue::from_static("\"\""));
        svc.clone().oneshot(empty).await.unwrap();
        assert_eq!(
            calls.swap(0, Ordering::Relaxed),
            1,
            "an empty Idempotency-Key does not make a POST safe"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_policy_backs_off_with_full_jitter_without_a_hint() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = tower::retry::RetryLayer::new(PeerPolicy::default()).layer(host(
            StatusCode::BAD_GATEWAY,
            false,
            &calls,
        ));
        let start = tokio::time::Instant::now();
        svc.oneshot(req(Method::GET, false)).await.unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert!(
            start.elapsed() <= PeerPolicy::BASE * 3,
            "0.5 s then 1 s at most"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_policy_gives_up_on_a_long_retry_after() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let svc = tower::retry::RetryLayer::new(PeerPolicy::default()).layer(service_fn(
            move |_req: Request<Body>| {
                counted.fetch_add(1, Ordering::Relaxed);
                let mut res = Response::new(Body::default());
                *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                res.headers_mut()
                    .insert(RETRY_AFTER, http::HeaderValue::from_static("3600"));
                std::future::ready(Ok::<_, BoxError>(res))
            },
        ));
        let start = tokio::time::Instant::now();
        let res = svc.oneshot(req(Method::GET, false)).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(start.elapsed(), Duration::ZERO, "answered at once");
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_circuit_reaches_nothing_below_and_is_not_retried() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let failing = service_fn(move |_req: Request<Body>| {
            counted.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Err::<Response<Body>, BoxError>("refused".into()))
        });
        let svc = tower::retry::RetryLayer::new(PeerPolicy::default())
            .layer(FailsafeLayer::default().layer(failing));
        let mut last = None;
        for _ in 0..4 {
            last = Some(
                svc.clone()
                    .oneshot(req(Method::GET, false))
                    .await
                    .unwrap_err(),
            );
        }
        assert_eq!(
            calls.load(Ordering::Relaxed),
            BREAKER_FAILURES as usize,
            "nothing reaches the service once the circuit is open"
        );
        assert!(last.unwrap().is::<CircuitOpen>());
    }

    #[tokio::test(start_paused = true)]
    async fn failsafe_opens_per_host_after_the_failures_in_a_row() {
        let layer = FailsafeLayer::default();
        let mut failing = layer.layer(service_fn(|_req: Request<Body>| {
            std::future::ready(Err::<Response<Body>, BoxError>("refused".into()))
        }));
        for _ in 0..BREAKER_FAILURES {
            let err = (&mut failing)
                .oneshot(req(Method::GET, false))
                .await
                .unwrap_err();
            assert_eq!(err.to_string(), "refused");
        }
        let err = (&mut failing)
            .oneshot(req(Method::GET, false))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "circuit open");
        let mut other = req(Method::GET, false);
        *other.uri_mut() = "http://other.example.com/".parse().unwrap();
        let err = failing.oneshot(other).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "refused",
            "another host's breaker is closed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn governor_makes_a_request_wait_for_its_host_bucket() {
        let calls = Arc::new(AtomicUsize::new(0));
        let quota = Quota::per_second(std::num::NonZeroU32::new(2).unwrap());
        let svc = GovernorLayer::new(quota).layer(host(StatusCode::OK, false, &calls));
        for _ in 0..3 {
            svc.clone().oneshot(req(Method::GET, false)).await.unwrap();
        }
        assert_eq!(calls.load(Ordering::Relaxed), 3, "every request is sent");
    }

    #[tokio::test]
    async fn the_stack_serves_a_fresh_answer_from_its_cache() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let fresh = service_fn(move |_req: Request<Body>| {
            counted.fetch_add(1, Ordering::Relaxed);
            let mut res = Response::new(Full::new(Bytes::from_static(b"hello")));
            res.headers_mut().insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static("max-age=3600"),
            );
            std::future::ready(Ok::<_, BoxError>(res))
        });
        let svc = stack(fresh, None);
        for _ in 0..3 {
            let res = svc.clone().oneshot(req(Method::GET, false)).await.unwrap();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "hello");
        }
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "served from the cache twice"
        );
    }
}
