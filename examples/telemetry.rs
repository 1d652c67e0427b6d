//! What an operator sees of a call that succeeded on its third attempt: one call span and one
//! client span per attempt (exported by the OpenTelemetry SDK), each attempt's own
//! `traceparent` at the server, and the metrics in Prometheus's text format.
//!
//! The upstream (the fault server, started here) answers 503, 503, then 200. The example
//! prints the finished spans as JSON lines (name, span id, parent id, kind, attributes), the
//! `traceparent` each attempt sent, then the Prometheus text.
//!
//! Run with `cargo run --example telemetry --features opentelemetry,metrics`.

use courier::CourierLayer;
use courier::retry::RetryLayer;
use courier_faultserver::{FaultServer, Step};
use http_body_util::Empty;
use metrics_exporter_prometheus::PrometheusBuilder;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::time::Duration;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

type Body = Empty<bytes::Bytes>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Traces: W3C trace context on the wire, spans kept in memory to print them.
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracked_inactivity(false)
        .with_tracer(provider.tracer("courier-example"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel))?;
    // Metrics: the Prometheus recorder, rendered at the end, with the histogram buckets the
    // semantic conventions advise for HTTP durations (in seconds).
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&[
            0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        ])?
        .install_recorder()?;
    courier::telemetry::describe_metrics();

    let server = FaultServer::start().await?;
    server.set_plan("flaky", vec![Step::status(503).times(2), Step::ok()]);
    let client = CourierLayer::new()
        .retry(RetryLayer::new().base(Duration::from_millis(50)))
        .hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/flaky")).body(Body::new())?;
    let resp = client.oneshot(req).await.map_err(courier::Error::from)?;
    let status = resp.status();
    drop(resp);

    provider.force_flush()?;
    println!("# spans (JSON lines, in the order they ended)");
    for span in exporter.get_finished_spans()? {
        let attributes: serde_json::Map<String, serde_json::Value> = span
            .attributes
            .iter()
            .filter(|kv| {
                let key = kv.key.as_str();
                !key.starts_with("code.") && !key.starts_with("thread.") && key != "target"
            })
            .map(|kv| {
                let value = match &kv.value {
                    opentelemetry::Value::I64(n) => serde_json::json!(n),
                    opentelemetry::Value::F64(n) => serde_json::json!(n),
                    opentelemetry::Value::Bool(b) => serde_json::json!(b),
                    other => serde_json::json!(other.as_str()),
                };
                (kv.key.to_string(), value)
            })
            .collect();
        let line = serde_json::json!({
            "name": span.name,
            "span_id": span.span_context.span_id().to_string(),
            "parent_id": span.parent_span_id.to_string(),
            "kind": format!("{:?}", span.span_kind).to_lowercase(),
            "attributes": attributes,
        });
        println!("{line}");
    }

    println!("\n# traceparent at the server, one per attempt");
    for hit in server.hits("flaky") {
        println!("{}", hit.header("traceparent").unwrap_or("-"));
    }

    println!("\n# metrics (Prometheus text)");
    print!("{}", prometheus.render());

    server.shutdown().await;
    if status != 200 {
        return Err(format!("expected 200 after two 503s, got {status}").into());
    }
    Ok(())
}
