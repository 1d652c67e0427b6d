//! Behaviour of the circuit breaker, on paused time.

use courier_breaker::{
    BreakerHandle, CircuitBreaker, CircuitBreakerLayer, CircuitState, FailureRate, OpenBackoff,
};
use courier_core::grpc::GrpcCode;
use courier_core::{
    BoxError, Classifier, DeadlineExceeded, Global, HostKey, RateLimited, ResponseHead, Verdict,
};
use courier_core::{CircuitOpen, RequestHead};
use courier_testkit::contract::{self, ReadyOnce};
use http::{Request, Response, StatusCode, Version};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::num::{NonZeroU32, NonZeroUsize};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{advance, sleep};
use tower::{Layer, Service, ServiceExt};

// === the scripted upstream ===

#[derive(Debug, Clone)]
enum Step {
    Status(u16),
    Refused,
    RateLimited,
    Deadline,
    /// A certificate the client's check refused.
    BadCertificate,
    /// Answers 200 after a delay.
    Slow(Duration),
    /// Never answers.
    Hang,
    /// Answers 200 with `x-throttled`.
    Throttled,
    /// A trailers-only gRPC answer with this code.
    Grpc(u16),
}

#[derive(Clone, Default)]
struct Upstream {
    script: Arc<Mutex<VecDeque<Step>>>,
    calls: Arc<AtomicUsize>,
}

impl Upstream {
    fn push(&self, step: Step, times: usize) {
        let mut s = self.script.lock().unwrap();
        for _ in 0..times {
            s.push_back(step.clone());
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

type BoxFut = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>> + Send>>;

impl Service<Request<()>> for Upstream {
    type Response = Response<()>;
    type Error = BoxError;
    type Future = BoxFut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> BoxFut {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let step = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Step::Status(200));
        Box::pin(async move {
            let status = match step {
                Step::Status(s) => s,
                Step::Refused => {
                    return Err(io::Error::from(io::ErrorKind::ConnectionRefused).into());
                }
                Step::RateLimited => return Err(RateLimited::new(Duration::from_secs(1)).into()),
                Step::Deadline => {
                    return Err(DeadlineExceeded::new(
                        Duration::from_secs(1),
                        Duration::from_secs(1),
                    )
                    .into());
                }
                Step::BadCertificate => {
                    let tls = courier_core::classify::TlsError("unknown issuer".into());
                    return Err(io::Error::new(io::ErrorKind::InvalidData, tls).into());
                }
                Step::Slow(d) => {
                    sleep(d).await;
                    200
                }
                Step::Hang => std::future::pending().await,
                Step::Throttled => {
                    return Ok(Response::builder()
                        .header("x-throttled", "1")
                        .body(())
                        .unwrap());
                }
                Step::Grpc(code) => {
                    return Ok(Response::builder()
                        .version(Version::HTTP_2)
                        .header("content-type", "application/grpc")
                        .header("grpc-status", code)
                        .body(())
                        .unwrap());
                }
            };
            Ok(Response::builder().status(status).body(()).unwrap())
        })
    }
}

fn req(host: &str) -> Request<()> {
    Request::get(format!("http://{host}/x")).body(()).unwrap()
}

fn key(host: &str) -> HostKey {
    HostKey::from_request(&req(host))
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

type Svc = CircuitBreaker<Upstream>;

fn setup(layer: CircuitBreakerLayer) -> (Svc, Upstream, BreakerHandle) {
    let up = Upstream::default();
    let handle = layer.handle();
    (layer.layer(up.clone()), up, handle)
}

async fn send(svc: &Svc, host: &str) -> Result<StatusCode, BoxError> {
    svc.clone().oneshot(req(host)).await.map(|r| r.status())
}

fn open_err(r: Result<StatusCode, BoxError>) -> CircuitOpen {
    let err = r.expect_err("the circuit should refuse");
    *err.downcast_ref::<CircuitOpen>()
        .unwrap_or_else(|| panic!("not CircuitOpen: {err}"))
}

async fn trip(svc: &Svc, up: &Upstream, host: &str, n: usize) {
    up.push(Step::Status(503), n);
    for _ in 0..n {
        assert_eq!(
            send(svc, host).await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}

// === transitions ===

#[tokio::test(start_paused = true)]
async fn closed_opens_after_five_consecutive_failures_and_fails_fast() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    up.push(Step::Status(503), 4);
    for _ in 0..4 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 4);
    up.push(Step::Status(500), 1);
    assert_eq!(
        send(&svc, "a").await.unwrap(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "a status stays a response"
    );
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));

    let before = up.calls();
    let err = open_err(send(&svc, "a").await);
    assert_eq!(err.retry_in(), Duration::from_secs(30));
    assert_eq!(
        up.calls(),
        before,
        "an open circuit does not call the inner service"
    );
    advance(Duration::from_secs(10)).await;
    assert_eq!(
        open_err(send(&svc, "a").await).retry_in(),
        Duration::from_secs(20)
    );
    assert_eq!(up.calls(), before);
}

#[tokio::test(start_paused = true)]
async fn a_success_resets_the_consecutive_count() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    up.push(Step::Status(503), 4);
    up.push(Step::Status(200), 1);
    up.push(Step::Status(503), 4);
    for _ in 0..9 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 4);
}

#[tokio::test(start_paused = true)]
async fn open_half_open_then_trial_success_closes() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    trip(&svc, &up, "a", 5).await;
    advance(Duration::from_secs(30)).await;
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Open),
        "moves on the next call"
    );
    up.push(Step::Slow(Duration::from_secs(1)), 1);
    let trial = tokio::spawn({
        let svc = svc.clone();
        async move { send(&svc, "a").await }
    });
    tokio::task::yield_now().await;
    assert_eq!(handle.state(&key("a")), Some(CircuitState::HalfOpen));
    // The trial is in flight: everyone else fails fast, told to try again at once.
    assert_eq!(open_err(send(&svc, "a").await).retry_in(), Duration::ZERO);
    assert_eq!(trial.await.unwrap().unwrap(), StatusCode::OK);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().trips(), 0);
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn trial_failure_reopens_at_once() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    trip(&svc, &up, "a", 5).await;
    advance(Duration::from_secs(30)).await;
    up.push(Step::Refused, 1);
    let err = send(&svc, "a").await.unwrap_err();
    assert!(
        err.downcast_ref::<io::Error>().is_some(),
        "the inner error passes through"
    );
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
    assert_eq!(
        open_err(send(&svc, "a").await).retry_in(),
        Duration::from_secs(30)
    );
}

#[tokio::test(start_paused = true)]
async fn transport_errors_count_as_failures() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(3)));
    up.push(Step::Refused, 3);
    for _ in 0..3 {
        assert!(send(&svc, "a").await.is_err());
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

// === growing open duration ===

#[tokio::test(start_paused = true)]
async fn open_duration_doubles_to_the_cap_and_a_success_starts_over() {
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(1))
        .open_duration(Duration::from_secs(1))
        .open_backoff(OpenBackoff::new(Duration::from_secs(5)).jitter(0.0));
    let (svc, up, _handle) = setup(layer);
    trip(&svc, &up, "a", 1).await;
    let mut seen = vec![open_err(send(&svc, "a").await).retry_in()];
    for _ in 0..4 {
        advance(seen[seen.len() - 1]).await;
        up.push(Step::Status(502), 1);
        send(&svc, "a").await.unwrap();
        seen.push(open_err(send(&svc, "a").await).retry_in());
    }
    let secs: Vec<u64> = seen.iter().map(|d| d.as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 5, 5]);
    // A successful trial forgets the trips.
    advance(Duration::from_secs(5)).await;
    send(&svc, "a").await.unwrap();
    trip(&svc, &up, "a", 1).await;
    assert_eq!(
        open_err(send(&svc, "a").await).retry_in(),
        Duration::from_secs(1)
    );
}

#[tokio::test(start_paused = true)]
async fn growing_open_duration_is_jittered_within_bounds_and_seedable() {
    async fn run(seed: u64) -> Vec<Duration> {
        let layer = CircuitBreakerLayer::new()
            .consecutive_failures(nz(1))
            .open_duration(Duration::from_secs(1))
            .open_backoff(OpenBackoff::new(Duration::from_secs(60)).jitter(0.5))
            .seed(seed);
        let (svc, up, _handle) = setup(layer);
        trip(&svc, &up, "a", 1).await;
        let mut seen = vec![open_err(send(&svc, "a").await).retry_in()];
        for _ in 0..5 {
            advance(seen[seen.len() - 1]).await;
            up.push(Step::Status(503), 1);
            send(&svc, "a").await.unwrap();
            seen.push(open_err(send(&svc, "a").await).retry_in());
        }
        seen
    }
    let a = run(7).await;
    for (n, d) in a.iter().enumerate() {
        let ceiling = Duration::from_secs(1 << n);
        assert!(*d <= ceiling && *d >= ceiling / 2, "trip {n}: {d:?}");
    }
    assert_eq!(a, run(7).await, "the same seed gives the same waits");
    assert_ne!(a, run(8).await, "jitter spreads clients out");
}

// === half-open concurrency ===

async fn race_into_half_open(trials: u32) {
    let layer = CircuitBreakerLayer::new().half_open_trials(nz(trials));
    let (svc, up, handle) = setup(layer);
    trip(&svc, &up, "a", 5).await;
    advance(Duration::from_secs(30)).await;
    up.push(Step::Hang, trials as usize);
    let before = up.calls();

    // `call` decides admission synchronously, so 50 threads calling at once race on the
    // breaker for real. Each enters the runtime to read its paused clock.
    let rt = tokio::runtime::Handle::current();
    let barrier = std::sync::Barrier::new(50);
    let futures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..50 {
            s.spawn(|| {
                let _rt = rt.enter();
                let mut svc = svc.clone();
                barrier.wait();
                let fut = svc.call(req("a"));
                futures.lock().unwrap().push(fut);
            });
        }
    });
    assert_eq!(
        up.calls() - before,
        trials as usize,
        "only the trials reach the inner service"
    );
    let mut refused = 0;
    let mut pending = Vec::new();
    for fut in futures.into_inner().unwrap() {
        let mut task = tokio_test::task::spawn(fut);
        match task.poll() {
            Poll::Ready(Err(e)) if e.is::<CircuitOpen>() => refused += 1,
            Poll::Pending => pending.push(task),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(refused, 50 - trials as usize);
    assert_eq!(pending.len(), trials as usize);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::HalfOpen));
    // Dropping every trial gives every permit back; the trials are judged together, and a
    // majority of them closes the circuit.
    drop(pending);
    let majority = trials / 2 + 1;
    up.push(Step::Status(200), majority as usize);
    for n in 1..=majority {
        assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
        let expected = if n < majority {
            CircuitState::HalfOpen
        } else {
            CircuitState::Closed
        };
        assert_eq!(handle.state(&key("a")), Some(expected), "{n} of {trials}");
    }
}

#[tokio::test(start_paused = true)]
async fn fifty_racing_calls_let_exactly_one_trial_through() {
    race_into_half_open(1).await;
}

#[tokio::test(start_paused = true)]
async fn fifty_racing_calls_let_exactly_the_configured_trials_through() {
    race_into_half_open(3).await;
}

// === cancellation ===

#[tokio::test(start_paused = true)]
async fn a_dropped_trial_gives_its_permit_back() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    trip(&svc, &up, "a", 5).await;
    advance(Duration::from_secs(30)).await;
    up.push(Step::Hang, 1);
    let trial = tokio::time::timeout(Duration::from_secs(5), send(&svc, "a")).await;
    assert!(trial.is_err(), "the trial was cancelled by the caller");
    assert_eq!(handle.state(&key("a")), Some(CircuitState::HalfOpen));
    // It counted as neither: no failure reopened the circuit, and the next call is the trial.
    let before = up.calls();
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    assert_eq!(up.calls(), before + 1);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_closed_call_counts_as_neither() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(1)));
    up.push(Step::Hang, 3);
    for _ in 0..3 {
        let _ = tokio::time::timeout(Duration::from_secs(1), send(&svc, "a")).await;
    }
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 0);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
}

// === what counts ===

#[tokio::test(start_paused = true)]
async fn a_429_or_other_4xx_counts_as_success() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    for healthy in [429, 404, 400, 403] {
        up.push(Step::Status(503), 4);
        up.push(Step::Status(healthy), 1);
    }
    for _ in 0..20 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 0);
}

#[tokio::test(start_paused = true)]
async fn statuses_outside_the_set_are_healthy_and_the_set_is_configurable() {
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(2))
        .failure_statuses([StatusCode::NOT_IMPLEMENTED]);
    let (svc, up, handle) = setup(layer);
    up.push(Step::Status(503), 5);
    for _ in 0..5 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    up.push(Step::Status(501), 2);
    send(&svc, "a").await.unwrap();
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

/// The default classifier, but a 409 is transient: it may change, and counts against the host.
fn conflicts_count() -> Classifier {
    Classifier::new().reclassify(
        |head: &ResponseHead<'_>, verdict: Verdict| match head.status() {
            StatusCode::CONFLICT => Verdict::transient(),
            _ => verdict,
        },
    )
}

#[tokio::test(start_paused = true)]
async fn the_classifier_decides_which_answers_count_against_the_host() {
    // By default a 409 is a healthy server answering on purpose.
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(3)));
    up.push(Step::Status(409), 10);
    for _ in 0..10 {
        assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::CONFLICT);
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 0);

    // Declared transient, it counts against the host: three in a row open.
    let layer = CircuitBreakerLayer::new()
        .classifier(conflicts_count())
        .consecutive_failures(nz(3));
    let (svc, up, handle) = setup(layer);
    up.push(Step::Status(409), 3);
    for _ in 0..2 {
        assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::CONFLICT);
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 2);
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::CONFLICT);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
    open_err(send(&svc, "a").await);
    assert_eq!(up.calls(), 3, "the refused call never reached the host");
}

#[tokio::test(start_paused = true)]
async fn a_200_the_classifier_calls_an_overload_against_the_host_is_a_failing_answer() {
    let classifier = Classifier::new().reclassify(|head: &ResponseHead<'_>, verdict: Verdict| {
        if head.headers().contains_key("x-throttled") {
            Verdict::overload(false).against_host(true)
        } else {
            verdict
        }
    });
    let layer = CircuitBreakerLayer::new()
        .classifier(classifier)
        .consecutive_failures(nz(2));
    let (svc, up, handle) = setup(layer);
    up.push(Step::Throttled, 1);
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 1);
    // A 200 without the header is a success, and ends the run.
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 0);
    up.push(Step::Throttled, 2);
    for _ in 0..2 {
        assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

#[tokio::test(start_paused = true)]
async fn a_classifier_replaces_earlier_delegate_settings_and_later_ones_update_it() {
    // Set after `failure_statuses`, the classifier replaces it: a 501 is healthy again.
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(2))
        .failure_statuses([StatusCode::NOT_IMPLEMENTED])
        .classifier(conflicts_count());
    let (svc, up, handle) = setup(layer);
    up.push(Step::Status(501), 3);
    for _ in 0..3 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 0);

    // Set before, it keeps its own rule and takes the delegate's.
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(2))
        .classifier(conflicts_count())
        .failure_statuses([StatusCode::NOT_IMPLEMENTED]);
    let (svc, up, handle) = setup(layer);
    up.push(Step::Status(503), 2);
    for _ in 0..2 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Closed),
        "503 left the set"
    );
    up.push(Step::Status(409), 1);
    up.push(Step::Status(501), 1);
    send(&svc, "a").await.unwrap();
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

#[tokio::test(start_paused = true)]
async fn trailers_only_grpc_codes_count_as_the_classifier_says() {
    // By default UNAVAILABLE counts against the host and INTERNAL does not.
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(2)));
    up.push(Step::Grpc(14), 1);
    up.push(Step::Grpc(13), 1);
    up.push(Step::Grpc(14), 1);
    for _ in 0..3 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(handle.status(&key("a")).unwrap().consecutive_failures(), 1);
    up.push(Step::Grpc(14), 1);
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));

    // `grpc_failure_codes` sets the classifier's codes.
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(2))
        .grpc_failure_codes([GrpcCode::INTERNAL]);
    let (svc, up, handle) = setup(layer);
    up.push(Step::Grpc(14), 3);
    for _ in 0..3 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    up.push(Step::Grpc(13), 2);
    send(&svc, "a").await.unwrap();
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

#[tokio::test(start_paused = true)]
async fn local_refusals_from_below_count_as_neither() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(2)));
    up.push(Step::Status(503), 1);
    up.push(Step::RateLimited, 5);
    up.push(Step::Deadline, 5);
    for _ in 0..11 {
        let _ = send(&svc, "a").await;
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(
        handle.status(&key("a")).unwrap().consecutive_failures(),
        1,
        "neither a failure nor a success"
    );
    // As a trial, a local refusal gives the permit back and leaves the circuit half-open.
    up.push(Step::Status(503), 1);
    send(&svc, "a").await.unwrap();
    advance(Duration::from_secs(30)).await;
    up.push(Step::RateLimited, 1);
    let err = send(&svc, "a").await.unwrap_err();
    assert!(err.is::<RateLimited>());
    assert_eq!(handle.state(&key("a")), Some(CircuitState::HalfOpen));
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
}

/// A certificate that fails the check is the client's trust settings or the server's
/// certificate: no wait mends it, so it neither opens the circuit nor hides behind one.
#[tokio::test(start_paused = true)]
async fn a_failed_certificate_check_counts_as_neither() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(2)));
    up.push(Step::Status(503), 1);
    up.push(Step::BadCertificate, 5);
    for _ in 0..5 {
        let _ = send(&svc, "a").await;
    }
    let err = send(&svc, "a").await.unwrap_err();
    assert!(courier_core::is_caused_by::<io::Error>(&*err), "{err}");
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(
        handle.status(&key("a")).unwrap().consecutive_failures(),
        1,
        "neither a failure nor a success"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_is_one_that_takes_longer_than_the_threshold_to_the_millisecond() {
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(1))
        .slow_call_threshold(Duration::from_millis(100));
    let (svc, up, handle) = setup(layer);
    up.push(Step::Slow(Duration::from_millis(100)), 1);
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    up.push(Step::Slow(Duration::from_millis(101)), 1);
    send(&svc, "a").await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}

#[tokio::test(start_paused = true)]
async fn slow_calls_count_as_failures_when_asked() {
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(3))
        .slow_call_threshold(Duration::from_secs(1));
    let (svc, up, handle) = setup(layer);
    up.push(Step::Slow(Duration::from_millis(900)), 5);
    for _ in 0..5 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    up.push(Step::Slow(Duration::from_millis(1500)), 3);
    for _ in 0..3 {
        assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));

    // Without the option, slowness is not a failure.
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().consecutive_failures(nz(3)));
    up.push(Step::Slow(Duration::from_secs(60)), 3);
    for _ in 0..3 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
}

#[tokio::test(start_paused = true)]
async fn failure_rate_over_a_sliding_window() {
    let rate = FailureRate::new(0.5, Duration::from_secs(10), nz(10)).unwrap();
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().failure_rate(rate));
    // 6 failures in 9 calls, 3 in a row: too few calls for the rate to count.
    for s in [503, 200, 503, 200, 503, 200, 503, 503, 503] {
        up.push(Step::Status(s), 1);
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Closed),
        "below min_calls"
    );
    // The window slides: those calls age out.
    advance(Duration::from_secs(11)).await;
    for s in [503, 200, 200, 200, 200, 200, 200, 200, 200, 503] {
        up.push(Step::Status(s), 1);
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Closed),
        "2 of 10 failed"
    );
    for _ in 0..6 {
        trip(&svc, &up, "a", 1).await;
    }
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Open),
        "8 of 16 failed"
    );
    // Five failures in a row alone do not trip it in rate mode.
    let rate = FailureRate::new(0.9, Duration::from_secs(10), nz(100)).unwrap();
    let (svc, up, handle) = setup(CircuitBreakerLayer::new().failure_rate(rate));
    trip(&svc, &up, "a", 20).await;
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
}

// === keys ===

#[tokio::test(start_paused = true)]
async fn hosts_are_isolated() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    trip(&svc, &up, "a", 5).await;
    assert!(send(&svc, "a").await.is_err());
    let before = up.calls();
    assert_eq!(send(&svc, "b").await.unwrap(), StatusCode::OK);
    assert_eq!(
        send(&svc, "a:8080").await.unwrap(),
        StatusCode::OK,
        "the port is part of the host"
    );
    assert_eq!(up.calls(), before + 2);
    let mut states = handle.states();
    states.sort_by_key(|(k, _)| k.to_string());
    assert_eq!(
        states,
        [
            (key("a"), CircuitState::Open),
            (key("a:8080"), CircuitState::Closed),
            (key("b"), CircuitState::Closed),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn global_and_custom_keys() {
    let up = Upstream::default();
    let layer = CircuitBreakerLayer::new().global();
    let handle = layer.handle();
    let mut svc = layer.layer(up.clone());
    up.push(Step::Status(503), 5);
    for h in ["a", "b", "c", "d", "e"] {
        svc.ready().await.unwrap().call(req(h)).await.unwrap();
    }
    assert_eq!(handle.state(&()), Some(CircuitState::Open));
    assert!(
        svc.ready()
            .await
            .unwrap()
            .call(req("z"))
            .await
            .unwrap_err()
            .is::<CircuitOpen>()
    );

    let by_tenant = |r: &RequestHead<'_>| {
        r.headers()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let layer = CircuitBreakerLayer::new()
        .consecutive_failures(nz(1))
        .key_by(by_tenant);
    let handle = layer.handle();
    let mut svc = layer.layer(up.clone());
    let tenant = |t: &str| {
        Request::get("http://same/")
            .header("x-tenant", t)
            .body(())
            .unwrap()
    };
    up.push(Step::Status(503), 1);
    svc.ready().await.unwrap().call(tenant("t1")).await.unwrap();
    assert!(
        svc.ready()
            .await
            .unwrap()
            .call(tenant("t1"))
            .await
            .unwrap_err()
            .is::<CircuitOpen>()
    );
    assert!(svc.ready().await.unwrap().call(tenant("t2")).await.is_ok());
    assert_eq!(handle.state(&"t1".to_owned()), Some(CircuitState::Open));
}

// === handle ===

#[tokio::test(start_paused = true)]
async fn handle_forces_open_and_closed_and_resets() {
    let (svc, up, handle) = setup(CircuitBreakerLayer::new());
    assert_eq!(handle.state(&key("a")), None, "no breaker until first use");
    handle.force_open(key("a"));
    assert_eq!(handle.state(&key("a")), Some(CircuitState::ForcedOpen));
    assert!(open_err(send(&svc, "a").await).retry_in() > Duration::ZERO);
    advance(Duration::from_secs(3600)).await;
    assert!(
        send(&svc, "a").await.is_err(),
        "forced open does not time out"
    );
    assert_eq!(up.calls(), 0);

    handle.force_closed(key("a"));
    trip(&svc, &up, "a", 20).await;
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::ForcedClosed),
        "nothing is counted"
    );

    handle.reset(&key("a"));
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    trip(&svc, &up, "a", 5).await;
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
    assert!(handle.status(&key("a")).unwrap().retry_in().is_some());
    handle.reset(&key("a"));
    assert_eq!(send(&svc, "a").await.unwrap(), StatusCode::OK);

    trip(&svc, &up, "b", 5).await;
    handle.reset_all();
    assert!(
        handle
            .states()
            .iter()
            .all(|(_, s)| *s == CircuitState::Closed)
    );
    assert_eq!(handle.len(), 2);
    // Clones of the handle see the same breakers.
    let h2 = handle.clone();
    h2.force_open(key("b"));
    assert_eq!(handle.state(&key("b")), Some(CircuitState::ForcedOpen));
}

// === eviction ===

#[tokio::test(start_paused = true)]
async fn idle_hosts_are_evicted_under_the_maximum() {
    let layer = CircuitBreakerLayer::new().max_keys(NonZeroUsize::new(2).unwrap());
    let (svc, up, handle) = setup(layer);
    trip(&svc, &up, "down", 5).await;
    send(&svc, "b").await.unwrap();
    send(&svc, "c").await.unwrap();
    assert_eq!(handle.len(), 2);
    assert_eq!(
        handle.state(&key("down")),
        Some(CircuitState::Open),
        "an open host outlives a healthy one"
    );
    assert_eq!(handle.state(&key("b")), None);
    for i in 0..50 {
        send(&svc, &format!("h{i}")).await.unwrap();
        assert!(handle.len() <= 2);
    }
    // A host used since the last sweep outlives one that was not.
    let layer = CircuitBreakerLayer::new().max_keys(NonZeroUsize::new(4).unwrap());
    let (svc, _up, handle) = setup(layer);
    for h in ["a", "b", "c", "d"] {
        send(&svc, h).await.unwrap();
    }
    // Full: the sweep keeps 2 of 4 (the newest, "c" and "d"), then adds "e".
    send(&svc, "e").await.unwrap();
    assert_eq!(handle.len(), 3);
    assert_eq!(handle.state(&key("a")), None);
    // "b" comes back and is used after that sweep; "c" and "d" are not.
    send(&svc, "b").await.unwrap();
    send(&svc, "f").await.unwrap();
    for (host, kept) in [
        ("b", true),
        ("c", false),
        ("d", false),
        ("e", true),
        ("f", true),
    ] {
        assert_eq!(handle.state(&key(host)).is_some(), kept, "{host}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_forced_breaker_outlives_any_eviction() {
    let layer = CircuitBreakerLayer::new().max_keys(NonZeroUsize::new(4).unwrap());
    let (svc, up, handle) = setup(layer);
    for h in ["a", "b", "c"] {
        handle.force_open(key(h));
    }
    handle.force_closed(key("x"));
    for i in 0..20 {
        send(&svc, &format!("h{i}")).await.unwrap();
    }
    let before = up.calls();
    let err = send(&svc, "a").await.unwrap_err();
    assert!(err.is::<CircuitOpen>(), "{err}");
    assert_eq!(up.calls(), before, "a host forced open is never called");
    for h in ["a", "b", "c"] {
        assert_eq!(handle.state(&key(h)), Some(CircuitState::ForcedOpen), "{h}");
    }
    assert_eq!(handle.state(&key("x")), Some(CircuitState::ForcedClosed));
}

// === the previous call's breaker, reused by one service ===

/// Sends through `svc` itself (not a clone), so that it keeps the previous call's breaker.
async fn send_here(svc: &mut Svc, host: &str) -> Result<StatusCode, BoxError> {
    svc.ready().await?.call(req(host)).await.map(|r| r.status())
}

#[tokio::test(start_paused = true)]
async fn a_service_follows_its_hosts_state_from_call_to_call() {
    let (mut svc, _up, handle) = setup(CircuitBreakerLayer::new());
    send_here(&mut svc, "a.example").await.unwrap();
    handle.force_open(key("a.example"));
    open_err(send_here(&mut svc, "a.example").await);
    // Same host, other case: the same breaker.
    open_err(send_here(&mut svc, "A.Example").await);
    // Another host, then back.
    send_here(&mut svc, "b.example").await.unwrap();
    open_err(send_here(&mut svc, "a.example").await);
    handle.force_open(key("b.example"));
    open_err(send_here(&mut svc, "b.example").await);
    // Another scheme is another host.
    let https = Request::get("https://b.example/x").body(()).unwrap();
    assert!(svc.ready().await.unwrap().call(https).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_service_drops_its_previous_breaker_once_evicted() {
    let layer = CircuitBreakerLayer::new().max_keys(NonZeroUsize::new(2).unwrap());
    let (mut svc, _up, handle) = setup(layer);
    send_here(&mut svc, "a").await.unwrap();
    // Other callers fill the map until "a" is evicted.
    for h in ["b", "c", "d"] {
        send(&svc, h).await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), None, "evicted");
    // The handle makes a fresh breaker for "a"; the service must use that one, not the
    // evicted one it saw last.
    handle.force_open(key("a"));
    open_err(send_here(&mut svc, "a").await);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::ForcedOpen));
}

// === tower contract ===

#[tokio::test(start_paused = true)]
async fn calls_the_instance_it_made_ready() {
    let upstream = tower::service_fn(|_: Request<()>| {
        std::future::ready(Ok::<_, BoxError>(Response::new(())))
    });
    let checked = contract::check(
        upstream,
        |inner| CircuitBreakerLayer::new().layer(inner),
        || req("a"),
    )
    .await;
    assert_eq!(checked.calls, contract::CALLS);
    let mut svc = checked.service;
    assert!(!svc.get_ref().is_ready());
    let _ = svc.get_mut();
    let _inner: ReadyOnce<_> = svc.into_inner();
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    // Per host and global alike: no call is counted, so the 503s and the error open nothing.
    courier_testkit::pass_through::check(CircuitBreaker::<_>::pass_through).await;
    courier_testkit::pass_through::check(CircuitBreaker::<_, Global>::pass_through).await;
    let off = CircuitBreaker::<_>::pass_through(Upstream::default());
    assert!(off.is_pass_through() && off.handle().is_none());
    let on = CircuitBreakerLayer::new().layer(Upstream::default());
    assert!(!on.is_pass_through() && on.handle().is_some());
}

#[test]
fn services_layers_handles_and_futures_are_send_sync_static() {
    fn check<T: Send + Sync + 'static>(_: &T) {}
    fn check_future<T: Send + 'static>(_: &T) {}
    let layer = CircuitBreakerLayer::new();
    check(&layer);
    check(&layer.handle());
    let svc = layer.layer(Upstream::default());
    check(&svc);
    let mut svc2 = svc.clone();
    // The future is as Sync as the inner one; here it is Send + 'static.
    check_future(&svc2.call(req("a")));
}

#[tokio::test(start_paused = true)]
async fn stale_outcomes_do_not_feed_the_failure_rate_window() {
    // Each call answers 503 or 200 after a delay, in the order they are called.
    let script: Arc<Mutex<VecDeque<(u64, u16)>>> = Arc::default();
    let s = script.clone();
    let inner = tower::service_fn(move |_req: Request<()>| {
        let (delay_ms, status) = s.lock().unwrap().pop_front().unwrap_or((0, 200));
        async move {
            sleep(Duration::from_millis(delay_ms)).await;
            Ok::<_, BoxError>(Response::builder().status(status).body(()).unwrap())
        }
    });
    let rate = FailureRate::new(0.5, Duration::from_secs(60), nz(4)).unwrap();
    let layer = CircuitBreakerLayer::new()
        .failure_rate(rate)
        .open_duration(Duration::from_secs(30));
    let handle = layer.handle();
    let svc = layer.layer(inner);

    // Four slow calls admitted while closed: they fail 45 s later.
    script.lock().unwrap().extend([(45_000, 503); 4]);
    let slow: Vec<_> = (0..4)
        .map(|_| tokio::spawn(svc.clone().oneshot(req("a"))))
        .collect();
    tokio::task::yield_now().await;
    // Four quick failures trip it by rate.
    script.lock().unwrap().extend([(0, 503); 4]);
    for _ in 0..4 {
        svc.clone().oneshot(req("a")).await.unwrap();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
    // 30 s later a trial succeeds: closed again, with a fresh window.
    advance(Duration::from_secs(30)).await;
    svc.clone().oneshot(req("a")).await.unwrap();
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    // The four calls admitted before the trip now fail: they belong to the past.
    advance(Duration::from_secs(16)).await;
    for h in slow {
        assert_eq!(
            h.await.unwrap().unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    // One fresh failure: one verdict in the new window, below the minimum of 4 calls.
    script.lock().unwrap().push_back((0, 503));
    svc.clone().oneshot(req("a")).await.unwrap();
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Closed),
        "outcomes of calls admitted before the trip counted in the new window"
    );
}

// === failing answers that must last ===

fn patient() -> CircuitBreakerLayer {
    CircuitBreakerLayer::new().failing_answers_for(Duration::from_secs(30))
}

#[tokio::test(start_paused = true)]
async fn failing_answers_open_only_once_they_have_lasted_with_no_success() {
    let (svc, up, handle) = setup(patient());
    // Twenty 503s over 19 s: far past the count, not yet 30 s.
    up.push(Step::Status(503), 30);
    for _ in 0..20 {
        assert_eq!(send(&svc, "a").await.unwrap(), 503);
        advance(Duration::from_secs(1)).await;
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    // 30 s after the run began, the next failing answer opens it.
    advance(Duration::from_secs(10)).await;
    assert_eq!(send(&svc, "a").await.unwrap(), 503);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
    let before = up.calls();
    open_err(send(&svc, "a").await);
    assert_eq!(up.calls(), before, "open: the host is not called");
}

#[tokio::test(start_paused = true)]
async fn a_success_among_failing_answers_keeps_the_circuit_closed() {
    // One broken path among working ones, for a minute: never opened.
    let (svc, up, handle) = setup(patient());
    for _ in 0..60 {
        up.push(Step::Status(500), 4);
        up.push(Step::Status(200), 1);
        for _ in 0..5 {
            send(&svc, "a").await.unwrap();
        }
        advance(Duration::from_secs(1)).await;
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Closed));
    assert_eq!(up.calls(), 300);
}

#[tokio::test(start_paused = true)]
async fn transport_failures_still_open_at_the_count() {
    let (svc, up, handle) = setup(patient());
    up.push(Step::Refused, 5);
    for _ in 0..5 {
        send(&svc, "a").await.unwrap_err();
    }
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));

    // And a refused connection that ends a run of failing answers opens it too.
    let (svc, up, handle) = setup(patient());
    up.push(Step::Status(503), 4);
    up.push(Step::Refused, 1);
    for _ in 0..4 {
        send(&svc, "b").await.unwrap();
    }
    assert_eq!(handle.state(&key("b")), Some(CircuitState::Closed));
    send(&svc, "b").await.unwrap_err();
    assert_eq!(handle.state(&key("b")), Some(CircuitState::Open));
}

#[tokio::test(start_paused = true)]
async fn a_new_run_is_timed_from_its_own_first_failure() {
    let (svc, up, handle) = setup(patient());
    up.push(Step::Status(503), 4);
    for _ in 0..4 {
        send(&svc, "a").await.unwrap();
    }
    // A success ends the run; a minute later a new one begins.
    send(&svc, "a").await.unwrap();
    advance(Duration::from_secs(60)).await;
    up.push(Step::Status(503), 10);
    for _ in 0..10 {
        send(&svc, "a").await.unwrap();
    }
    assert_eq!(
        handle.state(&key("a")),
        Some(CircuitState::Closed),
        "the old run's start does not count"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_trial_reopens_at_once() {
    let (svc, up, handle) = setup(patient().open_duration(Duration::from_secs(5)));
    up.push(Step::Refused, 5);
    for _ in 0..5 {
        send(&svc, "a").await.unwrap_err();
    }
    advance(Duration::from_secs(5)).await;
    up.push(Step::Status(503), 1);
    assert_eq!(send(&svc, "a").await.unwrap(), 503);
    assert_eq!(handle.state(&key("a")), Some(CircuitState::Open));
}
