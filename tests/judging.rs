//! How the preset judges a host (the preset's docs, "How the preset judges a host"), through
//! the whole preset with its defaults, on paused time over scripted transports: a host that is
//! not there, one that answers nothing but 503, one that fails most calls at the transport,
//! and one path that always answers 503 among healthy ones.

use bytes::Bytes;
use courier::CourierLayer;
use courier::core::{BoxError, CircuitOpen, is_caused_by};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Service, ServiceExt, service_fn};
use tracing_subscriber::layer::{Context, SubscriberExt};

type Req = Request<Full<Bytes>>;
type Resp = Response<Full<Bytes>>;

fn get(path: &str) -> Req {
    Request::get(format!("http://api.example{path}"))
        .body(Full::default())
        .unwrap()
}

fn status(s: StatusCode) -> Result<Resp, BoxError> {
    Ok(Response::builder().status(s).body(Full::default()).unwrap())
}

/// What a scripted host answers a request for a path.
type Answer = Arc<dyn Fn(&str) -> Result<Resp, BoxError> + Send + Sync>;

/// A transport whose answers `answer` decides from the path; it counts what reaches it.
#[derive(Clone)]
struct Scripted {
    reached: Arc<AtomicUsize>,
    answer: Answer,
}

impl Scripted {
    fn new(answer: impl Fn(&str) -> Result<Resp, BoxError> + Send + Sync + 'static) -> Self {
        Self {
            reached: Arc::default(),
            answer: Arc::new(answer),
        }
    }

    fn reached(&self) -> usize {
        self.reached.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl Service<Req, Response = Resp, Error = BoxError, Future: Send> + Clone + Send + 'static
    {
        let this = self.clone();
        service_fn(move |req: Req| {
            this.reached.fetch_add(1, Ordering::SeqCst);
            let out = (this.answer)(req.uri().path());
            async move { out }
        })
    }
}

fn refused() -> Result<Resp, BoxError> {
    Err(io::Error::from(io::ErrorKind::ConnectionRefused).into())
}

fn reset() -> Result<Resp, BoxError> {
    Err(io::Error::from(io::ErrorKind::ConnectionReset).into())
}

#[tokio::test(start_paused = true)]
async fn a_host_that_refuses_every_connection_opens_fails_fast_and_recovers_through_half_open() {
    let up = Arc::new(AtomicBool::new(false));
    let host = Scripted::new({
        let up = up.clone();
        move |_| {
            if up.load(Ordering::SeqCst) {
                status(StatusCode::OK)
            } else {
                refused()
            }
        }
    });
    let client = CourierLayer::new().service(host.service());
    // Five attempts find nothing listening (the first call's three, the second's two): the
    // circuit opens, and the second call's last retry is refused.
    let mut calls = 0;
    loop {
        calls += 1;
        let err = client.clone().oneshot(get("/")).await.unwrap_err();
        if is_caused_by::<CircuitOpen>(&*err) {
            break;
        }
        assert!(calls <= 5, "still closed after {calls} calls");
    }
    assert_eq!(
        (calls, host.reached()),
        (2, 5),
        "open after 5 refused connections"
    );
    // Later calls fail at once, and nothing reaches the host.
    let reached = host.reached();
    for _ in 0..100 {
        let start = Instant::now();
        let err = client.clone().oneshot(get("/")).await.unwrap_err();
        assert!(is_caused_by::<CircuitOpen>(&*err), "{err}");
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
    assert_eq!(host.reached(), reached);
    // The host accepts again: after the open time, half-open trials close the circuit.
    up.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(31)).await;
    for n in 0..3 {
        let resp = client.clone().oneshot(get("/")).await;
        assert_eq!(resp.unwrap().status(), StatusCode::OK, "trial {n}");
    }
    for _ in 0..20 {
        assert_eq!(
            client.clone().oneshot(get("/")).await.unwrap().status(),
            StatusCode::OK
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_host_that_answers_503_to_everything_opens_after_30_s_of_it() {
    let host = Scripted::new(|_| status(StatusCode::SERVICE_UNAVAILABLE));
    let client = CourierLayer::new().service(host.service());
    let start = Instant::now();
    let opened = loop {
        let res = client.clone().oneshot(get("/")).await;
        match res {
            Ok(resp) => assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE),
            Err(e) if is_caused_by::<CircuitOpen>(&*e) => break start.elapsed(),
            Err(e) => panic!("{e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never opened");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        opened >= Duration::from_secs(30) && opened < Duration::from_secs(40),
        "opened after {opened:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_where_most_calls_fail_at_the_transport_opens_by_the_rate() {
    // Three paths in five reset on every attempt; the others answer.
    let host = Scripted::new(|path| {
        let n: u32 = path.trim_start_matches("/p").parse().unwrap_or(0);
        if n % 5 < 3 {
            reset()
        } else {
            status(StatusCode::OK)
        }
    });
    let client = CourierLayer::new().service(host.service());
    let mut calls = 0;
    loop {
        let res = client.clone().oneshot(get(&format!("/p{calls}"))).await;
        calls += 1;
        if let Err(e) = &res
            && is_caused_by::<CircuitOpen>(&**e)
        {
            break;
        }
        assert!(calls < 1_000, "never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!((100..=120).contains(&calls), "opened after {calls} calls");
}

#[tokio::test(start_paused = true)]
async fn a_host_with_one_broken_path_among_fine_ones_stays_closed() {
    // One path in six resets on every attempt, 32 callers: no call to the others is refused.
    let host = Scripted::new(|path| {
        let n: u32 = path.trim_start_matches("/p").parse().unwrap_or(0);
        if n.is_multiple_of(6) {
            reset()
        } else {
            status(StatusCode::OK)
        }
    });
    let client = CourierLayer::new().service(host.service());
    let refused = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (client, refused, next) = (client.clone(), refused.clone(), next.clone());
        callers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= 5_000 {
                    break;
                }
                let res = client.clone().oneshot(get(&format!("/p{n}"))).await;
                if n % 6 != 0
                    && let Err(e) = res
                {
                    assert!(is_caused_by::<CircuitOpen>(&*e), "{e}");
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
    }
    while callers.join_next().await.is_some() {}
    assert_eq!(refused.load(Ordering::SeqCst), 0);
}

/// Every pacing wait recorded on the span of an attempt to another path than `/always503`,
/// in milliseconds (that path may pace itself).
#[derive(Clone, Default)]
struct PacingWaits {
    waits: Arc<Mutex<Vec<i64>>>,
    broken_spans: Arc<Mutex<std::collections::HashSet<u64>>>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PacingWaits {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        struct Url(bool);
        impl tracing::field::Visit for Url {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "url.full" && format!("{value:?}").contains("/always503") {
                    self.0 = true;
                }
            }
        }
        let mut url = Url(false);
        attrs.record(&mut url);
        if url.0 {
            self.broken_spans.lock().unwrap().insert(id.into_u64());
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: Context<'_, S>,
    ) {
        struct Visit<'a>(&'a Mutex<Vec<i64>>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
                if field.name() == "courier.pacing.wait_ms" {
                    self.0.lock().unwrap().push(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        if !self.broken_spans.lock().unwrap().contains(&id.into_u64()) {
            values.record(&mut Visit(&self.waits));
        }
    }
}

/// `/always503` answers 503 without a hint, every other path 200.
fn one_broken_path() -> Scripted {
    Scripted::new(|path| {
        if path == "/always503" {
            status(StatusCode::SERVICE_UNAVAILABLE)
        } else {
            status(StatusCode::OK)
        }
    })
}

#[test]
fn a_path_that_always_answers_503_never_paces_the_others() {
    let waits = PacingWaits::default();
    let subscriber = tracing_subscriber::registry().with(waits.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        // One client, 5 calls a second for a minute, one in five to the broken path.
        let client = CourierLayer::new().service(one_broken_path().service());
        let mut slowest = Duration::ZERO;
        for i in 0..300 {
            let path = if i % 5 == 0 { "/always503" } else { "/fine" };
            let client = client.clone();
            let call = tokio::spawn(async move {
                let start = Instant::now();
                let resp = client.oneshot(get(path)).await.unwrap();
                (resp.status(), start.elapsed())
            });
            if path == "/fine" {
                let (status, took) = call.await.unwrap();
                assert_eq!(status, StatusCode::OK);
                slowest = slowest.max(took);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(slowest, Duration::ZERO, "a call to a fine path waited");

        // As `courier batch --parallel 2` over 40 healthy URLs and 10 to the broken path.
        let client = CourierLayer::new().service(one_broken_path().service());
        let paths: Vec<String> = (0..50)
            .map(|i| {
                if i % 5 == 2 {
                    "/always503".to_owned()
                } else {
                    format!("/ok/{i}")
                }
            })
            .collect();
        let queue = Arc::new(Mutex::new(paths.into_iter()));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let (client, queue) = (client.clone(), queue.clone());
            workers.spawn(async move {
                let mut slowest = Duration::ZERO;
                loop {
                    let Some(path) = queue.lock().unwrap().next() else {
                        break;
                    };
                    let start = Instant::now();
                    client.clone().oneshot(get(&path)).await.unwrap();
                    if path != "/always503" {
                        slowest = slowest.max(start.elapsed());
                    }
                }
                slowest
            });
        }
        while let Some(slowest) = workers.join_next().await {
            assert!(slowest.unwrap() <= Duration::from_millis(100));
        }
    });
    let recorded = waits.waits.lock().unwrap();
    assert!(recorded.is_empty(), "pacing waits recorded: {recorded:?}");
}
