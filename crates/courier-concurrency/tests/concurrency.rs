//! The layer's contract: permits, the queue, the wait, keys, and what passes through.

use bytes::Bytes;
use courier_concurrency::{ConcurrencyLimit, ConcurrencyLimitLayer, ConcurrencyStatus};
use courier_core::{BoxError, ConcurrencyLimited, Global, HostKey, is_caused_by};
use courier_testkit::body::ScriptedBody;
use http::{Request, Response};
use http_body_util::BodyExt;
use std::convert::Infallible;
use std::future::poll_fn;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

type Body = ScriptedBody<Infallible>;

fn n(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

fn key(uri: &str) -> HostKey {
    HostKey::from_request(&get(uri))
}

/// An inner service that answers `chunks` after `delay`, counting its calls.
fn host(
    delay: Duration,
    chunks: usize,
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone + Send
{
    service_fn(move |_req: Request<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(delay).await;
            let body = Body::chunks((0..chunks).map(|i| Bytes::from(format!("chunk {i}"))));
            Ok::<_, Infallible>(Response::new(body))
        }
    })
}

fn status(layer: &ConcurrencyLimitLayer, uri: &str) -> ConcurrencyStatus {
    layer.handle().status(&key(uri)).expect("the key was seen")
}

#[tokio::test(start_paused = true)]
async fn a_pass_through_service_changes_nothing() {
    courier_testkit::pass_through::check(ConcurrencyLimit::<_>::pass_through).await;
    courier_testkit::pass_through::check(ConcurrencyLimit::<_, Global>::pass_through).await;
    let svc = ConcurrencyLimit::<_>::pass_through(host(Duration::ZERO, 1, Arc::default()));
    assert!(svc.is_pass_through());
    assert!(svc.handle().is_none());
}

#[tokio::test(start_paused = true)]
async fn the_ready_contract_holds() {
    // The answers are kept unread, their bodies holding their permits.
    let layer = ConcurrencyLimitLayer::new().fixed(n(courier_testkit::contract::CALLS));
    let checked = courier_testkit::contract::check(
        service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::new())) }),
        |inner| layer.layer(inner),
        || get("http://contract.example/"),
    )
    .await;
    assert_eq!(checked.calls, courier_testkit::contract::CALLS);
    assert!(!checked.service.is_pass_through());
}

#[tokio::test(start_paused = true)]
async fn a_call_over_the_limit_fails_at_once_without_calling_the_inner_service() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = ConcurrencyLimitLayer::new().fixed(n(2));
    let svc = layer.layer(host(Duration::from_secs(1), 1, calls.clone()));
    let a = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    let b = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;
    assert_eq!(status(&layer, "http://h.example/").in_flight, 2);

    let started = Instant::now();
    let err = svc
        .clone()
        .oneshot(get("http://h.example/"))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
    let refusal = err.downcast_ref::<ConcurrencyLimited>().expect("typed");
    assert_eq!((refusal.in_flight(), refusal.limit()), (2, 2));
    assert!(is_caused_by::<ConcurrencyLimited>(&*err));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the refused call was not sent"
    );

    // Another host has a limit of its own.
    svc.clone()
        .oneshot(get("http://other.example/"))
        .await
        .unwrap();
    for call in [a, b] {
        drop(call.await.unwrap().unwrap());
    }
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn poll_ready_never_waits_for_a_permit() {
    let layer = ConcurrencyLimitLayer::new().fixed(n(1));
    let mut svc = layer.layer(host(Duration::from_secs(1), 1, Arc::default()));
    let _held = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;
    let ready = poll_fn(|cx| Poll::Ready(svc.poll_ready(cx))).await;
    assert!(matches!(ready, Poll::Ready(Ok(()))));
}

#[tokio::test(start_paused = true)]
async fn the_body_holds_the_permit_until_it_ends() {
    let layer = ConcurrencyLimitLayer::new().fixed(n(1));
    let svc = layer.layer(host(Duration::ZERO, 3, Arc::default()));
    let res = svc.clone().oneshot(get("http://h.example/")).await.unwrap();
    assert!(res.body().holds_permit());
    let err = svc
        .clone()
        .oneshot(get("http://h.example/"))
        .await
        .unwrap_err();
    assert!(
        err.is::<ConcurrencyLimited>(),
        "the unread body holds the permit"
    );

    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "chunk 0chunk 1chunk 2");
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
    svc.oneshot(get("http://h.example/")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_midway_gives_the_permit_back() {
    let layer = ConcurrencyLimitLayer::new().fixed(n(1));
    let svc = layer.layer(host(Duration::ZERO, 3, Arc::default()));
    let mut body = svc
        .oneshot(get("http://h.example/"))
        .await
        .unwrap()
        .into_body();
    body.frame().await.unwrap().unwrap();
    assert_eq!(status(&layer, "http://h.example/").in_flight, 1);
    drop(body);
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn released_at_the_headers_the_body_holds_nothing() {
    let layer = ConcurrencyLimitLayer::new()
        .fixed(n(1))
        .release_at_headers(true);
    let svc = layer.layer(host(Duration::ZERO, 3, Arc::default()));
    let first = svc.clone().oneshot(get("http://h.example/")).await.unwrap();
    assert!(!first.body().holds_permit());
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
    svc.oneshot(get("http://h.example/")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_error_gives_the_permit_back() {
    let layer = ConcurrencyLimitLayer::new().fixed(n(1));
    let svc = layer.layer(service_fn(|_req: Request<()>| async {
        Err::<Response<Body>, BoxError>("upstream failed".into())
    }));
    for _ in 0..3 {
        let err = svc
            .clone()
            .oneshot(get("http://h.example/"))
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "upstream failed");
    }
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn queued_calls_are_served_first_come_first_served_and_a_full_queue_refuses() {
    let layer = ConcurrencyLimitLayer::new()
        .fixed(n(1))
        .max_queue(2)
        .max_wait(Duration::from_secs(10));
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inner = {
        let order = order.clone();
        service_fn(move |req: Request<()>| {
            order.lock().unwrap().push(req.uri().path().to_owned());
            async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, Infallible>(Response::new(Body::new()))
            }
        })
    };
    let svc = layer.layer(inner);
    let start = Instant::now();
    let mut calls = Vec::new();
    for path in ["/a", "/b", "/c"] {
        let svc = svc.clone();
        calls.push(tokio::spawn(async move {
            let res = svc.oneshot(get(&format!("http://h.example{path}"))).await?;
            res.into_body().collect().await.map_err(BoxError::from)?;
            Ok::<_, BoxError>(Instant::now())
        }));
        tokio::task::yield_now().await;
    }
    assert_eq!(status(&layer, "http://h.example/").queued, 2);
    let err = svc
        .clone()
        .oneshot(get("http://h.example/d"))
        .await
        .unwrap_err();
    assert!(err.is::<ConcurrencyLimited>(), "the queue is full");

    let mut ends = Vec::new();
    for call in calls {
        ends.push(call.await.unwrap().unwrap() - start);
    }
    let ms = |n| Duration::from_millis(n);
    assert_eq!(ends, [ms(100), ms(200), ms(300)]);
    assert_eq!(*order.lock().unwrap(), ["/a", "/b", "/c"]);
    let s = status(&layer, "http://h.example/");
    assert_eq!((s.in_flight, s.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_queued_call_waits_at_most_the_max_wait_and_never_past_its_deadline() {
    let layer = ConcurrencyLimitLayer::new()
        .fixed(n(1))
        .max_queue(10)
        .max_wait(Duration::from_millis(300));
    let svc = layer.layer(host(Duration::from_secs(5), 1, Arc::default()));
    let _held = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;

    let start = Instant::now();
    let err = svc
        .clone()
        .oneshot(get("http://h.example/"))
        .await
        .unwrap_err();
    assert!(err.is::<ConcurrencyLimited>());
    assert_eq!(start.elapsed(), Duration::from_millis(300), "the max wait");

    let mut req = get("http://h.example/");
    courier_core::CallContext::get_or_insert(&mut req)
        .shrink_deadline_after(Duration::from_millis(120));
    let start = Instant::now();
    let err = svc.clone().oneshot(req).await.unwrap_err();
    assert!(err.is::<ConcurrencyLimited>());
    assert_eq!(start.elapsed(), Duration::from_millis(120), "the deadline");

    let mut req = get("http://h.example/");
    courier_core::CallContext::get_or_insert(&mut req).shrink_deadline_after(Duration::ZERO);
    let start = Instant::now();
    assert!(svc.clone().oneshot(req).await.is_err());
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "a call past its deadline does not queue"
    );
    assert_eq!(status(&layer, "http://h.example/").queued, 0);
}

#[tokio::test(start_paused = true)]
async fn a_queued_call_dropped_leaves_the_queue_or_gives_its_permit_back() {
    let layer = ConcurrencyLimitLayer::new()
        .fixed(n(1))
        .max_queue(10)
        .max_wait(Duration::from_secs(60));
    let release = Arc::new(Notify::new());
    let inner = {
        let release = release.clone();
        service_fn(move |_req: Request<()>| {
            let release = release.clone();
            async move {
                release.notified().await;
                Ok::<_, Infallible>(Response::new(Body::new()))
            }
        })
    };
    let svc = layer.layer(inner);
    let first = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;

    // Dropped while queued.
    let queued = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;
    assert_eq!(status(&layer, "http://h.example/").queued, 1);
    queued.abort();
    let _ = queued.await;
    assert_eq!(status(&layer, "http://h.example/").queued, 0);

    // Handed the permit, then dropped before it was polled again.
    let mut second = Box::pin(svc.clone().oneshot(get("http://h.example/")));
    assert!(futures_util::poll!(second.as_mut()).is_pending());
    release.notify_one();
    drop(first.await.unwrap().unwrap());
    let s = status(&layer, "http://h.example/");
    assert_eq!(
        (s.in_flight, s.queued),
        (1, 0),
        "the permit went to the queued call"
    );
    drop(second);
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn keys_per_host_global_and_by_function() {
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = host(Duration::from_secs(1), 1, calls);

    let global = ConcurrencyLimitLayer::new().fixed(n(1)).global();
    let svc = global.layer(inner.clone());
    let _held = tokio::spawn(svc.clone().oneshot(get("http://a.example/")));
    tokio::task::yield_now().await;
    assert!(svc.clone().oneshot(get("http://b.example/")).await.is_err());
    assert_eq!(global.handle().status(&()).unwrap().in_flight, 1);

    let by_tenant = ConcurrencyLimitLayer::new().fixed(n(1)).key_by(|head| {
        head.headers()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    });
    let svc = by_tenant.layer(inner);
    let tenant = |t: &str| {
        Request::get("http://a.example/")
            .header("x-tenant", t)
            .body(())
            .unwrap()
    };
    let _held = tokio::spawn(svc.clone().oneshot(tenant("acme")));
    tokio::task::yield_now().await;
    assert!(svc.clone().oneshot(tenant("acme")).await.is_err());
    let other = tokio::spawn(svc.clone().oneshot(tenant("globex")));
    tokio::task::yield_now().await;
    assert_eq!(
        by_tenant
            .handle()
            .status(&"globex".to_owned())
            .unwrap()
            .in_flight,
        1
    );
    other.abort();
}

#[tokio::test(start_paused = true)]
async fn keys_are_bounded() {
    let layer = ConcurrencyLimitLayer::new().max_keys(n(16));
    let svc = layer.layer(host(Duration::ZERO, 0, Arc::default()));
    for i in 0..200 {
        svc.clone()
            .oneshot(get(&format!("http://h{i}.example/")))
            .await
            .unwrap();
        assert!(layer.handle().keys() <= 16);
    }
}

#[tokio::test(start_paused = true)]
async fn a_setter_gives_the_layer_limits_of_its_own() {
    let before = ConcurrencyLimitLayer::new().fixed(n(1));
    let svc = before.layer(host(Duration::from_secs(1), 1, Arc::default()));
    let _held = tokio::spawn(svc.clone().oneshot(get("http://h.example/")));
    tokio::task::yield_now().await;
    let after = before.clone().max_queue(1);
    assert!(after.handle().status(&key("http://h.example/")).is_none());
    assert_eq!(status(&before, "http://h.example/").in_flight, 1);
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_limit_shrinks_on_a_queueing_host() {
    // One worker, 10 ms a request: every call beyond the first queues at the host.
    let worker = Arc::new(tokio::sync::Semaphore::new(1));
    let inner = service_fn(move |_req: Request<()>| {
        let worker = worker.clone();
        async move {
            let _w = worker.acquire().await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, Infallible>(Response::new(Body::new()))
        }
    });
    let layer = ConcurrencyLimitLayer::new()
        .max_queue(100)
        .max_wait(Duration::from_secs(60));
    let svc = layer.layer(inner);
    let end = Instant::now() + Duration::from_secs(10);
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                while Instant::now() < end {
                    let res = svc.clone().oneshot(get("http://q.example/")).await.unwrap();
                    drop(res.into_body().collect().await);
                }
            })
        })
        .collect();
    for c in callers {
        c.await.unwrap();
    }
    let s = status(&layer, "http://q.example/");
    assert!(
        s.limit <= 2,
        "the limit came down to the host's one worker: {s:?}"
    );
    assert_eq!((s.in_flight, s.queued), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_inner_service_gives_the_permit_back() {
    let layer = ConcurrencyLimitLayer::new().fixed(n(1));
    let mut svc = layer.layer(service_fn(
        |_req: Request<()>| -> std::future::Ready<Result<Response<Body>, Infallible>> {
            panic!("the inner service panicked")
        },
    ));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(svc.call(get("http://h.example/")));
    }));
    assert!(panicked.is_err());
    assert_eq!(status(&layer, "http://h.example/").in_flight, 0);
}
