//! gRPC through the preset: a tonic server on 127.0.0.1 answers UNAVAILABLE, then UNAVAILABLE
//! with `grpc-retry-pushback-ms: 300`, then OK; the client, a tonic-generated one over the
//! preset, retries (the method is marked safe to repeat) and prints what each attempt met.
//!
//! `cargo run --example grpc --features grpc`

use courier::CourierLayer;
use courier::core::extensions::Attempts;
use courier::retry::RetryLayer;
use courier_testkit::grpc::greeter::HelloRequest;
use courier_testkit::grpc::greeter::greeter_client::GreeterClient;
use courier_testkit::grpc::{Answer, ScriptedGreeter};
use std::time::Duration;
use tonic::Code;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = ScriptedGreeter::start().await?;
    server.push(Answer::status(Code::Unavailable), 1);
    server.push(Answer::pushback(Code::Unavailable, "300"), 1);
    println!("greeter on {}", server.url());

    let endpoint = tonic::transport::Endpoint::from_shared(server.url())?;
    let layer = CourierLayer::grpc()
        .deadline(Duration::from_secs(10))
        .retry(RetryLayer::new().retry_safe_paths(["/courier.greeter.Greeter/SayHello"]));
    let mut client =
        GreeterClient::new(layer.channel(endpoint.uri().clone(), endpoint.connect_lazy()));

    let reply = client
        .say_hello(HelloRequest {
            name: "courier".into(),
        })
        .await?;
    println!("reply: {:?}", reply.get_ref().message);
    if let Some(attempts) = reply.extensions().get::<Attempts>() {
        for r in attempts.iter() {
            let wait = match r.wait_source {
                Some(source) => format!("then waited {} ms ({source})", r.wait.as_millis()),
                None => "done".to_owned(),
            };
            println!(
                "attempt {}: {} -> {} ({}), {wait}",
                r.attempt,
                r.outcome,
                r.decision.as_str(),
                r.reason
            );
        }
    }
    let hits = server.hits();
    println!(
        "the server saw {} calls, each with grpc-timeout {:?}",
        hits.len(),
        hits.iter()
            .map(|h| h.grpc_timeout.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    );
    Ok(())
}
