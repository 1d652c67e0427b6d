//! A call's own attempts and retry-safety (`CallOptions`) through the retry layer, on paused
//! time against a scripted upstream.

mod common;

use common::*;
use courier_core::extensions::Reason;
use courier_core::{BoxError, CallContext, CallOptions};
use courier_retry::{RetryBudget, RetryLayer};
use http::{Request, Response, StatusCode};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};

const URL: &str = "http://api.example/v1/items";

fn layer() -> RetryLayer {
    RetryLayer::new().seed(7).attempts(3)
}

fn with(mut req: Request<String>, options: CallOptions) -> Request<String> {
    options.apply(&mut req);
    req
}

async fn send(
    layer: &RetryLayer,
    mock: &Mock,
    req: Request<String>,
) -> Result<Response<String>, BoxError> {
    layer.layer(mock.clone()).oneshot(req).await
}

#[tokio::test(start_paused = true)]
async fn a_calls_attempts_replace_the_layers_fewer_or_more() {
    for (asked, sent) in [(1, 1), (5, 5)] {
        let mock = Mock::always(Answer::Status(503), 10);
        let options = CallOptions::new().attempts(asked).unwrap();
        let res = send(&layer(), &mock, with(get(URL), options))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(mock.count(), sent, "attempts({asked}) against a layer of 3");
        let records = attempts(&res);
        assert_eq!(records.count(), sent);
        assert_eq!(records.last().unwrap().reason, Reason::AttemptsExhausted);
    }
    // Without the option, the layer's 3.
    let mock = Mock::always(Answer::Status(503), 10);
    send(&layer(), &mock, get(URL)).await.unwrap();
    assert_eq!(mock.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn the_retry_budget_still_bounds_a_calls_attempts() {
    // A budget of two retries per window and no ratio.
    let layer = layer().budget(RetryBudget::new().ratio(0.0).floor(2));
    let mock = Mock::always(Answer::Status(503), 10);
    let options = CallOptions::new().attempts(5).unwrap();
    let res = send(&layer, &mock, with(get(URL), options)).await.unwrap();
    assert_eq!(
        mock.count(),
        3,
        "the first attempt and the budget's two retries"
    );
    assert_eq!(
        attempts(&res).last().unwrap().reason,
        Reason::BudgetExhausted
    );
}

#[tokio::test(start_paused = true)]
async fn retry_safe_true_lets_a_post_be_retried_on_a_503() {
    let mock = Mock::new([Answer::Status(503)]);
    let options = CallOptions::new().retry_safe(true);
    let res = send(&layer(), &mock, with(post(URL, "order"), options))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let calls = mock.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].body.as_deref(), Some(&b"order"[..]));
    // The same POST without the option is sent once.
    let mock = Mock::new([Answer::Status(503)]);
    let res = send(&layer(), &mock, post(URL, "order")).await.unwrap();
    assert_eq!(mock.count(), 1);
    assert_eq!(attempts(&res).last().unwrap().reason, Reason::NotRetrySafe);
}

#[tokio::test(start_paused = true)]
async fn retry_safe_false_stops_a_get_that_may_have_reached_the_server() {
    let options = CallOptions::new().retry_safe(false);
    // A read failure: the request went out.
    let mock = Mock::new([Answer::Fail(io::ErrorKind::ConnectionReset)]);
    let err = send(&layer(), &mock, with(get(URL), options))
        .await
        .unwrap_err();
    assert_eq!(mock.count(), 1);
    let records = courier_core::attempts_of(&*err).expect("records on the error");
    assert_eq!(records.last().unwrap().reason, Reason::NotRetrySafe);
    // A 503 to a GET with an `Idempotency-Key`: the option overrides what the request says.
    let mock = Mock::new([Answer::Status(503)]);
    let mut req = get(URL);
    req.headers_mut()
        .insert("idempotency-key", "k-1".parse().unwrap());
    let res = send(&layer(), &mock, with(req, options)).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.count(), 1);
    // A connect failure: nothing was sent, so it is retried all the same.
    let mock = Mock::new([Answer::Fail(io::ErrorKind::ConnectionRefused)]);
    let res = send(&layer(), &mock, with(get(URL), options))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.count(), 2);
    assert_eq!(attempts(&res).records()[0].reason, Reason::RetryableFailure);
}

#[tokio::test(start_paused = true)]
async fn every_attempt_carries_the_calls_options_and_deadline() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = service_fn({
        let seen = Arc::clone(&seen);
        move |req: Request<String>| {
            let ctx = CallContext::get(req.extensions()).expect("a context");
            seen.lock().unwrap().push((*ctx.options(), ctx.deadline()));
            let status = if seen.lock().unwrap().len() < 3 {
                503
            } else {
                200
            };
            async move {
                Ok::<_, BoxError>(
                    Response::builder()
                        .status(status)
                        .body(String::new())
                        .unwrap(),
                )
            }
        }
    });
    let options = CallOptions::new().attempts(4).unwrap().no_cache();
    let mut req = with(get(URL), options);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    CallContext::get_or_insert(&mut req).shrink_deadline(deadline);
    let res = layer().layer(upstream).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(*seen.lock().unwrap(), [(options, Some(deadline)); 3]);
}
