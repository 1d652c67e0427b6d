//! An axum service whose handler calls an upstream through the courier preset, with the
//! caller's deadline flowing into the upstream call.
//!
//! ```text
//! this example's hyper client --x-request-deadline-ms: 1500--> axum app (DeadlineScopeLayer)
//!                                                                handler
//!                                                                  └ courier preset over hyper
//!                                                                      --x-request-deadline-ms: <=1500--> fault server
//! ```
//!
//! The upstream (the fault server) answers 503 once, then 200: the preset retries, and each
//! attempt carries the time the caller has left, written afresh. Run with
//! `cargo run --example axum_upstream`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use courier::core::Attempts;
use courier::deadline::propagate::DEFAULT_HEADER;
use courier::deadline::{AttemptTimeoutLayer, DeadlineScopeLayer};
use courier::retry::RetryLayer;
use courier::transport::HyperService;
use courier::{Courier, CourierLayer};
use courier_faultserver::{FaultServer, Step};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::time::Duration;
use tower::ServiceExt;

/// What the handler needs: the preset client and where the upstream lives.
#[derive(Clone)]
struct AppState {
    upstream: Courier<HyperService<Full<Bytes>>>,
    upstream_url: String,
}

/// `GET /orders`: asks the upstream through the preset and reports what happened.
async fn orders(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let req = http::Request::get(&state.upstream_url)
        .body(Full::default())
        .expect("a valid request");
    match state.upstream.oneshot(req).await {
        Ok(resp) => {
            let status = resp.status();
            let attempts = resp
                .extensions()
                .get::<Attempts>()
                .map_or(1, Attempts::count);
            let body = match resp.into_body().collect().await {
                Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                Err(e) => return error(courier::Error::from(e)),
            };
            (
                StatusCode::OK,
                Json(json!({
                    "upstream_status": status.as_u16(),
                    "upstream_attempts": attempts,
                    "upstream_body": body,
                })),
            )
        }
        Err(e) => error(courier::Error::from(e)),
    }
}

fn error(e: courier::Error) -> (StatusCode, Json<Value>) {
    let status = match e {
        courier::Error::DeadlineExceeded(_) => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    (status, Json(json!({ "error": e.to_string() })))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let upstream = FaultServer::start().await?;
    upstream.set_plan(
        "inventory",
        vec![
            Step::status(503),
            Step::ok()
                .header("content-type", "application/json")
                .body(r#"{"in_stock":3}"#),
        ],
    );

    // The preset, sending the time left on every attempt. The app's own budget is 10 s; a
    // caller's shorter deadline (read by DeadlineScopeLayer) shrinks it.
    let client = CourierLayer::new()
        .deadline(Duration::from_secs(10))
        .attempt_timeout(AttemptTimeoutLayer::new(Duration::from_secs(2)).propagate(DEFAULT_HEADER))
        .retry(RetryLayer::new().base(Duration::from_millis(50)))
        .hyper::<Full<Bytes>>();

    let app = Router::new()
        .route("/orders", get(orders))
        .with_state(AppState {
            upstream: client,
            upstream_url: upstream.url_for("/s/inventory"),
        })
        .layer(DeadlineScopeLayer::new());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    println!("app on http://{addr}, upstream on {}", upstream.url());

    // Call the app once, as a caller with 1.5 s left.
    let caller = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::get(format!("http://{addr}/orders"))
        .header(DEFAULT_HEADER, "1500")
        .body(Full::default())?;
    let resp = caller.request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    println!(
        "GET /orders -> {status}: {}",
        String::from_utf8_lossy(&body)
    );

    println!("the upstream saw:");
    let hits = upstream.hits("inventory");
    for (i, hit) in hits.iter().enumerate() {
        println!(
            "  attempt {}: {} {} at {:.0} ms, {}: {}",
            i + 1,
            hit.method,
            hit.path,
            hit.t_ms,
            DEFAULT_HEADER,
            hit.header(DEFAULT_HEADER.as_str()).unwrap_or("(none)")
        );
    }

    let propagated: Vec<u64> = hits
        .iter()
        .filter_map(|h| h.header(DEFAULT_HEADER.as_str())?.parse().ok())
        .collect();
    let ok = status == StatusCode::OK
        && hits.len() == 2
        && propagated.len() == 2
        && propagated.iter().all(|&ms| ms <= 1500);
    server.abort();
    if !ok {
        return Err("the upstream did not see two attempts carrying the caller's deadline".into());
    }
    println!("each attempt carried what was left of the caller's 1500 ms");
    Ok(())
}
