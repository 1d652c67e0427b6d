//! The server side: an incoming deadline header becomes the deadline of outgoing calls.

use bytes::Bytes;
use courier_core::{BoxError, DeadlineExceeded};
use courier_deadline::propagate::DEFAULT_HEADER;
use courier_deadline::scope::{current_deadline, scope};
use courier_deadline::{DeadlineLayer, DeadlineScopeLayer};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

type Seen = (Option<Instant>, Option<Instant>);

type Log<T> = Arc<Mutex<Vec<T>>>;

/// A handler that records the extension and the scope it ran with, after `work`.
fn recording(
    work: Duration,
) -> (
    impl Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible> + Clone,
    Log<Seen>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let svc = service_fn(move |req: Request<()>| {
        let log = Arc::clone(&log);
        async move {
            tokio::time::sleep(work).await;
            log.lock().unwrap().push((
                courier_core::CallContext::deadline_in(req.extensions()),
                current_deadline(),
            ));
            Ok::<_, Infallible>(Response::new(Empty::new()))
        }
    });
    (svc, seen)
}

fn with_header(value: &[u8]) -> Request<()> {
    let mut req = Request::new(());
    req.headers_mut()
        .insert(DEFAULT_HEADER, HeaderValue::from_bytes(value).unwrap());
    req
}

#[tokio::test(start_paused = true)]
async fn header_becomes_extension_and_scope() {
    let (handler, seen) = recording(ms(100));
    let start = Instant::now();
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(with_header(b"250"))
        .await
        .unwrap();
    let want = Some(start + ms(250));
    assert_eq!(seen.lock().unwrap()[0], (want, want));
    assert_eq!(current_deadline(), None, "the scope ends with the request");
}

#[tokio::test(start_paused = true)]
async fn garbage_is_ignored_and_absurd_values_are_capped() {
    for bad in [&b"soon"[..], b"-5", b"1.5", b"", b"\xff"] {
        let (handler, seen) = recording(Duration::ZERO);
        DeadlineScopeLayer::new()
            .layer(handler)
            .oneshot(with_header(bad))
            .await
            .unwrap();
        assert_eq!(seen.lock().unwrap()[0], (None, None), "{bad:?}");
    }
    let (handler, seen) = recording(Duration::ZERO);
    let start = Instant::now();
    DeadlineScopeLayer::new()
        .max(Duration::from_secs(30))
        .layer(handler)
        .oneshot(with_header(b"99999999999999999999999999"))
        .await
        .unwrap();
    let capped = Some(start + Duration::from_secs(30));
    assert_eq!(seen.lock().unwrap()[0], (capped, capped));
}

#[tokio::test(start_paused = true)]
async fn default_budget_and_custom_header() {
    let (handler, seen) = recording(Duration::ZERO);
    let start = Instant::now();
    let mut svc = DeadlineScopeLayer::new()
        .header(http::HeaderName::from_static("x-timeout-ms"))
        .default_budget(Some(ms(800)))
        .layer(handler);
    svc.ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    let mut req = Request::new(());
    req.headers_mut()
        .insert("x-timeout-ms", HeaderValue::from_static("40"));
    svc.ready().await.unwrap().call(req).await.unwrap();
    // The default header is not read when another is configured.
    svc.ready()
        .await
        .unwrap()
        .call(with_header(b"10"))
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    let at = |n| Some(start + ms(n));
    assert_eq!(seen[0], (at(800), at(800)));
    assert_eq!(seen[1], (at(40), at(40)));
    assert_eq!(seen[2], (at(800), at(800)));
}

#[tokio::test(start_paused = true)]
async fn scope_covers_work_done_in_call() {
    let seen = Arc::new(Mutex::new(None));
    let log = Arc::clone(&seen);
    let start = Instant::now();
    // `call` itself (not only the future) runs inside the scope.
    let handler = service_fn(move |_req: Request<()>| {
        *log.lock().unwrap() = current_deadline();
        std::future::ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
    });
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(with_header(b"70"))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(start + ms(70)));
}

/// The handler's downstream client, with a generous budget of its own.
type Client = tower::util::BoxCloneService<
    Request<()>,
    Response<courier_deadline::DeadlineBody<Empty<Bytes>>>,
    BoxError,
>;

/// The handler's downstream client: records the deadline header the next service receives.
fn downstream() -> (Client, Log<Option<String>>) {
    let headers = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&headers);
    let leaf = service_fn(move |req: Request<()>| {
        log.lock().unwrap().push(
            req.headers()
                .get(DEFAULT_HEADER)
                .map(|v| v.to_str().unwrap().to_owned()),
        );
        async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    let client = DeadlineLayer::new(Duration::from_secs(10))
        .propagate(DEFAULT_HEADER)
        .layer(leaf)
        .boxed_clone();
    (client, headers)
}

#[tokio::test(start_paused = true)]
async fn handler_passes_the_deadline_on_implicitly() {
    let (client, headers) = downstream();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&errors);
    let handler = service_fn(move |_req: Request<()>| {
        let client = client.clone();
        let log = Arc::clone(&log);
        async move {
            tokio::time::sleep(ms(120)).await;
            let started = Instant::now();
            let err = client.oneshot(Request::new(())).await.unwrap_err();
            log.lock().unwrap().push((
                *err.downcast_ref::<DeadlineExceeded>().unwrap(),
                started.elapsed(),
            ));
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(with_header(b"500"))
        .await
        .unwrap();
    assert_eq!(*headers.lock().unwrap(), [Some("380".to_owned())]);
    let (err, waited) = errors.lock().unwrap()[0];
    assert_eq!(
        waited,
        ms(380),
        "the inner call ends with the outer deadline"
    );
    assert_eq!(err.budget(), ms(380));
}

#[tokio::test(start_paused = true)]
async fn handler_passes_the_deadline_on_explicitly_from_a_spawned_task() {
    let (client, headers) = downstream();
    let handler = service_fn(move |req: Request<()>| {
        let client = client.clone();
        let deadline = courier_core::CallContext::deadline_in(req.extensions());
        async move {
            // A spawned task leaves the scope behind: without the context it would get the
            // client's whole 10 s.
            let lost = tokio::spawn(async { current_deadline() }).await.unwrap();
            assert_eq!(lost, None);
            let task = tokio::spawn(async move {
                tokio::time::sleep(ms(100)).await;
                let mut out = Request::new(());
                if let Some(d) = deadline {
                    courier_core::CallContext::get_or_insert(&mut out).shrink_deadline(d);
                }
                client.oneshot(out).await
            });
            let err = task.await.unwrap().unwrap_err();
            assert!(err.is::<DeadlineExceeded>());
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }
    });
    let start = Instant::now();
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(with_header(b"300"))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), ms(300));
    assert_eq!(*headers.lock().unwrap(), [Some("200".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn nested_scopes_only_shrink() {
    let outer = Instant::now() + ms(100);
    let (handler, seen) = recording(Duration::ZERO);
    scope(
        outer,
        DeadlineScopeLayer::new()
            .layer(handler)
            .oneshot(with_header(b"5000")),
    )
    .await
    .unwrap();
    assert_eq!(seen.lock().unwrap()[0], (Some(outer), Some(outer)));
}

#[tokio::test(start_paused = true)]
async fn works_as_axum_middleware() {
    use axum::routing::get;
    use axum::{Extension, Router};

    async fn handler(call: Option<Extension<courier_core::CallContext>>) -> String {
        let ext = call
            .and_then(|Extension(c)| c.remaining())
            .map(|d| d.as_millis());
        let scoped = current_deadline().map(|d| (d - Instant::now()).as_millis());
        format!("{ext:?} {scoped:?}")
    }

    let app = Router::new()
        .route("/", get(handler))
        .layer(DeadlineScopeLayer::new());
    let req = Request::get("/")
        .header(DEFAULT_HEADER, "1234")
        .body(axum::body::Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let text = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(text, "Some(1234) Some(1234)");

    let req = Request::get("/").body(axum::body::Body::empty()).unwrap();
    let res = app.oneshot(req).await.unwrap();
    let text = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(text, "None None");
}

/// A gRPC call's `grpc-timeout` becomes the deadline; on a request that is not gRPC the field
/// means nothing and is left alone.
#[tokio::test(start_paused = true)]
async fn an_incoming_grpc_timeout_becomes_the_deadline() {
    let (handler, seen) = recording(Duration::ZERO);
    let start = Instant::now();
    let mut req = Request::new(());
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("250m"));
    req.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(req)
        .await
        .unwrap();
    let want = Some(start + ms(250));
    assert_eq!(seen.lock().unwrap()[0], (want, want));
    let (handler, seen) = recording(Duration::ZERO);
    let mut req = Request::new(());
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("250m"));
    DeadlineScopeLayer::new()
        .layer(handler)
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap()[0], (None, None), "not a gRPC call");
}

/// A gRPC call carries the time left as `grpc-timeout`; a plain HTTP request does not, and a
/// caller's own shorter one stays.
#[tokio::test(start_paused = true)]
async fn a_grpc_call_carries_the_time_left_as_grpc_timeout() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&sent);
    let upstream = service_fn(move |req: Request<()>| {
        log.lock()
            .unwrap()
            .push(req.headers().get("grpc-timeout").cloned());
        async { Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())) }
    });
    let svc = DeadlineLayer::new(ms(1500)).layer(upstream);
    let grpc = |timeout: Option<&'static str>| {
        let mut req = Request::post("http://h.example/pkg.Svc/Method")
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        if let Some(t) = timeout {
            req.headers_mut()
                .insert("grpc-timeout", HeaderValue::from_static(t));
        }
        req
    };
    svc.clone().oneshot(grpc(None)).await.unwrap();
    svc.clone().oneshot(grpc(Some("100m"))).await.unwrap();
    svc.clone().oneshot(grpc(Some("1H"))).await.unwrap();
    svc.clone()
        .oneshot(Request::post("http://h.example/").body(()).unwrap())
        .await
        .unwrap();
    let sent = sent.lock().unwrap().clone();
    let sent: Vec<Option<&str>> = sent
        .iter()
        .map(|v| v.as_ref().map(|v| v.to_str().unwrap()))
        .collect();
    assert_eq!(
        sent,
        [Some("1500000u"), Some("100m"), Some("1500000u"), None]
    );
}
