//! Instruction counts of the cache's paths, for callgrind:
//! `cache_count <bare|miss|hit|revalidate> <n>` runs n calls on an inner service that is ready
//! at once, reading each answer's body to its end. The difference of two runs divided by the
//! difference of n is the cost of one call.
//!
//! - `bare`: the inner service alone (a 200 with an empty body).
//! - `miss`: the cache over that service: the answer has no validator and no freshness, so
//!   every call looks the URI up in the 64 MiB `MemoryStore`, misses and stores nothing.
//! - `hit`: a fresh entry (`max-age=3600`, 5-byte body) served from memory.
//! - `revalidate`: a stored entry without freshness, revalidated with a 304 every call.
//!
//! ```text
//! cargo build --release -p courier-cache --example cache_count
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cache/out \
//!     target/release/examples/cache_count miss 21000 2>&1 | grep Collected
//! ```
#![allow(missing_docs)]
use bytes::Bytes;
use courier_cache::EtagCacheLayer;
use courier_core::BoxError;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use tower::{Layer, Service, service_fn};

type Body = Full<Bytes>;

const TAG: HeaderValue = HeaderValue::from_static("\"v1\"");

/// A 200 with an empty body and no cache fields: never stored.
fn plain(_: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    ready(Ok(Response::new(Body::default())))
}

/// A fresh 200 with a validator: stored once, then served from memory.
fn fresh(_: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"hello")));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=3600"));
    headers.insert(ETAG, TAG);
    headers.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
    ready(Ok(response))
}

/// A 200 with a validator and no freshness, or a 304 when the request names its tag.
fn validated(req: Request<Body>) -> Ready<Result<Response<Body>, BoxError>> {
    let matches = req.headers().get(IF_NONE_MATCH) == Some(&TAG);
    let mut response = if matches {
        let mut r = Response::new(Body::default());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(Full::new(Bytes::from_static(b"hello")));
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        r
    };
    response.headers_mut().insert(ETAG, TAG);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    ready(Ok(response))
}

fn request(uri: &Uri) -> Request<Body> {
    let mut req = Request::new(Body::default());
    *req.uri_mut() = uri.clone();
    req
}

/// One call: `poll_ready`, `call`, one poll of the future, the body read to its end.
fn one<S, RB>(svc: &mut S, uri: &Uri) -> bool
where
    S: Service<Request<Body>, Response = Response<RB>>,
    RB: http_body::Body,
{
    let mut cx = Context::from_waker(Waker::noop());
    if !matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))) {
        return false;
    }
    let fut = pin!(svc.call(request(uri)));
    let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
        return false;
    };
    let mut body = pin!(response.into_body());
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                black_box(frame);
            }
            Poll::Ready(None) => return true,
            _ => return false,
        }
    }
}

fn go<S, RB>(mut svc: S, uri: &Uri, n: usize)
where
    S: Service<Request<Body>, Response = Response<RB>>,
    RB: http_body::Body,
{
    for _ in 0..n {
        assert!(black_box(one(&mut svc, uri)), "left the path measured");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(which), Some(n)) = (args.next(), args.next().and_then(|n| n.parse().ok())) else {
        eprintln!("usage: cache_count <bare|miss|hit|revalidate> <n>");
        std::process::exit(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _rt = rt.enter();
    let uri: Uri = "http://api.example.com:8080/v1/items?page=2"
        .parse()
        .expect("a valid URI");
    match which.as_str() {
        "bare" => go(service_fn(plain), &uri, n),
        "miss" => go(EtagCacheLayer::new().layer(service_fn(plain)), &uri, n),
        "hit" => {
            let mut svc = EtagCacheLayer::new().layer(service_fn(fresh));
            assert!(one(&mut svc, &uri), "stored");
            go(svc, &uri, n);
        }
        "revalidate" => {
            let mut svc = EtagCacheLayer::new().layer(service_fn(validated));
            assert!(one(&mut svc, &uri), "stored");
            go(svc, &uri, n);
        }
        other => {
            eprintln!("no variant {other}: bare, miss, hit or revalidate");
            std::process::exit(2);
        }
    }
}
