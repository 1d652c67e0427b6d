//! RetryLayer at the layer level: the scenario table (docs/ARCHITECTURE.md) and every rule of
//! the retry policy, on paused time against a scripted upstream.

mod common;

use bytes::Bytes;
use common::*;
use courier_core::extensions::{AttemptOutcome, Decision, Reason};
use courier_core::{
    BoxError, CallContext, DeadlineExceeded, FailureKind, HintConfig, ManualClock, WaitSource,
    is_caused_by,
};
use courier_retry::future::ResponseFuture;
use courier_retry::policy::backoff_ceiling;
use courier_retry::{Jitter, ReplayBody, Retry, RetryBody, RetryBudget, RetryLayer};
use courier_testkit::body::ScriptedBody;
use courier_testkit::contract;
use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/v1/items";

fn layer() -> RetryLayer {
    RetryLayer::new().seed(7)
}

async fn send(
    layer: &RetryLayer,
    mock: &Mock,
    req: Request<String>,
) -> Result<Response<String>, BoxError> {
    layer.layer(mock.clone()).oneshot(req).await
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The waits of the records that retried, checked against the call gaps.
#[track_caller]
fn assert_gaps_match_records(res: &Response<String>, mock: &Mock) {
    let records = attempts(res);
    let calls = mock.calls();
    assert_eq!(records.count(), calls.len());
    for (gap, record) in gaps(&calls).into_iter().zip(records.records()) {
        assert_eq!(record.decision, Decision::Retry);
        assert_waited(gap, record.wait);
    }
}

// === the scenario table ===

#[tokio::test(start_paused = true)]
async fn get_503_503_200_takes_three_attempts() {
    let mock = Mock::new([Answer::Status(503), Answer::Status(503)]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 3);
    assert_gaps_match_records(&res, &mock);
    let records = attempts(&res);
    assert_eq!(records.records()[0].reason, Reason::RetryableStatus);
    assert_eq!(records.records()[0].wait_source, Some(WaitSource::Backoff));
    assert!(records.records()[0].wait <= Duration::from_millis(500));
    assert!(records.records()[1].wait <= secs(1));
    assert_eq!(records.last().unwrap().reason, Reason::FinalStatus);
}

#[tokio::test(start_paused = true)]
async fn get_500_five_times_stops_after_three() {
    let mock = Mock::always(Answer::Status(500), 5);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(mock.count(), 3);
    assert_gaps_match_records(&res, &mock);
    let last = attempts(&res).last().cloned().unwrap();
    assert_eq!(
        (last.decision, last.reason),
        (Decision::Stop, Reason::AttemptsExhausted)
    );
}

#[tokio::test(start_paused = true)]
async fn get_429_retry_after_2_waits_exactly_2s() {
    let mock = Mock::new([Answer::Headers(429, vec![("retry-after", "2".into())])]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 2);
    assert_waited(gaps(&mock.calls())[0], secs(2));
    let first = attempts(&res).records()[0].clone();
    assert_eq!(
        (first.wait, first.wait_source),
        (secs(2), Some(WaitSource::RetryAfter))
    );
}

#[tokio::test(start_paused = true)]
async fn get_429_quota_reset_waits_until_the_reset() {
    let now = UNIX_EPOCH + secs(1_700_000_000);
    let hints = HintConfig::new().clock(ManualClock::new(now));
    for reset in ["1700000002", "2"] {
        let mock = Mock::new([Answer::Headers(
            429,
            vec![
                ("x-ratelimit-remaining", "0".into()),
                ("x-ratelimit-reset", reset.into()),
            ],
        )]);
        let res = send(&layer().hint_config(hints.clone()), &mock, get(URL))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "reset {reset}");
        assert_eq!(mock.count(), 2);
        assert_waited(gaps(&mock.calls())[0], secs(2));
        assert_eq!(
            attempts(&res).records()[0].wait_source,
            Some(WaitSource::QuotaReset)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn get_connection_reset_is_retried() {
    let mock = Mock::new([Answer::Fail(io::ErrorKind::ConnectionReset)]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 2);
    assert_gaps_match_records(&res, &mock);
    let first = attempts(&res).records()[0].clone();
    assert_eq!(first.outcome, AttemptOutcome::Failure(FailureKind::Read));
    assert_eq!(first.reason, Reason::RetryableFailure);
}

#[tokio::test(start_paused = true)]
async fn get_delayed_answer_is_retried_after_the_attempt_timeout() {
    let mock = Mock::new([Answer::Delay(Duration::from_millis(1500), 200)]);
    let timeout = tower::timeout::TimeoutLayer::new(Duration::from_millis(500));
    // tower's timeout error is tower's to know: marked as a transport marks its failures.
    let timeout = tower::ServiceBuilder::new()
        .map_err(courier::transport::classified)
        .layer(timeout);
    let svc = layer().layer(timeout.service(mock.clone()));
    let res = svc.oneshot(get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 2);
    let records = attempts(&res);
    assert_eq!(
        records.records()[0].outcome,
        AttemptOutcome::Failure(FailureKind::Timeout)
    );
    assert_eq!(records.records()[0].elapsed, Duration::from_millis(500));
    assert_waited(
        gaps(&mock.calls())[0],
        Duration::from_millis(500) + records.records()[0].wait,
    );
}

#[tokio::test(start_paused = true)]
async fn post_503_without_key_is_sent_once() {
    let mock = Mock::new([Answer::Status(503)]);
    let res = send(&layer(), &mock, post(URL, "order")).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.count(), 1);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::NotRetrySafe);
}

#[tokio::test(start_paused = true)]
async fn post_503_with_key_is_retried_with_the_same_key() {
    let mock = Mock::new([Answer::Status(503)]);
    let mut req = post(URL, "order");
    req.headers_mut()
        .insert("idempotency-key", "k-42".parse().unwrap());
    let res = send(&layer(), &mock, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    for c in &calls {
        assert_eq!(c.headers["idempotency-key"], "k-42");
        assert_eq!(c.body.as_deref(), Some(&b"order"[..]));
    }
}

#[tokio::test(start_paused = true)]
async fn get_429_retry_after_120_returns_at_once() {
    let (_guard, events) = capture();
    let mock = Mock::new([Answer::Headers(429, vec![("retry-after", "120".into())])]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(mock.count(), 1);
    let last = attempts(&res).last().cloned().unwrap();
    assert_eq!(last.reason, Reason::HintTooLong);
    assert_eq!(last.elapsed, Duration::ZERO, "returned at once");
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "hint_exceeds_max_wait");
    assert_eq!(events[0]["decision"], "stop");
}

#[tokio::test(start_paused = true)]
async fn skewed_server_date_waits_the_servers_delta() {
    // Our clock is 40 s ahead of the server's; by our clock the Retry-After date is 38 s ago.
    let ours = UNIX_EPOCH + secs(1_700_000_000);
    let server_date = ours - secs(40);
    let mock = Mock::new([Answer::Headers(
        503,
        vec![
            ("date", httpdate::fmt_http_date(server_date)),
            (
                "retry-after",
                httpdate::fmt_http_date(server_date + secs(2)),
            ),
        ],
    )]);
    let layer = layer().hint_config(HintConfig::new().clock(ManualClock::new(ours)));
    let res = send(&layer, &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_waited(gaps(&mock.calls())[0], secs(2));
    assert_eq!(attempts(&res).records()[0].wait, secs(2));
}

// === idempotency ===

#[tokio::test(start_paused = true)]
async fn post_without_key_is_sent_once_on_a_read_timeout() {
    let mock = Mock::new([Answer::Delay(secs(5), 200)]);
    let timeout = tower::timeout::TimeoutLayer::new(Duration::from_millis(500));
    let err = layer()
        .layer(timeout.layer(mock.clone()))
        .oneshot(post(URL, "order"))
        .await
        .unwrap_err();
    assert!(
        is_caused_by::<tower::timeout::error::Elapsed>(&*err),
        "{err}"
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn post_without_key_is_retried_after_a_connect_error() {
    let mock = Mock::new([Answer::Fail(io::ErrorKind::ConnectionRefused)]);
    let res = send(&layer(), &mock, post(URL, "order")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].body.as_deref(), Some(&b"order"[..]));
    assert_eq!(
        attempts(&res).records()[0].outcome,
        AttemptOutcome::Failure(FailureKind::Connect)
    );
}

/// The bytes one connection was given.
type Wire = Arc<std::sync::Mutex<Vec<u8>>>;

/// A connection that takes every byte written and then fails the read with `kind`, as Linux
/// does on an established socket once an ICMP "host unreachable" has become a hard error.
struct SentThenFails {
    written: Wire,
    kind: io::ErrorKind,
    reader: Option<std::task::Waker>,
}

impl tokio::io::AsyncRead for SentThenFails {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        _: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.written.lock().unwrap().ends_with(b"\r\n\r\norder") {
            return Poll::Ready(Err(io::Error::from(self.kind)));
        }
        self.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl tokio::io::AsyncWrite for SentThenFails {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written.lock().unwrap().extend_from_slice(buf);
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn post_without_key_is_not_sent_again_after_it_was_written() {
    for kind in [
        io::ErrorKind::HostUnreachable,
        io::ErrorKind::NetworkUnreachable,
        io::ErrorKind::NotConnected,
    ] {
        // What each attempt put on the wire.
        let wires: Arc<std::sync::Mutex<Vec<Wire>>> = Arc::default();
        let transport = tower::service_fn({
            let wires = wires.clone();
            move |req: Request<String>| {
                let written = Wire::default();
                wires.lock().unwrap().push(written.clone());
                async move {
                    let io = hyper_util::rt::TokioIo::new(SentThenFails {
                        written,
                        kind,
                        reader: None,
                    });
                    let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
                    tokio::spawn(conn);
                    // hyper's errors are the facade's to know: marked as its transport does.
                    let res = send.send_request(req).await;
                    Ok::<_, BoxError>(res.map_err(courier::transport::classified)?)
                }
            }
        });
        let req = Request::post("http://api.example/orders")
            .header("host", "api.example")
            .body("order".to_owned())
            .unwrap();
        let err = RetryLayer::new()
            .base(Duration::from_millis(1))
            .attempts(2)
            .layer(transport)
            .oneshot(req)
            .await
            .unwrap_err();
        let wires = wires.lock().unwrap().clone();
        let first = String::from_utf8(wires[0].lock().unwrap().clone()).unwrap();
        assert!(
            first.starts_with("POST ") && first.ends_with("\r\n\r\norder"),
            "{first}"
        );
        assert_eq!(
            wires.len(),
            1,
            "{kind:?}: a POST without a key that was written whole was sent again ({err})"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn generated_key_is_the_same_on_every_attempt_and_never_replaces() {
    let layer = layer().generate_idempotency_keys(true);
    let mock = Mock::new([Answer::Status(503), Answer::Status(502)]);
    let res = send(&layer, &mock, post(URL, "x")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let calls = mock.calls();
    assert_eq!(calls.len(), 3);
    let key = calls[0].headers["idempotency-key"]
        .to_str()
        .unwrap()
        .to_owned();
    let parsed = uuid::Uuid::parse_str(&key).expect("a uuid");
    assert_eq!(parsed.get_version_num(), 4);
    assert!(calls.iter().all(|c| c.headers["idempotency-key"] == *key));

    let mock = Mock::new([Answer::Status(503)]);
    let mut req = Request::patch(URL).body(String::new()).unwrap();
    req.headers_mut()
        .insert("idempotency-key", "mine".parse().unwrap());
    send(&layer, &mock, req).await.unwrap();
    assert!(
        mock.calls()
            .iter()
            .all(|c| c.headers["idempotency-key"] == "mine")
    );

    let mock = Mock::new([]);
    send(&layer, &mock, get(URL)).await.unwrap();
    assert!(!mock.calls()[0].headers.contains_key("idempotency-key"));
}

#[tokio::test(start_paused = true)]
async fn idempotent_methods_are_configurable() {
    let layer = layer().idempotent_methods([http::Method::GET]);
    let mock = Mock::new([Answer::Status(503)]);
    let req = Request::put(URL).body(String::new()).unwrap();
    let res = send(&layer, &mock, req).await.unwrap();
    assert_eq!(mock.count(), 1);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::NotRetrySafe);
}

// === statuses and failures ===

#[tokio::test(start_paused = true)]
async fn final_statuses_end_the_call() {
    for status in [200, 201, 301, 304, 400, 401, 404, 409, 501] {
        let mock = Mock::new([Answer::Status(status)]);
        let res = send(&layer(), &mock, get(URL)).await.unwrap();
        assert_eq!(res.status().as_u16(), status);
        assert_eq!(mock.count(), 1, "{status}");
        assert_eq!(attempts(&res).last().unwrap().reason, Reason::FinalStatus);
    }
    for status in [408, 429, 500, 502, 503, 504] {
        let mock = Mock::new([Answer::Status(status)]);
        send(&layer(), &mock, get(URL)).await.unwrap();
        assert_eq!(mock.count(), 2, "{status}");
    }
}

#[test]
fn a_success_or_a_redirect_is_refused_as_a_retryable_status() {
    for status in [StatusCode::OK, StatusCode::NO_CONTENT, StatusCode::FOUND] {
        let err = layer()
            .retryable_statuses([StatusCode::SERVICE_UNAVAILABLE, status])
            .unwrap_err();
        assert_eq!(err.given(), status.to_string(), "{err}");
        assert!(err.to_string().contains("400 to 599"), "{err}");
    }
    assert!(
        layer()
            .retryable_statuses([StatusCode::IM_A_TEAPOT])
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn retryable_statuses_are_configurable() {
    let layer = layer().retryable_statuses([StatusCode::NOT_FOUND]).unwrap();
    let mock = Mock::new([Answer::Status(404), Answer::Status(503)]);
    let res = send(&layer, &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn forbidden_counts_as_rate_limit_only_with_a_hint() {
    let limited = || Answer::Headers(403, vec![("retry-after", "1".into())]);
    let mock = Mock::new([limited()]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_waited(gaps(&mock.calls())[0], secs(1));

    let mock = Mock::new([Answer::Status(403)]);
    let res = send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    assert_eq!(mock.count(), 1);

    let mock = Mock::new([limited()]);
    let res = send(&layer().rate_limit_403(false), &mock, get(URL))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    assert_eq!(mock.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn local_refusals_are_never_retried() {
    let mock = Mock::new([Answer::Local]);
    let err = send(&layer(), &mock, get(URL)).await.unwrap_err();
    let failed = err
        .downcast_ref::<courier_core::CallFailed>()
        .expect("the error carries the attempts");
    assert!(failed.get_ref().is::<courier_core::CircuitOpen>());
    let records = failed.attempts().records();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].outcome, records[0].reason),
        (
            AttemptOutcome::Failure(FailureKind::Local),
            Reason::NeverRetried
        )
    );
    assert_eq!(mock.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_last_transport_error_comes_back() {
    let mock = Mock::always(Answer::Fail(io::ErrorKind::ConnectionReset), 3);
    let err = send(&layer(), &mock, get(URL)).await.unwrap_err();
    let failed = err
        .downcast_ref::<courier_core::CallFailed>()
        .expect("the error carries the attempts");
    let io = failed
        .get_ref()
        .downcast_ref::<io::Error>()
        .expect("the inner error as is");
    assert_eq!(io.kind(), io::ErrorKind::ConnectionReset);
    assert!(
        err.source().is_some_and(|s| s.is::<io::Error>()),
        "source() is the inner error"
    );
    assert_eq!(err.to_string(), io.to_string(), "shown as the inner error");
    let reasons: Vec<_> = failed.attempts().iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::RetryableFailure,
            Reason::RetryableFailure,
            Reason::AttemptsExhausted
        ]
    );
    assert!(
        failed
            .attempts()
            .iter()
            .all(|r| r.outcome == AttemptOutcome::Failure(FailureKind::Read))
    );
    assert_eq!(mock.count(), 3);
}

/// A call ended from outside hands its records over to the layer that drops it: every
/// attempt's, and the one under way with why it ended.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_under_way_hands_its_attempts_over() {
    // The deadline passes during the second attempt (the first answer's wait is 2 s at most).
    let mock = Mock::new([Answer::Status(503), Answer::Delay(secs(60), 200)]);
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(5));
    let mut call = Box::pin(layer().layer(mock.clone()).oneshot(req));
    assert!(tokio::time::timeout(secs(5), call.as_mut()).await.is_err());
    assert_eq!(mock.count(), 2, "the second attempt is under way");
    let handed = courier_core::Attempts::of_dropped(|| drop(call)).expect("handed over");
    let seen: Vec<_> = handed
        .iter()
        .map(|r| (r.attempt, r.outcome, r.reason))
        .collect();
    assert_eq!(
        seen,
        [
            (
                1,
                AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE),
                Reason::RetryableStatus
            ),
            (
                2,
                AttemptOutcome::Failure(FailureKind::Local),
                Reason::DeadlinePassed
            ),
        ]
    );
    assert_eq!(handed.last().unwrap().elapsed, secs(5));

    // Dropped by its caller before any deadline: canceled.
    let mock = Mock::new([Answer::Delay(secs(60), 200)]);
    let mut call = Box::pin(layer().layer(mock.clone()).oneshot(get(URL)));
    assert!(tokio::time::timeout(secs(1), call.as_mut()).await.is_err());
    let handed = courier_core::Attempts::of_dropped(|| drop(call)).expect("handed over");
    let reasons: Vec<_> = handed.iter().map(|r| r.reason).collect();
    assert_eq!(reasons, [Reason::Canceled]);

    // A call that ended hands nothing over when its future is dropped.
    let mock = Mock::new([Answer::Status(200)]);
    let mut call = Box::pin(layer().layer(mock.clone()).oneshot(get(URL)));
    assert_eq!(call.as_mut().await.unwrap().status(), StatusCode::OK);
    assert!(courier_core::Attempts::of_dropped(|| drop(call)).is_none());
}

// === deadline and waits ===

#[tokio::test(start_paused = true)]
async fn a_hint_past_the_deadline_stops_at_once() {
    let mock = Mock::new([Answer::Headers(503, vec![("retry-after", "5".into())])]);
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(3));
    let res = send(&layer(), &mock, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.count(), 1);
    let last = attempts(&res).last().cloned().unwrap();
    assert_eq!(
        (last.reason, last.elapsed),
        (Reason::PastDeadline, Duration::ZERO)
    );
}

#[tokio::test(start_paused = true)]
async fn no_attempt_is_sent_with_the_deadline_spent() {
    // Retry-After: 3 with 3 s left would send the retry at the deadline itself.
    let left: Arc<std::sync::Mutex<Vec<Duration>>> = Arc::default();
    let mock = Mock::new([Answer::Headers(429, vec![("retry-after", "3".into())])]);
    let svc = tower::service_fn({
        let (left, mock) = (left.clone(), mock.clone());
        move |req: Request<String>| {
            left.lock().unwrap().push(
                CallContext::get(req.extensions())
                    .and_then(CallContext::remaining)
                    .unwrap(),
            );
            mock.clone().oneshot(req)
        }
    });
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(3));
    let res = layer().layer(svc).oneshot(req).await.unwrap();
    let left = left.lock().unwrap().clone();
    assert_eq!(left, [secs(3)], "a retry went out with no time left");
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::PastDeadline);
}

#[tokio::test(start_paused = true)]
async fn a_retry_is_not_sent_after_the_deadline_when_readiness_is_slow() {
    let start = tokio::time::Instant::now();
    // Ours: 503 at once. Another caller's: 200 after 10 s, holding the one slot meanwhile.
    let mock = Mock::new([Answer::Status(503), Answer::Delay(secs(10), 200)]);
    let svc = layer()
        .jitter(Jitter::None)
        .layer(tower::limit::ConcurrencyLimitLayer::new(1).layer(mock.clone()));
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(3));
    let ours = tokio::spawn(svc.clone().oneshot(req));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(mock.count(), 1, "our first attempt is done and waits 0.5 s");
    let other = tokio::spawn(svc.clone().oneshot(get(URL)));
    let err = ours.await.unwrap().unwrap_err();
    assert!(is_caused_by::<DeadlineExceeded>(&*err), "{err}");
    assert_eq!(start.elapsed(), secs(3), "the call ends at its deadline");
    other.await.unwrap().unwrap();
    let late: Vec<_> = mock
        .calls()
        .iter()
        .map(|c| c.at - start)
        .filter(|at| *at >= secs(3))
        .collect();
    assert!(
        late.is_empty(),
        "attempts sent after the deadline: {late:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_backoff_past_the_deadline_stops() {
    let layer = layer().jitter(Jitter::None).base(secs(2));
    let mock = Mock::always(Answer::Status(503), 3);
    let mut req = get(URL);
    CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(3));
    let res = send(&layer, &mock, req).await.unwrap();
    // 2 s fits, the next 4 s does not.
    assert_eq!(mock.count(), 2);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::PastDeadline);
}

#[tokio::test(start_paused = true)]
async fn backoff_is_exponential_without_jitter() {
    let layer = layer().jitter(Jitter::None).attempts(5).cap(secs(3));
    let mock = Mock::always(Answer::Status(500), 5);
    send(&layer, &mock, get(URL)).await.unwrap();
    let want = [500, 1000, 2000, 3000].map(Duration::from_millis);
    for (gap, want) in gaps(&mock.calls()).into_iter().zip(want) {
        assert_waited(gap, want);
    }
}

#[tokio::test(start_paused = true)]
async fn an_overload_answer_backs_off_from_the_overload_base() {
    // A bare 503 or 429 backs off from 2 s; a 500, a 502 or a reset from 0.5 s.
    let layer = layer().jitter(Jitter::None).attempts(4);
    let mock = Mock::new([
        Answer::Status(503),
        Answer::Status(500),
        Answer::Status(429),
        Answer::Status(200),
    ]);
    send(&layer, &mock, get(URL)).await.unwrap();
    let want = [2000, 1000, 8000].map(Duration::from_millis);
    let waits = gaps(&mock.calls());
    assert_eq!(waits.len(), 3);
    for (gap, want) in waits.into_iter().zip(want) {
        assert_waited(gap, want);
    }
    let layer = layer.overload_base(Duration::from_millis(100));
    let mock = Mock::new([Answer::Status(503), Answer::Status(200)]);
    send(&layer, &mock, get(URL)).await.unwrap();
    assert_waited(gaps(&mock.calls())[0], Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_seed_makes_waits_reproducible() {
    let run = |seed| async move {
        let mock = Mock::always(Answer::Status(503), 3);
        let res = send(&RetryLayer::new().seed(seed), &mock, get(URL))
            .await
            .unwrap();
        attempts(&res).iter().map(|r| r.wait).collect::<Vec<_>>()
    };
    assert_eq!(run(1).await, run(1).await);
    assert_ne!(run(1).await, run(2).await);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every backoff wait the layer takes lies in [0, min(cap, base * 2^(n-1))].
    #[test]
    fn layer_backoff_stays_in_bounds(
        seed in any::<u64>(),
        base_ms in 1u64..2_000,
        cap_ms in 1u64..20_000,
        attempts_n in 2u32..8,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let (base, cap) = (Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
        rt.block_on(async {
            let layer = RetryLayer::new()
                .seed(seed)
                .base(base)
                .cap(cap)
                .attempts(attempts_n)
                .without_budget();
            let mock = Mock::always(Answer::Status(502), 10);
            let res = send(&layer, &mock, get(URL)).await.unwrap();
            let records = attempts(&res);
            prop_assert_eq!(records.count(), attempts_n as usize);
            let calls = mock.calls();
            for (i, r) in records.iter().take(records.count() - 1).enumerate() {
                let ceiling = backoff_ceiling(base, cap, r.attempt);
                prop_assert!(r.wait <= ceiling, "{:?} > {:?}", r.wait, ceiling);
                let gap = calls[i + 1].at - calls[i].at;
                prop_assert!(gap >= r.wait && gap <= r.wait + Duration::from_millis(1));
            }
            Ok(())
        })?;
    }
}

// === records and events ===

#[tokio::test(start_paused = true)]
async fn one_event_per_attempt_without_credentials() {
    let (_guard, events) = capture();
    let mock = Mock::new([Answer::Status(503)]);
    let req = get("http://user:secret@api.example/v1/items?token=hunter2");
    let res = send(&layer(), &mock, req).await.unwrap();
    let records = attempts(&res);
    let events = events.lock().unwrap().clone();
    assert_eq!(events.len(), 2);
    let e = &events[0];
    assert_eq!(e["attempt"], "1");
    assert_eq!(e["method"], "GET");
    assert_eq!(e["host"], "http://api.example");
    assert_eq!(e["path"], "/v1/items");
    assert_eq!(e["outcome"], "503");
    assert_eq!(e["decision"], "retry");
    assert_eq!(e["reason"], "retryable_status");
    assert_eq!(e["wait_source"], "backoff");
    assert_eq!(
        e["wait_ms"],
        records.records()[0].wait.as_millis().to_string()
    );
    assert_eq!(e["elapsed_ms"], "0");
    assert_eq!(e["level"], "INFO");
    assert_eq!(events[1]["decision"], "stop");
    assert_eq!(events[1]["reason"], "final_status");
    assert_eq!(events[1]["wait_source"], "none");
    for e in &events {
        let all = format!("{e:?}");
        assert!(!all.contains("secret") && !all.contains("hunter2"), "{all}");
    }
}

// === bodies ===

/// A streaming body of chunks, not `Clone`.
fn chunks(parts: &[&'static str]) -> ScriptedBody<Infallible> {
    ScriptedBody::chunks(parts.iter().copied())
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_replayed_whole() {
    let mock = Mock::new([Answer::Status(503)]);
    let req = Request::put(URL)
        .body(ReplayBody::new(chunks(&["a", "bc", "def"])))
        .unwrap();
    let res = layer().layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    for c in calls {
        assert_eq!(c.body.as_deref(), Some(&b"abcdef"[..]));
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_cap_is_sent_once() {
    let mock = Mock::new([Answer::Status(503)]);
    let req = Request::put(URL)
        .body(ReplayBody::with_cap(chunks(&["abc", "def"]), 4))
        .unwrap();
    let res = layer().layer(mock.clone()).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.count(), 1);
    assert_eq!(mock.calls()[0].body.as_deref(), Some(&b"abcdef"[..]));
    assert_eq!(
        attempts(&res).last().unwrap().reason,
        Reason::BodyNotReplayable
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_body_is_drained_before_the_next_attempt() {
    let drained = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = tower::service_fn({
        let (drained, calls) = (drained.clone(), calls.clone());
        move |_req: Request<String>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let done = if n == 0 {
                drained.clone()
            } else {
                Arc::new(AtomicBool::new(false))
            };
            let status = if n == 0 { 503 } else { 200 };
            let saw_drained = drained.load(Ordering::SeqCst);
            async move {
                assert!(
                    n == 0 || saw_drained,
                    "the next attempt comes after the drain"
                );
                // Says whether it was read to the end.
                let body = ScriptedBody::<Infallible>::chunks(["busy"]).signal_end(done);
                Ok::<_, Infallible>(Response::builder().status(status).body(body).unwrap())
            }
        }
    });
    let res = layer().layer(svc).oneshot(get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(drained.load(Ordering::SeqCst));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

// === cancellation ===

#[tokio::test(start_paused = true)]
async fn dropping_the_future_during_backoff_stops_everything() {
    let budget = RetryBudget::new().ratio(0.0).floor(1);
    let layer = layer().jitter(Jitter::None).base(secs(10)).budget(budget);
    let mock = Mock::new([Answer::Status(503), Answer::Status(503)]);
    let mut fut = Box::pin(send(&layer, &mock, get(URL)));
    assert!(
        tokio::time::timeout(secs(1), &mut fut).await.is_err(),
        "still waiting"
    );
    assert_eq!(mock.count(), 1);
    drop(fut);
    tokio::time::sleep(secs(60)).await;
    assert_eq!(mock.count(), 1, "no attempt after the drop");
    // The retry never sent was given back: the floor of one still allows a retry.
    let res = send(&layer, &mock, get(URL)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 3);
}

// === the tower contract ===

#[tokio::test(start_paused = true)]
async fn calls_the_instance_made_ready() {
    // The first call is retried twice, through the instance each attempt made ready.
    let mock = Mock::new([Answer::Status(503), Answer::Status(503)]);
    let checked = contract::check(mock.clone(), |inner| layer().layer(inner), || get(URL)).await;
    for res in &checked.responses {
        assert_eq!(res.status(), StatusCode::OK);
    }
    assert_eq!(checked.calls, contract::CALLS + 2);
    assert_eq!(mock.count(), contract::CALLS + 2);
}

#[tokio::test(start_paused = true)]
async fn switched_off_it_passes_everything_through() {
    courier_testkit::pass_through::check(Retry::pass_through).await;
    assert!(Retry::pass_through(()).is_pass_through());
    assert!(!Retry::new((), layer()).is_pass_through());
}

#[test]
fn types_are_send_sync_static() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<RetryLayer>();
    send_sync::<Retry<Mock>>();
    send_sync::<RetryBudget>();
    send_sync::<ReplayBody<String>>();
    send::<ResponseFuture<Mock, String, String>>();
    // Every Clone body can be retried.
    fn retry_body<B: RetryBody>() {}
    retry_body::<String>();
    retry_body::<http_body_util::Full<Bytes>>();
    retry_body::<ReplayBody<ScriptedBody<Infallible>>>();
}

/// A request extension of the caller's own.
#[derive(Clone, Debug, PartialEq)]
struct Tag(&'static str);

/// Every attempt carries the request's extensions: the deadline alone (kept aside rather than
/// cloned), and the deadline with an extension of the caller's.
#[tokio::test(start_paused = true)]
async fn every_attempt_carries_the_request_extensions() {
    for with_tag in [false, true] {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let upstream = {
            let seen = seen.clone();
            tower::service_fn(move |req: Request<String>| {
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push((
                        courier_core::CallContext::deadline_in(req.extensions()),
                        req.extensions().get::<Tag>().cloned(),
                    ));
                    seen.len()
                };
                let status = if n < 3 { 503 } else { 200 };
                async move {
                    Ok::<_, BoxError>(
                        Response::builder()
                            .status(status)
                            .body(String::new())
                            .unwrap(),
                    )
                }
            })
        };
        let mut req = Request::get(URL).body(String::new()).unwrap();
        let deadline = CallContext::get_or_insert(&mut req).shrink_deadline_after(secs(60));
        if with_tag {
            req.extensions_mut().insert(Tag("mine"));
        }
        let res = layer().layer(upstream).oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let tag = with_tag.then_some(Tag("mine"));
        assert_eq!(*seen.lock().unwrap(), vec![(Some(deadline), tag); 3]);
    }
}

// === the service later attempts go to ===

/// Answers 503 to its first `failures` calls, then 200 with its `tag` in `x-tag`; counts its
/// clones.
#[derive(Debug)]
struct Tagged {
    tag: &'static str,
    clones: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    failures: usize,
}

impl Clone for Tagged {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            tag: self.tag,
            clones: Arc::clone(&self.clones),
            calls: Arc::clone(&self.calls),
            failures: self.failures,
        }
    }
}

impl Service<Request<String>> for Tagged {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let status = if n < self.failures {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        let res = Response::builder()
            .status(status)
            .header("x-tag", self.tag)
            .body(String::new())
            .expect("a valid response");
        std::future::ready(Ok(res))
    }
}

/// One GET through `svc`, made ready first.
async fn call_once(svc: &mut Retry<Tagged>) -> Response<String> {
    svc.ready()
        .await
        .expect("ready")
        .call(get(URL))
        .await
        .expect("an answer")
}

#[tokio::test(start_paused = true)]
async fn calls_that_do_not_retry_clone_the_service_once_in_all_and_a_retry_once_more() {
    let clones = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let upstream = Tagged {
        tag: "first",
        clones: Arc::clone(&clones),
        calls: Arc::clone(&calls),
        failures: 0,
    };
    let mut svc = Retry::new(upstream, layer());
    for _ in 0..5 {
        let res = call_once(&mut svc).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    // The spare, made at the first call; none per call.
    assert_eq!(clones.load(Ordering::SeqCst), 1);

    // A call that retries clones the spare once for all its later attempts.
    svc.get_mut().failures = 7;
    calls.store(5, Ordering::SeqCst);
    let res = call_once(&mut svc).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(attempts(&res).count(), 3);
    // A new spare after `get_mut`, and one clone of it for the retries.
    assert_eq!(clones.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_service_changed_through_get_mut_takes_the_next_calls_retries() {
    let upstream = Tagged {
        tag: "before",
        clones: Arc::default(),
        calls: Arc::default(),
        failures: 0,
    };
    let calls = Arc::clone(&upstream.calls);
    let mut svc = Retry::new(upstream, layer());
    call_once(&mut svc).await;
    svc.get_mut().tag = "after";
    svc.get_mut().failures = 2;
    calls.store(0, Ordering::SeqCst);
    let res = call_once(&mut svc).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(attempts(&res).count(), 3);
    // The third attempt went to a clone of the service as `get_mut` left it.
    assert_eq!(res.headers()["x-tag"], "after");
}
