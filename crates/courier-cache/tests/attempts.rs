//! The `Attempts` extension on what the cache serves: empty on a response built without an
//! answer from below, the layers' below on one built from their answer. On paused time.

mod common;

use common::*;
use courier_core::extensions::{AttemptOutcome, Reason};
use courier_core::{Attempts, BoxError, CacheStatus};
use courier_retry::RetryLayer;
use http::{Method, Response, StatusCode};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

const URL: &str = "http://api.example/counted";

/// The cache over a retry layer over `mock`, as the preset stacks them.
fn stack(
    mock: &Mock,
) -> impl Service<
    http::Request<()>,
    Response = Response<courier_cache::CacheBody<TestBody>>,
    Error = BoxError,
> + Clone {
    let retry = RetryLayer::new().attempts(3).without_budget().seed(7);
    layer().layer(retry.layer(mock.service()))
}

/// The response's `Attempts` and its read-out answer.
async fn call<S>(svc: &mut S, req: http::Request<()>) -> (Option<Attempts>, Got)
where
    S: Service<
            http::Request<()>,
            Response = Response<courier_cache::CacheBody<TestBody>>,
            Error = BoxError,
        >,
{
    let response = svc.ready().await.unwrap().call(req).await.unwrap();
    let attempts = response.extensions().get::<Attempts>().cloned();
    (attempts, read(response).await.unwrap())
}

fn outcomes(attempts: &Attempts) -> Vec<AttemptOutcome> {
    attempts.iter().map(|r| r.outcome).collect()
}

fn status(code: u16) -> AttemptOutcome {
    AttemptOutcome::Status(StatusCode::from_u16(code).unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_fresh_hit_carries_attempts_of_zero() {
    let mock = Mock::new();
    let mut svc = stack(&mock);
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "max-age=60")],
        "a",
    ));
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!(got.cache, CacheStatus::Miss);
    assert_eq!(
        outcomes(&attempts.expect("a miss carries retry's records")),
        [status(200)]
    );

    for method in [Method::GET, Method::HEAD] {
        let (attempts, got) = call(&mut svc, req(method.clone(), URL, &[])).await;
        assert_eq!(got.cache, CacheStatus::Hit, "{method}");
        let attempts = attempts.expect("a hit carries Attempts");
        assert_eq!((attempts.count(), attempts.last()), (0, None), "{method}");
    }
    assert_eq!(mock.calls(), 1, "the hits sent nothing");
}

#[tokio::test(start_paused = true)]
async fn a_hit_without_a_retry_layer_below_carries_attempts_of_zero_too() {
    let mock = Mock::new();
    let mut svc = layer().layer(mock.service());
    mock.push(ok(&[("cache-control", "max-age=60")], "a"));
    let (attempts, _) = call(&mut svc, get(URL)).await;
    assert!(attempts.is_none(), "nothing below counts attempts");
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!(got.cache, CacheStatus::Hit);
    assert_eq!(attempts.map(|a| a.count()), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_revalidated_response_carries_the_attempts_made_below() {
    let mock = Mock::new();
    let mut svc = stack(&mock);
    mock.push(ok(
        &[("etag", "\"v1\""), ("cache-control", "no-cache")],
        "a",
    ));
    call(&mut svc, get(URL)).await;

    // One attempt: its 304.
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!(
        (got.cache, got.status, &got.body[..]),
        (CacheStatus::Revalidated, StatusCode::OK, &b"a"[..])
    );
    let attempts = attempts.expect("the 304's records are kept");
    assert_eq!(outcomes(&attempts), [status(304)]);
    assert_eq!(attempts.last().map(|r| r.reason), Some(Reason::FinalStatus));

    // A 503 retried below, then the 304: both attempts are on the merged response.
    mock.push(respond(503, &[], "down"));
    mock.push(not_modified(&[("etag", "\"v1\"")]));
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!(got.cache, CacheStatus::Revalidated);
    assert_eq!(outcomes(&attempts.unwrap()), [status(503), status(304)]);
    assert_eq!(mock.calls(), 4);
    for n in 2..4 {
        assert_eq!(
            mock.nth(n).headers["if-none-match"],
            "\"v1\"",
            "every attempt carries the validator"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_concurrent_revalidation_answers_the_waiting_caller_with_attempts_of_zero() {
    let mock = Mock::new();
    let mut svc = stack(&mock);
    mock.push(ok(&[("etag", "\"v1\"")], "a"));
    call(&mut svc, get(URL)).await;

    mock.push_delayed(Duration::from_secs(1), not_modified(&[("etag", "\"v1\"")]));
    let leader = svc.ready().await.unwrap().call(get(URL));
    let follower = svc.ready().await.unwrap().call(get(URL));
    let (leader, follower) = tokio::join!(leader, follower);
    let (leader, follower) = (leader.unwrap(), follower.unwrap());
    assert_eq!(mock.calls(), 2, "one revalidation went upstream");
    let attempts = |r: &Response<_>| r.extensions().get::<Attempts>().cloned().unwrap();
    assert_eq!(outcomes(&attempts(&leader)), [status(304)]);
    assert_eq!(attempts(&follower).count(), 0, "the follower sent nothing");
    for response in [leader, follower] {
        let got = read(response).await.unwrap();
        assert_eq!(
            (got.cache, &got.body[..]),
            (CacheStatus::Revalidated, &b"a"[..])
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stale_answer_carries_the_failed_attempts_of_a_5xx_and_none_of_an_error() {
    let mock = Mock::new();
    let mut svc = stack(&mock);
    mock.push(ok(
        &[
            ("etag", "\"v1\""),
            ("cache-control", "max-age=1, stale-if-error=600"),
        ],
        "a",
    ));
    call(&mut svc, get(URL)).await;
    tokio::time::advance(Duration::from_secs(5)).await;

    // Every attempt answered 503: the records of the 5xx the stale entry stands in for.
    for _ in 0..3 {
        mock.push(respond(503, &[], "down"));
    }
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Stale, &b"a"[..]));
    let attempts = attempts.expect("the 5xx's records are kept");
    assert_eq!(outcomes(&attempts), [status(503); 3]);
    assert_eq!(
        attempts.last().map(|r| r.reason),
        Some(Reason::AttemptsExhausted)
    );

    // Every attempt failed to connect: the error carries no records, so none is on the stale
    // answer; its cache status says it stands in for a failure.
    for _ in 0..3 {
        mock.push(Err(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )
        .into()));
    }
    let calls = mock.calls();
    let (attempts, got) = call(&mut svc, get(URL)).await;
    assert_eq!(mock.calls() - calls, 3, "retried below");
    assert_eq!((got.cache, &got.body[..]), (CacheStatus::Stale, &b"a"[..]));
    assert_eq!(attempts.map(|a| a.count()), Some(0));
}
