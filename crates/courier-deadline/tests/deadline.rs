//! The deadline and attempt-timeout layers on paused time.

use bytes::Bytes;
use courier_core::classify::{FailureKind, classify_error};
use courier_core::{AttemptTimedOut, BoxError, DeadlineExceeded};
use courier_deadline::propagate::DEFAULT_HEADER;
use courier_deadline::scope::scope;
use courier_deadline::{AttemptTimeoutLayer, DeadlineBody, DeadlineLayer};
use courier_testkit::body::ScriptedBody;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Empty};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A body that yields one frame, then pends forever without waking anyone.
fn frame_then_stall() -> ScriptedBody<Infallible> {
    ScriptedBody::chunks(["x"]).stall()
}

/// Answers after `delay` with a body that sends one byte and then stalls.
fn stalling(
    delay: Duration,
) -> impl Service<
    Request<()>,
    Response = Response<ScriptedBody<Infallible>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    service_fn(move |_req: Request<()>| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, Infallible>(Response::new(frame_then_stall()))
    })
}

/// What a request carried: its deadline extension and its deadline header.
type Seen = (Option<Instant>, Option<String>);

/// Answers `status` after `delay`, counting calls and recording what each request carried.
#[derive(Clone, Default)]
struct Upstream {
    delay: Duration,
    status: u16,
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    fn new(delay: Duration, status: u16) -> Self {
        Self {
            delay,
            status,
            ..Self::default()
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Service<Request<()>> for Upstream {
    type Response = Response<Empty<Bytes>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let header = req
            .headers()
            .get(DEFAULT_HEADER)
            .map(|v| v.to_str().unwrap().to_owned());
        self.seen.lock().unwrap().push((
            courier_core::CallContext::deadline_in(req.extensions()),
            header,
        ));
        let (delay, status) = (self.delay, self.status);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let mut res = Response::new(Empty::new());
            *res.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok(res)
        })
    }
}

fn exceeded(err: &BoxError) -> DeadlineExceeded {
    *err.downcast_ref::<DeadlineExceeded>()
        .unwrap_or_else(|| panic!("expected DeadlineExceeded, got {err:?}"))
}

#[tokio::test(start_paused = true)]
async fn deadline_fires_while_waiting_for_headers() {
    let upstream = Upstream::new(ms(5000), 200);
    let svc = DeadlineLayer::new(ms(1000)).layer(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(1000), "fails exactly at the deadline");
    let err = exceeded(&err);
    assert_eq!((err.budget(), err.elapsed()), (ms(1000), ms(1000)));
    assert_eq!(upstream.calls(), 1);
    let (deadline, header) = upstream.seen()[0].clone();
    assert_eq!(deadline.unwrap(), start + ms(1000));
    assert_eq!(header, None, "propagation is off by default");
}

#[tokio::test(start_paused = true)]
async fn answer_in_time_passes_through() {
    let svc = DeadlineLayer::new(ms(1000)).layer(Upstream::new(ms(999), 503));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), 503, "a status is never turned into an error");
    assert!(res.body().is_bounded());
    let rest = res.into_body().collect().await.unwrap();
    assert!(rest.to_bytes().is_empty());
}

#[tokio::test(start_paused = true)]
async fn deadline_fires_while_reading_the_body() {
    for header_delay in [Duration::ZERO, ms(400)] {
        let svc = DeadlineLayer::new(ms(1000)).layer(stalling(header_delay));
        let start = Instant::now();
        let res = svc.oneshot(Request::new(())).await.unwrap();
        assert_eq!(start.elapsed(), header_delay);
        let mut body = res.into_body();
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "x");
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            start.elapsed(),
            ms(1000),
            "the body stalls until the deadline, no longer"
        );
        let err = exceeded(&err);
        assert_eq!((err.budget(), err.elapsed()), (ms(1000), ms(1000)));
        // Reading again keeps failing instead of hanging.
        assert!(body.frame().await.unwrap().is_err());
        assert_eq!(start.elapsed(), ms(1000));
    }
}

#[tokio::test(start_paused = true)]
async fn ready_data_does_not_outlive_the_deadline() {
    let svc = DeadlineLayer::new(ms(100)).layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from(
            "late",
        ))))
    }));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    tokio::time::advance(ms(150)).await;
    let mut body = res.into_body();
    assert!(exceeded(&body.frame().await.unwrap().unwrap_err()).elapsed() >= ms(100));
}

#[tokio::test(start_paused = true)]
async fn spent_deadline_sends_nothing() {
    let upstream = Upstream::new(ms(10), 200);
    let err = DeadlineLayer::new(Duration::ZERO)
        .layer(upstream.clone())
        .oneshot(Request::new(()))
        .await
        .unwrap_err();
    assert_eq!(exceeded(&err).budget(), Duration::ZERO);

    let mut req = Request::new(());
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(Instant::now());
    tokio::time::advance(ms(5)).await;
    for svc in [
        DeadlineLayer::new(ms(1000)).layer(upstream.clone()).boxed(),
        AttemptTimeoutLayer::new(ms(1000))
            .layer(upstream.clone())
            .boxed(),
    ] {
        let mut r = Request::new(());
        *r.extensions_mut() = req.extensions().clone();
        let err = svc.oneshot(r).await.unwrap_err();
        assert!(err.is::<DeadlineExceeded>(), "{err}");
    }
    assert_eq!(
        upstream.calls(),
        0,
        "a spent deadline never reaches the wire"
    );
}

#[tokio::test(start_paused = true)]
async fn nested_deadlines_only_shrink() {
    // A longer inner deadline does not extend the outer one.
    let upstream = Upstream::new(ms(60_000), 200);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(500)))
        .layer(DeadlineLayer::new(ms(10_000)))
        .service(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(500));
    assert_eq!(upstream.seen()[0].0.unwrap(), start + ms(500));
    let err = exceeded(&err);
    assert_eq!(err.budget(), ms(500));

    // A shorter inner deadline wins; the outer one, not yet spent, passes its error on.
    let upstream = Upstream::new(ms(60_000), 200);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(10_000)))
        .layer(DeadlineLayer::new(ms(200)))
        .service(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(200));
    assert_eq!(upstream.seen()[0].0.unwrap(), start + ms(200));
    assert_eq!(exceeded(&err).budget(), ms(200));

    // A deadline already on the request is never extended either.
    let upstream = Upstream::new(ms(60_000), 200);
    let mut req = Request::new(());
    let start = Instant::now();
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(300));
    let err = DeadlineLayer::new(ms(10_000))
        .layer(upstream.clone())
        .oneshot(req)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(300));
    assert_eq!(exceeded(&err).budget(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_shrinks_to_the_time_left() {
    // The deadline is nearer than the per-attempt bound: the deadline's error, at its time.
    let upstream = Upstream::new(ms(60_000), 200);
    let start = Instant::now();
    let mut req = Request::new(());
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(300));
    let err = AttemptTimeoutLayer::new(ms(1000))
        .layer(upstream.clone())
        .oneshot(req)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(300));
    assert_eq!(exceeded(&err).budget(), ms(300));
    assert_eq!(classify_error(&*err), FailureKind::Local, "never retried");

    // The per-attempt bound is nearer: a retryable timeout.
    let start = Instant::now();
    let mut req = Request::new(());
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(5000));
    let err = AttemptTimeoutLayer::new(ms(1000))
        .layer(upstream.clone())
        .oneshot(req)
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(1000));
    let timed_out = err
        .downcast_ref::<AttemptTimedOut>()
        .expect("attempt timeout");
    assert_eq!(timed_out.timeout(), ms(1000));
    assert_eq!(classify_error(&*err), FailureKind::Timeout, "retryable");

    // No deadline at all: the per-attempt bound.
    let start = Instant::now();
    let err = AttemptTimeoutLayer::new(ms(700))
        .layer(upstream)
        .oneshot(Request::new(()))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), ms(700));
    assert!(err.is::<AttemptTimedOut>());
}

#[tokio::test(start_paused = true)]
async fn attempt_timeout_bounds_headers_by_default_and_the_body_on_request() {
    let res = AttemptTimeoutLayer::new(ms(1000))
        .layer(stalling(Duration::ZERO))
        .oneshot(Request::new(()))
        .await
        .unwrap();
    assert!(!res.body().is_bounded());
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    let start = Instant::now();
    let waited = tokio::time::timeout(ms(5000), body.frame()).await;
    assert!(
        waited.is_err(),
        "headers-only: the body is left to the deadline"
    );
    assert_eq!(start.elapsed(), ms(5000));

    let start = Instant::now();
    let res = AttemptTimeoutLayer::new(ms(1000))
        .through_body(true)
        .layer(stalling(ms(200)))
        .oneshot(Request::new(()))
        .await
        .unwrap();
    let mut body = res.into_body();
    body.frame().await.unwrap().unwrap();
    let err = body.frame().await.unwrap().unwrap_err();
    assert_eq!(start.elapsed(), ms(1000));
    assert!(err.is::<AttemptTimedOut>(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn propagates_the_time_left_to_the_server() {
    let upstream = Upstream::new(Duration::ZERO, 200);
    DeadlineLayer::new(Duration::from_micros(1_500_900))
        .propagate(DEFAULT_HEADER)
        .layer(upstream.clone())
        .oneshot(Request::new(()))
        .await
        .unwrap();
    assert_eq!(
        upstream.seen()[0].1.as_deref(),
        Some("1500"),
        "whole ms, rounded down"
    );

    // A configurable name; an absurd budget neither overflows nor goes negative.
    let name = http::HeaderName::from_static("x-budget");
    let seen = Arc::new(Mutex::new(None));
    let recorded = seen.clone();
    DeadlineLayer::new(Duration::MAX)
        .propagate(name.clone())
        .layer(service_fn(move |req: Request<()>| {
            *recorded.lock().unwrap() = req.headers().get("x-budget").cloned();
            async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) }
        }))
        .oneshot(Request::new(()))
        .await
        .unwrap();
    let value: u64 = seen
        .lock()
        .unwrap()
        .clone()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        value > 86_400_000 * 365,
        "a far deadline reads as far: {value}"
    );
}

/// A tiny retry loop for the tests: retries 503s and `Timeout` failures, waiting `backoff`.
#[derive(Clone)]
struct TestRetry<S> {
    inner: S,
    backoff: Duration,
    /// Stops (returning the last answer) when the next wait would pass the deadline.
    respect_deadline: bool,
    /// Retries every failure, our own refusals included: a badly behaved loop.
    retry_everything: bool,
}

impl<S, B> Service<Request<()>> for TestRetry<S>
where
    S: Service<Request<()>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            loop {
                let mut attempt = Request::new(());
                *attempt.headers_mut() = req.headers().clone();
                *attempt.extensions_mut() = req.extensions().clone();
                let answer = this.inner.clone().oneshot(attempt).await;
                let again = match &answer {
                    Ok(res) => res.status() == StatusCode::SERVICE_UNAVAILABLE,
                    Err(e) => this.retry_everything || classify_error(&**e) == FailureKind::Timeout,
                };
                if !again {
                    return answer;
                }
                let past = courier_core::CallContext::get(req.extensions())
                    .is_some_and(|c| c.would_pass(this.backoff));
                if this.respect_deadline && past {
                    return answer;
                }
                tokio::time::sleep(this.backoff).await;
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn retry_loop_stops_when_the_budget_is_spent() {
    // Attempts time out at 300 ms; the third one only has 200 ms left and ends with the
    // deadline, which the loop does not retry.
    let upstream = Upstream::new(ms(60_000), 200);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)))
        .layer_fn(|inner| TestRetry {
            inner,
            backoff: ms(100),
            respect_deadline: false,
            retry_everything: false,
        })
        .layer(AttemptTimeoutLayer::new(ms(300)).propagate(DEFAULT_HEADER))
        .service(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(1000), "never later than the deadline");
    let err = exceeded(&err);
    assert_eq!(
        (err.budget(), err.elapsed()),
        (ms(1000), ms(1000)),
        "restated with the call's budget"
    );
    assert_eq!(upstream.calls(), 3);
    let headers: Vec<_> = upstream
        .seen()
        .into_iter()
        .map(|(_, h)| h.unwrap())
        .collect();
    assert_eq!(
        headers,
        ["300", "300", "200"],
        "each attempt sends its own bound"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_loop_that_ignores_the_deadline_is_cut_at_it() {
    let upstream = Upstream::new(ms(70), 503);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)))
        .layer_fn(|inner| TestRetry {
            inner,
            backoff: ms(50),
            respect_deadline: false,
            retry_everything: true,
        })
        .service(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(1000));
    assert_eq!(exceeded(&err).budget(), ms(1000));
    // 0..70, 120..190, ...: the ninth attempt starts at 960 and is cut off.
    assert_eq!(upstream.calls(), 9);
}

#[tokio::test(start_paused = true)]
async fn retry_loop_that_reads_the_deadline_returns_the_last_answer() {
    let upstream = Upstream::new(ms(250), 503);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)))
        .layer_fn(|inner| TestRetry {
            inner,
            backoff: ms(300),
            respect_deadline: true,
            retry_everything: false,
        })
        .service(upstream.clone());
    let start = Instant::now();
    let res = svc.oneshot(Request::new(())).await.unwrap();
    // 0..250, wait, 550..800; another wait would end at 1100.
    assert_eq!(res.status(), 503);
    assert_eq!(start.elapsed(), ms(800));
    assert_eq!(upstream.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn client_layers_inherit_the_active_scope() {
    let start = Instant::now();
    let served = start + ms(400);
    let upstream = Upstream::new(ms(60_000), 200);

    // DeadlineLayer shrinks to the scope, and sends what is left of it.
    let svc = DeadlineLayer::new(ms(10_000))
        .propagate(DEFAULT_HEADER)
        .layer(upstream.clone());
    let err = scope(served, async move {
        tokio::time::sleep(ms(100)).await;
        svc.oneshot(Request::new(())).await
    })
    .await
    .unwrap_err();
    assert_eq!(start.elapsed(), ms(400));
    assert_eq!(exceeded(&err).budget(), ms(300));
    assert_eq!(upstream.seen()[0], (Some(served), Some("300".to_owned())));

    // A later extension on the request does not win over the scope either.
    let start = Instant::now();
    let served = start + ms(250);
    let mut req = Request::new(());
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(900));
    let svc = AttemptTimeoutLayer::new(ms(1000)).layer(upstream.clone());
    let err = scope(served, svc.oneshot(req)).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(250));
    assert!(err.is::<DeadlineExceeded>());

    // An earlier extension does.
    let start = Instant::now();
    let mut req = Request::new(());
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + ms(50));
    let svc = DeadlineLayer::new(ms(10_000)).layer(upstream.clone());
    let err = scope(start + ms(250), svc.oneshot(req)).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(50));
    assert!(err.is::<DeadlineExceeded>());
}

#[test]
fn errors_classify_as_the_retry_layer_expects() {
    let timeout: BoxError = Box::new(AttemptTimedOut::new(ms(300)));
    assert_eq!(classify_error(&*timeout), FailureKind::Timeout);
    assert!(classify_error(&*timeout).is_retryable());
    let spent: BoxError = Box::new(DeadlineExceeded::new(ms(1000), ms(1000)));
    assert_eq!(classify_error(&*spent), FailureKind::Local);
    assert!(!classify_error(&*spent).is_retryable());
}

#[tokio::test(start_paused = true)]
async fn inner_errors_pass_through() {
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        Err::<Response<Empty<Bytes>>, _>(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))
    }));
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(classify_error(&*err), FailureKind::Connect);
}

#[tokio::test(start_paused = true)]
async fn body_timer_is_released_at_the_end_of_the_body() {
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(ms(10)).await;
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
    }));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    let mut body: DeadlineBody<_> = res.into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "ok"
    );
    assert!(body.frame().await.is_none());
    assert!(
        !body.is_bounded(),
        "the timer went with the end of the body"
    );
}

/// Counts the wakes of the task that holds it.
struct Wakes(AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempts_timer_leaves_the_wheel_with_its_answer() {
    // The attempt's timer waits for the headers only. Once they came, a caller that keeps the
    // finished future (a layer above often does, until its own future ends) is not woken when
    // the attempt's time would have run out.
    let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    let mut svc = AttemptTimeoutLayer::new(ms(3000)).layer(Upstream::new(ms(10), 200));
    let mut fut = std::pin::pin!(svc.call(Request::new(())));
    assert!(
        fut.as_mut().poll(&mut cx).is_pending(),
        "the timer is armed"
    );
    tokio::time::advance(ms(10)).await;
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(res)) => assert_eq!(res.status(), 200),
        other => panic!("the answer came in time: {:?}", other.map(|r| r.err())),
    }
    let woken = wakes.0.load(Ordering::SeqCst);
    tokio::time::advance(ms(5000)).await;
    assert_eq!(
        wakes.0.load(Ordering::SeqCst),
        woken,
        "no wake from a finished attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn headers_bounded_below_leaves_the_wait_to_the_attempt_timeout() {
    // The attempt timeout below ends the wait at the deadline; the deadline layer reports it
    // with the call's budget, and still bounds the body.
    let upstream = Upstream::new(ms(5000), 200);
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)).headers_bounded_below(true))
        .layer(AttemptTimeoutLayer::new(ms(3000)))
        .service(upstream.clone());
    let start = Instant::now();
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(1000), "fails exactly at the deadline");
    let err = exceeded(&err);
    assert_eq!((err.budget(), err.elapsed()), (ms(1000), ms(1000)));
    assert_eq!(upstream.seen()[0].0.unwrap(), start + ms(1000));

    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)).headers_bounded_below(true))
        .layer(AttemptTimeoutLayer::new(ms(3000)))
        .service(stalling(ms(400)));
    let start = Instant::now();
    let mut body = svc.oneshot(Request::new(())).await.unwrap().into_body();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "x"
    );
    assert!(body.frame().await.unwrap().is_err());
    assert_eq!(start.elapsed(), ms(1000), "the body is bounded as before");

    // Alone, the layer arms no timer for the headers: that is what the option says.
    let fut = DeadlineLayer::new(ms(1000))
        .headers_bounded_below(true)
        .layer(Upstream::new(ms(5000), 200))
        .oneshot(Request::new(()));
    let mut fut = std::pin::pin!(fut);
    let pending = tokio::time::timeout(ms(2000), fut.as_mut()).await;
    assert!(pending.is_err(), "still waiting past the deadline");
    assert_eq!(fut.await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn an_empty_body_that_arrived_in_time_reads_as_empty() {
    // A 204 (or HEAD, or 304) answered before the deadline has no body to wait for: reading its
    // end later does not fail.
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(ms(900)).await;
        let mut res = Response::new(Empty::<Bytes>::new());
        *res.status_mut() = StatusCode::NO_CONTENT;
        Ok::<_, Infallible>(res)
    }));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert!(res.body().is_end_stream());
    tokio::time::sleep(ms(200)).await;
    let body = res.into_body().collect().await;
    assert!(body.is_ok(), "{:?}", body.err());
}

#[tokio::test(start_paused = true)]
async fn a_response_at_the_deadline_is_the_deadline_not_an_unreadable_body() {
    // The inner future and the deadline's timer are ready at the same poll: the response would
    // carry a body that fails at its first read, so the call fails with the deadline instead.
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(ms(1000)).await;
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
    }));
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    let err = err.downcast::<DeadlineExceeded>().expect("the deadline");
    assert_eq!(err.budget(), ms(1000));
    // Just before it, the body reads whole.
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(ms(999)).await;
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
    }));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
}

#[tokio::test(start_paused = true)]
async fn an_empty_response_at_the_deadline_is_the_response() {
    // A 204 that comes as the timer fires has no body that could fail at its first read: the
    // call's answer came, and is returned.
    let svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        tokio::time::sleep(ms(1000)).await;
        let mut res = Response::new(Empty::<Bytes>::new());
        *res.status_mut() = StatusCode::NO_CONTENT;
        Ok::<_, Infallible>(res)
    }));
    let res = svc.oneshot(Request::new(())).await;
    assert_eq!(
        res.map(|r| r.status()).map_err(|e| e.to_string()),
        Ok(StatusCode::NO_CONTENT)
    );
}

/// The call ended with its 1 s deadline, or its response's body reads whole: never a response
/// whose body fails at its first read.
async fn deadline_or_readable<B>(result: Result<Response<DeadlineBody<B>>, BoxError>)
where
    B: Body,
    B::Error: Into<BoxError>,
{
    match result {
        Err(err) => assert_eq!(exceeded(&err).budget(), ms(1000)),
        Ok(res) => {
            let body = res.into_body().collect().await;
            assert!(
                body.is_ok(),
                "a response was returned whose body cannot be read: {:?}",
                body.err()
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn headers_bounded_below_a_response_at_the_deadline_is_the_deadline_not_an_unreadable_body() {
    // As `a_response_at_the_deadline_is_the_deadline_not_an_unreadable_body`, in the shape the
    // preset builds: the deadline layer leaves the header wait to an attempt timeout below.
    let svc = ServiceBuilder::new()
        .layer(DeadlineLayer::new(ms(1000)).headers_bounded_below(true))
        .layer(AttemptTimeoutLayer::new(ms(3000)))
        .service(service_fn(|_: Request<()>| async {
            tokio::time::sleep(ms(1000)).await;
            Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
        }));
    deadline_or_readable(svc.oneshot(Request::new(())).await).await;
}

#[tokio::test(start_paused = true)]
async fn a_ready_response_polled_after_the_deadline_is_the_deadline_not_an_unreadable_body() {
    // The inner future is ready at its first poll (a cache hit, say), but that poll comes after
    // the deadline: the timer was never armed.
    let mut svc = DeadlineLayer::new(ms(1000)).layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
    }));
    let fut = svc.call(Request::new(()));
    tokio::time::sleep(ms(1500)).await;
    deadline_or_readable(fut.await).await;
}

/// A transport whose own timer enforces the same deadline (tonic's channel reads the
/// `grpc-timeout` sent) fails at the bound: the failure is the bound's, as if our timer had
/// fired first. A failure before the bound stays the transport's.
#[tokio::test(start_paused = true)]
async fn a_failure_at_the_bound_is_the_bounds() {
    let failing_after = |after: Duration| {
        service_fn(move |_req: Request<()>| async move {
            tokio::time::sleep(after).await;
            Err::<Response<Empty<Bytes>>, BoxError>(Box::new(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            )))
        })
    };
    let svc = AttemptTimeoutLayer::new(ms(100)).layer(failing_after(ms(100)));
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert!(err.is::<AttemptTimedOut>(), "{err}");

    let svc = DeadlineLayer::new(ms(100)).layer(failing_after(ms(100)));
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert!(err.is::<DeadlineExceeded>(), "{err}");

    let svc = AttemptTimeoutLayer::new(ms(100)).layer(failing_after(ms(50)));
    let err = svc.oneshot(Request::new(())).await.unwrap_err();
    assert!(err.is::<std::io::Error>(), "before the bound: {err}");
}
