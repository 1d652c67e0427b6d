//! A scripted upstream that records every call, and a tracing capture.
#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;
use courier_core::{Attempts, BoxError, CircuitOpen};
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body::Body;
use http_body_util::BodyExt;
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use tower::Service;

/// What the mock answers to one call.
#[derive(Clone, Debug)]
pub enum Answer {
    Status(u16),
    Headers(u16, Vec<(&'static str, String)>),
    Fail(io::ErrorKind),
    /// Answer `status` after a delay (an attempt timeout can cut it short).
    Delay(Duration, u16),
    /// Answer `status` with headers after a delay.
    DelayHeaders(Duration, u16, Vec<(&'static str, String)>),
    /// One of our own refusals from a layer below.
    Local,
}

/// One call the mock saw.
#[derive(Clone, Debug)]
pub struct Call {
    pub at: Instant,
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
}

#[derive(Default)]
struct State {
    script: VecDeque<Answer>,
    calls: Vec<Call>,
}

/// Answers by its script (200 once it runs out) and records every call.
#[derive(Clone, Default)]
pub struct Mock {
    state: Arc<Mutex<State>>,
}

impl Mock {
    pub fn new(script: impl IntoIterator<Item = Answer>) -> Self {
        let mock = Self::default();
        mock.state.lock().unwrap().script = script.into_iter().collect();
        mock
    }

    /// Every call answers `answer`.
    pub fn always(answer: Answer, n: usize) -> Self {
        Self::new(std::iter::repeat_n(answer, n))
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn count(&self) -> usize {
        self.state.lock().unwrap().calls.len()
    }
}

type BoxFut = Pin<Box<dyn Future<Output = Result<Response<String>, BoxError>> + Send>>;

impl<B> Service<Request<B>> for Mock
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<String>;
    type Error = BoxError;
    type Future = BoxFut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> BoxFut {
        let (parts, body) = req.into_parts();
        let (index, answer) = {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Call {
                at: Instant::now(),
                method: parts.method.clone(),
                uri: parts.uri.clone(),
                headers: parts.headers.clone(),
                body: None,
            });
            let answer = s.script.pop_front().unwrap_or(Answer::Status(200));
            (s.calls.len() - 1, answer)
        };
        let state = self.state.clone();
        Box::pin(async move {
            let body = body.collect().await.map_err(Into::into)?.to_bytes();
            state.lock().unwrap().calls[index].body = Some(body);
            let (status, headers) = match answer {
                Answer::Status(s) => (s, vec![]),
                Answer::Headers(s, h) => (s, h),
                Answer::Fail(kind) => return Err(io::Error::from(kind).into()),
                Answer::Local => return Err(CircuitOpen::new(Duration::from_secs(1)).into()),
                Answer::Delay(d, s) => {
                    tokio::time::sleep(d).await;
                    (s, vec![])
                }
                Answer::DelayHeaders(d, s, h) => {
                    tokio::time::sleep(d).await;
                    (s, h)
                }
            };
            let mut res = Response::builder().status(status);
            for (k, v) in headers {
                res = res.header(k, v);
            }
            Ok(res.body(format!("answer {index}")).unwrap())
        })
    }
}

/// The records a response carries.
pub fn attempts<B>(res: &Response<B>) -> Attempts {
    res.extensions()
        .get::<Attempts>()
        .cloned()
        .expect("the retry layer sets Attempts")
}

/// Gaps between consecutive calls.
pub fn gaps(calls: &[Call]) -> Vec<Duration> {
    calls.windows(2).map(|w| w[1].at - w[0].at).collect()
}

/// Asserts `gap` is `wait`, up to the timer's one-millisecond resolution, and never less.
#[track_caller]
pub fn assert_waited(gap: Duration, wait: Duration) {
    assert!(
        gap >= wait && gap <= wait + Duration::from_millis(1),
        "waited {gap:?}, expected {wait:?}"
    );
}

/// Events on target `courier::retry`, as field maps.
pub type Events = Arc<Mutex<Vec<BTreeMap<String, String>>>>;

/// The one global subscriber of a test binary: it hands each event to the sink of the thread
/// that emitted it. A global subscriber (rather than `set_default` per test) keeps tracing's
/// per-callsite interest cache from going stale while tests on other threads come and go.
struct Capture;

thread_local! {
    static SINK: std::cell::RefCell<Option<Events>> = const { std::cell::RefCell::new(None) };
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != "courier::retry" {
            return;
        }
        SINK.with(|sink| {
            if let Some(events) = &*sink.borrow() {
                let mut map = BTreeMap::new();
                map.insert("level".to_owned(), event.metadata().level().to_string());
                event.record(&mut Fields(&mut map));
                events.lock().unwrap().push(map);
            }
        });
    }
}

/// Stops capturing on this thread when dropped.
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        SINK.with(|sink| *sink.borrow_mut() = None);
    }
}

/// Captures this thread's `courier::retry` events while the guard lives.
pub fn capture() -> (CaptureGuard, Events) {
    use tracing_subscriber::layer::SubscriberExt;
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
            .expect("this test binary installs no other global subscriber");
    });
    let events = Events::default();
    SINK.with(|sink| *sink.borrow_mut() = Some(events.clone()));
    (CaptureGuard(()), events)
}

pub fn get(uri: &str) -> Request<String> {
    Request::get(uri).body(String::new()).unwrap()
}

pub fn post(uri: &str, body: &str) -> Request<String> {
    Request::post(uri).body(body.to_owned()).unwrap()
}
