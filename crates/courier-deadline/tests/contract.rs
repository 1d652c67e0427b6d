//! The tower contract and the auto traits every layer crate promises.

use bytes::Bytes;
use courier_deadline::future::{ResponseFuture, ScopeFuture};
use courier_deadline::{
    AttemptTimeout, AttemptTimeoutLayer, Deadline, DeadlineBody, DeadlineLayer, DeadlineScope,
    DeadlineScopeLayer,
};
use courier_testkit::contract::{self, ReadyOnce};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::time::Duration;
use tower::{Layer, service_fn};

/// The upstream: an empty 200 at once.
type Upstream =
    tower::util::ServiceFn<fn(Request<()>) -> Ready<Result<Response<Empty<Bytes>>, Infallible>>>;

fn upstream() -> Upstream {
    service_fn(|_req| ready(Ok(Response::new(Empty::new()))))
}

/// The requests: every other one carries a deadline header for the layers to read.
fn requests() -> impl FnMut() -> Request<()> {
    let mut n = 0;
    move || {
        n += 1;
        let mut req = Request::new(());
        if n % 2 == 1 {
            req.headers_mut()
                .insert("x-request-deadline-ms", "5000".parse().unwrap());
        }
        req
    }
}

#[tokio::test(start_paused = true)]
async fn every_layer_calls_the_instance_it_made_ready() {
    let checked = contract::check(
        upstream(),
        |inner| DeadlineLayer::new(Duration::from_secs(1)).layer(inner),
        requests(),
    )
    .await;
    assert_eq!(checked.calls, contract::CALLS);
    let checked = contract::check(
        upstream(),
        |inner| AttemptTimeoutLayer::new(Duration::from_secs(1)).layer(inner),
        requests(),
    )
    .await;
    assert_eq!(checked.calls, contract::CALLS);
    let checked = contract::check(
        upstream(),
        |inner| DeadlineScopeLayer::new().layer(inner),
        requests(),
    )
    .await;
    assert_eq!(checked.calls, contract::CALLS);
}

#[test]
fn layers_services_futures_and_bodies_are_send_sync_static() {
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}
    fn assert_send_static<T: Send + 'static>() {}

    assert_send_sync_static::<DeadlineLayer>();
    assert_send_sync_static::<AttemptTimeoutLayer>();
    assert_send_sync_static::<DeadlineScopeLayer>();
    assert_send_sync_static::<Deadline<ReadyOnce<Upstream>>>();
    assert_send_sync_static::<AttemptTimeout<ReadyOnce<Upstream>>>();
    assert_send_sync_static::<DeadlineScope<ReadyOnce<Upstream>>>();
    assert_send_sync_static::<DeadlineBody<Empty<Bytes>>>();
    assert_send_sync_static::<ResponseFuture<Ready<()>>>();
    assert_send_static::<ScopeFuture<Ready<()>>>();
    assert_send_sync_static::<courier_core::DeadlineExceeded>();
    assert_send_sync_static::<courier_core::AttemptTimedOut>();
}

#[tokio::test(start_paused = true)]
async fn switched_off_they_pass_everything_through() {
    courier_testkit::pass_through::check(Deadline::pass_through).await;
    courier_testkit::pass_through::check(AttemptTimeout::pass_through).await;
}
