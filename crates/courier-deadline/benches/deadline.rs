//! The cost of a deadline next to tower's `Timeout`, in one run.
//!
//! Two inner services: one whose future is ready at once, and one whose future returns
//! `Pending` once (after waking itself), which makes every timeout arm its timer. Compare each
//! wrapper with `bare` to read the added cost. The floor the contract sets (the call's
//! context alone, no timer) is measured next to the deadline in
//! `cargo bench -p courier-bench --bench layers`.

#![allow(missing_docs)]

use bytes::Bytes;
use courier_deadline::{AttemptTimeoutLayer, DeadlineLayer};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::timeout::TimeoutLayer;
use tower::{Layer, Service, ServiceExt};

#[derive(Clone, Copy)]
struct Ready;

impl Service<Request<()>> for Ready {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(Empty::new())))
    }
}

#[derive(Clone, Copy)]
struct YieldOnce;

struct YieldOnceFuture {
    yielded: bool,
}

impl Future for YieldOnceFuture {
    type Output = Result<Response<Empty<Bytes>>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.yielded {
            return Poll::Ready(Ok(Response::new(Empty::new())));
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Service<Request<()>> for YieldOnce {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = YieldOnceFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        YieldOnceFuture { yielded: false }
    }
}

const BOUND: Duration = Duration::from_secs(1);

fn run<S>(c: &mut Criterion, group: &str, inner: S)
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds");
    let mut g = c.benchmark_group(group);

    let bare = inner.clone();
    g.bench_function("bare", |b| {
        b.to_async(&rt).iter(|| {
            let svc = bare.clone();
            async move { black_box(svc.oneshot(Request::new(())).await.is_ok()) }
        })
    });

    let tower_timeout = TimeoutLayer::new(BOUND).layer(inner.clone());
    g.bench_function("tower_timeout", |b| {
        b.to_async(&rt).iter(|| {
            let svc = tower_timeout.clone();
            async move { black_box(svc.oneshot(Request::new(())).await.is_ok()) }
        })
    });

    let deadline = DeadlineLayer::new(BOUND).layer(inner.clone());
    g.bench_function("courier_deadline", |b| {
        b.to_async(&rt).iter(|| {
            let svc = deadline.clone();
            async move { black_box(svc.oneshot(Request::new(())).await.is_ok()) }
        })
    });

    let attempt = AttemptTimeoutLayer::new(BOUND).layer(inner.clone());
    g.bench_function("courier_attempt_timeout", |b| {
        b.to_async(&rt).iter(|| {
            let svc = attempt.clone();
            async move { black_box(svc.oneshot(Request::new(())).await.is_ok()) }
        })
    });

    g.finish();
}

fn benches(c: &mut Criterion) {
    run(c, "ready", Ready);
    run(c, "yield_once", YieldOnce);
}

criterion_group!(deadline, benches);
criterion_main!(deadline);
