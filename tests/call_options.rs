//! One call's own options (`courier::core::CallOptions`) through the preset over hyper,
//! against the fault server on loopback: its attempts, and its cache bypass.
//!
//! `layer().hyper()` leaves the request body type to inference from the first `oneshot`, as a
//! user's code may: the preset's `Service` impl must keep that cheap to type-check.

mod common;

use common::{bounded, get, quick_retry};
use courier::CourierLayer;
use courier::core::{CacheStatus, CallOptions, attempts_of};
use courier_faultserver::{FaultServer, Step};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// The preset with a quick retry and no pacing (a 503 would otherwise slow the next call).
fn layer() -> CourierLayer {
    CourierLayer::new()
        .retry(quick_retry())
        .adaptive_pacing(None)
}

#[tokio::test]
async fn a_call_makes_the_attempts_it_asks_for() {
    let server = FaultServer::start().await.unwrap();
    let client = layer().hyper();
    // (the call's attempts, the requests the server sees); the layer's own are 3.
    for (asked, sent) in [(None, 3), (Some(1), 1), (Some(5), 5)] {
        server.clear("busy");
        server.set_plan("busy", vec![Step::status(503).times(10)]);
        let mut req = get(&server.url_for("/s/busy"));
        if let Some(n) = asked {
            CallOptions::new().attempts(n).unwrap().apply(&mut req);
        }
        let res = bounded(client.clone().oneshot(req))
            .await
            .expect("a 503 is an answer");
        assert_eq!(res.status(), 503, "{asked:?}");
        assert_eq!(server.hits("busy").len(), sent, "{asked:?}");
        let attempts = res
            .extensions()
            .get::<courier::core::Attempts>()
            .expect("the records of the call");
        assert_eq!(attempts.count(), sent, "{asked:?}");
    }
    // An invalid value never reaches a request.
    let err = CallOptions::new().attempts(0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid setting: CallOptions::attempts must be at least 1, got 0; use 1 for a single attempt"
    );
    // One attempt on a failure that would be retried: the error carries that one record.
    server.clear("gone");
    server.set_plan("gone", vec![Step::reset().times(3)]);
    let mut req = get(&server.url_for("/s/gone"));
    CallOptions::new().attempts(1).unwrap().apply(&mut req);
    let err = bounded(client.clone().oneshot(req))
        .await
        .expect_err("the connection was closed");
    assert_eq!(attempts_of(&*err).map(|a| a.count()), Some(1));
    assert_eq!(server.hits("gone").len(), 1);
}

#[tokio::test]
async fn a_call_with_no_cache_goes_to_the_server_past_a_fresh_entry() {
    let server = FaultServer::start().await.unwrap();
    let client = layer().hyper();
    server.set_plan(
        "doc",
        vec![
            Step::ok()
                .header("cache-control", "max-age=600")
                .body("stored"),
            Step::ok()
                .header("cache-control", "max-age=600")
                .body("fresh from the server"),
        ],
    );
    let url = server.url_for("/s/doc");
    let call = |no_cache: bool| {
        let mut req = get(&url);
        if no_cache {
            CallOptions::new().no_cache().apply(&mut req);
        }
        let client = client.clone();
        async move {
            let res = bounded(client.oneshot(req)).await.expect("an answer");
            let status = *res
                .extensions()
                .get::<CacheStatus>()
                .expect("a cache status");
            let body = res
                .into_body()
                .collect()
                .await
                .expect("the body")
                .to_bytes();
            (status, body)
        }
    };
    assert_eq!(call(false).await, (CacheStatus::Miss, "stored".into()));
    assert_eq!(call(false).await, (CacheStatus::Hit, "stored".into()));
    assert_eq!(server.hits("doc").len(), 1);
    assert_eq!(
        call(true).await,
        (CacheStatus::Bypass, "fresh from the server".into())
    );
    assert_eq!(server.hits("doc").len(), 2);
    // The bypassed answer was not stored: the entry is still the first one.
    assert_eq!(call(false).await, (CacheStatus::Hit, "stored".into()));
    assert_eq!(server.hits("doc").len(), 2);
}
