//! Instruction counts of the happy path (bucket never empty, a 200 without quota headers), for
//! callgrind: `ratelimit_count <bare|host|global|tower|alternate> <n>` runs n calls; the
//! difference of two runs divided by the difference of n is the cost of one. `alternate` sends
//! to two hosts in turn, so no request finds its bucket in the service's cache (the map lookup).
#![allow(missing_docs)]
use courier_core::BoxError;
use courier_ratelimit::{Rate, TokenBucketRateLimitLayer};
use http::{Request, Response, Uri};
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service, service_fn};

fn ok(_: Request<()>) -> Ready<Result<Response<()>, BoxError>> {
    ready(Ok(Response::new(())))
}
fn request(uri: &Uri) -> Request<()> {
    let mut req = Request::new(());
    *req.uri_mut() = uri.clone();
    req
}
fn one<S: Service<Request<()>>>(svc: &mut S, uri: &Uri) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    let fut = pin!(svc.call(request(uri)));
    matches!(fut.poll(&mut cx), Poll::Ready(Ok(_)))
}
fn go<S: Service<Request<()>>>(mut svc: S, uri: &Uri, n: usize) {
    for _ in 0..n {
        assert!(black_box(one(&mut svc, uri)));
    }
}
fn alternate<S: Service<Request<()>>>(mut svc: S, uris: &[Uri; 2], n: usize) {
    for i in 0..n {
        assert!(black_box(one(&mut svc, &uris[i % 2])));
    }
}
fn unlimited() -> TokenBucketRateLimitLayer {
    TokenBucketRateLimitLayer::new(Rate::per_second(1e9).unwrap(), NonZeroU32::MAX)
}
fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _rt = rt.enter();
    let uri: Uri = "http://api.example.com:8080/v1/items?page=2"
        .parse()
        .unwrap();
    match which.as_str() {
        "bare" => go(service_fn(ok), &uri, n),
        "host" => go(unlimited().layer(service_fn(ok)), &uri, n),
        "global" => go(unlimited().global().layer(service_fn(ok)), &uri, n),
        "tower" => go(
            tower::limit::RateLimitLayer::new(u64::MAX, Duration::from_secs(1))
                .layer(service_fn(ok)),
            &uri,
            n,
        ),
        "alternate" => {
            let other = "http://api.example.org:8080/v1/items?page=2"
                .parse()
                .unwrap();
            alternate(unlimited().layer(service_fn(ok)), &[uri, other], n)
        }
        _ => panic!("variants: bare, host, global, tower, alternate"),
    }
}
