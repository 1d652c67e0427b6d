//! The pass-through contract, checked the same way for every layer: a service switched off
//! (`Foo::pass_through(inner)`) hands each request to its inner service as it came and each
//! answer back as it went, and keeps nothing from one call to the next.
//!
//! [`check`] builds the service under test around a [`Recorder`], an inner service that keeps
//! what it was given and answers with a script chosen to wake every layer that is on: a `503`
//! with `Retry-After` and quota headers, a `200` with an `ETag` and `Cache-Control: max-age`,
//! a `429`, and a transport error. The service passes when:
//!
//! - the inner service saw each request exactly once, with the method, URI, version, headers
//!   (in order) and extensions the caller sent, nothing added (no deadline, no idempotency
//!   key, no validators);
//! - each answer reached the caller with the inner service's status, headers, extensions and
//!   body bytes, nothing added (no `Attempts`, no `CacheStatus`);
//! - the inner service's error reached the caller unchanged in kind and message;
//! - the same GET asked twice reached the inner service twice (nothing was cached), and a
//!   `503` or `429` did not stop the next call (nothing was opened or parked).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use courier_testkit::pass_through;
//! use tower::layer::util::Identity;
//! use tower::Layer;
//!
//! pass_through::check(|inner| Identity::new().layer(inner)).await;
//! # }
//! ```

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use std::error::Error as StdError;
use std::fmt;
use std::future::{Ready, ready};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower_service::Service;

/// The error the [`Recorder`] answers with on its fourth script line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamFailed;

impl fmt::Display for UpstreamFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("upstream failed (scripted)")
    }
}

impl StdError for UpstreamFailed {}

/// A request extension the caller sets, to see it arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker(pub u32);

/// What the inner service was given: the parts of each request it saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request's method.
    pub method: http::Method,
    /// The request's URI.
    pub uri: http::Uri,
    /// The request's version.
    pub version: http::Version,
    /// The request's header fields, in order.
    pub headers: HeaderMap,
    /// How many extensions the request carried.
    pub extensions: usize,
    /// The caller's [`Marker`], if it arrived.
    pub marker: Option<Marker>,
}

/// The inner service of [`check`]: records every request and answers from a script that
/// cycles (see the module docs). Clones share the record.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .expect("no test panicked holding it")
            .clone()
    }

    /// The answer to the `n`th request (from 0).
    fn answer(n: usize) -> Result<Response<Full<Bytes>>, UpstreamFailed> {
        let mut resp = Response::new(Full::new(Bytes::from(format!("answer {n}"))));
        let headers = resp.headers_mut();
        match n % 4 {
            0 => {
                *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                let headers = resp.headers_mut();
                headers.insert("retry-after", "120".parse().expect("valid"));
                headers.insert("x-ratelimit-remaining", "0".parse().expect("valid"));
                headers.insert("x-ratelimit-reset", "120".parse().expect("valid"));
            }
            1 => {
                headers.insert("etag", "\"v1\"".parse().expect("valid"));
                headers.insert("cache-control", "max-age=600".parse().expect("valid"));
                headers.insert(
                    "last-modified",
                    "Tue, 01 Dec 2026 00:00:00 GMT".parse().expect("valid"),
                );
            }
            2 => {
                *resp.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                resp.headers_mut()
                    .insert("retry-after", "3600".parse().expect("valid"));
            }
            _ => return Err(UpstreamFailed),
        }
        resp.extensions_mut().insert(Marker(n as u32));
        Ok(resp)
    }
}

impl Service<Request<Full<Bytes>>> for Recorder {
    type Response = Response<Full<Bytes>>;
    type Error = UpstreamFailed;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let mut seen = self.seen.lock().expect("no test panicked holding it");
        let n = seen.len();
        seen.push(Seen {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: req.headers().clone(),
            extensions: req.extensions().len(),
            marker: req.extensions().get::<Marker>().cloned(),
        });
        ready(Self::answer(n))
    }
}

/// How many calls [`check`] makes: the script twice over, GETs and POSTs mixed.
pub const CALLS: usize = 8;

/// The `n`th request of [`check`]: the same GET (with a `Marker`) on even calls, a POST with a
/// body on odd ones.
fn request(n: usize) -> Request<Full<Bytes>> {
    let post = n % 2 == 1;
    let mut req = Request::builder()
        .method(if post { "POST" } else { "GET" })
        .uri("http://pass.example/item?q=1")
        .header("accept", "application/json")
        .header("x-trace", format!("call-{n}"))
        .body(Full::new(Bytes::from(if post { "payload" } else { "" })))
        .expect("a valid request");
    req.extensions_mut().insert(Marker(n as u32));
    req
}

/// Drives the service `make` builds around a [`Recorder`] through [`CALLS`] calls and panics
/// on the first difference from the bare recorder (see the module docs).
///
/// # Panics
///
/// When the service under test changed a request or an answer, answered from anything but the
/// inner service, or refused a call.
pub async fn check<S, F, RB>(make: F)
where
    F: FnOnce(Recorder) -> S,
    S: Service<Request<Full<Bytes>>, Response = Response<RB>>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    RB: Body<Data = Bytes>,
    RB::Error: fmt::Debug,
{
    let recorder = Recorder::default();
    let mut service = make(recorder.clone());
    for n in 0..CALLS {
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .map_err(Into::into)
            .expect("a pass-through service is ready when its inner service is");
        let sent = request(n);
        let (method, uri, headers) = (
            sent.method().clone(),
            sent.uri().clone(),
            sent.headers().clone(),
        );
        let got = service.call(sent).await.map_err(Into::into);

        let seen = recorder.seen();
        assert_eq!(
            seen.len(),
            n + 1,
            "call {n}: the inner service saw every request once"
        );
        let seen = &seen[n];
        assert_eq!(seen.method, method, "call {n}: method");
        assert_eq!(seen.uri, uri, "call {n}: URI");
        assert_eq!(seen.version, http::Version::HTTP_11, "call {n}: version");
        assert_eq!(
            seen.headers, headers,
            "call {n}: headers reach the inner service as sent"
        );
        assert_eq!(
            seen.extensions, 1,
            "call {n}: no extension added to the request"
        );
        assert_eq!(
            seen.marker,
            Some(Marker(n as u32)),
            "call {n}: the caller's extension"
        );

        let expected = Recorder::answer(n);
        match (got, expected) {
            (Ok(resp), Ok(want)) => {
                assert_eq!(resp.status(), want.status(), "call {n}: status");
                assert_eq!(resp.headers(), want.headers(), "call {n}: response headers");
                assert_eq!(
                    resp.extensions().len(),
                    1,
                    "call {n}: no extension added to the answer"
                );
                assert_eq!(resp.extensions().get::<Marker>(), Some(&Marker(n as u32)));
                let body = resp
                    .into_body()
                    .collect()
                    .await
                    .expect("the body reads")
                    .to_bytes();
                let want = want
                    .into_body()
                    .collect()
                    .await
                    .expect("a full body")
                    .to_bytes();
                assert_eq!(body, want, "call {n}: body");
            }
            (Err(err), Err(want)) => {
                assert!(
                    err.downcast_ref::<UpstreamFailed>() == Some(&want),
                    "call {n}: the inner error passes as it is, got {err:?}"
                );
            }
            (Ok(resp), Err(_)) => panic!(
                "call {n}: the inner service failed, the caller got {}",
                resp.status()
            ),
            (Err(err), Ok(_)) => {
                panic!("call {n}: the inner service answered, the caller got {err}")
            }
        }
    }
}
