//! What a setter does to the breakers: a layer is a value, and each setter gives the services
//! made after it breakers of their own.

use courier_breaker::{CircuitBreakerLayer, CircuitState};
use courier_core::CircuitOpen;
use courier_core::{BoxError, HostKey};
use http::{Request, Response, StatusCode};
use std::num::NonZeroU32;
use tower::{Layer, Service, ServiceExt, service_fn};

fn req() -> Request<()> {
    Request::get("http://a/x").body(()).unwrap()
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

async fn send<S>(svc: &S) -> Result<StatusCode, BoxError>
where
    S: Service<Request<()>, Response = Response<()>, Error = BoxError> + Clone,
{
    svc.clone().oneshot(req()).await.map(|r| r.status())
}

fn is_open(r: Result<StatusCode, BoxError>) -> bool {
    r.is_err_and(|e| e.is::<CircuitOpen>())
}

#[tokio::test(start_paused = true)]
async fn a_setter_leaves_earlier_services_their_limit_and_their_breakers() {
    let failing = service_fn(|_: Request<()>| async {
        Ok::<_, BoxError>(Response::builder().status(503).body(()).unwrap())
    });
    let key = HostKey::from_request(&req());

    let first = CircuitBreakerLayer::new().consecutive_failures(nz(2));
    let early_handle = first.handle();
    let early = first.layer(failing);
    let second = first.consecutive_failures(nz(3));
    let handle = second.handle();
    let late = second.layer(failing);

    for _ in 0..2 {
        assert_eq!(send(&early).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!(
        is_open(send(&early).await),
        "the early service keeps its limit of 2"
    );
    assert_eq!(early_handle.state(&key), Some(CircuitState::Open));
    assert_eq!(
        handle.state(&key),
        None,
        "the early service's calls are not in the later layer's breakers"
    );

    for _ in 0..2 {
        assert_eq!(send(&late).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        handle.state(&key),
        Some(CircuitState::Closed),
        "the limit is now 3"
    );
    assert_eq!(handle.status(&key).unwrap().consecutive_failures(), 2);
    assert_eq!(send(&late).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(handle.state(&key), Some(CircuitState::Open));
    assert!(is_open(send(&late).await));
}

#[tokio::test(start_paused = true)]
async fn services_and_clones_of_one_layer_share_its_breakers() {
    let failing = service_fn(|_: Request<()>| async {
        Ok::<_, BoxError>(Response::builder().status(503).body(()).unwrap())
    });
    let key = HostKey::from_request(&req());
    let layer = CircuitBreakerLayer::new().consecutive_failures(nz(2));
    let a = layer.layer(failing);
    let b = layer.clone().layer(failing);
    assert_eq!(send(&a).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(send(&b).await.unwrap(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(layer.handle().state(&key), Some(CircuitState::Open));
    assert!(is_open(send(&a).await));
}
