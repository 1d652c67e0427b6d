//! Transports for the preset: a hyper-util client built for you, and a `reqwest::Client` as a
//! tower service. Both have their own retries switched off (courier retries in one place only),
//! speak HTTPS by default (feature `rustls`), and send a `User-Agent` when the request has none.
//!
//! # HTTPS
//!
//! With the `rustls` feature (in the default set) both transports speak HTTPS: rustls, and the
//! server's certificate checked against the operating system's trust store through
//! `rustls-platform-verifier`, the verifier reqwest uses.
#![cfg_attr(
    feature = "rustls",
    doc = "Trust anchors of your own (a private CA) and a client identity for mutual TLS are \
           settings made once by [`tls`] and given to either transport: its module docs show \
           how."
)]
//! A certificate that fails the check (unknown issuer, wrong host name, expired), or a
//! handshake the server refuses (no client certificate, or one it does not trust), ends the
//! call with an error of kind
//! [`FailureKind::Tls`](courier_core::FailureKind::Tls): never retried, and no mark against the
//! host in the circuit breaker, since asking again cannot change it.
//!
//! Under TLS 1.3 a server judges a client's certificate after the client has finished its side
//! of the handshake and sent its request: the refusal (a TLS alert) comes where the answer
//! would. A server that closes such a connection without reading what was sent may reset it
//! before the alert is read, and the attempt then fails as a `read` failure, retried as one.
//!
//! `default-features = false, features = ["full"]` builds courier with no TLS code: both
//! transports then speak plain HTTP only.
//!
//! # Failures
//!
//! courier-core classifies what every build has (its refusals, `std::io::Error` kinds, tokio's
//! `Elapsed`, [`TransportError`]) and never looks at an error's text. [`classify`] knows the
//! error types of the clients the facade is built with too, by typed downcasts:
//!
//! | error | kind |
//! | --- | --- |
//! | hyper-util's legacy client error, `is_connect()` | `connect`, or `tls` when a rustls error is in its chain |
//! | `hyper::Error`: the request's own body failed (`is_user()`, `is_body_write_aborted()`) | `local` |
//! | `hyper::Error`: `is_timeout()` | `timeout` |
//! | `hyper::Error`: `is_incomplete_message()`, `is_canceled()`, `is_closed()`, `is_parse()` | `read`, or `tls` when a rustls error is in its chain (a TLS 1.3 server refusing the client's certificate ends the connection the request was on) |
//! | `reqwest::Error`: `is_builder()`, or a request body that failed in its chain | `local` |
//! | `reqwest::Error`: `is_connect()` | `connect`, or `tls` when a rustls error is in its chain |
//! | `reqwest::Error`: `is_timeout()` | `timeout` |
//! | `rustls::Error` (feature `rustls`), alone or as an I/O error's payload | `tls` |
//! | tower's `timeout::error::Elapsed` | `timeout` |
//!
//! Any other error of these clients is about a connection they had: the walk goes on to its
//! causes, where an I/O kind that would mean "nothing was sent" (host unreachable, not
//! connected) is a read failure, since hyper reports those kinds on a socket that has
//! already written the request. A tonic channel's errors carry hyper's and the I/O errors
//! inside them, and are read through to those.
//!
//! The transports here ([`HyperService`], [`ReqwestService`], the gRPC channel of
//! `CourierLayer::channel`) hand every failure up as a [`TransportError`] of the kind
//! [`classify`] gives it, so that every layer above reads the same kind whatever it was built
//! with.
//!
//! ## Over a client of your own
//!
//! A courier layer over a client the facade did not wrap sees the client's errors as they are.
//! Map them with [`classified`] where they are made:
//!
//! ```
//! # #[cfg(all(feature = "hyper-client", feature = "retry"))] {
//! use courier::hyper_util::client::legacy::{Client, Error};
//! use courier::hyper_util::rt::TokioExecutor;
//! use courier::retry::RetryLayer;
//! use courier::transport::classified;
//! use tower::ServiceBuilder;
//!
//! let client = Client::builder(TokioExecutor::new())
//!     .retry_canceled_requests(false)
//!     .build_http::<http_body_util::Full<bytes::Bytes>>();
//! let svc = ServiceBuilder::new()
//!     .layer(RetryLayer::new())
//!     .map_err(classified::<Error>)
//!     .service(client);
//! # fn is_service<S>(_: &S)
//! # where
//! #     S: tower::Service<http::Request<http_body_util::Full<bytes::Bytes>>, Error = courier::core::BoxError>,
//! # {}
//! # is_service(&svc); }
//! ```
//!
//! # User-Agent
//!
//! [`HyperService`] and [`ReqwestService`] send [`DEFAULT_USER_AGENT`] (`courier/<version>`) on
//! every request that carries no `User-Agent` of its own; many APIs refuse a request without
//! one. Change it with their `user_agent` setter, or on the preset with
//! [`CourierLayer::user_agent`](crate::CourierLayer::user_agent); `None` sends none.

mod errors;
#[cfg(feature = "rustls")]
pub mod tls;

use courier_core::classify::TransportError;
#[cfg(feature = "hyper-client")]
mod via_hyper;
#[cfg(feature = "reqwest")]
mod via_reqwest;

pub use self::errors::{classified, classify};
#[cfg(feature = "rustls")]
pub use self::via_hyper::hyper_client_with_tls;
#[cfg(feature = "hyper-client")]
pub use self::via_hyper::{Connector, HyperClient, HyperService, hyper_client};
#[cfg(all(feature = "reqwest", feature = "rustls"))]
pub use self::via_reqwest::reqwest_client_builder_with_tls;
#[cfg(feature = "reqwest")]
pub use self::via_reqwest::{ReqwestService, ResponseFuture, reqwest_client_builder};

/// The connect timeout of the clients built here: just above a multiple of TCP's 3 s initial
/// retransmission timeout, so a lost SYN gets its one retransmission.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(3050);

/// The `User-Agent` the transports send on a request that has none: `courier/<version>`.
pub const DEFAULT_USER_AGENT: &str = concat!("courier/", env!("CARGO_PKG_VERSION"));

/// [`DEFAULT_USER_AGENT`] as a header value.
#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
pub(crate) fn default_user_agent() -> Option<http::HeaderValue> {
    Some(http::HeaderValue::from_static(DEFAULT_USER_AGENT))
}

/// Puts `user_agent` on `req` unless it carries a `User-Agent` already.
#[cfg(any(feature = "hyper-client", feature = "reqwest"))]
#[inline]
fn set_user_agent<B>(req: &mut http::Request<B>, user_agent: Option<&http::HeaderValue>) {
    if let Some(value) = user_agent
        && let http::header::Entry::Vacant(slot) = req.headers_mut().entry(http::header::USER_AGENT)
    {
        slot.insert(value.clone());
    }
}

pin_project_lite::pin_project! {
    /// The future of a transport here ([`HyperService`], the gRPC channel's): the client's, its
    /// failure handed up as a [`TransportError`] of the kind [`classify`] gives it.
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub struct Classified<F> {
        #[pin]
        inner: F,
    }
}

// === impl Classified ===

impl<F> Classified<F> {
    #[cfg_attr(not(any(feature = "hyper-client", feature = "grpc")), allow(dead_code))]
    pub(crate) const fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F, T, E> std::future::Future for Classified<F>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: Into<courier_core::BoxError>,
{
    type Output = Result<T, TransportError>;

    #[inline]
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(classified)
    }
}
