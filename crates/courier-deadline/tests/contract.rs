//! The tower contract and the auto traits every layer crate promises.

use bytes::Bytes;
use courier_deadline::future::{ResponseFuture, ScopeFuture};
use courier_deadline::{
    AttemptTimeout, AttemptTimeoutLayer, Deadline, DeadlineBody, DeadlineLayer, DeadlineScope,
    DeadlineScopeLayer,
};
use http::{Request, Response};
use http_body_util::Empty;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

/// A service that must be called on the instance that was made ready; a clone starts unready.
#[derive(Debug)]
struct Picky {
    ready: bool,
    calls: Arc<AtomicUsize>,
}

impl Clone for Picky {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            calls: Arc::clone(&self.calls),
        }
    }
}

impl Service<Request<()>> for Picky {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<()>) -> Self::Future {
        assert!(self.ready, "called an instance that was not made ready");
        self.ready = false;
        self.calls.fetch_add(1, Ordering::SeqCst);
        ready(Ok(Response::new(Empty::new())))
    }
}

async fn drive<S>(svc: S, calls: &AtomicUsize)
where
    S: Service<Request<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    let before = calls.load(Ordering::SeqCst);
    let mut svc = svc;
    for _ in 0..3 {
        let mut req = Request::new(());
        req.headers_mut()
            .insert("x-request-deadline-ms", "5000".parse().unwrap());
        svc.ready().await.unwrap().call(req).await.unwrap();
        // A clone made after readiness starts unready and must be driven on its own.
        let mut clone = svc.clone();
        clone
            .ready()
            .await
            .unwrap()
            .call(Request::new(()))
            .await
            .unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), before + 6);
}

#[tokio::test(start_paused = true)]
async fn every_layer_calls_the_instance_it_made_ready() {
    let calls = Arc::new(AtomicUsize::new(0));
    let picky = Picky {
        ready: false,
        calls: Arc::clone(&calls),
    };
    drive(
        DeadlineLayer::new(Duration::from_secs(1)).layer(picky.clone()),
        &calls,
    )
    .await;
    drive(
        AttemptTimeoutLayer::new(Duration::from_secs(1)).layer(picky.clone()),
        &calls,
    )
    .await;
    drive(DeadlineScopeLayer::new().layer(picky.clone()), &calls).await;
}

#[test]
fn layers_services_futures_and_bodies_are_send_sync_static() {
    fn assert_send_sync_static<T: Send + Sync + 'static>() {}
    fn assert_send_static<T: Send + 'static>() {}

    assert_send_sync_static::<DeadlineLayer>();
    assert_send_sync_static::<AttemptTimeoutLayer>();
    assert_send_sync_static::<DeadlineScopeLayer>();
    assert_send_sync_static::<Deadline<Picky>>();
    assert_send_sync_static::<AttemptTimeout<Picky>>();
    assert_send_sync_static::<DeadlineScope<Picky>>();
    assert_send_sync_static::<DeadlineBody<Empty<Bytes>>>();
    assert_send_sync_static::<ResponseFuture<Ready<()>>>();
    assert_send_static::<ScopeFuture<Ready<()>>>();
    assert_send_sync_static::<courier_deadline::error::DeadlineExceeded>();
    assert_send_sync_static::<courier_deadline::error::AttemptTimedOut>();
}
