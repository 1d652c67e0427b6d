//! Adaptive pacing, on paused time: each rule, cancellation, deadlines, bounds.

use courier_core::{
    BoxError, CallContext, Classifier, HostKey, RateLimited, ResponseHead, Verdict,
};
use courier_ratelimit::adaptive::{AdaptivePacing, AdaptivePacingLayer};
use courier_ratelimit::{InMemoryStore, Rate};
use courier_testkit::contract;
use http::{Request, Response, StatusCode};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

// === a scripted host that records when each request reached it ===

#[derive(Debug, Clone)]
enum Answer {
    Status(u16),
    /// A 503 with `Retry-After: 1`.
    BusyWithHint,
    /// A 403 with `Retry-After: 1`: a spent quota of the caller's.
    ForbiddenWithHint,
    /// A 200 with `x-throttled: 1`: an overload only a classifier of the caller's knows.
    Throttled,
    Refused,
    Reset,
    /// The attempt timed out.
    TimedOut,
}

#[derive(Clone, Default)]
struct Host {
    script: Arc<Mutex<VecDeque<Answer>>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Host {
    fn push(&self, answer: Answer, times: usize) {
        let mut s = self.script.lock().unwrap();
        s.extend(std::iter::repeat_n(answer, times));
    }

    fn arrivals(&self) -> Vec<Duration> {
        let a = self.arrivals.lock().unwrap();
        let Some(&first) = a.first() else {
            return Vec::new();
        };
        a.iter().map(|&t| t - first).collect()
    }

    fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }
}

type BoxFut = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>> + Send>>;

impl Service<Request<()>> for Host {
    type Response = Response<()>;
    type Error = BoxError;
    type Future = BoxFut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> BoxFut {
        self.arrivals.lock().unwrap().push(Instant::now());
        let answer = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Answer::Status(200));
        Box::pin(async move {
            let mut resp = Response::new(());
            match answer {
                Answer::Status(s) => *resp.status_mut() = StatusCode::from_u16(s).unwrap(),
                Answer::BusyWithHint => {
                    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    resp.headers_mut()
                        .insert(http::header::RETRY_AFTER, 1.into());
                }
                Answer::ForbiddenWithHint => {
                    *resp.status_mut() = StatusCode::FORBIDDEN;
                    resp.headers_mut()
                        .insert(http::header::RETRY_AFTER, 1.into());
                }
                Answer::Throttled => {
                    resp.headers_mut().insert("x-throttled", 1.into());
                }
                Answer::Refused => {
                    return Err(io::Error::from(io::ErrorKind::ConnectionRefused).into());
                }
                Answer::Reset => return Err(io::Error::from(io::ErrorKind::ConnectionReset).into()),
                Answer::TimedOut => {
                    return Err(courier_core::AttemptTimedOut::new(Duration::from_secs(1)).into());
                }
            }
            Ok(resp)
        })
    }
}

fn get() -> Request<()> {
    Request::get("http://api.example/x").body(()).unwrap()
}

fn key() -> HostKey {
    HostKey::from_request(&get())
}

type Svc = AdaptivePacing<Host>;

/// Pacing that needs one answer as evidence: the tests here are about what it does once the
/// evidence is in, with crowds of a few; `tests/evidence.rs` holds the default's minimum.
fn eager() -> AdaptivePacingLayer {
    AdaptivePacingLayer::new().min_answers(1)
}

fn setup(layer: &AdaptivePacingLayer) -> (Svc, Host) {
    let host = Host::default();
    (layer.layer(host.clone()), host)
}

/// `n` calls at once; their results in order.
async fn crowd(svc: &Svc, n: usize) -> Vec<Result<StatusCode, BoxError>> {
    let calls = (0..n).map(|_| {
        let svc = svc.clone();
        async move { svc.oneshot(get()).await.map(|r| r.status()) }
    });
    futures_util::future::join_all(calls).await
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Serves 2 of a crowd of 4 and refuses the other 2 with a bare `status`: half its answers
/// are refusals, and the host is then paced at 2/s.
async fn overload_with(status: u16) -> (AdaptivePacingLayer, Svc, Host) {
    half(eager(), Answer::Status(status)).await
}

/// Serves 2 of a crowd of 4 through `layer` and gives the other 2 `answer`.
async fn half(layer: AdaptivePacingLayer, answer: Answer) -> (AdaptivePacingLayer, Svc, Host) {
    answered(layer, &[(Answer::Status(200), 2), (answer, 2)]).await
}

/// A crowd through `layer`, as many as `answers` holds, answered those in order.
async fn answered(
    layer: AdaptivePacingLayer,
    answers: &[(Answer, usize)],
) -> (AdaptivePacingLayer, Svc, Host) {
    let (svc, host) = setup(&layer);
    for (answer, times) in answers {
        host.push(answer.clone(), *times);
    }
    crowd(&svc, answers.iter().map(|(_, times)| times).sum()).await;
    (layer, svc, host)
}

/// How long a crowd of 4 takes to be served, all answered 200.
async fn crowd_time(svc: &Svc) -> Duration {
    let start = Instant::now();
    for r in crowd(svc, 4).await {
        r.unwrap();
    }
    start.elapsed()
}

// === the rules ===

#[tokio::test(start_paused = true)]
async fn a_few_refusals_among_many_answers_pace_nothing() {
    // One path that answers 503 for a reason of its own: 4 of 10 answers.
    let layer = eager();
    let (svc, host) = setup(&layer);
    for _ in 0..5 {
        host.push(Answer::Status(200), 3);
        host.push(Answer::Status(503), 2);
    }
    let start = Instant::now();
    crowd(&svc, 25).await;
    assert_eq!(layer.learned_rate(&key()), None);
    assert_eq!(start.elapsed(), Duration::ZERO);
    // A stricter share paces it.
    let layer = eager().overload_share(0.3).unwrap();
    let (svc, host) = setup(&layer);
    for _ in 0..5 {
        host.push(Answer::Status(200), 3);
        host.push(Answer::Status(503), 2);
    }
    let start = Instant::now();
    crowd(&svc, 25).await;
    assert!(start.elapsed() > Duration::ZERO, "paced");
    assert!(eager().overload_share(1.5).is_err());
}

#[tokio::test(start_paused = true)]
async fn pacing_stops_when_what_the_host_accepts_falls_with_the_pace() {
    // A host that served well, then answers every other call with a bare 503 however slowly
    // it is asked: no pace helps. Paced once half its answers are refusals, it is left alone
    // when what it accepts has fallen below half of where pacing began.
    let layer = eager();
    let (svc, host) = setup(&layer);
    host.push(Answer::Status(200), 40);
    for _ in 0..500 {
        host.push(Answer::Status(503), 1);
        host.push(Answer::Status(200), 1);
    }
    let start = Instant::now();
    let (mut paced, mut unpaced_at) = (false, None);
    // One caller, a call every 10 ms, for 10 s at most (paused time).
    for _ in 0..1_000 {
        svc.clone().oneshot(get()).await.unwrap();
        let rate = layer.learned_rate(&key());
        paced |= rate.is_some();
        if paced && rate.is_none() {
            unpaced_at = Some(start.elapsed());
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert!(paced, "paced at first");
    let at = unpaced_at.expect("pacing stopped");
    assert!(at <= Duration::from_secs(8), "{at:?}");
    // And the next calls go at once, although half of them are still refused.
    let start = Instant::now();
    for r in crowd(&svc, 20).await {
        r.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_healthy_host_is_never_paced() {
    let layer = eager();
    let (svc, host) = setup(&layer);
    host.push(Answer::Status(500), 20); // an answer, not a refusal
    host.push(Answer::Status(404), 20);
    host.push(Answer::Status(429), 0);
    let start = Instant::now();
    for r in crowd(&svc, 100).await {
        r.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(host.count(), 100);
    assert_eq!(layer.learned_rate(&key()), None);
}

#[tokio::test(start_paused = true)]
async fn a_bare_503_paces_every_caller_at_what_the_host_accepted() {
    let (layer, svc, host) = overload_with(503).await;
    assert_eq!(layer.learned_rate(&key()), Some(2.0));
    let start = Instant::now();
    for r in crowd(&svc, 4).await {
        r.unwrap();
    }
    // One at once, then one every half second (the learned rate holds for 2 s).
    let arrivals: Vec<_> = host.arrivals().into_iter().skip(4).collect();
    let since: Vec<_> = arrivals.iter().map(|&a| a - arrivals[0]).collect();
    assert_eq!(since, [0, 500, 1000, 1500].map(ms));
    assert_eq!(start.elapsed(), ms(1500));
}

#[tokio::test(start_paused = true)]
async fn a_bare_429_and_a_timeout_are_signals_too() {
    let (layer, ..) = overload_with(429).await;
    assert_eq!(layer.learned_rate(&key()), Some(2.0));

    let layer = eager();
    let (svc, host) = setup(&layer);
    host.push(Answer::TimedOut, 1);
    svc.clone().oneshot(get()).await.unwrap_err();
    assert_eq!(
        layer.learned_rate(&key()),
        Some(1.0),
        "nothing accepted: the minimum rate"
    );
}

/// gRPC's 503 and 429 are UNAVAILABLE and RESOURCE_EXHAUSTED in a trailers-only answer; with a
/// pushback they are the server's word and teach nothing.
#[tokio::test(start_paused = true)]
async fn a_grpc_refusal_in_the_headers_is_a_signal_too() {
    let grpc = |code: &'static str, pushback: bool| {
        move |_req: Request<()>| async move {
            let mut resp = Response::builder()
                .version(http::Version::HTTP_2)
                .header("content-type", "application/grpc")
                .header("grpc-status", code);
            if pushback {
                resp = resp.header("grpc-retry-pushback-ms", "100");
            }
            Ok::<_, Infallible>(resp.body(()).unwrap())
        }
    };
    for code in ["14", "8"] {
        let layer = eager();
        let svc = layer.layer(tower::service_fn(grpc(code, false)));
        svc.oneshot(get()).await.unwrap();
        assert_eq!(layer.learned_rate(&key()), Some(1.0), "grpc-status {code}");
    }
    for (code, pushback) in [("14", true), ("3", false), ("0", false)] {
        let layer = eager();
        let svc = layer.layer(tower::service_fn(grpc(code, pushback)));
        svc.oneshot(get()).await.unwrap();
        assert_eq!(layer.learned_rate(&key()), None, "grpc-status {code}");
    }
}

// === the classifier decides what is a signal ===

/// Gives an answer carrying `x-throttled` the verdict `throttled`.
fn throttled_as(throttled: Verdict) -> Classifier {
    Classifier::new().reclassify(move |head: &ResponseHead<'_>, verdict: Verdict| {
        if head.headers().contains_key("x-throttled") {
            throttled
        } else {
            verdict
        }
    })
}

#[tokio::test(start_paused = true)]
async fn an_answer_the_classifier_calls_an_overload_is_a_signal() {
    // Set before another setter: the classifier stays.
    let layer = AdaptivePacingLayer::new()
        .classifier(throttled_as(Verdict::overload(false)))
        .min_answers(1);
    let (layer, svc, _host) = half(layer, Answer::Throttled).await;
    assert_eq!(layer.learned_rate(&key()), Some(2.0));
    // One at once, then one every half second.
    assert_eq!(crowd_time(&svc).await, ms(1500));
}

#[tokio::test(start_paused = true)]
async fn with_the_default_classifier_the_same_answers_pace_nothing() {
    let (layer, svc, _host) = half(eager(), Answer::Throttled).await;
    assert_eq!(layer.learned_rate(&key()), None);
    assert_eq!(crowd_time(&svc).await, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_503_the_classifier_calls_a_success_paces_nothing() {
    let success = Classifier::new().reclassify(|head: &ResponseHead<'_>, verdict: Verdict| {
        match head.status() {
            StatusCode::SERVICE_UNAVAILABLE => Verdict::success(),
            _ => verdict,
        }
    });
    let (layer, svc, _host) = half(eager().classifier(success), Answer::Status(503)).await;
    assert_eq!(layer.learned_rate(&key()), None);
    assert_eq!(crowd_time(&svc).await, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_hinted_overload_of_the_classifiers_teaches_nothing() {
    let layer = eager().classifier(throttled_as(Verdict::overload(true)));
    let (layer, svc, host) = answered(layer, &[(Answer::Throttled, 10)]).await;
    assert_eq!(layer.learned_rate(&key()), None, "no signal");
    // Nor are they accepts: two bare 503s after them are all of the answers, nothing accepted.
    host.push(Answer::Status(503), 2);
    crowd(&svc, 2).await;
    assert_eq!(layer.learned_rate(&key()), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn a_rate_limiting_403_counts_as_an_accept() {
    // Two 403s with a wait and two bare 503s: the 403s are the host's accepts (half of four
    // answers are signals, 2 accepted in the last second), not answers that teach nothing
    // (which would leave the 503s all of the answers, nothing accepted: the minimum, 1/s).
    let answers = [(Answer::ForbiddenWithHint, 2), (Answer::Status(503), 2)];
    let (layer, ..) = answered(eager(), &answers).await;
    assert_eq!(layer.learned_rate(&key()), Some(2.0));
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_a_host_down_not_overloaded() {
    let layer = eager();
    let (svc, host) = setup(&layer);
    host.push(Answer::Refused, 5);
    for _ in 0..5 {
        svc.clone().oneshot(get()).await.unwrap_err();
    }
    assert_eq!(layer.learned_rate(&key()), None, "the breaker's case");
}

#[tokio::test(start_paused = true)]
async fn a_server_hint_is_obeyed_elsewhere_and_teaches_nothing() {
    let layer = eager();
    let (svc, host) = setup(&layer);
    host.push(Answer::BusyWithHint, 10);
    crowd(&svc, 10).await;
    assert_eq!(layer.learned_rate(&key()), None);
    // Nor does a reset connection: the request may have run; it is no refusal.
    host.push(Answer::Reset, 3);
    crowd(&svc, 3).await;
    assert_eq!(layer.learned_rate(&key()), None);
}

#[tokio::test(start_paused = true)]
async fn answers_arriving_just_after_the_signal_raise_the_estimate() {
    // Under overload the quick refusals come first: two refusals, then three slow successes,
    // all sent before pacing began.
    let layer = eager();
    let host = tower::service_fn(|req: Request<()>| async move {
        let slow = req.uri().path() == "/slow";
        tokio::time::sleep(ms(if slow { 100 } else { 10 })).await;
        let status = if slow { 200 } else { 503 };
        Ok::<_, Infallible>(Response::builder().status(status).body(()).unwrap())
    });
    let svc = layer.layer(host);
    let calls = ["/fast", "/fast", "/slow", "/slow", "/slow"].map(|p| {
        let svc = svc.clone();
        async move {
            let req = Request::get(format!("http://api.example{p}"))
                .body(())
                .unwrap();
            svc.oneshot(req).await.unwrap()
        }
    });
    futures_util::future::join_all(calls).await;
    // Three accepted over the 1.1 s the rates cover at 100 ms.
    let rate = layer.learned_rate(&key()).unwrap();
    assert!((2.7..=3.0).contains(&rate), "{rate}");
}

#[tokio::test(start_paused = true)]
async fn the_rate_ramps_up_and_pacing_ends_once_the_host_is_quiet() {
    let (layer, svc, _host) = overload_with(503).await;
    tokio::time::advance(Duration::from_secs(3)).await;
    // Held 2 s, then doubled in 1 s.
    let rate = layer.learned_rate(&key()).unwrap();
    assert!((rate - 4.0).abs() < 1e-3, "{rate}");
    tokio::time::advance(Duration::from_millis(7_001)).await;
    assert_eq!(layer.learned_rate(&key()), None, "10 s without a signal");
    let start = Instant::now();
    for r in crowd(&svc, 20).await {
        r.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "full speed again");
}

#[tokio::test(start_paused = true)]
async fn a_host_that_keeps_refusing_and_accepts_nothing_comes_down_to_the_minimum() {
    let (layer, svc, host) = overload_with(503).await;
    // Past the second and a quarter the rates cover.
    tokio::time::advance(Duration::from_millis(1_500)).await;
    host.push(Answer::Status(503), 1);
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(layer.learned_rate(&key()), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn clones_and_services_of_one_layer_learn_and_pace_together() {
    let (layer, _svc, _host) = overload_with(503).await;
    let (other, other_host) = setup(&layer);
    let start = Instant::now();
    for r in crowd(&other, 3).await {
        r.unwrap();
    }
    assert_eq!(other_host.count(), 3);
    assert_eq!(
        start.elapsed(),
        ms(1000),
        "paced at the 2/s learned by the first"
    );
}

// === cancellation and deadlines ===

#[tokio::test(start_paused = true)]
async fn a_dropped_wait_gives_its_slot_back() {
    let (_layer, svc, host) = overload_with(503).await;
    // The first paced request takes the slot now; the second waits for the next one.
    svc.clone().oneshot(get()).await.unwrap();
    let waiting = tokio::spawn(svc.clone().oneshot(get()));
    tokio::time::sleep(ms(100)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    // The abandoned slot (at 500 ms) is the next caller's: it does not wait one more interval.
    let start = Instant::now();
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(start.elapsed(), ms(400));
    assert_eq!(host.count(), 6, "the abandoned request was never sent");
}

#[tokio::test(start_paused = true)]
async fn a_future_dropped_before_its_first_poll_gives_its_slot_back() {
    let (_layer, svc, host) = overload_with(503).await;
    svc.clone().oneshot(get()).await.unwrap();
    // Its slot (at 500 ms) is reserved in `call`; the future is dropped unpolled.
    let mut caller = svc.clone();
    drop(caller.ready().await.unwrap().call(get()));
    let start = Instant::now();
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(start.elapsed(), ms(500), "the next caller has that slot");
    assert_eq!(host.count(), 6, "the dropped request was never sent");
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_deadline_fails_at_once_with_rate_limited() {
    let (_layer, svc, host) = overload_with(503).await;
    svc.clone().oneshot(get()).await.unwrap();
    let mut req = get();
    CallContext::get_or_insert(&mut req).shrink_deadline_after(ms(200));
    let start = Instant::now();
    let err = svc.clone().oneshot(req).await.unwrap_err();
    assert!(err.is::<RateLimited>(), "{err}");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(host.count(), 5);
}

// === bounds and settings ===

#[tokio::test(start_paused = true)]
async fn idle_hosts_are_forgotten_past_the_maximum() {
    let layer = eager().max_keys(NonZeroUsize::new(10).unwrap());
    let svc = layer.layer(Host::default());
    for i in 0..100 {
        let req = Request::get(format!("http://h{i}.example/"))
            .body(())
            .unwrap();
        svc.clone().oneshot(req).await.unwrap();
        // A second apart: the one before is idle by then.
        tokio::time::advance(Duration::from_millis(1_001)).await;
    }
    assert!(layer.len() <= 11, "{} keys kept", layer.len());
}

#[tokio::test(start_paused = true)]
async fn paced_hosts_are_kept_past_the_maximum() {
    let layer = eager().max_keys(NonZeroUsize::new(2).unwrap());
    let host = Host::default();
    host.push(Answer::Status(503), 3);
    let svc = layer.layer(host);
    for i in 0..3 {
        let req = Request::get(format!("http://h{i}.example/"))
            .body(())
            .unwrap();
        svc.clone().oneshot(req).await.unwrap();
    }
    assert_eq!(layer.len(), 3, "forgetting a paced host would unpace it");
}

#[test]
fn a_minimum_above_the_maximum_is_refused() {
    let err = eager()
        .max_rate(Rate::per_second(10.0).unwrap())
        .unwrap()
        .min_rate(Rate::per_second(20.0).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("min_rate"), "{err}");
    assert!(eager().max_rate(Rate::per_second(0.5).unwrap()).is_err());
}

#[tokio::test(start_paused = true)]
async fn the_slots_can_come_from_a_store_of_the_callers() {
    let store = InMemoryStore::new();
    let layer = eager().store_in(store.clone());
    let host = Host::default();
    host.push(Answer::Status(503), 1);
    let svc = layer.layer(host);
    svc.clone().oneshot(get()).await.unwrap();
    svc.clone().oneshot(get()).await.unwrap();
    assert_eq!(store.len(), 1, "the paced request reserved its slot there");
}

// === tower contract ===

#[tokio::test(start_paused = true)]
async fn calls_the_instance_that_was_made_ready() {
    let upstream = tower::service_fn(|_: Request<()>| {
        std::future::ready(Ok::<_, Infallible>(Response::new(())))
    });
    let checked = contract::check(upstream, |inner| eager().layer(inner), get).await;
    assert_eq!(checked.calls, contract::CALLS);
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    courier_testkit::pass_through::check(AdaptivePacing::<_>::pass_through).await;
    assert!(AdaptivePacing::<()>::pass_through(()).is_pass_through());
    assert!(!eager().layer(()).is_pass_through());
}

#[test]
fn services_and_futures_are_send_sync_static() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync_static::<AdaptivePacingLayer>();
    send_sync_static::<Svc>();
    send_static::<
        courier_ratelimit::adaptive::ResponseFuture<
            Host,
            (),
            courier_core::PerHost,
            InMemoryStore<HostKey>,
        >,
    >();
}
