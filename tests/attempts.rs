//! A failed call carries its attempts: `courier::Error::attempts()`, and `attempts_of` on the
//! `BoxError` the stack returns, for every way a call can fail, over both transports through
//! the fault server on loopback. Every record keeps its reason.

mod common;

use common::{TRANSPORTS, Transport, bounded, get, over, quick_retry};
use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::core::extensions::{AttemptOutcome, Decision, Reason};
use courier::core::{AttemptRecord, BoxError, CallFailed, FailureKind, attempts_of};
use courier::ratelimit::{Mode, Rate, TokenBucketRateLimitLayer};
use courier_faultserver::{FaultServer, Step};
use http::StatusCode;
use std::num::NonZeroU32;
use std::time::Duration;
use tower::ServiceExt;

/// What each record says: its number, its outcome, its decision and its reason.
fn summary(records: &[AttemptRecord]) -> Vec<(u32, AttemptOutcome, Decision, Reason)> {
    records
        .iter()
        .map(|r| (r.attempt, r.outcome, r.decision, r.reason))
        .collect()
}

/// The records of `err` as `attempts_of` reads them from the `BoxError`, checked to be those of
/// `courier::Error::attempts()`; and the `courier::Error`.
fn records(transport: Transport, err: BoxError) -> (Vec<AttemptRecord>, courier::Error) {
    assert!(err.is::<CallFailed>(), "{transport:?}: {err:?}");
    let boxed = attempts_of(&*err)
        .expect("the error carries its attempts")
        .records()
        .to_vec();
    let err = courier::Error::from(err);
    assert_eq!(err.attempts().records(), boxed, "{transport:?}");
    (boxed, err)
}

const S503: AttemptOutcome = AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE);
const LOCAL: AttemptOutcome = AttemptOutcome::Failure(FailureKind::Local);

#[tokio::test]
async fn three_connect_errors() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let connect = AttemptOutcome::Failure(FailureKind::Connect);
    for transport in TRANSPORTS {
        let client = over(transport, &CourierLayer::new().retry(quick_retry()));
        let err = bounded(client.oneshot(get(&format!("http://{addr}/"))))
            .await
            .expect_err("nothing listens");
        let (records, err) = records(transport, err);
        assert_eq!(
            summary(&records),
            [
                (1, connect, Decision::Retry, Reason::RetryableFailure),
                (2, connect, Decision::Retry, Reason::RetryableFailure),
                (3, connect, Decision::Stop, Reason::AttemptsExhausted),
            ],
            "{transport:?}"
        );
        assert!(
            matches!(
                err,
                courier::Error::Transport {
                    kind: FailureKind::Connect,
                    ..
                }
            ),
            "{transport:?}: {err}"
        );
        assert!(
            courier::core::is_caused_by::<std::io::Error>(&err),
            "{transport:?}: the transport's own error stays reachable"
        );
    }
}

#[tokio::test]
async fn two_503s_then_an_open_circuit() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("down");
        server.set_plan("down", vec![Step::status(503).times(2)]);
        // The breaker counts calls: a first call (not retried) answers 503, a second one's
        // first attempt answers 503 too, and the circuit is open for its retry.
        let breaker = CircuitBreakerLayer::new()
            .consecutive_failures(NonZeroU32::new(2).unwrap())
            .open_duration(Duration::from_secs(30));
        let once = CourierLayer::new()
            .retry(quick_retry().attempts(1))
            .adaptive_pacing(None)
            .circuit_breaker(breaker.clone());
        let first = bounded(over(transport, &once).oneshot(get(&server.url_for("/s/down"))))
            .await
            .expect("a 503 is an answer");
        assert_eq!(first.status(), 503, "{transport:?}");
        let layer = CourierLayer::new()
            .retry(quick_retry())
            .adaptive_pacing(None)
            .circuit_breaker(breaker);
        let err = bounded(over(transport, &layer).oneshot(get(&server.url_for("/s/down"))))
            .await
            .expect_err("the circuit opened after the second 503");
        let (records, err) = records(transport, err);
        assert_eq!(
            summary(&records),
            [
                (1, S503, Decision::Retry, Reason::RetryableStatus),
                (2, LOCAL, Decision::Stop, Reason::NeverRetried),
            ],
            "{transport:?}"
        );
        match &err {
            courier::Error::CircuitOpen(open) => {
                assert!(open.retry_in() > Duration::from_secs(25), "{transport:?}");
                assert_eq!(open.attempts().count(), 2, "{transport:?}");
            }
            other => panic!("{transport:?}: unexpected {other}"),
        }
        assert_eq!(server.hits("down").len(), 2, "{transport:?}");
    }
}

#[tokio::test]
async fn a_rate_limit_refusal_after_a_first_attempt() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("paced");
        server.set_plan("paced", vec![Step::status(503)]);
        let limiter = TokenBucketRateLimitLayer::new(
            Rate::per_second(1.0).unwrap(),
            NonZeroU32::new(1).unwrap(),
        )
        .mode(Mode::Reject);
        let layer = CourierLayer::new()
            .retry(quick_retry())
            .adaptive_pacing(None)
            .rate_limit(limiter);
        let err = bounded(over(transport, &layer).oneshot(get(&server.url_for("/s/paced"))))
            .await
            .expect_err("the bucket refuses the retry");
        let (records, err) = records(transport, err);
        assert_eq!(
            summary(&records),
            [
                (1, S503, Decision::Retry, Reason::RetryableStatus),
                (2, LOCAL, Decision::Stop, Reason::NeverRetried),
            ],
            "{transport:?}"
        );
        assert!(
            matches!(err, courier::Error::RateLimited(_)),
            "{transport:?}: {err}"
        );
        assert!(err.nothing_sent(), "{transport:?}: the refused retry");
        assert_eq!(server.hits("paced").len(), 1, "{transport:?}");
    }
}

/// With no attempt timeout below, the deadline layer ends the call itself while the second
/// attempt waits for its answer; the attempt under way is recorded with why it ended.
#[tokio::test]
async fn the_deadline_ending_the_call() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        common::plan_503_then_late(&server, "late");
        let layer = CourierLayer::new()
            .retry(quick_retry())
            .adaptive_pacing(None)
            .attempt_timeout(None)
            .deadline(Duration::from_millis(500));
        let err = bounded(over(transport, &layer).oneshot(get(&server.url_for("/s/late"))))
            .await
            .expect_err("the deadline passes first");
        let (records, err) = records(transport, err);
        assert_eq!(
            summary(&records),
            [
                (1, S503, Decision::Retry, Reason::RetryableStatus),
                (2, LOCAL, Decision::Stop, Reason::DeadlinePassed),
            ],
            "{transport:?}"
        );
        // Counted from retry's start, a few microseconds after the deadline's own: the timer
        // fires at the deadline or after it, so the record may read a hair under 500 ms.
        assert!(
            records[1].elapsed >= Duration::from_millis(495),
            "{transport:?}: {:?}",
            records[1].elapsed
        );
        match &err {
            courier::Error::DeadlineExceeded(spent) => {
                assert_eq!(spent.budget(), Duration::from_millis(500), "{transport:?}");
            }
            other => panic!("{transport:?}: unexpected {other}"),
        }
        assert_eq!(server.hits("late").len(), 2, "{transport:?}");
    }
}

/// With the attempt timeout on (the preset's default), the attempt bounded by the time left
/// ends at the deadline and is recorded as never retried; the error is the call's deadline.
#[tokio::test]
async fn the_deadline_ending_an_attempt_below() {
    let server = FaultServer::start().await.unwrap();
    for transport in TRANSPORTS {
        server.clear("slow");
        server.set_plan("slow", vec![Step::ok().delay(Duration::from_secs(3))]);
        let layer = CourierLayer::new().deadline(Duration::from_millis(200));
        let err = bounded(over(transport, &layer).oneshot(get(&server.url_for("/s/slow"))))
            .await
            .expect_err("the deadline passes first");
        let (records, err) = records(transport, err);
        assert_eq!(
            summary(&records),
            [(1, LOCAL, Decision::Stop, Reason::NeverRetried)],
            "{transport:?}"
        );
        assert!(
            matches!(err, courier::Error::DeadlineExceeded(_)),
            "{transport:?}: {err}"
        );
    }
}
