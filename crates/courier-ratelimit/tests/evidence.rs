//! Enough evidence before a host is paced, with the defaults: at least 10 answers in the last
//! second, and the whole host only when the refusals come from more than one path (one path's
//! refusals pace that path alone).

use courier_core::{BoxError, HostKey};
use courier_ratelimit::adaptive::AdaptivePacingLayer;
use http::{Request, Response, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

fn get(path: &str) -> Request<()> {
    Request::get(format!("http://api.example{path}"))
        .body(())
        .unwrap()
}

fn key() -> HostKey {
    HostKey::from_request(&get("/"))
}

fn answer(status: StatusCode) -> Result<Response<()>, BoxError> {
    Ok(Response::builder().status(status).body(()).unwrap())
}

/// `/always503` answers 503 without a hint, every other path 200.
fn one_broken_path()
-> impl Service<Request<()>, Response = Response<()>, Error = BoxError, Future: Send> + Clone {
    service_fn(|req: Request<()>| async move {
        if req.uri().path() == "/always503" {
            answer(StatusCode::SERVICE_UNAVAILABLE)
        } else {
            answer(StatusCode::OK)
        }
    })
}

/// Serves the first `capacity` requests and refuses every later one with a bare 503.
fn serves_first(
    capacity: usize,
) -> impl Service<Request<()>, Response = Response<()>, Error = BoxError, Future: Send> + Clone {
    let served = Arc::new(AtomicUsize::new(0));
    service_fn(move |_req: Request<()>| {
        let n = served.fetch_add(1, Ordering::Relaxed);
        async move {
            if n < capacity {
                answer(StatusCode::OK)
            } else {
                answer(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn three_refusals_in_a_quiet_second_pace_nothing() {
    let layer = AdaptivePacingLayer::new();
    let svc = layer.layer(one_broken_path());
    for _ in 0..3 {
        let resp = svc.clone().oneshot(get("/always503")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(layer.learned_rate(&key()), None);
    let start = Instant::now();
    for path in ["/a", "/b", "/c"] {
        svc.clone().oneshot(get(path)).await.unwrap();
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "no wait for the other paths"
    );
}

#[tokio::test(start_paused = true)]
async fn a_path_that_always_refuses_never_paces_the_others() {
    // Five calls a second for 30 s, one in five to the broken path (each with two retries
    // behind it, as retry would send them): the other paths never wait.
    let layer = AdaptivePacingLayer::new();
    let svc = layer.layer(one_broken_path());
    let mut waited = Duration::ZERO;
    for i in 0..150 {
        let path = if i % 5 == 0 { "/always503" } else { "/fine" };
        let tries = if i % 5 == 0 { 3 } else { 1 };
        for _ in 0..tries {
            let start = Instant::now();
            svc.clone().oneshot(get(path)).await.unwrap();
            if path == "/fine" {
                waited += start.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(waited, Duration::ZERO);
    // A burst of them, fast enough to be evidence, paces the broken path only.
    for _ in 0..20 {
        svc.clone().oneshot(get("/always503")).await.unwrap();
    }
    let start = Instant::now();
    for _ in 0..5 {
        svc.clone().oneshot(get("/fine")).await.unwrap();
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the fine path is never paced"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crowd_on_one_path_paces_that_path() {
    let layer = AdaptivePacingLayer::new();
    let svc = layer.layer(serves_first(5));
    // Ten at once, five served: the tenth answer is the evidence.
    let calls = (0..10).map(|_| svc.clone().oneshot(get("/search")));
    futures_util::future::join_all(calls).await;
    assert_eq!(
        layer.learned_rate(&key()),
        Some(5.0),
        "paced at what it served"
    );
    // The crowd's path waits for its slots; another path goes at once.
    let start = Instant::now();
    for _ in 0..3 {
        svc.clone().oneshot(get("/search")).await.unwrap();
    }
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    let start = Instant::now();
    svc.clone().oneshot(get("/other")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_crowd_over_many_paths_paces_the_whole_host() {
    let layer = AdaptivePacingLayer::new();
    let svc = layer.layer(serves_first(5));
    let calls = (0..10).map(|i| svc.clone().oneshot(get(&format!("/orders/{i}"))));
    futures_util::future::join_all(calls).await;
    assert_eq!(layer.learned_rate(&key()), Some(5.0));
    let start = Instant::now();
    for path in ["/a", "/b", "/c"] {
        svc.clone().oneshot(get(path)).await.unwrap();
    }
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
}
