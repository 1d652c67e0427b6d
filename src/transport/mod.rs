//! Transports for the preset: a hyper-util client built for you, and a `reqwest::Client` as a
//! tower service. Both have their own retries switched off (courier retries in one place only),
//! speak HTTPS by default (feature `rustls`), and send a `User-Agent` when the request has none.
//!
//! # HTTPS
//!
//! With the `rustls` feature (in the default set) both transports speak HTTPS: rustls, and the
//! server's certificate checked against the operating system's trust store through
//! `rustls-platform-verifier`, the verifier reqwest uses. [`tls::client_config`] adds trust
//! anchors of your own (a private CA) for the hyper client; `reqwest::ClientBuilder::tls_certs_merge`
//! does the same for reqwest. A certificate that fails the check (unknown issuer, wrong host name,
//! expired) ends the call with an error of kind
//! [`FailureKind::Tls`](courier_core::FailureKind::Tls): never retried, and no mark against the
//! host in the circuit breaker, since asking again cannot change it.
//!
//! `default-features = false, features = ["full"]` builds courier with no TLS code: both
//! transports then speak plain HTTP only.
//!
//! # User-Agent
//!
//! [`HyperService`] and [`ReqwestService`] send [`DEFAULT_USER_AGENT`] (`courier/<version>`) on
//! every request that carries no `User-Agent` of its own; many APIs refuse a request without
//! one. Change it with their `user_agent` setter, or on the preset with
//! [`CourierLayer::user_agent`](crate::CourierLayer::user_agent); `None` sends none.

#[cfg(feature = "rustls")]
pub mod tls;
#[cfg(feature = "hyper-client")]
mod via_hyper;
#[cfg(feature = "reqwest")]
mod via_reqwest;

#[cfg(feature = "rustls")]
pub use self::via_hyper::hyper_client_with_tls;
#[cfg(feature = "hyper-client")]
pub use self::via_hyper::{Connector, HyperClient, HyperService, hyper_client};
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
