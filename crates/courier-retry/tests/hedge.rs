//! The hedge layer: what is hedged, when, which answer wins, what it costs the host, and what
//! it leaves behind.

mod common;

use common::{Answer, Mock, get, post};
use courier_core::CallOptions;
use courier_core::idempotency::RetrySafe;
use courier_retry::hedge::{HedgeLayer, Hedged};
use courier_retry::{RetryBudget, RetryLayer};
use http::{Request, Response};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// A hedge layer whose budget allows a few hedges before any request has earned one: the
/// default earns a tenth of a hedge per request, so a fresh layer's first nine calls go alone.
fn layer() -> HedgeLayer {
    HedgeLayer::new().budget(RetryBudget::new().floor(10))
}

fn hedged<B>(res: &Response<B>) -> Option<Hedged> {
    res.extensions().get::<Hedged>().cloned()
}

#[tokio::test(start_paused = true)]
async fn a_slow_get_is_hedged_after_the_delay_and_the_first_answer_wins() {
    let mock = Mock::new([Answer::Delay(2_000 * MS, 200), Answer::Delay(10 * MS, 200)]);
    let svc = layer().after(50 * MS).layer(mock.clone());
    let start = Instant::now();
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!(res.body(), "answer 1", "the hedge's answer");
    assert_eq!(start.elapsed(), 60 * MS);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].at - calls[0].at, 50 * MS);
    let hedged = hedged(&res).unwrap();
    assert_eq!(
        hedged.to_string(),
        "#1 at 0 ms: cancelled, #2 at 50 ms: won"
    );
    assert_eq!(hedged.winner().unwrap().attempt, 2);
}

#[tokio::test(start_paused = true)]
async fn an_answer_before_the_delay_sends_no_hedge_and_carries_no_record() {
    let mock = Mock::new([Answer::Delay(10 * MS, 200)]);
    let svc = layer().after(50 * MS).layer(mock.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(mock.count(), 1);
    assert!(hedged(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_keyless_post_is_never_hedged_and_a_keyed_one_carries_its_key_on_every_hedge() {
    let mock = Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(500 * MS, 200)]);
    let hedge = layer().after(50 * MS).attempts(3);
    let res = hedge
        .layer(mock.clone())
        .oneshot(post("http://a.example/orders", "{}"))
        .await
        .unwrap();
    assert_eq!(mock.count(), 1, "a keyless POST goes once");
    assert!(hedged(&res).is_none());

    let mock = Mock::new([
        Answer::Delay(500 * MS, 200),
        Answer::Delay(500 * MS, 200),
        Answer::Delay(10 * MS, 201),
    ]);
    let mut req = post("http://a.example/orders", "{\"n\":1}");
    req.headers_mut()
        .insert("idempotency-key", "k-42".parse().unwrap());
    let res = hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(res.status(), 201);
    let calls = mock.calls();
    assert_eq!(calls.len(), 3);
    for call in &calls {
        assert_eq!(call.headers["idempotency-key"], "k-42");
        assert_eq!(call.body.as_deref(), Some(&b"{\"n\":1}"[..]));
    }
    assert_eq!(
        hedged(&res).unwrap().to_string(),
        "#1 at 0 ms: cancelled, #2 at 50 ms: cancelled, #3 at 100 ms: won"
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_posts_409_while_another_copy_is_out_waits_for_that_copy() {
    // A server that keeps keys answers a copy that comes while the first is under way with
    // 409: the first's answer is the call's, and no more copies go.
    let mock = Mock::new([Answer::Delay(500 * MS, 201), Answer::Delay(10 * MS, 409)]);
    let hedge = layer().after(50 * MS).attempts(3);
    let mut req = post("http://a.example/orders", "{\"n\":3}");
    req.headers_mut()
        .insert("idempotency-key", "k-9".parse().unwrap());
    let start = Instant::now();
    let res = hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!((res.status().as_u16(), start.elapsed()), (201, 500 * MS));
    assert_eq!(mock.count(), 2, "no copy after the 409");

    // With no other copy out, the 409 is the answer.
    let mock = Mock::new([Answer::Delay(10 * MS, 409)]);
    let mut req = post("http://a.example/orders", "{}");
    req.headers_mut()
        .insert("idempotency-key", "k-10".parse().unwrap());
    let res = hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!((res.status().as_u16(), mock.count()), (409, 1));

    // A GET's 409 is final, as before.
    let mock = Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(10 * MS, 409)]);
    let res = hedge
        .layer(mock.clone())
        .oneshot(get("http://a.example/x"))
        .await
        .unwrap();
    assert_eq!(res.status(), 409);
}

#[tokio::test(start_paused = true)]
async fn under_retry_the_hedges_answers_are_read_with_retrys_classifier() {
    // Retry calls 418 retryable; the hedge layer was given no classifier. A hedge answered
    // 418 does not win over the first request still out.
    let mock = Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(10 * MS, 418)]);
    let retry = RetryLayer::new().classifier(
        courier_core::Classifier::new()
            .retryable_statuses([http::StatusCode::IM_A_TEAPOT])
            .unwrap(),
    );
    let svc = courier_retry::Retry::new(mock.clone(), retry).with_hedge(layer().after(50 * MS));
    let start = Instant::now();
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!((res.status().as_u16(), start.elapsed()), (200, 500 * MS));
    assert_eq!(mock.count(), 2, "the first and one hedge; nothing retried");
}

/// A body of two chunks, the second `after` the first.
struct SlowBody {
    chunks: Vec<bytes::Bytes>,
    wait: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for SlowBody {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Infallible>>> {
        if self.chunks.len() == 1 && self.wait.as_mut().poll(cx).is_pending() {
            return std::task::Poll::Pending;
        }
        let chunk = (!self.chunks.is_empty()).then(|| self.chunks.remove(0));
        std::task::Poll::Ready(chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_still_being_read_when_the_delay_ends_is_hedged_at_the_next_tick() {
    // The first request reads the body until 80 ms; the hedge due at 50 ms goes at 100 ms.
    let mock = Mock::new([Answer::Delay(2_000 * MS, 200), Answer::Delay(10 * MS, 201)]);
    let body = courier_retry::ReplayBody::new(SlowBody {
        chunks: vec![
            bytes::Bytes::from_static(b"{\"n\":"),
            bytes::Bytes::from_static(b"4}"),
        ],
        wait: Box::pin(tokio::time::sleep(80 * MS)),
    });
    let req = Request::put("http://a.example/items/4").body(body).unwrap();
    let start = Instant::now();
    let res = layer()
        .after(50 * MS)
        .layer(mock.clone())
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!((res.status().as_u16(), start.elapsed()), (201, 110 * MS));
    let calls = mock.calls();
    assert_eq!(calls[1].at - calls[0].at, 100 * MS);
    assert_eq!(calls[1].body.as_deref(), Some(&b"{\"n\":4}"[..]));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_loses_while_it_waits_to_be_ready_costs_no_budget() {
    let hedge = HedgeLayer::new()
        .after(50 * MS)
        .budget(RetryBudget::new().floor(1).ratio(0.0));
    // One request at a time below: the hedge waits for the first to end, and loses to it.
    let mock = Mock::new([Answer::Delay(100 * MS, 200)]);
    let res = hedge
        .layer(tower::limit::ConcurrencyLimit::new(mock.clone(), 1))
        .oneshot(get("http://a.example/x"))
        .await
        .unwrap();
    assert_eq!((res.status().as_u16(), mock.count()), (200, 1));
    // The budget's one hedge is still there for the next call.
    let mock = Mock::new([Answer::Delay(2_000 * MS, 200), Answer::Delay(10 * MS, 200)]);
    let start = Instant::now();
    hedge
        .layer(mock.clone())
        .oneshot(get("http://a.example/x"))
        .await
        .unwrap();
    assert_eq!((mock.count(), start.elapsed()), (2, 60 * MS));
}

/// A service whose first instance is ready at once and whose clones only at `at`: a hedge
/// waits for readiness (a full concurrency limit below, say).
struct ReadyAt {
    inner: Mock,
    at: Instant,
    first: Arc<std::sync::atomic::AtomicBool>,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Clone for ReadyAt {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            at: self.at,
            first: Arc::clone(&self.first),
            wait: None,
        }
    }
}

impl Service<Request<String>> for ReadyAt {
    type Response = Response<String>;
    type Error = courier_core::BoxError;
    type Future = <Mock as Service<Request<String>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        if !self.first.swap(true, Ordering::SeqCst) {
            return std::task::Poll::Ready(Ok(()));
        }
        let at = self.at;
        let wait = self
            .wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        std::task::ready!(std::future::Future::poll(wait.as_mut(), cx));
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<String>) -> Self::Future {
        self.inner.call(req)
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedge_still_waiting_to_be_ready_at_the_deadline_is_never_sent() {
    let mock = Mock::new([Answer::Delay(1_000 * MS, 200), Answer::Delay(10 * MS, 200)]);
    let start = Instant::now();
    let svc = ReadyAt {
        inner: mock.clone(),
        at: start + 300 * MS,
        first: Arc::default(),
        wait: None,
    };
    let mut req = get("http://a.example/x");
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline(start + 200 * MS);
    let res = layer()
        .after(50 * MS)
        .layer(svc)
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!((res.status().as_u16(), start.elapsed()), (200, 1_000 * MS));
    assert_eq!(
        mock.count(),
        1,
        "the hedge was ready only after the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn delays_beyond_an_hour_are_an_hour() {
    let mock = Mock::new([Answer::Delay(10 * MS, 200)]);
    for hedge in [
        layer().after(Duration::MAX),
        layer().bounds(Duration::MAX, Duration::MAX),
    ] {
        let res = hedge
            .layer(mock.clone())
            .oneshot(get("http://a.example/x"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_marked_safe_is_hedged_and_the_call_options_decide_for_their_call() {
    let slow_then_fast = || Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(5 * MS, 200)]);
    let hedge = layer().after(50 * MS);

    let mock = slow_then_fast();
    let mut req = post("http://a.example/rpc", "x");
    req.extensions_mut().insert(RetrySafe);
    hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(mock.count(), 2, "marked retry-safe");

    let mock = slow_then_fast();
    let mut req = get("http://a.example/x");
    CallOptions::new().no_hedge().apply(&mut req);
    let start = Instant::now();
    hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!((mock.count(), start.elapsed()), (1, 500 * MS), "no_hedge");

    let mock = slow_then_fast();
    let mut req = get("http://a.example/x");
    CallOptions::new()
        .hedge_after(20 * MS)
        .unwrap()
        .apply(&mut req);
    let start = Instant::now();
    hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(
        (mock.count(), start.elapsed()),
        (2, 25 * MS),
        "its own delay"
    );

    let mock = slow_then_fast();
    let mut req = get("http://a.example/x");
    CallOptions::new().retry_safe(false).apply(&mut req);
    hedge.layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(mock.count(), 1, "not retry-safe for this call");
}

#[tokio::test(start_paused = true)]
async fn a_non_fatal_answer_sends_the_next_hedge_at_once_and_pushback_stops_them() {
    // A 502 after 10 ms: the hedge goes then, not at 50 ms.
    let mock = Mock::new([Answer::Delay(10 * MS, 502), Answer::Delay(5 * MS, 200)]);
    let svc = layer().after(50 * MS).layer(mock.clone());
    let start = Instant::now();
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!((res.status().as_u16(), start.elapsed()), (200, 15 * MS));
    assert_eq!(
        hedged(&res).unwrap().to_string(),
        "#1 at 0 ms: non_fatal, #2 at 10 ms: won"
    );

    // A 503 is pushback: no hedge after it, and it is the call's answer.
    let mock = Mock::new([Answer::Delay(10 * MS, 503)]);
    let svc = layer().after(50 * MS).attempts(3).layer(mock.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((res.status().as_u16(), mock.count()), (503, 1));

    // So is a wait the server asks for, on an answer that is not an overload.
    let mock = Mock::new([
        Answer::Delay(100 * MS, 200),
        Answer::Headers(502, vec![("retry-after", "3".into())]),
    ]);
    let svc = layer().after(50 * MS).attempts(4).layer(mock.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!(res.status(), 200, "the first request still answers");
    assert_eq!(mock.count(), 2, "no third hedge after the pushback");
    assert_eq!(
        hedged(&res).unwrap().to_string(),
        "#1 at 0 ms: won, #2 at 50 ms: non_fatal"
    );
}

#[tokio::test(start_paused = true)]
async fn a_final_answer_wins_even_when_it_is_an_error_status() {
    let mock = Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(5 * MS, 404)]);
    let svc = layer().after(50 * MS).layer(mock.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!(res.status(), 404, "asking again cannot change a 404");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_refused_below_is_not_sent_stops_the_hedges_and_goes_back_to_the_budget() {
    // The hedge is refused by a layer below (an open circuit): the first request answers.
    let mock = Mock::new([Answer::Delay(100 * MS, 200), Answer::Local]);
    let svc = layer().after(20 * MS).attempts(3).layer(mock.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(mock.count(), 2, "no third request after the refusal");
    assert_eq!(
        hedged(&res).unwrap().to_string(),
        "#1 at 0 ms: won, #2 at 20 ms: refused"
    );
}

/// A service whose requests take `slow` when `is_slow(n)` for the n-th, else 1 ms, and that
/// counts requests started and still in flight (a request dropped leaves the count).
#[derive(Clone)]
struct Upstream {
    started: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    slow: Duration,
    status: u16,
    every: usize,
}

struct InFlight(Arc<AtomicUsize>, Arc<AtomicUsize>, bool);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        if !self.2 {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Upstream {
    /// Every `every`-th request is slow.
    fn new(slow: Duration, every: usize, status: u16) -> Self {
        Self {
            started: Arc::default(),
            in_flight: Arc::default(),
            dropped: Arc::default(),
            slow,
            status,
            every,
        }
    }
}

impl Service<Request<String>> for Upstream {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<String>, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<String>) -> Self::Future {
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let mut guard = InFlight(self.in_flight.clone(), self.dropped.clone(), false);
        let took = if n.is_multiple_of(self.every) {
            self.slow
        } else {
            MS
        };
        let status = self.status;
        Box::pin(async move {
            tokio::time::sleep(took).await;
            guard.2 = true;
            drop(guard);
            Ok(Response::builder()
                .status(status)
                .body(String::new())
                .unwrap())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn every_hedge_is_charged_to_the_budget_so_a_slow_host_gets_at_most_a_tenth_more() {
    // Every request is slow: each call would hedge, the budget lets one in ten.
    let upstream = Upstream::new(100 * MS, 1, 200);
    let svc = HedgeLayer::new().after(10 * MS).layer(upstream.clone());
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..125 {
                svc.clone()
                    .oneshot(get("http://a.example/x"))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sent = upstream.started.load(Ordering::SeqCst);
    assert!(sent > 2_000, "hedges went: {sent}");
    assert!(
        sent <= 2_200,
        "at most 10 % more than the 2000 calls: {sent}"
    );
    assert_eq!(upstream.in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_host_answering_503_to_everything_slowly_gets_no_more_than_the_budget() {
    let upstream = Upstream::new(100 * MS, 1, 503);
    // The preset's order: retry above the hedges.
    let svc = tower::ServiceBuilder::new()
        .layer(RetryLayer::new().attempts(3).without_budget())
        .layer(HedgeLayer::new().after(10 * MS).attempts(5))
        .service(upstream.clone());
    for _ in 0..200 {
        let res = svc
            .clone()
            .oneshot(get("http://a.example/x"))
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
    }
    // 600 attempts from retry; hedges at most a tenth of them.
    let sent = upstream.started.load(Ordering::SeqCst);
    assert!(sent <= 660, "{sent}");
}

#[tokio::test(start_paused = true)]
async fn a_losing_request_is_dropped_and_nothing_is_left_in_flight() {
    let upstream = Upstream::new(5_000 * MS, 2, 200);
    let svc = layer().after(20 * MS).layer(upstream.clone());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!(hedged(&res).unwrap().winner().unwrap().attempt, 2);
    assert_eq!(upstream.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(
        upstream.dropped.load(Ordering::SeqCst),
        1,
        "the slow one was cancelled"
    );

    // A call dropped by its caller drops every request it has out.
    let upstream = Upstream::new(5_000 * MS, 1, 200);
    let svc = layer().after(20 * MS).attempts(3).layer(upstream.clone());
    let call = svc.oneshot(get("http://a.example/x"));
    let _ = tokio::time::timeout(100 * MS, call).await.unwrap_err();
    assert_eq!(upstream.started.load(Ordering::SeqCst), 3);
    assert_eq!(upstream.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(upstream.dropped.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn the_learned_delay_follows_the_hosts_tail_and_then_no_call_waits_for_a_slow_answer() {
    // One request in 20 takes 500 ms, the others 1 ms.
    let upstream = Upstream::new(500 * MS, 20, 200);
    let svc = HedgeLayer::new().layer(upstream.clone());
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let start = Instant::now();
        svc.clone()
            .oneshot(get("http://a.example/x"))
            .await
            .unwrap();
        worst = worst.max(start.elapsed());
        tokio::time::sleep(MS).await;
    }
    assert_eq!(
        worst,
        500 * MS,
        "while the delay is learned, a slow call waits"
    );
    assert_eq!(upstream.started.load(Ordering::SeqCst), 20);
    let calls = 2_000;
    let mut worst = Duration::ZERO;
    for _ in 0..calls {
        let start = Instant::now();
        svc.clone()
            .oneshot(get("http://a.example/x"))
            .await
            .unwrap();
        worst = worst.max(start.elapsed());
        // Not all in one instant: the window is time.
        tokio::time::sleep(MS).await;
    }
    // At most the learned delay (the fast answers' top, rounded up to the timer's
    // millisecond) and a fast answer: a hundredth of the slow one.
    assert!(worst <= 5 * MS, "{worst:?}");
    // The slow twentieth was hedged, and nothing else.
    let hedges = upstream.started.load(Ordering::SeqCst) - 20 - calls;
    assert!((90..=110).contains(&hedges), "{hedges}");
}

fn grpc(after: Duration, code: &str) -> Answer {
    Answer::DelayHeaders(
        after,
        200,
        vec![
            ("content-type", "application/grpc".into()),
            ("grpc-status", code.into()),
        ],
    )
}

fn grpc_request() -> Request<String> {
    let mut req = Request::post("http://a.example/pkg.Greeter/SayHello")
        .header("content-type", "application/grpc")
        .body(String::new())
        .unwrap();
    req.extensions_mut().insert(RetrySafe);
    req
}

#[tokio::test(start_paused = true)]
async fn a_grpc_hedge_says_how_many_went_before_and_the_non_fatal_codes_are_the_layers() {
    use courier_core::grpc::GrpcCode;
    let mock = Mock::new([grpc(500 * MS, "0"), grpc(5 * MS, "0"), grpc(5 * MS, "0")]);
    let svc = layer().after(50 * MS).attempts(3).layer(mock.clone());
    svc.oneshot(grpc_request()).await.unwrap();
    let calls = mock.calls();
    assert!(!calls[0].headers.contains_key("grpc-previous-rpc-attempts"));
    assert_eq!(calls[1].headers["grpc-previous-rpc-attempts"], "1");

    // UNAVAILABLE named non-fatal: the next hedge at once, whose OK wins.
    let hedge = layer()
        .after(50 * MS)
        .attempts(3)
        .non_fatal_grpc_codes([GrpcCode::UNAVAILABLE]);
    let mock = Mock::new([grpc(10 * MS, "14"), grpc(5 * MS, "0")]);
    let res = hedge
        .layer(mock.clone())
        .oneshot(grpc_request())
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "0");
    assert_eq!(
        hedged(&res).unwrap().to_string(),
        "#1 at 0 ms: non_fatal, #2 at 10 ms: won"
    );
    // Any other code is fatal, even one the classifier would retry.
    let hedge = layer()
        .after(50 * MS)
        .attempts(3)
        .non_fatal_grpc_codes([GrpcCode::ABORTED]);
    let mock = Mock::new([grpc(10 * MS, "14"), grpc(5 * MS, "0")]);
    let res = hedge
        .layer(mock.clone())
        .oneshot(grpc_request())
        .await
        .unwrap();
    assert_eq!(res.headers()["grpc-status"], "14");
    assert_eq!(mock.count(), 1);
}

/// Span events, `open <name>#<id> under <parent> <fields>`, `record <name>#<id> <fields>`,
/// `close <name>#<id>`, each to the log of the thread it happened on, if it has one.
///
/// One global subscriber for the binary, not one per test: a per-test default can leave a
/// span's callsite with the interest it was given on another test's thread, with no
/// subscriber.
struct SpanLog;

type Log = Arc<std::sync::Mutex<Vec<String>>>;

thread_local! {
    static LOG: std::cell::RefCell<Option<Log>> = const { std::cell::RefCell::new(None) };
}

impl SpanLog {
    fn push(line: String) {
        LOG.with(|log| {
            if let Some(log) = &*log.borrow() {
                log.lock().unwrap().push(line);
            }
        });
    }

    /// Logs this thread's span events from now on.
    fn start() -> Log {
        use tracing_subscriber::layer::SubscriberExt;
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(SpanLog))
                .expect("this test binary installs no other global subscriber");
        });
        let log = Log::default();
        LOG.with(|l| *l.borrow_mut() = Some(log.clone()));
        log
    }
}

struct Fields(Vec<String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanLog
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(Vec::new());
        attrs.record(&mut fields);
        let parent = ctx
            .span(id)
            .and_then(|s| s.parent().map(|p| p.name()))
            .unwrap_or("-");
        Self::push(format!(
            "open {}#{} under {parent} {}",
            attrs.metadata().name(),
            id.into_u64(),
            fields.0.join(" ")
        ));
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(Vec::new());
        values.record(&mut fields);
        let name = ctx.span(id).map_or("?", |s| s.name());
        Self::push(format!(
            "record {name}#{} {}",
            id.into_u64(),
            fields.0.join(" ")
        ));
    }
    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let name = ctx.span(&id).map_or("?", |s| s.name());
        Self::push(format!("close {name}#{}", id.into_u64()));
    }
}

#[test]
fn one_call_span_and_overlapping_request_spans_with_the_winner_marked() {
    let log = SpanLog::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let mock = Mock::new([Answer::Delay(500 * MS, 200), Answer::Delay(5 * MS, 200)]);
        let svc = tower::ServiceBuilder::new()
            .layer(RetryLayer::new())
            .layer(layer().after(50 * MS))
            .service(mock);
        svc.oneshot(get("http://a.example/x")).await.unwrap();
    });
    let log = log.lock().unwrap().clone();
    let find = |prefix: &str| {
        log.iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {log:#?}"))
    };
    assert_eq!(
        log.iter()
            .filter(|l| l.starts_with("open courier.call"))
            .count(),
        1,
        "{log:#?}"
    );
    let hedges: Vec<_> = log
        .iter()
        .filter(|l| l.starts_with("open courier.hedge"))
        .collect();
    assert_eq!(hedges.len(), 2, "{log:#?}");
    for (n, (open, offset)) in hedges.iter().zip([0, 50]).enumerate() {
        assert!(open.contains("under courier.attempt"), "{open}");
        assert!(
            open.contains(&format!("courier.hedge.attempt={}", n + 1)),
            "{open}"
        );
        assert!(
            open.contains(&format!("courier.hedge.offset_ms={offset}")),
            "{open}"
        );
    }
    let id = |open: &str| open.split_whitespace().nth(1).unwrap().to_owned();
    let (first, second) = (id(hedges[0]), id(hedges[1]));
    // The hedge opened while the first request was still out: they overlap.
    assert!(find(&format!("open {second}")) < find(&format!("close {first}")));
    assert!(
        log.iter()
            .any(|l| l.starts_with(&format!("record {second}"))
                && l.contains("courier.hedge.outcome=won")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.starts_with(&format!("record {first}"))
            && l.contains("courier.hedge.outcome=cancelled")),
        "{log:#?}"
    );
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    courier_testkit::pass_through::check(courier_retry::hedge::Hedge::pass_through).await;
    assert!(courier_retry::hedge::Hedge::pass_through(()).is_pass_through());
    assert!(!HedgeLayer::new().layer(()).is_pass_through());
}

#[tokio::test(start_paused = true)]
async fn retry_hedging_its_own_attempts_does_what_a_hedge_layer_below_it_does() {
    // Attempt 1: the first request fails slowly, its hedge fails at once; the retry goes after
    // its wait, and its own first request is slow enough to be hedged too.
    let script = || {
        Mock::new([
            Answer::Delay(500 * MS, 502),
            Answer::Delay(10 * MS, 502),
            Answer::Delay(2_000 * MS, 200),
            Answer::Delay(10 * MS, 200),
        ])
    };
    let retry = || RetryLayer::new().attempts(2).seed(7);
    let hedge = || layer().after(50 * MS);

    let below = script();
    let stack = tower::ServiceBuilder::new()
        .layer(retry())
        .layer(hedge())
        .service(below.clone());
    let own = script();
    let retry_own = courier_retry::Retry::new(own.clone(), retry()).with_hedge(hedge());
    assert!(retry_own.is_hedged() && !retry_own.is_pass_through());

    let mut seen = Vec::new();
    for (mock, res) in [
        (&below, stack.oneshot(get("http://a.example/x")).await),
        (&own, retry_own.oneshot(get("http://a.example/x")).await),
    ] {
        let res = res.unwrap();
        let start = mock.calls()[0].at;
        let offsets: Vec<_> = mock.calls().iter().map(|c| c.at - start).collect();
        let attempts = res.extensions().get::<courier_core::Attempts>().unwrap();
        seen.push((
            res.status(),
            res.body().clone(),
            offsets,
            attempts.count(),
            hedged(&res).map(|h| h.to_string()),
        ));
    }
    assert_eq!(seen[0], seen[1]);
    let (status, body, offsets, attempts, hedges) = &seen[1];
    assert_eq!(
        (status.as_u16(), body.as_str(), *attempts),
        (200, "answer 3", 2)
    );
    assert_eq!(offsets.len(), 4);
    assert_eq!(offsets[1], 50 * MS, "the first attempt's hedge");
    assert_eq!(offsets[3] - offsets[2], 50 * MS, "the retry's hedge");
    assert_eq!(
        hedges.as_deref(),
        Some("#1 at 0 ms: cancelled, #2 at 50 ms: won")
    );

    // A pass-through retry service with hedging hedges its one attempt.
    let mock = Mock::new([Answer::Delay(2_000 * MS, 200), Answer::Delay(10 * MS, 200)]);
    let svc = courier_retry::Retry::pass_through(mock.clone()).with_hedge(hedge());
    let res = svc.oneshot(get("http://a.example/x")).await.unwrap();
    assert_eq!((res.body().as_str(), mock.count()), ("answer 1", 2));
    assert!(res.extensions().get::<courier_core::Attempts>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_under_retry_is_hedged_once_the_first_request_has_read_it_whole() {
    // Retry keeps a copy of the body aside for its next attempt; the hedge's copy is whole as
    // soon as the first request has read the body to its end.
    let mock = Mock::new([Answer::Delay(2_000 * MS, 200), Answer::Delay(10 * MS, 201)]);
    let svc = courier_retry::Retry::new(mock.clone(), RetryLayer::new())
        .with_hedge(layer().after(50 * MS));
    let body = courier_retry::ReplayBody::new(http_body_util::Full::new(
        bytes::Bytes::from_static(b"{\"n\":2}"),
    ));
    let req = Request::post("http://a.example/orders")
        .header("idempotency-key", "k-7")
        .body(body)
        .unwrap();
    let res = svc.oneshot(req).await.unwrap();
    assert_eq!(res.status(), 201);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.headers["idempotency-key"], "k-7");
        assert_eq!(call.body.as_deref(), Some(&b"{\"n\":2}"[..]));
    }
}
