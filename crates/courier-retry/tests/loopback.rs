//! RetryLayer over a real hyper-util client against the fault server on 127.0.0.1: what the
//! server counted is the truth. Waits are real but short (backoff base 20 ms, Retry-After: 1).

use bytes::Bytes;
use courier_core::Attempts;
use courier_core::extensions::Reason;
use courier_faultserver::{FaultServer, Step};
use courier_retry::RetryLayer;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use tower::{Layer, ServiceExt};

type Transport = Client<HttpConnector, Full<Bytes>>;

/// The transport with its own retries off: retry happens in one place.
fn transport() -> Transport {
    Client::builder(TokioExecutor::new())
        .retry_canceled_requests(false)
        .build_http()
}

fn layer() -> RetryLayer {
    RetryLayer::new().base(Duration::from_millis(20)).seed(5)
}

async fn send(layer: &RetryLayer, req: Request<Full<Bytes>>) -> Response<Incoming> {
    let svc = layer.layer(transport());
    tokio::time::timeout(Duration::from_secs(10), svc.oneshot(req))
        .await
        .expect("bounded in time")
        .expect("a response")
}

fn get(server: &FaultServer, name: &str) -> Request<Full<Bytes>> {
    Request::get(server.url_for(&format!("/s/{name}")))
        .body(Full::default())
        .unwrap()
}

fn post(server: &FaultServer, name: &str) -> Request<Full<Bytes>> {
    Request::post(server.url_for(&format!("/s/{name}")))
        .body(Full::new(Bytes::from_static(b"{\"order\":1}")))
        .unwrap()
}

fn attempts<B>(res: &Response<B>) -> &Attempts {
    res.extensions().get::<Attempts>().expect("attempt records")
}

#[tokio::test]
async fn connection_reset_is_retried() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("reset", vec![Step::reset()]);
    let res = send(&layer(), get(&server, "reset")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.hits("reset").len(), 2);
    assert_eq!(attempts(&res).count(), 2);
}

#[tokio::test]
async fn two_503s_then_200() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("busy", vec![Step::status(503).body("try later").times(2)]);
    let res = send(&layer(), get(&server, "busy")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.hits("busy").len(), 3);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert!(body.is_empty());
}

#[tokio::test]
async fn five_500s_stop_after_three_attempts() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("down", vec![Step::status(500).times(5)]);
    let res = send(&layer(), get(&server, "down")).await;
    assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(server.hits("down").len(), 3);
    assert_eq!(
        attempts(&res).last().unwrap().reason,
        Reason::AttemptsExhausted
    );
}

#[tokio::test]
async fn too_many_requests_waits_for_retry_after() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "limited",
        vec![Step::status(429).header("retry-after", "1")],
    );
    let res = send(&layer(), get(&server, "limited")).await;
    assert_eq!(res.status(), StatusCode::OK);
    let hits = server.hits("limited");
    assert_eq!(hits.len(), 2);
    let gap = hits[1].t_ms - hits[0].t_ms;
    assert!(gap >= 1000.0, "waited {gap} ms, the server asked 1000");
    assert!(gap < 3000.0, "waited {gap} ms");
}

#[tokio::test]
async fn post_without_a_key_is_sent_once() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("orders", vec![Step::status(503)]);
    let res = send(&layer(), post(&server, "orders")).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.hits("orders").len(), 1);

    // A reset after the request went out: it may have run, so it is not sent again.
    server.set_plan("reset-orders", vec![Step::reset()]);
    let svc = layer().layer(transport());
    let err = svc
        .oneshot(post(&server, "reset-orders"))
        .await
        .unwrap_err();
    assert!(!err.to_string().is_empty());
    assert_eq!(server.hits("reset-orders").len(), 1);
}

#[tokio::test]
async fn post_with_a_key_is_retried_with_the_same_key() {
    let server = FaultServer::start().await.unwrap();
    server.set_plan("generated", vec![Step::status(503)]);
    let res = send(
        &layer().generate_idempotency_keys(true),
        post(&server, "generated"),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let hits = server.hits("generated");
    assert_eq!(hits.len(), 2);
    let key = hits[0].idempotency_key.clone().expect("a generated key");
    assert_eq!(hits[1].idempotency_key.as_deref(), Some(key.as_str()));

    server.set_plan("given", vec![Step::status(503)]);
    let mut req = post(&server, "given");
    req.headers_mut()
        .insert("idempotency-key", "order-1".parse().unwrap());
    let res = send(&layer().generate_idempotency_keys(true), req).await;
    assert_eq!(res.status(), StatusCode::OK);
    let hits = server.hits("given");
    assert_eq!(hits.len(), 2);
    assert!(
        hits.iter()
            .all(|h| h.idempotency_key.as_deref() == Some("order-1"))
    );
}

#[tokio::test]
async fn a_put_with_a_replay_body_is_hedged_over_a_real_connection() {
    // hyper sends a body whose length it knows up to that length, then drops it without
    // asking for its end: the copy must still count as read whole for the hedge to go.
    use courier_retry::hedge::HedgeLayer;
    use courier_retry::{ReplayBody, RetryBudget};
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "put",
        vec![
            Step::ok().body("slow").delay(Duration::from_secs(2)),
            Step::status(201).body("fast"),
        ],
    );
    let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
        Client::builder(TokioExecutor::new())
            .retry_canceled_requests(false)
            .build_http();
    let svc = courier_retry::Retry::new(transport, layer()).with_hedge(
        HedgeLayer::new()
            .after(Duration::from_millis(100))
            .budget(RetryBudget::new().floor(10)),
    );
    let req = Request::put(server.url_for("/s/put"))
        .body(ReplayBody::new(Full::new(Bytes::from_static(b"{\"n\":5}"))))
        .unwrap();
    let started = tokio::time::Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(10), svc.oneshot(req))
        .await
        .expect("bounded in time")
        .expect("a response");
    assert_eq!(res.status(), StatusCode::CREATED, "the hedge's answer");
    assert_eq!(server.hits("put").len(), 2);
    // The hedge waits its delay. A lower bound only, seen from the caller: the server
    // records both copies while they overlap, so the gap between its records is not
    // bounded below on a loaded machine.
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(100),
        "answered in {waited:?}"
    );
}
