//! What the facade's tests over both transports share.

#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::BoxError;
use courier::retry::RetryLayer;
use courier_faultserver::{FaultServer, Step};
use http::{Request, Response};
use http_body_util::Full;
use http_body_util::combinators::UnsyncBoxBody;
use std::future::Future;
use std::time::Duration;
use tower::util::BoxCloneSyncService;

/// The longest any test here may run.
pub const BOUND: Duration = Duration::from_secs(10);

pub async fn bounded<F: Future>(fut: F) -> F::Output {
    tokio::time::timeout(BOUND, fut)
        .await
        .expect("the test finished within its bound")
}

/// A retry layer with a quick, seeded backoff, so a retried call costs milliseconds.
pub fn quick_retry() -> RetryLayer {
    RetryLayer::new()
        .base(Duration::from_millis(10))
        .cap(Duration::from_millis(50))
        .seed(7)
}

pub fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).unwrap()
}

pub type Boxed =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>;

#[derive(Debug, Clone, Copy)]
pub enum Transport {
    Hyper,
    Reqwest,
}

pub const TRANSPORTS: [Transport; 2] = [Transport::Hyper, Transport::Reqwest];

pub fn over(transport: Transport, layer: &CourierLayer) -> Boxed {
    match transport {
        Transport::Hyper => layer.hyper::<Full<Bytes>>().boxed(),
        Transport::Reqwest => {
            let client = courier::transport::reqwest_client_builder()
                .build()
                .expect("reqwest builds a plain-HTTP client");
            layer.reqwest::<Full<Bytes>>(client).boxed()
        }
    }
}

/// Plans `/s/{name}` afresh: a 503, then an answer that takes 3 s. A call with a shorter
/// deadline and no attempt timeout is ended by the deadline during its second attempt.
pub fn plan_503_then_late(server: &FaultServer, name: &str) {
    server.clear(name);
    server.set_plan(
        name,
        vec![Step::status(503), Step::ok().delay(Duration::from_secs(3))],
    );
}
