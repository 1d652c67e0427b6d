//! The courier preset over a `reqwest::Client`: retries, backoff and the attempt records.
//!
//! The upstream (the fault server, started here) answers 503, 503, then 200. The preset retries
//! twice with full-jitter backoff and returns the 200; the `Attempts` extension on the response
//! says what each attempt got, what was decided and why. reqwest's own retries are off
//! (`reqwest_client_builder`), so courier retries in one place only.
//!
//! Run with `cargo run --example reqwest_preset`.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::Attempts;
use courier_faultserver::{FaultServer, Step};
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = FaultServer::start().await?;
    server.set_plan(
        "flaky",
        vec![Step::status(503).times(2), Step::ok().body("finally")],
    );

    let client = CourierLayer::new()
        .reqwest::<Full<Bytes>>(courier::transport::reqwest_client_builder().build()?);

    let req = http::Request::get(server.url_for("/s/flaky")).body(Full::default())?;
    let resp = client.oneshot(req).await.map_err(courier::Error::from)?;
    let status = resp.status();
    let attempts = resp
        .extensions()
        .get::<Attempts>()
        .cloned()
        .unwrap_or_default();
    let body = resp.into_body().collect().await?.to_bytes();
    println!(
        "GET /s/flaky -> {status}: {:?}",
        String::from_utf8_lossy(&body)
    );

    println!("attempts, as the retry layer recorded them:");
    for a in &attempts {
        let waited = match a.wait_source {
            Some(source) => format!("then wait {:?} ({source})", a.wait),
            None => String::from("no wait"),
        };
        println!(
            "  #{} -> {}: {} ({}), {waited}, {:?} into the call",
            a.attempt,
            a.outcome,
            a.decision.as_str(),
            a.reason,
            a.elapsed
        );
    }
    let hits = server.hits("flaky");
    println!("the server counted {} requests", hits.len());

    if status != 200 || attempts.count() != 3 || hits.len() != 3 {
        return Err("expected 3 attempts ending in 200".into());
    }
    Ok(())
}
