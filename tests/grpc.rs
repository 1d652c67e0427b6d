//! gRPC through the preset, against a real tonic server on loopback: retries only where safe
//! and only for retryable codes, pushback, the breaker, streams, `grpc-timeout`, and the
//! `tonic::Status` a caller sees. Real time: every wait is bounded.

use courier::CourierLayer;
use courier::core::extensions::{AttemptOutcome, Attempts, Reason, WaitSource};
use courier::core::idempotency::RetrySafe;
use courier::grpc::{GrpcSafe, GrpcService};
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

/// Holds this binary's tests one at a time. Three of them set a `tracing` subscriber for
/// their thread; a span callsite first reached by another test's thread at the moment one of
/// them sets it can be left disabled for it (`tracing`'s interest cache), and its spans lost.
/// One at a time, nothing races the subscriber. The tests are quick: the binary runs in about
/// half a second either way.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

#[tokio::test]
async fn unavailable_twice_then_ok_on_a_safe_method_takes_three_attempts() {
    let _serial = serial().await;
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
    // The refusals came with their headers; the OK in the reply's trailers, read by the
    // generated client before it returned.
    assert_eq!(
        outcomes,
        ["grpc UNAVAILABLE", "grpc UNAVAILABLE", "grpc OK"]
    );
    for r in attempts {
        let AttemptOutcome::Grpc(answer) = r.outcome else {
            panic!("not a gRPC outcome: {r:?}");
        };
        assert_eq!(
            answer.status,
            http::StatusCode::OK,
            "the HTTP status is kept"
        );
    }
    let lines: Vec<String> = attempts.iter().map(ToString::to_string).collect();
    assert!(
        lines[0].starts_with("grpc UNAVAILABLE -> retry in ")
            && lines[0].ends_with(" ms (backoff)"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "grpc OK -> stop (final_status)");
}

#[tokio::test]
async fn a_final_code_is_recorded_with_its_name() {
    let _serial = serial().await;
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::PermissionDenied), 1);
    let layer = layer();
    // A call that keeps its response: the records of a refusal the caller sees as a Status.
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut svc = layer.channel(server.url().parse().unwrap(), channel);
    let resp = bounded(tower::ServiceExt::oneshot(&mut svc, say_hello_request()))
        .await
        .expect("an answer");
    let records = resp.extensions().get::<Attempts>().unwrap();
    assert_eq!(records.count(), 1);
    assert_eq!(
        records.records()[0].to_string(),
        "grpc PERMISSION_DENIED -> stop (final_status)"
    );
}

/// `SayHello` with an empty `HelloRequest` as tonic frames it, for calls without the
/// generated client.
fn say_hello_request() -> http::Request<tonic::body::Body> {
    // One uncompressed message of zero bytes: the flag and the length.
    let frame = bytes::Bytes::from_static(&[0, 0, 0, 0, 0]);
    http::Request::post(format!("http://h.example{SAY_HELLO}"))
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(http_body_util::Full::new(frame)))
        .unwrap()
}

#[tokio::test]
async fn a_method_not_marked_safe_is_sent_once() {
    let _serial = serial().await;
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
    let _serial = serial().await;
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
    let _serial = serial().await;
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
    let _serial = serial().await;
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
    let _serial = serial().await;
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
    let _serial = serial().await;
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
    let _serial = serial().await;
    let server = ScriptedGreeter::start().await.unwrap();
    server.count_fails_after(1);
    let mut client = client(&server, &layer()).await;
    let resp = bounded(client.count(CountRequest { up_to: 3 }))
        .await
        .expect("the stream starts");
    let attempts = resp.extensions().get::<Attempts>().unwrap().clone();
    assert_eq!(
        attempts.records()[0].to_string(),
        "200 -> stop (final_status)",
        "no status before the trailers"
    );
    let mut stream = resp.into_inner();
    let first = bounded(stream.message()).await.expect("a message");
    assert_eq!(first.map(|m| m.n), Some(1));
    let err = bounded(stream.message())
        .await
        .expect_err("the stream broke");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(server.hits().len(), 1, "committed once the headers came");
    assert_eq!(
        attempts.records()[0].to_string(),
        "grpc UNAVAILABLE -> stop (final_status)",
        "the trailers' status, in the records the caller already held"
    );
}

#[tokio::test]
async fn the_server_sees_the_time_left_as_grpc_timeout() {
    let _serial = serial().await;
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
    let _serial = serial().await;
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

// === methods marked safe by their generated names ===

/// The gRPC preset with quick backoff and `SayHello` marked safe by the generated server's
/// name for its service.
fn layer_marking(safe: GrpcSafe) -> CourierLayer {
    CourierLayer::grpc().retry(
        RetryLayer::new()
            .base(Duration::from_millis(10))
            .seed(1)
            .retry_safe_paths(safe),
    )
}

#[tokio::test]
async fn a_method_marked_by_its_generated_names_is_retried_and_its_sibling_is_not() {
    let _serial = serial().await;
    use courier_testkit::grpc::greeter::greeter_server::GreeterServer;
    use tonic::server::NamedService;
    let safe = GrpcSafe::new()
        .methods(<GreeterServer<()> as NamedService>::NAME, ["SayHello"])
        .unwrap();
    assert_eq!(safe.paths(), [SAY_HELLO]);

    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 1);
    let mut greeter = client(&server, &layer_marking(safe.clone())).await;
    bounded(greeter.say_hello(hello()))
        .await
        .expect("OK on the second");
    assert_eq!(server.hits().len(), 2, "the safe method, repeated");

    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 1);
    let mut greeter = client(&server, &layer_marking(safe)).await;
    let status = bounded(greeter.say_hello_again(hello())).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.hits().len(), 1, "its sibling, sent once");
}

#[tokio::test]
async fn a_whole_service_marked_safe_repeats_each_of_its_methods() {
    let _serial = serial().await;
    use courier_testkit::grpc::greeter::greeter_server::SERVICE_NAME;
    let safe = GrpcSafe::new().service(SERVICE_NAME).unwrap();
    assert_eq!(safe.paths(), ["/courier.greeter.Greeter/"]);
    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 1);
    let mut client = client(&server, &layer_marking(safe)).await;
    bounded(client.say_hello_again(hello()))
        .await
        .expect("OK on the second");
    assert_eq!(server.hits().len(), 2);
}

#[test]
fn a_name_that_cannot_be_in_a_method_path_is_refused() {
    let _serial = SERIAL.blocking_lock();
    for (service, method) in [
        (
            "courier.greeter.Greeter",
            "/courier.greeter.Greeter/SayHello",
        ),
        ("courier.greeter.Greeter", "Say Hello"),
        ("courier.greeter.Greeter", ""),
        ("/courier.greeter.Greeter", "SayHello"),
        ("courier.greeter.Greeter/", "SayHello"),
        ("courier..Greeter", "SayHello"),
        ("", "SayHello"),
    ] {
        let err = GrpcSafe::new()
            .methods(service, [method])
            .expect_err("refused");
        assert!(
            err.to_string().starts_with("invalid setting: a gRPC"),
            "{service:?} {method:?}: {err}"
        );
    }
    let none: [&str; 0] = [];
    assert!(
        GrpcSafe::new()
            .methods("courier.greeter.Greeter", none)
            .is_err()
    );
    assert!(GrpcSafe::new().service("courier.greeter.Greeter/").is_err());
    // A service without a package is a name too.
    let safe = GrpcSafe::new().methods("Greeter", ["SayHello"]).unwrap();
    assert_eq!(safe.paths(), ["/Greeter/SayHello"]);
}

// === spans ===

#[tokio::test]
async fn attempt_spans_carry_the_grpc_code_and_its_name_as_the_error() {
    let _serial = serial().await;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry::{KeyValue, Value};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use tracing_subscriber::layer::SubscriberExt;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("courier-grpc-tests")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = ScriptedGreeter::start().await.unwrap();
    server.push(Answer::status(Code::Unavailable), 1);
    server.push(Answer::status(Code::InvalidArgument), 1);
    let mut client = client(&server, &layer()).await;
    let status = bounded(client.say_hello(hello())).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    bounded(client.say_hello(hello())).await.expect("OK");

    provider.force_flush().unwrap();
    let spans: Vec<SpanData> = exporter.get_finished_spans().unwrap();
    let attr = |span: &SpanData, key: &str| -> Option<Value> {
        span.attributes
            .iter()
            .find(|kv: &&KeyValue| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    let attempts: Vec<&SpanData> = spans
        .iter()
        .filter(|s| attr(s, "courier.attempt").is_some())
        .collect();
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    let seen: Vec<_> = attempts
        .iter()
        .map(|s| {
            (
                attr(s, "rpc.grpc.status_code"),
                attr(s, "error.type").map(|v| v.as_str().into_owned()),
                attr(s, "http.response.status_code"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                Some(Value::I64(14)),
                Some("UNAVAILABLE".to_owned()),
                Some(Value::I64(200))
            ),
            (
                Some(Value::I64(3)),
                Some("INVALID_ARGUMENT".to_owned()),
                Some(Value::I64(200))
            ),
            // An answer that streams its reply has its status in the trailers: the attempt
            // span stays open until the generated client has read them.
            (Some(Value::I64(0)), None, Some(Value::I64(200))),
        ]
    );
    for s in &attempts[..2] {
        assert_eq!(attr(s, "rpc.system"), Some(Value::from("grpc")));
        assert!(matches!(
            s.status,
            opentelemetry::trace::Status::Error { .. }
        ));
    }
    // The call span of the refused call says the same.
    let calls: Vec<&SpanData> = spans.iter().filter(|s| s.name == "courier.call").collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(attr(calls[0], "rpc.grpc.status_code"), Some(Value::I64(3)));
    // And the call answered OK in its trailers, OK.
    assert_eq!(attr(calls[1], "rpc.system"), Some(Value::from("grpc")));
    assert_eq!(attr(calls[1], "rpc.grpc.status_code"), Some(Value::I64(0)));
    assert_eq!(attr(calls[1], "error.type"), None);
    assert_eq!(attr(attempts[2], "rpc.system"), Some(Value::from("grpc")));
    assert!(matches!(
        attempts[2].status,
        opentelemetry::trace::Status::Unset
    ));
}

/// A stand-in channel: every call is answered with one empty message, then trailers with
/// `grpc-status: 5` (NOT_FOUND).
fn not_found_in_the_trailers() -> impl tower::Service<
    http::Request<tonic::body::Body>,
    Response = http::Response<
        impl http_body::Body<Data = bytes::Bytes, Error = std::convert::Infallible>,
    >,
    Error = std::convert::Infallible,
    Future = impl Future + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_req: http::Request<tonic::body::Body>| async {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("5"));
        trailers.insert(
            "grpc-message",
            http::HeaderValue::from_static("no such greeting"),
        );
        let frames = [
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(bytes::Bytes::from_static(
                &[0, 0, 0, 0, 0],
            ))),
            Ok(http_body::Frame::trailers(trailers)),
        ];
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
        Ok(http::Response::builder()
            .header("content-type", "application/grpc")
            .body(body)
            .unwrap())
    })
}

#[tokio::test]
async fn a_code_in_the_trailers_goes_on_the_spans_which_close_then() {
    let _serial = serial().await;
    use http_body_util::BodyExt;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry::{KeyValue, Value};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use tracing_subscriber::layer::SubscriberExt;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("courier-grpc-tests")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let attr = |span: &SpanData, key: &str| -> Option<Value> {
        span.attributes
            .iter()
            .find(|kv: &&KeyValue| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    let finished = |name: &str| -> Vec<SpanData> {
        provider.force_flush().unwrap();
        exporter
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .filter(|s| {
                s.name == name || (name == "attempt" && attr(s, "courier.attempt").is_some())
            })
            .collect()
    };

    let mut svc = layer().channel(
        "http://h.example".parse().unwrap(),
        not_found_in_the_trailers(),
    );
    let resp = bounded(tower::ServiceExt::oneshot(&mut svc, say_hello_request()))
        .await
        .expect("an answer");
    // The headers came without a status: the spans wait for the trailers.
    assert!(finished("attempt").is_empty());
    assert!(finished("courier.call").is_empty());
    let body = bounded(resp.into_body().collect()).await.expect("the body");
    let trailers = body.trailers().expect("trailers").clone();
    assert_eq!(trailers["grpc-status"], "5");

    let attempts = finished("attempt");
    assert_eq!(attempts.len(), 1, "not retried: {attempts:#?}");
    let calls = finished("courier.call");
    assert_eq!(calls.len(), 1);
    for span in [&attempts[0], &calls[0]] {
        assert_eq!(attr(span, "rpc.system"), Some(Value::from("grpc")));
        assert_eq!(attr(span, "rpc.grpc.status_code"), Some(Value::I64(5)));
        assert_eq!(attr(span, "error.type"), Some(Value::from("NOT_FOUND")));
        assert_eq!(
            attr(span, "http.response.status_code"),
            Some(Value::I64(200))
        );
        assert!(matches!(
            span.status,
            opentelemetry::trace::Status::Error { .. }
        ));
    }
    assert_eq!(
        attr(&attempts[0], "courier.retry.reason"),
        Some(Value::from("final_status"))
    );

    // A body dropped before its trailers closes the spans without a code.
    exporter.reset();
    let resp = bounded(tower::ServiceExt::oneshot(&mut svc, say_hello_request()))
        .await
        .expect("an answer");
    assert!(finished("attempt").is_empty());
    drop(resp);
    let attempts = finished("attempt");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attr(&attempts[0], "rpc.grpc.status_code"), None);
    assert_eq!(attr(&attempts[0], "error.type"), None);
    assert_eq!(finished("courier.call").len(), 1);
}

#[tokio::test]
async fn without_the_grpc_channel_the_spans_close_with_the_answer() {
    let _serial = serial().await;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("courier-grpc-tests")));
    let _guard = tracing::subscriber::set_default(subscriber);

    // The retry layer alone, over the stand-in: nobody said it reads the trailers.
    let mut svc = tower::ServiceBuilder::new()
        .layer(RetryLayer::new().retry_safe_paths([SAY_HELLO]))
        .map_request(
            |req: http::Request<courier::retry::ReplayBody<tonic::body::Body>>| {
                req.map(tonic::body::Body::new)
            },
        )
        .service(not_found_in_the_trailers());
    let resp = bounded(tower::ServiceExt::oneshot(
        &mut svc,
        say_hello_request().map(courier::retry::ReplayBody::new),
    ))
    .await
    .expect("an answer");
    assert!(
        resp.extensions()
            .get::<courier::retry::future::GrpcStatusSpans>()
            .is_none()
    );
    provider.force_flush().unwrap();
    let names: Vec<_> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names.len(), 2, "the attempt's and the call's: {names:?}");
    drop(resp);
}

/// gRPC's hedging policy on the gRPC preset: a slow safe call is overtaken by its hedge, an
/// unsafe one is never hedged, and a non-fatal code sends the next hedge at once.
#[tokio::test]
async fn a_hedging_policy_hedges_safe_methods_only_and_a_non_fatal_code_hedges_at_once() {
    use courier::retry::RetryBudget;
    use courier::retry::hedge::{HedgeLayer, Hedged};
    let _serial = serial().await;
    let server = ScriptedGreeter::start().await.unwrap();
    let hedge = HedgeLayer::new()
        .after(Duration::from_millis(100))
        .attempts(3)
        .non_fatal_grpc_codes([courier::core::grpc::GrpcCode::UNAVAILABLE])
        .budget(RetryBudget::new().floor(10));
    let layer = layer().hedge(hedge);
    let mut client = client(&server, &layer).await;

    server.push(Answer::Slow(Duration::from_secs(5)), 1);
    let started = Instant::now();
    let resp = bounded(client.say_hello(hello())).await.expect("OK");
    assert!(started.elapsed() < Duration::from_secs(4));
    let hedged = resp.extensions().get::<Hedged>().expect("hedged").clone();
    assert_eq!(hedged.winner().unwrap().attempt, 2, "{hedged}");
    assert_eq!(server.hits().len(), 2);

    // Not marked safe: one request, however slow.
    server.push(Answer::Slow(Duration::from_millis(300)), 1);
    let resp = bounded(client.say_hello_again(hello())).await.expect("OK");
    assert!(resp.extensions().get::<Hedged>().is_none());
    assert_eq!(server.hits().len(), 3);

    // UNAVAILABLE is non-fatal: the next hedge goes at once, and its OK is the call's.
    server.push(Answer::status(Code::Unavailable), 1);
    let started = Instant::now();
    let resp = bounded(client.say_hello(hello())).await.expect("OK");
    assert!(started.elapsed() < Duration::from_secs(1));
    let hedged = resp.extensions().get::<Hedged>().expect("hedged").clone();
    let outcomes: Vec<_> = hedged
        .requests()
        .iter()
        .map(|r| r.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["non_fatal", "won"], "{hedged}");
    let attempts = resp.extensions().get::<Attempts>().expect("the attempts");
    assert_eq!(attempts.count(), 1, "one attempt of retry's, hedged");
    assert_eq!(server.hits().len(), 5);
}
