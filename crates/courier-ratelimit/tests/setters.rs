//! What a setter does to the buckets: a layer is a value, and each setter gives the services
//! made after it buckets of their own.

use courier_core::{BoxError, RateLimited};
use courier_ratelimit::{InMemoryStore, Mode, Rate, TokenBucketRateLimitLayer};
use http::{Request, Response, StatusCode};
use std::num::NonZeroU32;
use std::num::NonZeroUsize;
use std::time::Duration;
use tower::{Layer, Service, ServiceExt, service_fn};

fn req() -> Request<()> {
    Request::get("http://a/x").body(()).unwrap()
}

async fn send<S>(svc: &S) -> Result<StatusCode, BoxError>
where
    S: Service<Request<()>, Response = Response<()>, Error = BoxError> + Clone,
{
    svc.clone().oneshot(req()).await.map(|r| r.status())
}

fn is_limited(r: Result<StatusCode, BoxError>) -> bool {
    r.is_err_and(|e| e.is::<RateLimited>())
}

fn layer() -> TokenBucketRateLimitLayer {
    let rate = Rate::every(Duration::from_secs(60)).unwrap();
    TokenBucketRateLimitLayer::new(rate, NonZeroU32::new(1).unwrap()).mode(Mode::Reject)
}

#[tokio::test(start_paused = true)]
async fn a_setter_leaves_earlier_services_their_settings_and_their_buckets() {
    let ok = service_fn(|_: Request<()>| async { Ok::<_, BoxError>(Response::new(())) });

    let first = layer();
    let early_store = first.store().clone();
    let early = first.layer(ok);
    let second = first.mode(Mode::Wait).max_wait(Duration::from_secs(120));
    let store = second.store().clone();
    let late = second.layer(ok);

    assert_eq!(send(&early).await.unwrap(), StatusCode::OK);
    assert!(
        is_limited(send(&early).await),
        "the early service still rejects"
    );
    assert_eq!(early_store.len(), 1);
    assert!(
        store.is_empty(),
        "the early calls are not in the later layer's buckets"
    );

    assert_eq!(
        send(&late).await.unwrap(),
        StatusCode::OK,
        "a bucket of its own"
    );
    assert_eq!(
        store.len(),
        1,
        "the store taken after the last setter sees the calls"
    );
    let started = tokio::time::Instant::now();
    assert_eq!(
        send(&late).await.unwrap(),
        StatusCode::OK,
        "waits for its slot"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_setter_keeps_the_room_of_a_store_the_layer_made() {
    let second = layer()
        .max_keys(NonZeroUsize::new(7).unwrap())
        .max_wait(Duration::from_secs(1));
    assert_eq!(second.store().max_keys(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_setter_keeps_a_store_handed_in() {
    let ok = service_fn(|_: Request<()>| async { Ok::<_, BoxError>(Response::new(())) });
    let mine = InMemoryStore::new();
    let first = layer().store_in(mine.clone());
    let early = first.clone().layer(ok);
    let late = first.max_wait(Duration::from_secs(1)).layer(ok);
    assert_eq!(send(&early).await.unwrap(), StatusCode::OK);
    assert!(
        is_limited(send(&late).await),
        "both draw from the store handed in"
    );
    assert_eq!(mine.len(), 1);
}
