//! The closed path (a healthy host, a ready inner service) next to the peers, in one run:
//! the bare `service_fn`, courier's breaker per host and global, tower-resilience's circuit
//! breaker and failsafe's. Plus the per-host map on its own: papaya against dashmap. The
//! floors (the least a breaker does, globally and per host) are measured next to courier's
//! breaker in `cargo bench -p courier-bench --bench layers`.
//!
//! Every variant builds the same request and polls the same always-ready `service_fn`, so the
//! difference to `bare_service_fn` is what the breaker adds.
//!
//! ```text
//! cargo bench -p courier-breaker --bench breaker -- --warm-up-time 1 --measurement-time 3
//! ```

use courier_breaker::CircuitBreakerLayer;
use courier_core::{BoxError, HostKey};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, Uri};
use std::future::Future;
use std::future::{Ready, ready};
use std::hint::black_box;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
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

/// One call through `svc`: poll_ready, call, poll the future once (it is always ready).
fn one<S>(svc: &mut S, uri: &Uri) -> bool
where
    S: Service<Request<()>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    poll_once(svc.call(request(uri))).is_ok()
}

/// Polls `fut` once, here. Not `FutureExt::now_or_never`: rustc places a trait's provided
/// method, instantiated for a type of another crate, in a codegen unit of its own, where it
/// cannot be inlined into the caller. The future types of this file (the floor's) would then
/// be inlined and every other crate's (courier's and the peers') not, which is a difference
/// of the harness, not of the layers.
#[inline]
fn poll_once<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::pin!(fut).poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the inner service is always ready"),
    }
}

fn closed_path(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _rt = rt.enter();
    let uri: Uri = "http://api.example.com:8080/v1/items?page=2"
        .parse()
        .expect("a valid uri");
    let mut g = c.benchmark_group("closed_path");

    g.bench_function("bare_service_fn", |b| {
        let mut svc = service_fn(ok);
        b.iter(|| black_box(one(&mut svc, &uri)))
    });

    g.bench_function("courier_per_host", |b| {
        let mut svc = CircuitBreakerLayer::new().layer(service_fn(ok));
        b.iter(|| black_box(one(&mut svc, &uri)))
    });

    g.bench_function("courier_global", |b| {
        let mut svc = CircuitBreakerLayer::new().global().layer(service_fn(ok));
        b.iter(|| black_box(one(&mut svc, &uri)))
    });

    g.bench_function("tower_resilience", |b| {
        let layer = tower_resilience_circuitbreaker::CircuitBreakerLayer::builder()
            .build()
            .expect("default config");
        let mut svc = layer.layer(service_fn(ok));
        b.iter(|| black_box(one(&mut svc, &uri)))
    });

    g.bench_function("failsafe", |b| {
        use failsafe::futures::CircuitBreaker as _;
        let breaker = failsafe::Config::new().build();
        let mut svc = service_fn(ok);
        let mut cx = Context::from_waker(Waker::noop());
        b.iter(|| {
            assert!(svc.poll_ready(&mut cx).is_ready());
            let fut = breaker.call(svc.call(request(&uri)));
            black_box(poll_once(fut).is_ok())
        })
    });
    g.finish();

    let mut g = c.benchmark_group("open_path");
    g.bench_function("courier_per_host_refuses", |b| {
        let layer = CircuitBreakerLayer::new();
        let handle = layer.handle();
        let mut svc = layer.layer(service_fn(ok));
        handle.force_open(HostKey::from_parts(&uri, &http::HeaderMap::new()));
        b.iter(|| black_box(one(&mut svc, &uri)))
    });
    g.finish();
}

/// The per-host lookup alone: build the key from the request, find the entry, clone its `Arc`.
fn host_map(c: &mut Criterion) {
    let uri: Uri = "http://api.example.com:8080/v1/items".parse().expect("uri");
    let headers = http::HeaderMap::new();
    let hosts: Vec<Uri> = (0..64)
        .map(|i| format!("http://host{i}.example.com/").parse().expect("uri"))
        .collect();
    let mut g = c.benchmark_group("host_map");

    let papaya = papaya::HashMap::new();
    let dashmap = dashmap::DashMap::new();
    let papaya_fold = papaya::HashMap::with_hasher(foldhash::fast::RandomState::default());
    let dashmap_fold = dashmap::DashMap::with_hasher(foldhash::fast::RandomState::default());
    for u in hosts.iter().chain([&uri]) {
        let k = HostKey::from_parts(u, &headers);
        papaya.pin().insert(k.clone(), Arc::new(AtomicU64::new(0)));
        dashmap.insert(k.clone(), Arc::new(AtomicU64::new(0)));
        papaya_fold
            .pin()
            .insert(k.clone(), Arc::new(AtomicU64::new(0)));
        dashmap_fold.insert(k, Arc::new(AtomicU64::new(0)));
    }
    g.bench_function("papaya", |b| {
        b.iter(|| {
            let req = request(&uri);
            let key = HostKey::from_parts(req.uri(), req.headers());
            black_box(papaya.pin().get(&key).cloned())
        })
    });
    g.bench_function("dashmap", |b| {
        b.iter(|| {
            let req = request(&uri);
            let key = HostKey::from_parts(req.uri(), req.headers());
            black_box(dashmap.get(&key).map(|e| e.value().clone()))
        })
    });
    g.bench_function("papaya_foldhash", |b| {
        b.iter(|| {
            let req = request(&uri);
            let key = HostKey::from_parts(req.uri(), req.headers());
            black_box(papaya_fold.pin().get(&key).cloned())
        })
    });
    g.bench_function("dashmap_foldhash", |b| {
        b.iter(|| {
            let req = request(&uri);
            let key = HostKey::from_parts(req.uri(), req.headers());
            black_box(dashmap_fold.get(&key).map(|e| e.value().clone()))
        })
    });
    g.bench_function("key_only", |b| {
        b.iter(|| {
            let req = request(&uri);
            black_box(HostKey::from_parts(req.uri(), req.headers()))
        })
    });
    g.finish();
}

// criterion_group! makes an undocumented `pub fn`.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, closed_path, host_map);
}
use group::benches;
criterion_main!(benches);
