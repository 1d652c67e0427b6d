//! Instruction counts next to tower's timeout, for callgrind: `deadline_count
//! <ready|yield>-<bare|tower|deadline|attempt> <n>` runs n calls; the difference of two runs
//! divided by the difference of n is the cost of one.
#![allow(missing_docs)]
use bytes::Bytes;
use courier_deadline::{AttemptTimeoutLayer, DeadlineLayer};
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

fn go<S>(rt: &tokio::runtime::Runtime, svc: S, n: usize)
where
    S: Service<Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    rt.block_on(async {
        for _ in 0..n {
            black_box(svc.clone().oneshot(Request::new(())).await.is_ok());
        }
    });
}
fn run<S>(rt: &tokio::runtime::Runtime, which: &str, inner: S, n: usize)
where
    S: Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible>
        + Clone
        + 'static,
{
    match which {
        "bare" => go(rt, inner, n),
        "tower" => go(rt, TimeoutLayer::new(BOUND).layer(inner), n),
        "deadline" => go(rt, DeadlineLayer::new(BOUND).layer(inner), n),
        "attempt" => go(rt, AttemptTimeoutLayer::new(BOUND).layer(inner), n),
        _ => panic!(),
    }
}
fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap();
    let n: usize = args.next().unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (inner, which) = which.split_once('-').unwrap();
    match inner {
        "ready" => run(&rt, which, Ready, n),
        "yield" => run(&rt, which, YieldOnce, n),
        _ => panic!(),
    }
}
