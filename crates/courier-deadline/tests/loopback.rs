//! Real sockets on 127.0.0.1: a dripping body, and a deadline carried from one service to the
//! next. These run on real time with short waits; every wait is bounded.

use bytes::Bytes;
use courier_core::{BoxError, DeadlineExceeded};
use courier_deadline::propagate::DEFAULT_HEADER;
use courier_deadline::{DeadlineLayer, DeadlineScopeLayer, current_deadline};
use courier_faultserver::{FaultServer, Step};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::{Instant, timeout};
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Upper bound for each test: far above what it needs, so a hang fails instead of stalling CI.
const LIMIT: Duration = Duration::from_secs(20);

fn http_client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn get(url: &str) -> Request<Empty<Bytes>> {
    Request::get(url).body(Empty::new()).unwrap()
}

#[tokio::test]
async fn deadline_cuts_a_dripping_body() {
    timeout(LIMIT, async {
        let server = FaultServer::start().await.unwrap();
        // Ten bytes, 300 ms apart: 2.7 s to read in full.
        server.set_plan(
            "drip",
            vec![
                Step::ok()
                    .body("0123456789")
                    .drip(Duration::from_millis(300)),
            ],
        );
        let budget = Duration::from_millis(700);
        let client = ServiceBuilder::new()
            .layer(DeadlineLayer::new(budget))
            .service(http_client());
        let res = client
            .oneshot(get(&server.url_for("/s/drip")))
            .await
            .expect("the headers come at once");
        assert_eq!(res.status(), 200);
        let mut body = res.into_body();
        let mut got = Vec::new();
        let err = loop {
            match body.frame().await {
                Some(Ok(frame)) => got.extend_from_slice(&frame.into_data().unwrap()),
                Some(Err(err)) => break err,
                None => panic!("the whole body arrived within the deadline: {got:?}"),
            }
        };
        let err = err
            .downcast_ref::<DeadlineExceeded>()
            .unwrap_or_else(|| panic!("expected DeadlineExceeded, got {err:?}"));
        assert_eq!(err.budget(), budget);
        assert!(err.elapsed() >= budget);
        assert!(
            !got.is_empty() && got.len() < 10,
            "some bytes, not all: {got:?}"
        );
        assert_eq!(&got[..], &b"0123456789"[..got.len()]);
        assert_eq!(server.hits("drip").len(), 1);
    })
    .await
    .expect("bounded");
}

/// When A called B, and the scope A's handler ran in.
type InnerCall = Arc<Mutex<Option<(Instant, Option<Instant>)>>>;

/// Server A: the scope layer, then a handler that works a little and calls `downstream`.
async fn start_service_a(
    downstream: String,
    work: Duration,
    inner_call_at: InnerCall,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = ServiceBuilder::new()
        // A's own budget for the call is generous; the caller's deadline is what binds it.
        .layer(DeadlineLayer::new(Duration::from_secs(10)).propagate(DEFAULT_HEADER))
        .service(http_client());
    let handler = service_fn(move |_req: Request<Incoming>| {
        let client = client.clone();
        let url = downstream.clone();
        let record = Arc::clone(&inner_call_at);
        async move {
            tokio::time::sleep(work).await;
            *record.lock().unwrap() = Some((Instant::now(), current_deadline()));
            let status = match client.oneshot(get(&url)).await {
                Ok(res) => res.status().as_u16().to_string(),
                Err(e) => e.to_string(),
            };
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(status))))
        }
    });
    let svc = ServiceBuilder::new()
        .layer(DeadlineScopeLayer::new())
        .service(handler);
    tokio::spawn(async move {
        for _ in 0..8 {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let svc = TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn deadline_round_trip_over_loopback() {
    timeout(LIMIT, async {
        let b = FaultServer::start().await.unwrap();
        b.set_plan("inner", vec![Step::ok()]);
        let inner_call = Arc::new(Mutex::new(None));
        let work = Duration::from_millis(100);
        let a = start_service_a(b.url_for("/s/inner"), work, Arc::clone(&inner_call)).await;

        let client = ServiceBuilder::new()
            .layer(DeadlineLayer::new(Duration::from_secs(2)).propagate(DEFAULT_HEADER))
            .service(http_client());
        let sent = Instant::now();
        let res = client
            .oneshot(get(&format!("http://{a}/")))
            .await
            .map_err(|e: BoxError| e.to_string())
            .unwrap();
        let text = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(text, "200", "A's call to B succeeded");

        let answered = Instant::now();
        let hits = b.hits("inner");
        assert_eq!(hits.len(), 1);
        let inner_ms: u64 = hits[0]
            .header(DEFAULT_HEADER.as_str())
            .expect("A passed the deadline on to B")
            .parse()
            .unwrap();
        let (called_at, scoped) = inner_call.lock().unwrap().expect("A called B");
        let spent = called_at.duration_since(sent).as_millis() as u64;
        let whole = answered.duration_since(sent).as_millis() as u64;
        assert!(
            spent >= work.as_millis() as u64,
            "A worked before calling: {spent}"
        );
        // Bounds that hold however late each side is scheduled. A reads what was left when the
        // header was written (at most 2000 ms) and counts from when it read it, so it can only
        // think it has more time than it had, never less: what it forwards is at most 2000 ms
        // less the time it worked, and at least what the caller had left when the answer came.
        let worked = work.as_millis() as u64;
        assert!(
            inner_ms <= 2000 - worked + 1,
            "inner {inner_ms} ms, after {worked} ms of work"
        );
        assert!(
            inner_ms + 1 >= 2000u64.saturating_sub(whole),
            "inner {inner_ms} ms, but the caller still had {} ms when the answer came",
            2000u64.saturating_sub(whole)
        );
        // The scope held by A's handler is the deadline it forwarded, less the time between
        // the handler's reading it and A's client writing the header.
        let scoped = scoped.expect("the handler ran inside the scope");
        let scoped_left = scoped.duration_since(called_at).as_millis() as u64;
        let until_answer = answered.duration_since(called_at).as_millis() as u64;
        assert!(
            inner_ms <= scoped_left + 1 && scoped_left <= inner_ms + until_answer + 1,
            "scope {scoped_left} ms at the call, inner {inner_ms} ms, answered {until_answer} ms later"
        );
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn spent_inherited_deadline_sends_nothing_downstream() {
    timeout(LIMIT, async {
        let b = FaultServer::start().await.unwrap();
        let inner_call = Arc::new(Mutex::new(None));
        // A works 150 ms on a caller that only waits 50 ms.
        let a = start_service_a(
            b.url_for("/s/late"),
            Duration::from_millis(150),
            Arc::clone(&inner_call),
        )
        .await;
        let mut req = get(&format!("http://{a}/"));
        req.headers_mut()
            .insert(DEFAULT_HEADER, http::HeaderValue::from_static("50"));
        let res = http_client().request(req).await.unwrap();
        let text = res.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&text).starts_with("deadline exceeded"),
            "{text:?}"
        );
        assert!(b.hits("late").is_empty(), "B never saw the call");
    })
    .await
    .expect("bounded");
}
