//! The spans, trace context and metrics of calls through the preset, against the fault server:
//! spans read back from the OpenTelemetry SDK's in-memory exporter, metrics from `metrics-util`'s
//! debugging recorder (installed for the test's thread only).

mod common;

use courier::CourierLayer;
use courier::breaker::CircuitBreakerLayer;
use courier::cache::EtagCacheLayer;
use courier::ratelimit::{Mode, Rate, TokenBucketRateLimitLayer};
use courier::retry::{RetryBudget, RetryLayer};
use courier_faultserver::{FaultServer, Step};
use http_body_util::Empty;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::num::NonZeroU32;
use std::time::Duration;
use tower::ServiceExt;
use tracing_subscriber::layer::SubscriberExt;

type Body = Empty<bytes::Bytes>;

/// A tracing subscriber exporting to an in-memory exporter, for this thread only.
struct Traced {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

fn traced() -> Traced {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("courier-tests")));
    let guard = tracing::subscriber::set_default(subscriber);
    Traced {
        exporter,
        provider,
        _guard: guard,
    }
}

impl Traced {
    /// The finished spans of courier, in the order they ended.
    fn spans(&self) -> Vec<SpanData> {
        self.provider
            .force_flush()
            .expect("the in-memory exporter flushes");
        self.exporter
            .get_finished_spans()
            .expect("the in-memory exporter lists its spans")
            .into_iter()
            .filter(|s| s.instrumentation_scope.name() == "courier-tests")
            .filter(|s| attr(s, "courier.attempt").is_some() || s.name == "courier.call")
            .collect()
    }
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv: &&KeyValue| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn int(span: &SpanData, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Value::I64(n) => Some(*n),
        other => panic!("{key} is {other:?}, not an integer"),
    }
}

fn text(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

/// Retries that wait a millisecond, not half a second.
fn quick_retry() -> RetryLayer {
    RetryLayer::new()
        .base(Duration::from_millis(1))
        .cap(Duration::from_millis(2))
}

#[tokio::test]
async fn a_call_answered_503_503_200_has_a_call_span_and_three_attempt_spans() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    server.set_plan("flaky", vec![Step::status(503).times(2), Step::ok()]);
    let client = CourierLayer::new().retry(quick_retry()).hyper::<Body>();

    let url = format!("{}?token=secret", server.url_for("/s/flaky"));
    let req = http::Request::get(url).body(Body::new()).unwrap();
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(res.status(), 200);
    drop(res);

    let spans = traced.spans();
    let calls: Vec<_> = spans.iter().filter(|s| s.name == "courier.call").collect();
    assert_eq!(calls.len(), 1, "one call span: {spans:#?}");
    let call = calls[0];
    let mut attempts: Vec<_> = spans.iter().filter(|s| s.name != "courier.call").collect();
    attempts.sort_by_key(|s| int(s, "courier.attempt"));
    assert_eq!(attempts.len(), 3);

    for a in &attempts {
        assert_eq!(a.name, "GET");
        assert_eq!(a.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(a.parent_span_id, call.span_context.span_id());
        assert_eq!(
            a.span_context.trace_id(),
            call.span_context.trace_id(),
            "one trace"
        );
        assert_eq!(text(a, "http.request.method").as_deref(), Some("GET"));
        assert_eq!(text(a, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(int(a, "server.port"), Some(i64::from(server.addr().port())));
        // The query is left out unless asked.
        assert_eq!(
            text(a, "url.full"),
            Some(server.url_for("/s/flaky")),
            "no query in url.full"
        );
    }
    let resends: Vec<_> = attempts
        .iter()
        .map(|a| int(a, "http.request.resend_count"))
        .collect();
    assert_eq!(resends, [None, Some(1), Some(2)]);
    let statuses: Vec<_> = attempts
        .iter()
        .map(|a| int(a, "http.response.status_code"))
        .collect();
    assert_eq!(statuses, [Some(503), Some(503), Some(200)]);
    let errors: Vec<_> = attempts.iter().map(|a| text(a, "error.type")).collect();
    assert_eq!(errors, [Some("503".into()), Some("503".into()), None]);
    assert!(matches!(
        attempts[0].status,
        opentelemetry::trace::Status::Error { .. }
    ));
    assert_eq!(attempts[2].status, opentelemetry::trace::Status::Unset);
    let decisions: Vec<_> = attempts
        .iter()
        .map(|a| text(a, "courier.retry.decision"))
        .collect();
    assert_eq!(
        decisions,
        [
            Some("retry".into()),
            Some("retry".into()),
            Some("stop".into())
        ]
    );
    assert_eq!(
        text(attempts[0], "courier.retry.wait_source").as_deref(),
        Some("backoff")
    );
    assert!(int(attempts[0], "courier.retry.wait_ms").is_some());
    assert_eq!(
        text(attempts[2], "courier.retry.reason").as_deref(),
        Some("final_status")
    );
    // The waits are the gaps: no attempt starts before the one before it ended.
    assert!(attempts[1].start_time >= attempts[0].end_time);
    assert!(attempts[2].start_time >= attempts[1].end_time);
    // The call span has the call's answer and its attempts.
    assert_eq!(int(call, "courier.attempts"), Some(3));
    assert_eq!(int(call, "http.response.status_code"), Some(200));

    // Each attempt sent the trace context of its own span.
    let hits = server.hits("flaky");
    assert_eq!(hits.len(), 3);
    let parents: Vec<_> = hits
        .iter()
        .map(|h| {
            h.header("traceparent")
                .expect("each attempt sends a traceparent")
        })
        .collect();
    for (sent, attempt) in parents.iter().zip(&attempts) {
        let fields: Vec<_> = sent.split('-').collect();
        assert_eq!(fields.len(), 4, "{sent}");
        assert_eq!(fields[1], attempt.span_context.trace_id().to_string());
        assert_eq!(fields[2], attempt.span_context.span_id().to_string());
    }
    assert_ne!(parents[0], parents[1]);
    assert_ne!(parents[1], parents[2]);
    assert_ne!(parents[0], parents[2]);
    server.shutdown().await;
}

#[tokio::test]
async fn the_query_shows_in_url_full_only_when_asked() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    let client = CourierLayer::new()
        .retry(RetryLayer::new().record_url_query(true))
        .hyper::<Body>();
    let url = format!("{}?page=2", server.url_for("/s/q"));
    let req = http::Request::get(url.clone()).body(Body::new()).unwrap();
    client.oneshot(req).await.unwrap();
    let spans = traced.spans();
    assert_eq!(spans.len(), 2);
    let attempt = spans.iter().find(|s| s.name == "GET").unwrap();
    assert_eq!(text(attempt, "url.full"), Some(url.clone()));
    // The call span is the cache's, which never shows the query.
    let call = spans.iter().find(|s| s.name == "courier.call").unwrap();
    assert_eq!(text(call, "url.full"), Some(server.url_for("/s/q")));
    server.shutdown().await;
}

#[tokio::test]
async fn a_fresh_hit_is_a_call_span_without_attempts_and_a_revalidation_says_so() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "etag",
        vec![
            Step::ok()
                .header("etag", "\"v1\"")
                .header("cache-control", "no-cache"),
            Step::status(304).header("etag", "\"v1\""),
        ],
    );
    let client = CourierLayer::new().hyper::<Body>();
    let get = || {
        http::Request::get(server.url_for("/s/etag"))
            .body(Body::new())
            .unwrap()
    };
    assert_eq!(client.clone().oneshot(get()).await.unwrap().status(), 200);
    let first = traced.spans();
    let call = first.iter().find(|s| s.name == "courier.call").unwrap();
    assert_eq!(text(call, "courier.cache.status").as_deref(), Some("miss"));
    assert_eq!(int(call, "courier.attempts"), Some(1));
    assert_eq!(int(call, "http.response.status_code"), Some(200));
    let attempt = first.iter().find(|s| s.name == "GET").unwrap();
    assert_eq!(attempt.parent_span_id, call.span_context.span_id());
    assert_eq!(first.len(), 2, "{first:#?}");

    // Stored, but to be revalidated before use: the next call revalidates, and the server's
    // 304 is a 200 to the caller.
    assert_eq!(client.clone().oneshot(get()).await.unwrap().status(), 200);
    let second = traced.spans();
    let second = &second[first.len()..];
    assert_eq!(second.len(), 2, "{second:#?}");
    let call = second.iter().find(|s| s.name == "courier.call").unwrap();
    let attempt = second.iter().find(|s| s.name == "GET").unwrap();
    assert_eq!(
        text(call, "courier.cache.status").as_deref(),
        Some("revalidated")
    );
    assert_eq!(int(call, "http.response.status_code"), Some(200));
    assert_eq!(int(attempt, "http.response.status_code"), Some(304));
    assert_eq!(attempt.parent_span_id, call.span_context.span_id());
    server.shutdown().await;
}

#[tokio::test]
async fn a_fresh_hit_has_no_attempt_span() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "fresh",
        vec![Step::ok().header("cache-control", "max-age=60")],
    );
    let client = CourierLayer::new().hyper::<Body>();
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/fresh"))
            .body(Body::new())
            .unwrap();
        assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);
    }
    assert_eq!(server.hits("fresh").len(), 1);
    let spans = traced.spans();
    let calls: Vec<_> = spans.iter().filter(|s| s.name == "courier.call").collect();
    assert_eq!(calls.len(), 2, "{spans:#?}");
    assert_eq!(spans.len(), 3, "one attempt in all: {spans:#?}");
    let hit = calls[1];
    assert_eq!(text(hit, "courier.cache.status").as_deref(), Some("hit"));
    assert_eq!(int(hit, "http.response.status_code"), Some(200));
    assert_eq!(int(hit, "courier.attempts"), None);
    assert!(
        spans
            .iter()
            .all(|s| s.parent_span_id != hit.span_context.span_id())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_call_refused_by_an_open_circuit_reaches_no_server_and_says_why() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    server.set_plan("down", vec![Step::status(503)]);
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .circuit_breaker(
            CircuitBreakerLayer::new().consecutive_failures(NonZeroU32::new(1).unwrap()),
        )
        .hyper::<Body>();
    let url = server.url_for("/s/down");
    let first = http::Request::get(url.clone()).body(Body::new()).unwrap();
    assert_eq!(client.clone().oneshot(first).await.unwrap().status(), 503);
    let before = traced.spans().len();

    let second = http::Request::get(url).body(Body::new()).unwrap();
    let err = client.oneshot(second).await.unwrap_err();
    assert!(courier::core::is_caused_by::<courier::core::CircuitOpen>(
        &*err
    ));
    assert_eq!(
        server.hits("down").len(),
        1,
        "the refused call reached no server"
    );

    let spans = traced.spans();
    let refused: Vec<_> = spans[before..].iter().collect();
    assert_eq!(
        refused.len(),
        2,
        "a call span and its one attempt: {refused:#?}"
    );
    let attempt = refused.iter().find(|s| s.name == "GET").unwrap();
    let call = refused.iter().find(|s| s.name == "courier.call").unwrap();
    assert_eq!(text(attempt, "error.type").as_deref(), Some("circuit_open"));
    assert_eq!(
        text(attempt, "courier.breaker.state").as_deref(),
        Some("open")
    );
    assert_eq!(int(attempt, "http.response.status_code"), None);
    assert_eq!(text(call, "error.type").as_deref(), Some("circuit_open"));
    assert!(matches!(
        call.status,
        opentelemetry::trace::Status::Error { .. }
    ));
    server.shutdown().await;
}

/// A call the outer deadline ends while an attempt waits for its answer (no attempt timeout
/// below to end it first) ends its call span and that attempt's span saying why: with the
/// cache's call span (a GET through the preset) and with retry's own (the cache off). A call
/// its caller drops says it was canceled.
#[tokio::test]
async fn a_call_ended_from_outside_says_why_on_its_spans() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    for cache in [true, false] {
        common::plan_503_then_late(&server, "late");
        let layer = CourierLayer::new()
            .retry(quick_retry())
            .attempt_timeout(None)
            .deadline(Duration::from_millis(300));
        let layer = if cache { layer } else { layer.cache(None) };
        let client = layer.hyper::<Body>();
        let before = traced.spans().len();
        let req = http::Request::get(server.url_for("/s/late"))
            .body(Body::new())
            .unwrap();
        let err = client.oneshot(req).await.unwrap_err();
        assert!(courier::core::is_caused_by::<courier::core::DeadlineExceeded>(&*err));

        let spans = traced.spans();
        let ended: Vec<_> = spans[before..].iter().collect();
        assert_eq!(
            ended.len(),
            3,
            "cache {cache}: a call and two attempts: {ended:#?}"
        );
        let call = ended.iter().find(|s| s.name == "courier.call").unwrap();
        assert_eq!(
            text(call, "error.type").as_deref(),
            Some("deadline_exceeded"),
            "cache {cache}"
        );
        assert!(
            matches!(call.status, opentelemetry::trace::Status::Error { .. }),
            "cache {cache}"
        );
        assert_eq!(int(call, "courier.attempts"), Some(2), "cache {cache}");
        assert_eq!(
            text(call, "courier.retry.reason").as_deref(),
            Some("deadline_passed"),
            "cache {cache}"
        );
        let cut = ended
            .iter()
            .find(|s| int(s, "courier.attempt") == Some(2))
            .unwrap();
        assert_eq!(
            text(cut, "error.type").as_deref(),
            Some("deadline_exceeded"),
            "cache {cache}"
        );
        assert_eq!(text(cut, "courier.retry.decision").as_deref(), Some("stop"));
        assert_eq!(
            text(cut, "courier.retry.reason").as_deref(),
            Some("deadline_passed")
        );
    }

    server.clear("late");
    server.set_plan("late", vec![Step::ok().delay(Duration::from_secs(3))]);
    let client = CourierLayer::new().hyper::<Body>();
    let before = traced.spans().len();
    let req = http::Request::get(server.url_for("/s/late"))
        .body(Body::new())
        .unwrap();
    let dropped = tokio::time::timeout(Duration::from_millis(200), client.oneshot(req)).await;
    assert!(dropped.is_err(), "the caller gave up first");
    let spans = traced.spans();
    let call = spans[before..]
        .iter()
        .find(|s| s.name == "courier.call")
        .unwrap();
    assert_eq!(text(call, "error.type").as_deref(), Some("canceled"));
    assert_eq!(
        text(call, "courier.retry.reason").as_deref(),
        Some("canceled")
    );
    server.shutdown().await;
}

/// A call dropped by its caller while it waits in the cache on another caller's revalidation
/// (no layer below is at work for it) ends its call span saying so.
#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_the_cache_waits_on_another_revalidation_says_so() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let traced = traced();
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let upstream = {
        let calls = calls.clone();
        tower::service_fn(move |_req: http::Request<Body>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let stored = n == 0;
                if !stored {
                    // Every revalidation hangs.
                    tokio::time::sleep(Duration::from_secs(20)).await;
                }
                http::Response::builder()
                    .status(if stored { 200 } else { 304 })
                    .header("etag", "\"v1\"")
                    .header("cache-control", "no-cache")
                    .body(http_body_util::Full::new(bytes::Bytes::from_static(
                        b"hello",
                    )))
            }
        })
    };
    let client = CourierLayer::new().service(upstream);
    let get = || {
        http::Request::get("http://api.example/doc")
            .body(Body::new())
            .unwrap()
    };
    let first = client.clone().oneshot(get()).await.unwrap();
    // Stored once its body is read to the end.
    http_body_util::BodyExt::collect(first.into_body())
        .await
        .unwrap();
    let leader = tokio::spawn(client.clone().oneshot(get()));
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the leader is upstream");
    let before = traced.spans().len();
    let waited = tokio::time::timeout(Duration::from_secs(1), client.oneshot(get())).await;
    assert!(
        waited.is_err(),
        "the caller gave up while its call followed the leader"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the follower sent nothing");
    let spans = traced.spans();
    let ended: Vec<_> = spans[before..].iter().collect();
    assert_eq!(ended.len(), 1, "a call span and no attempt: {ended:#?}");
    assert_eq!(ended[0].name, "courier.call");
    assert_eq!(text(ended[0], "error.type").as_deref(), Some("canceled"));
    assert!(matches!(
        ended[0].status,
        opentelemetry::trace::Status::Error { .. }
    ));
    leader.abort();
}

#[tokio::test]
async fn a_paced_attempt_says_how_long_the_rate_limiter_held_it() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    let every = Rate::every(Duration::from_millis(50)).unwrap();
    let client = CourierLayer::new()
        .rate_limit(TokenBucketRateLimitLayer::new(
            every,
            NonZeroU32::new(1).unwrap(),
        ))
        .hyper::<Body>();
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/paced"))
            .body(Body::new())
            .unwrap();
        assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);
    }
    let spans = traced.spans();
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "GET").collect();
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    assert_eq!(
        int(attempts[0], "courier.ratelimit.wait_ms"),
        None,
        "a full bucket"
    );
    let waited = int(attempts[1], "courier.ratelimit.wait_ms").expect("the second one waited");
    assert!((1..=50).contains(&waited), "{waited}");
    server.shutdown().await;
}

/// The concurrency limit's wait and refusal are on the attempt spans: with one permit and a
/// queue of one, of three calls at once to a host that holds its answers, the second waits for
/// the first's permit and says how long, and the third is refused and says so.
#[tokio::test]
async fn an_attempt_held_or_refused_by_the_concurrency_limit_says_so() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "held",
        vec![Step::ok().delay(Duration::from_millis(300)); 3],
    );
    let limit = courier::concurrency::ConcurrencyLimitLayer::new()
        .fixed(std::num::NonZeroUsize::MIN)
        .max_queue(1);
    let client = CourierLayer::new()
        .cache(None)
        .concurrency_limit(limit)
        .hyper::<Body>();
    let get = || {
        http::Request::get(server.url_for("/s/held"))
            .body(Body::new())
            .unwrap()
    };
    let calls = (0..3).map(|_| client.clone().oneshot(get()));
    let results = futures_util::future::join_all(calls).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    let spans = traced.spans();
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "GET").collect();
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    let refused: Vec<_> = attempts
        .iter()
        .filter(|a| {
            matches!(
                attr(a, "courier.concurrency.refused"),
                Some(Value::Bool(true))
            )
        })
        .collect();
    assert_eq!(refused.len(), 1, "{attempts:#?}");
    assert_eq!(
        text(refused[0], "error.type").as_deref(),
        Some("concurrency_limited")
    );
    let waited: Vec<i64> = attempts
        .iter()
        .filter_map(|a| int(a, "courier.concurrency.wait_ms"))
        .collect();
    assert_eq!(waited.len(), 1, "one call waited: {attempts:#?}");
    assert!((100..=1000).contains(&waited[0]), "{waited:?}");
    assert_eq!(
        server.hits("held").len(),
        2,
        "the refused call sent nothing"
    );
    server.shutdown().await;
}

/// Adaptive pacing's wait is named as pacing's: a host that refused half of ten answers with a
/// bare 503 is paced, and the paced attempt's span says how long it waited, under
/// `courier.pacing.wait_ms` (never the rate limiter's field: no rate limiter is set).
#[tokio::test]
async fn an_attempt_held_by_adaptive_pacing_says_how_long() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    // Five answered, five refused: paced at what it accepted, 5 per second.
    server.set_plan(
        "busy",
        vec![Step::ok().times(5), Step::status(503).times(5)],
    );
    let client = CourierLayer::new()
        .retry(courier::retry::RetryLayer::new().attempts(1))
        .hyper::<Body>();
    let get = || {
        http::Request::get(server.url_for("/s/busy"))
            .body(Body::new())
            .unwrap()
    };
    let calls = (0..10).map(|_| client.clone().oneshot(get()));
    futures_util::future::join_all(calls).await;
    for _ in 0..2 {
        assert_eq!(client.clone().oneshot(get()).await.unwrap().status(), 200);
    }
    let spans = traced.spans();
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "GET").collect();
    assert_eq!(attempts.len(), 12, "{spans:#?}");
    let waited = int(attempts[11], "courier.pacing.wait_ms").expect("the last one waited");
    // Paced at about 5 per second (five accepted over the second and its part the rates cover).
    assert!((120..=300).contains(&waited), "{waited}");
    assert!(
        attempts
            .iter()
            .all(|a| int(a, "courier.ratelimit.wait_ms").is_none()),
        "no rate limiter wait"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_subscriber_no_trace_context_is_sent() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let server = FaultServer::start().await.unwrap();
    let client = CourierLayer::new().hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/quiet"))
        .body(Body::new())
        .unwrap();
    assert_eq!(client.oneshot(req).await.unwrap().status(), 200);
    let hits = server.hits("quiet");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].header("traceparent"), None);
    server.shutdown().await;
}

#[tokio::test]
async fn a_trace_without_vendor_state_sends_no_empty_tracestate() {
    let traced = traced();
    let server = FaultServer::start().await.unwrap();
    let client = CourierLayer::new().hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/state"))
        .body(Body::new())
        .unwrap();
    assert_eq!(client.oneshot(req).await.unwrap().status(), 200);
    let hits = server.hits("state");
    assert_eq!(hits.len(), 1);
    let parent = hits[0].header("traceparent").expect("a traceparent");
    let attempt = traced
        .spans()
        .into_iter()
        .find(|s| s.name != "courier.call")
        .expect("the attempt span");
    assert_eq!(
        parent.split('-').nth(2),
        Some(attempt.span_context.span_id().to_string().as_str())
    );
    assert_eq!(hits[0].header("tracestate"), None, "no empty tracestate");
    server.shutdown().await;
}

// === metrics ===

/// Every metric recorded so far (a snapshot drains the histograms: take one per check).
type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn snapshot(snapshotter: &Snapshotter) -> Snapshot {
    snapshotter.snapshot().into_vec()
}

/// What a snapshot holds for one metric name and label set.
fn value<'a>(snap: &'a Snapshot, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    snap.iter()
        .find(|(key, _, _, _)| {
            let key = key.key();
            key.name() == name
                && labels.len() == key.labels().count()
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(_, _, _, value)| value)
}

fn counter(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snap, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn histogram(snap: &Snapshot, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    match value(snap, name, labels) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_of_attempts_retries_and_the_budget() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = FaultServer::start().await.unwrap();
    let port = server.addr().port().to_string();
    let host = server.url().trim_end_matches('/').to_owned();
    server.set_plan("flaky", vec![Step::status(503).times(2), Step::ok()]);
    // A budget of one retry per window: the second call's first retry is refused.
    let retry = quick_retry().budget(RetryBudget::new().ratio(0.0).floor(2));
    let client = CourierLayer::new().retry(retry).hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/flaky"))
        .body(Body::new())
        .unwrap();
    assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);

    let snap = snapshot(&snapshotter);
    let duration = |status: &str| {
        histogram(
            &snap,
            "http.client.request.duration",
            &[
                ("http.request.method", "GET"),
                ("server.address", "127.0.0.1"),
                ("server.port", &port),
                ("http.response.status_code", status),
            ],
        )
    };
    assert_eq!(duration("503").len(), 2);
    assert_eq!(duration("200").len(), 1);
    assert!(duration("200")[0] >= 0.0);
    assert_eq!(
        counter(
            &snap,
            "courier.retry.retries",
            &[
                ("host", &host),
                ("method", "GET"),
                ("reason", "retryable_status"),
                ("outcome", "5xx"),
            ],
        ),
        2
    );

    // The budget's floor is spent: the next 503 is not retried.
    server.set_plan("again", vec![Step::status(503)]);
    let req = http::Request::get(server.url_for("/s/again"))
        .body(Body::new())
        .unwrap();
    assert_eq!(client.oneshot(req).await.unwrap().status(), 503);
    assert_eq!(
        counter(
            &snapshot(&snapshotter),
            "courier.retry.budget_refusals",
            &[("host", &host), ("method", "GET")],
        ),
        1
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_recorder_installed_after_the_first_calls_gets_the_next_ones() {
    let server = FaultServer::start().await.unwrap();
    let port = server.addr().port().to_string();
    let client = CourierLayer::new().hyper::<Body>();
    let get = || {
        http::Request::get(server.url_for("/s/late"))
            .body(Body::new())
            .unwrap()
    };
    // Nothing listens: the layer keeps the no-op recorder's handle.
    assert_eq!(client.clone().oneshot(get()).await.unwrap().status(), 200);

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    for _ in 0..2 {
        assert_eq!(client.clone().oneshot(get()).await.unwrap().status(), 200);
    }
    let durations = histogram(
        &snapshot(&snapshotter),
        "http.client.request.duration",
        &[
            ("http.request.method", "GET"),
            ("server.address", "127.0.0.1"),
            ("server.port", &port),
            ("http.response.status_code", "200"),
        ],
    );
    assert_eq!(
        durations.len(),
        2,
        "both calls made after the recorder came"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_of_the_breaker() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = FaultServer::start().await.unwrap();
    let host = server.url().trim_end_matches('/').to_owned();
    server.set_plan("down", vec![Step::status(503)]);
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .circuit_breaker(
            CircuitBreakerLayer::new().consecutive_failures(NonZeroU32::new(1).unwrap()),
        )
        .hyper::<Body>();
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/down"))
            .body(Body::new())
            .unwrap();
        let _ = client.clone().oneshot(req).await;
    }
    let snap = snapshot(&snapshotter);
    assert_eq!(
        counter(
            &snap,
            "courier.breaker.transitions",
            &[("host", &host), ("from", "closed"), ("to", "open")],
        ),
        1
    );
    assert_eq!(
        value(&snap, "courier.breaker.state", &[("host", &host)]),
        Some(&DebugValue::Gauge(2.0.into()))
    );
    assert_eq!(
        counter(
            &snap,
            "courier.breaker.refusals",
            &[("host", &host), ("state", "open")],
        ),
        1
    );
    // The refused attempt has an error.type, not a status.
    let refused = histogram(
        &snap,
        "http.client.request.duration",
        &[
            ("http.request.method", "GET"),
            ("server.address", "127.0.0.1"),
            ("server.port", &server.addr().port().to_string()),
            ("error.type", "circuit_open"),
        ],
    );
    assert_eq!(refused.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_of_the_rate_limiter() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = FaultServer::start().await.unwrap();
    let host = server.url().trim_end_matches('/').to_owned();
    let one = NonZeroU32::new(1).unwrap();
    let every = Rate::every(Duration::from_millis(50)).unwrap();
    // Waits: the second call waits for its slot.
    let client = CourierLayer::new()
        .rate_limit(TokenBucketRateLimitLayer::new(every, one))
        .hyper::<Body>();
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/paced"))
            .body(Body::new())
            .unwrap();
        assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);
    }
    let waits = histogram(
        &snapshot(&snapshotter),
        "courier.ratelimit.wait.duration",
        &[("host", &host)],
    );
    assert_eq!(waits.len(), 1);
    assert!(waits[0] > 0.0 && waits[0] <= 0.05, "{waits:?}");

    // Refusals: a limiter that rejects instead of waiting.
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .rate_limit(
            TokenBucketRateLimitLayer::new(Rate::every(Duration::from_secs(60)).unwrap(), one)
                .mode(Mode::Reject),
        )
        .hyper::<Body>();
    let mut refused = 0;
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/paced"))
            .body(Body::new())
            .unwrap();
        refused += usize::from(client.clone().oneshot(req).await.is_err());
    }
    assert_eq!(refused, 1);
    assert_eq!(
        counter(
            &snapshot(&snapshotter),
            "courier.ratelimit.refusals",
            &[("host", &host), ("parked", "false")],
        ),
        1
    );
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_of_the_cache_and_the_deadlines() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = FaultServer::start().await.unwrap();
    server.set_plan(
        "fresh",
        vec![
            Step::ok()
                .header("cache-control", "max-age=60")
                .header("etag", "\"v1\""),
        ],
    );
    let client = CourierLayer::new()
        .cache(EtagCacheLayer::new())
        .hyper::<Body>();
    for _ in 0..2 {
        let req = http::Request::get(server.url_for("/s/fresh"))
            .body(Body::new())
            .unwrap();
        assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);
    }
    // Stale when the upstream fails: stored, revalidated (304), then served stale (500).
    server.set_plan(
        "stale",
        vec![
            Step::ok()
                .header("cache-control", "max-age=0, stale-if-error=60")
                .header("etag", "\"v1\""),
            Step::status(304).header("etag", "\"v1\""),
            Step::status(500),
        ],
    );
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .cache(EtagCacheLayer::new())
        .hyper::<Body>();
    for _ in 0..3 {
        let req = http::Request::get(server.url_for("/s/stale"))
            .body(Body::new())
            .unwrap();
        assert_eq!(client.clone().oneshot(req).await.unwrap().status(), 200);
    }
    assert_eq!(server.hits("stale").len(), 3);
    let snap = snapshot(&snapshotter);
    let lookups = |status| counter(&snap, "courier.cache.lookups", &[("status", status)]);
    assert_eq!(lookups("miss"), 2);
    assert_eq!(lookups("hit"), 1);
    assert_eq!(lookups("revalidated"), 1);
    assert_eq!(lookups("stale"), 1);

    // An attempt timeout, then a spent deadline.
    server.set_plan(
        "slow",
        vec![Step::ok().delay(Duration::from_millis(300)).times(10)],
    );
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .attempt_timeout(Duration::from_millis(20))
        .hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/slow"))
        .body(Body::new())
        .unwrap();
    assert!(client.oneshot(req).await.is_err());
    let client = CourierLayer::new()
        .retry(RetryLayer::new().attempts(1))
        .deadline(Duration::from_millis(20))
        .hyper::<Body>();
    let req = http::Request::get(server.url_for("/s/slow"))
        .body(Body::new())
        .unwrap();
    assert!(client.oneshot(req).await.is_err());
    let snap = snapshot(&snapshotter);
    let expiries = |kind| counter(&snap, "courier.deadline.expiries", &[("kind", kind)]);
    assert_eq!(expiries("attempt_timeout"), 1);
    assert_eq!(expiries("deadline"), 1);
    server.shutdown().await;
}
