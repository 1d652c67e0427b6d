//! courier's layers one by one in a `tower::ServiceBuilder`, mixed with tower-http's
//! `TraceLayer` and tower's `ConcurrencyLimit`, over the hyper-util client.
//!
//! No preset here: each layer is picked by hand, in the order docs/ARCHITECTURE.md gives (deadline
//! outside retry, the attempt timeout inside it). `ServiceBuilderExt` adds one method per
//! courier layer, named so as not to clash with tower's own (`courier_retry`).
//!
//! Run with `cargo run --example a_la_carte`.

use bytes::Bytes;
use courier::ServiceBuilderExt;
use courier::core::Attempts;
use courier::retry::RetryLayer;
use courier_faultserver::{FaultServer, Step};
use futures_util::future::join_all;
use http_body_util::{BodyExt, Full};
use std::io::IsTerminal;
use std::time::Duration;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::trace::{DefaultMakeSpan, DefaultOnResponse, TraceLayer};
use tracing::Level;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Logs (tower-http's spans and courier's one event per attempt) on stderr.
    tracing_subscriber::fmt()
        .with_max_level(Level::INFO)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();

    let server = FaultServer::start().await?;
    server.set_plan(
        "flaky",
        vec![Step::status(503), Step::reset(), Step::ok().body("ok")],
    );
    server.set_plan(
        "slow",
        vec![Step::ok().delay(Duration::from_millis(800)), Step::ok()],
    );

    let client = ServiceBuilder::new()
        // tower-http: one span per call, its status and latency logged.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::INFO)),
        )
        // tower: at most 2 calls in flight through this client.
        .concurrency_limit(2)
        // courier: a 5 s budget per call, three attempts, each bounded to 300 ms.
        .deadline(Duration::from_secs(5))
        .courier_retry(
            RetryLayer::new()
                .attempts(3)
                .base(Duration::from_millis(50)),
        )
        .attempt_timeout(Duration::from_millis(300))
        .service(courier::transport::hyper_client::<Full<Bytes>>());

    let paths = ["/s/flaky", "/s/slow", "/items?per_page=3"];
    let calls = paths.iter().map(|path| {
        let client = client.clone();
        let req = http::Request::get(server.url_for(path))
            .body(Full::default())
            .expect("a valid request");
        async move {
            let resp = client.oneshot(req).await.map_err(courier::Error::from)?;
            let status = resp.status();
            let attempts = resp
                .extensions()
                .get::<Attempts>()
                .cloned()
                .unwrap_or_default();
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, attempts, body))
        }
    });

    let mut all_ok = true;
    for (path, result) in paths.iter().zip(join_all(calls).await) {
        let (status, attempts, body) = result?;
        let outcomes: Vec<String> = attempts.iter().map(|a| a.outcome.to_string()).collect();
        println!(
            "GET {path} -> {status} after {} attempt(s) [{}], {} body bytes",
            attempts.count(),
            outcomes.join(", "),
            body.len()
        );
        all_ok &= status == 200;
    }
    println!(
        "the server counted: flaky {}, slow {}, items {}",
        server.hits("flaky").len(),
        server.hits("slow").len(),
        server.hits("items").len()
    );
    if !all_ok || server.hits("flaky").len() != 3 || server.hits("slow").len() != 2 {
        return Err("expected flaky to take 3 attempts and slow 2".into());
    }
    Ok(())
}
