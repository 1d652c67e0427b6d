//! A scripted upstream for the cache tests.

#![allow(dead_code, unreachable_pub)]

use bytes::Bytes;
use courier_cache::{CacheBody, EtagCacheLayer};
use courier_core::{BoxError, CacheStatus, ManualClock};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tower::{Service, ServiceExt};

pub type TestBody = BoxBody<Bytes, BoxError>;

/// A store by key text only, in a map: the path every store but the in-memory one takes. Its
/// futures are ready at once.
#[derive(Debug, Default, Clone)]
pub struct TextStore(Arc<Mutex<std::collections::HashMap<String, Arc<courier_cache::Variants>>>>);

impl courier_cache::CacheStore for TextStore {
    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> courier_cache::StoreFuture<'a, Option<Arc<courier_cache::Variants>>> {
        Box::pin(std::future::ready(self.0.lock().unwrap().get(key).cloned()))
    }
    fn insert(
        &self,
        key: String,
        variants: Arc<courier_cache::Variants>,
    ) -> courier_cache::StoreFuture<'_, ()> {
        self.0.lock().unwrap().insert(key, variants);
        Box::pin(std::future::ready(()))
    }
    fn remove<'a>(&'a self, key: &'a str) -> courier_cache::StoreFuture<'a, bool> {
        Box::pin(std::future::ready(
            self.0.lock().unwrap().remove(key).is_some(),
        ))
    }
    fn weight(&self) -> u64 {
        self.0.lock().unwrap().values().map(|v| v.weight()).sum()
    }
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A [`TextStore`] whose every read and write waits `delay` (on tokio's clock) before it is
/// done: a store that can wait.
#[derive(Debug, Clone)]
pub struct SlowStore {
    pub inner: TextStore,
    pub delay: Duration,
}

impl courier_cache::CacheStore for SlowStore {
    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> courier_cache::StoreFuture<'a, Option<Arc<courier_cache::Variants>>> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.get(key).await
        })
    }
    fn insert(
        &self,
        key: String,
        variants: Arc<courier_cache::Variants>,
    ) -> courier_cache::StoreFuture<'_, ()> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.insert(key, variants).await
        })
    }
    fn remove<'a>(&'a self, key: &'a str) -> courier_cache::StoreFuture<'a, bool> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.remove(key).await
        })
    }
    fn weight(&self) -> u64 {
        self.inner.weight()
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
}

/// One scripted answer.
pub type Answer = Result<Response<TestBody>, BoxError>;

/// The wall-clock time every test starts at.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

pub fn date(at: SystemTime) -> String {
    httpdate::fmt_http_date(at)
}

pub fn full(data: impl Into<Bytes>) -> TestBody {
    http_body_util::Full::new(data.into())
        .map_err(|e| match e {})
        .boxed()
}

/// A 200 with the given headers and body.
pub fn ok(headers: &[(&str, &str)], body: &str) -> Result<Response<TestBody>, BoxError> {
    respond(200, headers, body)
}

pub fn respond(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Response<TestBody>, BoxError> {
    let mut b = Response::builder()
        .status(status)
        .header("date", date(t0()));
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    if status != 304
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        b = b.header("content-length", body.len());
    }
    Ok(b.body(full(body.to_owned())).unwrap())
}

pub fn not_modified(headers: &[(&str, &str)]) -> Result<Response<TestBody>, BoxError> {
    respond(304, headers, "")
}

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub uri: http::Uri,
    pub headers: HeaderMap,
}

/// An upstream that answers from a queue and records every request.
#[derive(Clone, Default)]
pub struct Mock {
    seen: Arc<Mutex<Vec<Seen>>>,
    queue: Arc<Mutex<VecDeque<(Duration, Answer)>>>,
}

impl Mock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, answer: Answer) {
        self.push_delayed(Duration::ZERO, answer);
    }

    /// An answer that arrives `delay` after the request (on tokio's clock).
    pub fn push_delayed(&self, delay: Duration, answer: Answer) {
        self.queue.lock().unwrap().push_back((delay, answer));
    }

    pub fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Drops the answers no request took.
    pub fn discard_answers(&self) {
        self.queue.lock().unwrap().clear();
    }

    /// The `n`th request (from 0).
    pub fn nth(&self, n: usize) -> Seen {
        self.seen.lock().unwrap()[n].clone()
    }

    pub fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request was sent")
    }

    pub fn service(
        &self,
    ) -> impl Service<
        Request<()>,
        Response = Response<TestBody>,
        Error = BoxError,
        Future = impl Future<Output = Result<Response<TestBody>, BoxError>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        let mock = self.clone();
        tower::service_fn(move |req: Request<()>| {
            let mock = mock.clone();
            async move {
                mock.seen.lock().unwrap().push(Seen {
                    method: req.method().clone(),
                    uri: req.uri().clone(),
                    headers: req.headers().clone(),
                });
                let (delay, answer) = mock
                    .queue
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("the test scripted an answer for every request");
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                answer
            }
        })
    }
}

/// The layer every test starts from: the defaults, with a manual wall clock at `t0`.
pub fn layer() -> EtagCacheLayer {
    EtagCacheLayer::new().wall_clock(ManualClock::new(t0()))
}

/// One answer, body read to the end.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub cache: CacheStatus,
}

pub fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

pub fn req(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut b = Request::builder().method(method).uri(uri);
    for (n, v) in headers {
        b = b.header(*n, *v);
    }
    b.body(()).unwrap()
}

/// Reads a response to the end.
pub async fn read<B>(response: Response<CacheBody<B>>) -> Result<Got, BoxError>
where
    B: Body<Data = Bytes, Error = BoxError>,
{
    let cache = *response
        .extensions()
        .get::<CacheStatus>()
        .expect("every response carries a cache status");
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Got {
        status: parts.status,
        headers: parts.headers,
        body,
        cache,
    })
}

pub async fn send<S, B>(svc: &mut S, req: Request<()>) -> Result<Got, BoxError>
where
    S: Service<Request<()>, Response = Response<CacheBody<B>>, Error = BoxError>,
    B: Body<Data = Bytes, Error = BoxError>,
{
    let response = svc.ready().await?.call(req).await?;
    read(response).await
}
