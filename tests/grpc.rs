//! gRPC through the preset, against a real tonic server on loopback: retries only where safe
//! and only for retryable codes, pushback, the breaker, streams, `grpc-timeout`, and the
//! `tonic::Status` a caller sees. Real time: every wait is bounded.

use courier::CourierLayer;
use courier::core::extensions::{Attempts, Reason, WaitSource};
use courier::core::idempotency::RetrySafe;
use courier::grpc::GrpcService;
use courier::retry::RetryLayer;
use courier_testkit::grpc::greeter::greeter_client::GreeterClient;
use courier_testkit::grpc::greeter::{CountRequest, HelloRequest};
use courier_testkit::grpc::{Answer, ScriptedGreeter};
use std::future::Future;
use std::time::Duration;
use tokio::time::{Instant, timeout};
use tonic::Code;
use tonic::transport::Channel;

const SAY_HELLO: &str = "/courier.greeter.Greeter/SayHello";
const COUNT: &str = "/courier.greeter.Greeter/Count";

type Client = GreeterClient<GrpcService<Channel>>;

/// The gRPC preset with quick backoff; `SayHello` and `Count` are safe to repeat,
/// `SayHelloAgain` is not.
fn layer() -> CourierLayer {
    CourierLayer::grpc().retry(
        RetryLayer::new()
            .base(Duration::from_millis(10))
            .seed(1)
            .retry_safe_paths([SAY_HELLO, COUNT]),
    )
}

async fn client(server: &ScriptedGreeter, layer: &CourierLayer) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .expect("a valid url")
        .connect()
        .await
        .expect("the server accepts");
    GreeterClient::new(layer.channel(server.url().parse().unwrap(), channel))
}

fn hello() -> tonic::Request<HelloRequest> {
    tonic::Request::new(HelloRequest {
        name: "courier".into(),
    })
}

async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    timeout(Duration::from_secs(10), fut)
        .await
        .expect("within 10 s")
}

#[tokio::test]
async fn unavailable_twice_then_ok_on_a_safe_method_takes_three_attempts() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 2);
    let mut client = client(&server, &layer()).await;
    let resp = bounded(client.say_hello(hello()))
        .await
        .expect("OK on the third");
    assert_eq!(resp.get_ref().message, "hello, courier");
    assert_eq!(server.hits().len(), 3);
    let attempts = resp.extensions().get::<Attempts>().expect("the attempts");
    let outcomes: Vec<String> = attempts.iter().map(|r| r.outcome.to_string()).collect();
    assert_eq!(outcomes, ["grpc UNAVAILABLE", "grpc UNAVAILABLE", "200"]);
}

#[tokio::test]
async fn a_method_not_marked_safe_is_sent_once() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 2);
    let mut client = client(&server, &layer()).await;
    let status = bounded(client.say_hello_again(hello()))
        .await
        .expect_err("the server's UNAVAILABLE");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "scripted", "the server's own status");
    assert_eq!(server.hits().len(), 1);
}

#[tokio::test]
async fn a_call_marked_safe_is_repeated_on_any_method() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 1);
    let mut client = client(&server, &layer()).await;
    let mut req = hello();
    req.extensions_mut().insert(RetrySafe);
    bounded(client.say_hello_again(req))
        .await
        .expect("OK on the second");
    assert_eq!(server.hits().len(), 2);
}

#[tokio::test]
async fn a_pushback_is_waited_exactly() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::pushback(Code::Unavailable, "300"), 1);
    let mut client = client(&server, &layer()).await;
    let resp = bounded(client.say_hello(hello()))
        .await
        .expect("OK on the second");
    let first = &resp.extensions().get::<Attempts>().unwrap().records()[0];
    assert_eq!(first.wait, Duration::from_millis(300));
    assert_eq!(first.wait_source, Some(WaitSource::Pushback));
    let hits = server.hits();
    assert_eq!(hits.len(), 2);
    let gap = hits[1].at - hits[0].at;
    assert!(gap >= Duration::from_millis(300), "{gap:?}");
}

#[tokio::test]
async fn a_negative_or_unreadable_pushback_means_no_retry() {
    for pushback in ["-1", "soon"] {
        let server = ScriptedGreeter::start().await.unwrap();
        server.push(Answer::pushback(Code::Unavailable, pushback), 1);
        let mut client = client(&server, &layer()).await;
        let status = bounded(client.say_hello(hello())).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{pushback}");
        assert_eq!(server.hits().len(), 1, "{pushback}");
    }
    // What the record says, through a call that keeps its response.
    let svc = tower::service_fn(|_req: http::Request<tonic::body::Body>| async {
        let resp = http::Response::builder()
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc")
            .header("grpc-status", "14")
            .header("grpc-retry-pushback-ms", "-1")
            .body(tonic::body::Body::empty())
            .unwrap();
        Ok::<_, std::convert::Infallible>(resp)
    });
    let mut svc = layer().channel("http://h.example".parse().unwrap(), svc);
    let req = http::Request::post(format!("http://h.example{SAY_HELLO}"))
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::empty())
        .unwrap();
    let resp = tower::ServiceExt::ready(&mut svc).await.unwrap();
    let resp = tower::Service::call(resp, req).await.unwrap();
    let records = resp.extensions().get::<Attempts>().unwrap();
    assert_eq!(records.records()[0].reason, Reason::PushbackRefused);
}

#[tokio::test]
async fn a_final_code_is_not_retried_and_leaves_the_breaker_alone() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::InvalidArgument), 1);
    let layer = layer();
    let handle = layer.breaker_layer().unwrap().handle();
    let mut client = client(&server, &layer).await;
    let status = bounded(client.say_hello(hello())).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(server.hits().len(), 1);
    let host =
        courier::core::HostKey::from_request(&http::Request::get(server.url()).body(()).unwrap());
    let status = handle.status(&host).expect("the host's breaker");
    assert_eq!(status.consecutive_failures(), 0, "{status:?}");
}

#[tokio::test]
async fn five_unavailable_calls_open_the_breaker_and_the_next_fails_fast() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 5);
    let mut client = client(&server, &layer()).await;
    for _ in 0..5 {
        let status = bounded(client.say_hello_again(hello())).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
    }
    let start = Instant::now();
    let status = bounded(client.say_hello_again(hello())).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("circuit"), "{status:?}");
    assert!(start.elapsed() < Duration::from_millis(100));
    assert_eq!(server.hits().len(), 5, "the open circuit sent nothing");
}

#[tokio::test]
async fn a_stream_that_fails_after_its_first_message_is_not_retried() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.count_fails_after(1);
    let mut client = client(&server, &layer()).await;
    let mut stream = bounded(client.count(CountRequest { up_to: 3 }))
        .await
        .expect("the stream starts")
        .into_inner();
    let first = bounded(stream.message()).await.expect("a message");
    assert_eq!(first.map(|m| m.n), Some(1));
    let err = bounded(stream.message())
        .await
        .expect_err("the stream broke");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.hits().len(), 1, "committed once the headers came");
}

#[tokio::test]
async fn the_server_sees_the_time_left_as_grpc_timeout() {
    let server = ScriptedGreeter::start().await.unwrap();
    let layer = layer().deadline(Duration::from_secs(2));
    let mut client = client(&server, &layer).await;
    bounded(client.say_hello(hello())).await.unwrap();
    let sent = server.hits()[0]
        .grpc_timeout
        .clone()
        .expect("grpc-timeout sent");
    let left = courier::core::grpc::decode_timeout(&sent.parse().unwrap()).unwrap();
    assert!(
        left <= Duration::from_secs(2) && left > Duration::from_millis(1_900),
        "{sent}"
    );
}

#[tokio::test]
async fn a_server_slower_than_the_deadline_fails_with_deadline_exceeded_on_time() {
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::Slow(Duration::from_secs(3)), 1);
    let layer = layer().deadline(Duration::from_millis(300));
    let mut client = client(&server, &layer).await;
    let start = Instant::now();
    let status = bounded(client.say_hello(hello())).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(1),
        "{took:?}"
    );
}
