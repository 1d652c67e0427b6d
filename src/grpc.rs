//! gRPC through the preset: a tonic `Channel` gets a deadline, safe retries, a breaker and
//! pacing, and its callers keep matching on `tonic::Status`.
//!
//! ```no_run
//! use courier::CourierLayer;
//! use courier::retry::RetryLayer;
//! # mod greeter { pub struct GreeterClient<T>(T); impl<T> GreeterClient<T> { pub fn new(t: T) -> Self { Self(t) } } }
//! # use greeter::GreeterClient;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051");
//! let layer = CourierLayer::grpc()
//!     // Only the caller knows which methods are safe to repeat.
//!     .retry(RetryLayer::new().retry_safe_paths(["/helloworld.Greeter/SayHello"]));
//! let client = GreeterClient::new(layer.channel(endpoint.uri().clone(), endpoint.connect_lazy()));
//! # let _ = client; Ok(()) }
//! ```
//!
//! What each layer does with a gRPC call (see `courier_core::grpc`):
//!
//! - **Retry** reads a trailers-only answer's `grpc-status`: UNAVAILABLE may change if asked
//!   again ([`RetryLayer::grpc_retryable_codes`](courier_retry::RetryLayer::grpc_retryable_codes));
//!   every other code is final, and an answer that sent its headers without a status has
//!   committed the call, which is then never retried (gRFC A6). Every gRPC call is a POST:
//!   it is repeated only when the caller says it is safe, per method or service
//!   ([`retry_safe_paths`](courier_retry::RetryLayer::retry_safe_paths)), per call (the
//!   [`RetrySafe`](courier_core::idempotency::RetrySafe) extension), or with an
//!   `Idempotency-Key`. `grpc-retry-pushback-ms` replaces the backoff; a negative or unreadable
//!   one means "do not retry".
//! - **The breaker** counts a trailers-only UNAVAILABLE as a failing answer
//!   ([`grpc_failure_codes`](courier_breaker::CircuitBreakerLayer::grpc_failure_codes)); other
//!   codes are the server answering on purpose.
//! - **The deadline** travels as `grpc-timeout` (the time left, per attempt), and
//!   `DeadlineScopeLayer` on a tonic server reads an incoming one.
//! - **Errors**: a call whose deadline passed fails with `Status::deadline_exceeded`, one our
//!   layers refused (open circuit, rate limit) with `Status::unavailable`, the reason in the
//!   message. The server's own statuses come back as the server sent them.
//! - The cache is off: gRPC calls are POSTs.
//!
//! Request messages are replayed from a copy of up to 64 KiB ([`ReplayBody`]): a unary or
//! server-streaming call's one message, or a client stream that has ended within that.

use crate::preset::{Courier, CourierLayer, PresetBody};
use crate::transport::{Classified, classified};
use bytes::Bytes;
use courier_core::classify::TransportError;
use courier_core::{
    AttemptTimedOut, BoxError, CircuitOpen, ConcurrencyLimited, DeadlineExceeded, RateLimited,
    cause_ref,
};
use courier_retry::ReplayBody;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::MapErr;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_service::Service;

impl CourierLayer {
    /// The preset for gRPC: every default of [`CourierLayer::new`] but the cache (gRPC calls
    /// are POSTs), and a breaker that opens on the count alone
    /// ([`CircuitBreakerLayer::new`](courier_breaker::CircuitBreakerLayer::new)): gRPC tells a
    /// service that is not there (UNAVAILABLE, the one code it counts) from a method that
    /// failed (INTERNAL, UNKNOWN, ...), so five UNAVAILABLEs in a row are the host's, not a
    /// path's. Wrap a channel with [`channel`](Self::channel).
    pub fn grpc() -> Self {
        Self::new()
            .cache(None)
            .circuit_breaker(courier_breaker::CircuitBreakerLayer::new())
    }

    /// The stack over a tonic channel to `origin` (any service of
    /// `http::Request<tonic::body::Body>`, such as `tonic::transport::Channel`), for a
    /// generated client: `GreeterClient::new(layer.channel(endpoint.uri().clone(), channel))`.
    ///
    /// `origin` is the channel's endpoint: tonic's clients send requests with a path only and
    /// the channel adds its scheme and host inside itself, so the stack puts them on first,
    /// for the breaker, the pacing and the budget to key their state by the host.
    pub fn channel<S>(&self, origin: http::Uri, channel: S) -> GrpcService<S> {
        GrpcService {
            inner: tower_layer::Layer::layer(self, GrpcTransport { inner: channel }),
            origin: http::uri::Parts::from(origin),
        }
    }
}

/// The stack over a tonic channel: what [`CourierLayer::channel`] makes. A service of
/// `http::Request<tonic::body::Body>`, as tonic's generated clients want, whose errors are
/// `tonic::Status` where courier refused the call.
#[derive(Debug)]
pub struct GrpcService<S> {
    inner: Courier<GrpcTransport<S>>,
    /// The scheme and authority put on requests that carry a path only.
    origin: http::uri::Parts,
}

impl<S: Clone> Clone for GrpcService<S> {
    fn clone(&self) -> Self {
        let mut origin = http::uri::Parts::default();
        origin.scheme.clone_from(&self.origin.scheme);
        origin.authority.clone_from(&self.origin.authority);
        Self {
            inner: self.inner.clone(),
            origin,
        }
    }
}

impl<S> GrpcService<S> {
    /// The preset's service inside.
    pub fn get_ref(&self) -> &Courier<GrpcTransport<S>> {
        &self.inner
    }

    /// The preset's service, unwrapped.
    pub fn into_inner(self) -> Courier<GrpcTransport<S>> {
        self.inner
    }
}

/// The response body of a [`GrpcService`]: the preset's, with a deadline that passes while
/// the messages stream turned into `Status::deadline_exceeded`.
pub type GrpcBody<B> = MapErr<PresetBody<B>, fn(BoxError) -> BoxError>;

impl<S, RB> Service<Request<tonic::body::Body>> for GrpcService<S>
where
    RB: http_body::Body,
    Courier<GrpcTransport<S>>: Service<
            Request<ReplayBody<tonic::body::Body>>,
            Response = Response<PresetBody<RB>>,
            Error = BoxError,
        >,
    PresetBody<RB>: http_body::Body<Error = BoxError>,
{
    type Response = Response<GrpcBody<RB>>;
    type Error = BoxError;
    type Future = GrpcFuture<
        <Courier<GrpcTransport<S>> as Service<Request<ReplayBody<tonic::body::Body>>>>::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(to_status)
    }

    fn call(&mut self, mut req: Request<tonic::body::Body>) -> Self::Future {
        if req.uri().authority().is_none() && self.origin.authority.is_some() {
            let mut parts = req.uri().clone().into_parts();
            parts.scheme.clone_from(&self.origin.scheme);
            parts.authority.clone_from(&self.origin.authority);
            // An origin that cannot complete the URI (no scheme) leaves it as it was.
            if let Ok(uri) = http::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
            }
        }
        GrpcFuture {
            inner: self.inner.call(req.map(ReplayBody::new)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`GrpcService`] call.
    pub struct GrpcFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, B> Future for GrpcFuture<F>
where
    F: Future<Output = Result<Response<B>, BoxError>>,
    B: http_body::Body<Error = BoxError>,
{
    type Output = Result<Response<MapErr<B, fn(BoxError) -> BoxError>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(self.project().inner.poll(cx));
        Poll::Ready(match result {
            Ok(resp) => Ok(resp.map(|body| body.map_err(to_status as fn(BoxError) -> BoxError))),
            Err(e) => Err(to_status(e)),
        })
    }
}

/// courier's refusals as the `tonic::Status` a gRPC caller matches on; any other error as it
/// is (tonic reads transport errors itself).
pub fn to_status(err: BoxError) -> BoxError {
    let status = if cause_ref::<DeadlineExceeded>(&*err).is_some()
        || cause_ref::<AttemptTimedOut>(&*err).is_some()
    {
        tonic::Status::deadline_exceeded(err.to_string())
    } else if cause_ref::<CircuitOpen>(&*err).is_some()
        || cause_ref::<RateLimited>(&*err).is_some()
        || cause_ref::<ConcurrencyLimited>(&*err).is_some()
    {
        tonic::Status::unavailable(err.to_string())
    } else {
        return err;
    };
    Box::new(status)
}

/// The transport under the preset for gRPC: hands each request to the channel with its body
/// as a `tonic::body::Body`, and its failures up as a [`TransportError`] of the kind
/// [`classify`](crate::transport::classify) gives them.
#[derive(Debug, Clone)]
pub struct GrpcTransport<S> {
    inner: S,
}

impl<S> GrpcTransport<S> {
    /// The channel.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for GrpcTransport<S>
where
    S: Service<Request<tonic::body::Body>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<RB>;
    type Error = TransportError;
    type Future = TransportFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(classified)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        Classified::new(self.inner.call(req.map(tonic::body::Body::new)))
    }
}

/// The future of a [`GrpcTransport`] call: the channel's, its failure classified.
pub type TransportFuture<F> = Classified<F>;
