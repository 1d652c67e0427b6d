//! Instruction counts of the closed path, for callgrind: `breaker_count <bare|host|global> <n>`
//! runs n calls; the difference of two runs divided by the difference of n is the cost of one.
#![allow(missing_docs)]
use courier_breaker::CircuitBreakerLayer;
use courier_core::BoxError;
use futures_util::FutureExt;
use http::{Request, Response, Uri};
use std::future::{Ready, ready};
use std::hint::black_box;
use std::task::{Context, Waker};
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
    svc.call(request(uri))
        .now_or_never()
        .expect("ready")
        .is_ok()
}
fn go<S: Service<Request<()>>>(mut svc: S, uri: &Uri, n: usize) {
    for _ in 0..n {
        black_box(one(&mut svc, uri));
    }
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
        "host" => go(CircuitBreakerLayer::new().layer(service_fn(ok)), &uri, n),
        "global" => go(
            CircuitBreakerLayer::new().global().layer(service_fn(ok)),
            &uri,
            n,
        ),
        _ => panic!(),
    }
}
