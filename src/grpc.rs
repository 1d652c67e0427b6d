//! gRPC through the preset: a tonic `Channel` gets a deadline, safe retries, a breaker and
//! pacing, and its callers keep matching on `tonic::Status`.
//!
//! ```no_run
//! use courier::CourierLayer;
//! use courier::grpc::GrpcSafe;
//! use courier::retry::RetryLayer;
//! # mod greeter { pub struct GreeterClient<T>(T); impl<T> GreeterClient<T> { pub fn new(t: T) -> Self { Self(t) } } }
//! # use greeter::GreeterClient;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051");
//! // Only the caller knows which methods are safe to repeat. The service's name is the
//! // generated code's (`greeter_server::SERVICE_NAME`, or `NamedService::NAME`).
//! let safe = GrpcSafe::new().methods("helloworld.Greeter", ["SayHello"])?;
//! let layer = CourierLayer::grpc().retry(RetryLayer::new().retry_safe_paths(safe));
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
//!   ([`GrpcSafe`], given to
//!   [`retry_safe_paths`](courier_retry::RetryLayer::retry_safe_paths)), per call (the
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
//! - **The records** ([`Attempts`], on the response's extensions) give each attempt's gRPC
//!   code: a trailers-only answer's at once (`grpc UNAVAILABLE -> retry in 300 ms
//!   (pushback)`), and an answer that streamed its messages the code of its trailers once the
//!   body has been read to them (`grpc OK -> stop (final_status)`; a unary call's reply has
//!   been read when the generated client returns it).
//! - **The spans**: the attempt spans carry `rpc.grpc.status_code`, and the call span its
//!   last attempt's. A trailers-only answer's code is recorded at once; an answer that
//!   streams its messages leaves its last attempt's span and the call span open until its
//!   trailers are read, which record their code on them and close them (a body dropped
//!   before its trailers closes them without one). See `courier::telemetry`.
//! - The cache is off: gRPC calls are POSTs.
//!
//! Request messages are replayed from a copy of up to 64 KiB ([`ReplayBody`]): a unary or
//! server-streaming call's one message, or a client stream that has ended within that.

use crate::preset::{Courier, CourierLayer, PresetBody};
use crate::transport::{Classified, classified};
use bytes::Bytes;
use courier_core::classify::TransportError;
use courier_core::extensions::GrpcTrailers;
use courier_core::grpc::{GRPC_STATUS, GrpcCode, is_grpc, status_in_headers};
use courier_core::{
    AttemptTimedOut, Attempts, BoxError, CircuitOpen, ConcurrencyLimited, DeadlineExceeded,
    InvalidConfig, RateLimited, cause_ref,
};
use courier_retry::ReplayBody;
use courier_retry::future::{GrpcStatusSpans, ReadsGrpcTrailers};
use http::{Request, Response};
use http_body::Frame;
use std::collections::BTreeMap;
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
    pub fn channel<S: Clone>(&self, origin: http::Uri, channel: S) -> GrpcService<S> {
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

pin_project_lite::pin_project! {
    /// The response body of a [`GrpcService`]: the preset's (`B`), with a deadline that passes
    /// while the messages stream turned into `Status::deadline_exceeded`, and the
    /// `grpc-status` of its trailers put on the call's last attempt record (its
    /// [`AttemptOutcome`](crate::core::extensions::AttemptOutcome)) and on its spans, which
    /// close then ([`GrpcStatusSpans`]).
    pub struct GrpcBody<B> {
        #[pin]
        inner: B,
        trailers: Option<GrpcTrailers>,
        spans: Option<GrpcStatusSpans>,
    }
}

impl<B> std::fmt::Debug for GrpcBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcBody")
            .field("awaiting_trailers", &self.trailers.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> http_body::Body for GrpcBody<B>
where
    B: http_body::Body<Error = BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        Poll::Ready(match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = trailers.get(GRPC_STATUS).and_then(GrpcCode::from_header);
                    if let Some(code) = code
                        && let Some(record) = this.trailers.take()
                    {
                        record.complete(code);
                    }
                    // The spans close at the trailers, with their code when they have one.
                    if let Some(spans) = this.spans.take()
                        && let Some(code) = code
                    {
                        spans.complete(code);
                    }
                }
                Some(Ok(frame))
            }
            Some(Err(e)) => Some(Err(to_status(e))),
            None => {
                // The end without trailers: the spans close without a code.
                *this.spans = None;
                None
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

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
    type Response = Response<GrpcBody<PresetBody<RB>>>;
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
        // The answer's trailers are read here (`GrpcBody`): its spans may wait for them.
        req.extensions_mut().insert(ReadsGrpcTrailers);
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
    type Output = Result<Response<GrpcBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(self.project().inner.poll(cx));
        Poll::Ready(match result {
            Ok(mut resp) => {
                // An answer that sent its headers without a status ends with it in its
                // trailers: the last record waits for them.
                // Its spans, the retry layer's, are kept open for them too.
                let headers = resp.headers();
                let (trailers, spans) = if is_grpc(headers) && status_in_headers(headers).is_none()
                {
                    let extensions = resp.extensions_mut();
                    (
                        extensions
                            .get_mut::<Attempts>()
                            .and_then(Attempts::await_grpc_trailers),
                        extensions.remove::<GrpcStatusSpans>(),
                    )
                } else {
                    (None, None)
                };
                Ok(resp.map(|inner| GrpcBody {
                    inner,
                    trailers,
                    spans,
                }))
            }
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

/// gRPC methods that are safe to repeat, named as the generated code names them: what
/// [`RetryLayer::retry_safe_paths`](courier_retry::RetryLayer::retry_safe_paths) (or
/// [`Classifier::retry_safe_paths`](courier_core::Classifier::retry_safe_paths)) takes.
///
/// A service is named by its full name, `package.Service`: the generated server module's
/// `SERVICE_NAME`, or tonic's `NamedService::NAME` of the generated server
/// (`<GreeterServer<()> as NamedService>::NAME`); a method by its name in the `.proto`
/// (`SayHello`, not the generated Rust method `say_hello`). A name that cannot be part of a
/// gRPC method's path (`/package.Service/Method`) is refused when it is given, so a slip
/// cannot quietly leave a method unmarked.
///
/// ```
/// use courier::grpc::GrpcSafe;
/// use courier::retry::RetryLayer;
///
/// # fn main() -> Result<(), courier::core::InvalidConfig> {
/// let safe = GrpcSafe::new()
///     .methods("helloworld.Greeter", ["SayHello", "ListGreetings"])?
///     .service("helloworld.Health")?;
/// assert_eq!(
///     safe.paths(),
///     [
///         "/helloworld.Greeter/SayHello",
///         "/helloworld.Greeter/ListGreetings",
///         "/helloworld.Health/",
///     ]
/// );
/// let retry = RetryLayer::new().retry_safe_paths(safe);
/// # let _ = retry;
///
/// // A path where a name belongs is refused.
/// assert!(GrpcSafe::new().methods("helloworld.Greeter", ["/helloworld.Greeter/SayHello"]).is_err());
/// assert!(GrpcSafe::new().methods("/helloworld.Greeter/", ["SayHello"]).is_err());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrpcSafe {
    paths: Vec<String>,
    /// The services and their methods of a descriptor set, once [`known`](Self::known) gave
    /// one: every name is checked against them.
    known: Option<BTreeMap<String, Vec<String>>>,
}

impl GrpcSafe {
    /// No method yet.
    pub const fn new() -> Self {
        Self {
            paths: Vec::new(),
            known: None,
        }
    }

    /// Checks every name, given before or after, against the services and methods that
    /// `descriptor_set` describes: the `.proto` files compiled into an encoded
    /// `FileDescriptorSet`, as tonic's build tooling writes it
    /// (`.file_descriptor_set_path(..)`) and `tonic::include_file_descriptor_set!` includes
    /// it, the same bytes a reflection service serves. A name spelt as no method of the set
    /// (`SayHelo`) is refused, with the methods the service has, instead of leaving the method
    /// quietly unmarked.
    ///
    /// ```text
    /// // build.rs: tonic_prost_build::configure()
    /// //     .file_descriptor_set_path(out_dir.join("helloworld_descriptor.bin"))
    /// //     .compile_protos(&["proto/helloworld.proto"], &["proto"])?;
    /// const DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("helloworld_descriptor");
    ///
    /// let safe = GrpcSafe::new()
    ///     .known(DESCRIPTOR_SET)?
    ///     .methods("helloworld.Greeter", ["SayHello"])?;
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when `descriptor_set` is no encoded `FileDescriptorSet`, or a name
    /// given before is not in it.
    pub fn known(mut self, descriptor_set: &[u8]) -> Result<Self, InvalidConfig> {
        let set = <descriptor::FileDescriptorSet as prost::Message>::decode(descriptor_set)
            .map_err(|e| {
                InvalidConfig::new(
                    "an encoded FileDescriptorSet",
                    format_args!("bytes that do not decode as one ({e})"),
                    "the file tonic's build tooling writes with `file_descriptor_set_path`",
                )
            })?;
        self.known = Some(set.services());
        for path in &self.paths {
            let (service, method) = path
                .trim_start_matches('/')
                .split_once('/')
                .expect("a path made here is /service/ or /service/method");
            self.check_known(service, (!method.is_empty()).then_some(method))?;
        }
        Ok(self)
    }

    /// With a descriptor set, whether it has `service` (and its `method`).
    fn check_known(&self, service: &str, method: Option<&str>) -> Result<(), InvalidConfig> {
        let Some(known) = &self.known else {
            return Ok(());
        };
        let Some(methods) = known.get(service) else {
            let services: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(InvalidConfig::new(
                "a service of the descriptor set",
                format_args!("{service:?} (it has {})", services.join(", ")),
                "the service's full name as the .proto declares it",
            ));
        };
        match method {
            Some(method) if !methods.iter().any(|m| m == method) => Err(InvalidConfig::new(
                "a method of the service in the descriptor set",
                format_args!("{method:?} ({service} has {})", methods.join(", ")),
                "the rpc's name as the .proto spells it",
            )),
            _ => Ok(()),
        }
    }

    /// These methods of `service`: `/service/Method` each.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when `service` is no full service name (dot-separated identifiers),
    /// a method is no identifier, or there is no method (a whole service is
    /// [`service`](Self::service)); with a [descriptor set](Self::known), when the service or
    /// a method is not in it.
    pub fn methods<M: AsRef<str>>(
        mut self,
        service: &str,
        methods: impl IntoIterator<Item = M>,
    ) -> Result<Self, InvalidConfig> {
        check_service(service)?;
        let before = self.paths.len();
        for method in methods {
            let method = method.as_ref();
            if !is_identifier(method) {
                return Err(InvalidConfig::new(
                    "a gRPC method's name as the .proto spells it",
                    format_args!("{method:?}"),
                    "the rpc's name alone, e.g. \"SayHello\"",
                ));
            }
            self.check_known(service, Some(method))?;
            self.paths.push(format!("/{service}/{method}"));
        }
        if self.paths.len() == before {
            return Err(InvalidConfig::new(
                "at least one method",
                format_args!("none of {service:?}"),
                "`service(name)` for every method of a service",
            ));
        }
        Ok(self)
    }

    /// These methods of the service `S` names: the generated server type's own name
    /// (`tonic::server::NamedService::NAME`, so a service renamed in its `.proto` cannot be
    /// missed), with [`methods`](Self::methods)' checks.
    ///
    /// ```
    /// # use courier::grpc::GrpcSafe;
    /// // What tonic generates for `package helloworld; service Greeter { .. }`, server side.
    /// struct GreeterServer<T>(T);
    /// impl<T> tonic::server::NamedService for GreeterServer<T> {
    ///     const NAME: &'static str = "helloworld.Greeter";
    /// }
    ///
    /// # fn main() -> Result<(), courier::core::InvalidConfig> {
    /// let safe = GrpcSafe::new().named::<GreeterServer<()>, _>(["SayHello"])?;
    /// assert_eq!(safe.paths(), ["/helloworld.Greeter/SayHello"]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`methods`](Self::methods).
    pub fn named<S: tonic::server::NamedService, M: AsRef<str>>(
        self,
        methods: impl IntoIterator<Item = M>,
    ) -> Result<Self, InvalidConfig> {
        self.methods(S::NAME, methods)
    }

    /// Every method of `service`: `/service/`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when `service` is no full service name (dot-separated identifiers);
    /// with a [descriptor set](Self::known), when it is not in it.
    pub fn service(mut self, service: &str) -> Result<Self, InvalidConfig> {
        check_service(service)?;
        self.check_known(service, None)?;
        self.paths.push(format!("/{service}/"));
        Ok(self)
    }

    /// The paths marked, in the order given.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }
}

impl IntoIterator for GrpcSafe {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.paths.into_iter()
    }
}

/// A service's full name: identifiers joined by dots (`helloworld.Greeter`, or `Greeter`
/// without a package).
fn check_service(service: &str) -> Result<(), InvalidConfig> {
    if service.split('.').all(is_identifier) {
        Ok(())
    } else {
        Err(InvalidConfig::new(
            "a gRPC service's full name, package.Service",
            format_args!("{service:?}"),
            "the generated server's SERVICE_NAME or NamedService::NAME",
        ))
    }
}

/// A `.proto` identifier: a letter or `_`, then letters, digits and `_`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The few fields of protobuf's descriptor messages that name services and methods; the rest
/// of an encoded set is skipped as unknown fields.
mod descriptor {
    use std::collections::BTreeMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct FileDescriptorSet {
        #[prost(message, repeated, tag = "1")]
        pub(super) file: Vec<FileDescriptorProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct FileDescriptorProto {
        #[prost(string, optional, tag = "2")]
        pub(super) package: Option<String>,
        #[prost(message, repeated, tag = "6")]
        pub(super) service: Vec<ServiceDescriptorProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ServiceDescriptorProto {
        #[prost(string, optional, tag = "1")]
        pub(super) name: Option<String>,
        #[prost(message, repeated, tag = "2")]
        pub(super) method: Vec<MethodDescriptorProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct MethodDescriptorProto {
        #[prost(string, optional, tag = "1")]
        pub(super) name: Option<String>,
    }

    impl FileDescriptorSet {
        /// Each service by its full name (`package.Service`), with its methods' names.
        pub(super) fn services(&self) -> BTreeMap<String, Vec<String>> {
            let mut out = BTreeMap::new();
            for file in &self.file {
                for service in &file.service {
                    let name = service.name.as_deref().unwrap_or_default();
                    let full = match file.package.as_deref() {
                        Some(package) if !package.is_empty() => format!("{package}.{name}"),
                        _ => name.to_owned(),
                    };
                    let methods = service
                        .method
                        .iter()
                        .filter_map(|m| m.name.clone())
                        .collect();
                    out.insert(full, methods);
                }
            }
            out
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::grpc::GrpcSafe;
        use prost::Message;

        fn set() -> Vec<u8> {
            let method = |name: &str| MethodDescriptorProto {
                name: Some(name.to_owned()),
            };
            FileDescriptorSet {
                file: vec![FileDescriptorProto {
                    package: Some("helloworld".to_owned()),
                    service: vec![
                        ServiceDescriptorProto {
                            name: Some("Greeter".to_owned()),
                            method: vec![method("SayHello"), method("ListGreetings")],
                        },
                        ServiceDescriptorProto {
                            name: Some("Health".to_owned()),
                            method: vec![method("Check")],
                        },
                    ],
                }],
            }
            .encode_to_vec()
        }

        #[test]
        fn names_are_checked_against_the_descriptor_set_before_and_after() {
            let safe = GrpcSafe::new()
                .known(&set())
                .unwrap()
                .methods("helloworld.Greeter", ["SayHello"])
                .unwrap()
                .service("helloworld.Health")
                .unwrap();
            assert_eq!(
                safe.paths(),
                ["/helloworld.Greeter/SayHello", "/helloworld.Health/"]
            );

            let err = GrpcSafe::new()
                .known(&set())
                .unwrap()
                .methods("helloworld.Greeter", ["SayHelo"])
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                "invalid setting: a method of the service in the descriptor set, got \"SayHelo\" \
                 (helloworld.Greeter has SayHello, ListGreetings); use the rpc's name as the \
                 .proto spells it"
            );
            let err = GrpcSafe::new()
                .known(&set())
                .unwrap()
                .service("helloworld.Greter")
                .unwrap_err();
            assert!(
                err.given()
                    .contains("it has helloworld.Greeter, helloworld.Health"),
                "{err}"
            );

            // Names given before the set are checked when it comes.
            let before = GrpcSafe::new()
                .methods("helloworld.Greeter", ["SayHelo"])
                .unwrap();
            assert!(before.known(&set()).is_err());
            let before = GrpcSafe::new().service("helloworld.Health").unwrap();
            assert!(before.known(&set()).is_ok());

            // Not a descriptor set at all.
            let err = GrpcSafe::new().known(b"\xff\xff\xff").unwrap_err();
            assert_eq!(err.requirement(), "an encoded FileDescriptorSet");
        }
    }
}
