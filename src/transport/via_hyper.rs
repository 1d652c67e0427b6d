//! A pooled hyper-util client, shared behind an `Arc`.

use super::{CONNECT_TIMEOUT, default_user_agent, set_user_agent};
use http::HeaderValue;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The connector of [`hyper_client`]: HTTP and HTTPS with the `rustls` feature (the default),
/// plain HTTP without it.
#[cfg(not(feature = "rustls"))]
pub type Connector = HttpConnector;

/// The connector of [`hyper_client`]: HTTP and HTTPS with the `rustls` feature (the default),
/// plain HTTP without it.
#[cfg(feature = "rustls")]
pub type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The hyper-util client that [`hyper_client`] builds.
pub type HyperClient<B> = Client<Connector, B>;

/// A [`HyperClient`] shared behind an `Arc`: the transport of
/// [`CourierLayer::hyper`](crate::CourierLayer::hyper). It puts a `User-Agent` on every
/// request that has none ([`DEFAULT_USER_AGENT`](super::DEFAULT_USER_AGENT) unless set with
/// [`user_agent`](Self::user_agent)), and fails with a [`TransportError`](courier_core::classify::TransportError)
/// that says what kind of failure the client's error is ([Failures](super#failures)).
///
/// The retry layer keeps a clone of the stack below it for each call (to drive later
/// attempts); cloning this is one reference count, where cloning the client itself copies
/// 300 bytes and counts a dozen references. The pool, the connector and the settings are
/// those of the client: clones share one connection pool.
pub struct HyperService<B> {
    client: Arc<HyperClient<B>>,
    user_agent: Option<HeaderValue>,
}

// === impl HyperService ===

impl<B> HyperService<B> {
    /// Shares `client`, sending [`DEFAULT_USER_AGENT`](super::DEFAULT_USER_AGENT).
    ///
    /// The agent is then this service's own: [`CourierLayer::service`](crate::CourierLayer::service)
    /// wraps it as it is, and the layer's [`user_agent`](crate::CourierLayer::user_agent) does
    /// not reach it. Set it with [`user_agent`](Self::user_agent), or let
    /// [`CourierLayer::hyper_with`](crate::CourierLayer::hyper_with) make the service.
    pub fn new(client: HyperClient<B>) -> Self {
        Self {
            client: Arc::new(client),
            user_agent: default_user_agent(),
        }
    }

    /// The `User-Agent` put on a request that has none, or `None` to add none.
    /// Defaults to [`DEFAULT_USER_AGENT`](super::DEFAULT_USER_AGENT).
    pub fn user_agent(mut self, user_agent: impl Into<Option<HeaderValue>>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// The client.
    pub fn get_ref(&self) -> &HyperClient<B> {
        &self.client
    }
}

impl<B> From<HyperClient<B>> for HyperService<B> {
    fn from(client: HyperClient<B>) -> Self {
        Self::new(client)
    }
}

impl<B> Clone for HyperService<B> {
    fn clone(&self) -> Self {
        Self {
            client: Arc::clone(&self.client),
            user_agent: self.user_agent.clone(),
        }
    }
}

impl<B> std::fmt::Debug for HyperService<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperService")
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

impl<B> tower_service::Service<http::Request<B>> for HyperService<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<courier_core::BoxError>,
{
    type Response = <HyperClient<B> as tower_service::Service<http::Request<B>>>::Response;
    type Error = courier_core::classify::TransportError;
    type Future =
        super::Classified<<HyperClient<B> as tower_service::Service<http::Request<B>>>::Future>;

    /// Always ready, as the client is: the pool makes room (or a connection) per request.
    #[inline]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        set_user_agent(&mut req, self.user_agent.as_ref());
        super::Classified::new(self.client.request(req))
    }
}

/// A pooled hyper-util client for the preset: connect timeout 3.05 s, `TCP_NODELAY`, idle
/// connections kept 90 s, HTTP/1.1 and HTTP/2 (negotiated by ALPN over TLS), and hyper's own
/// retry of canceled requests off.
///
/// With the `rustls` feature (the default) it speaks HTTPS too, trusting what the operating
/// system trusts. Where the system has no trust store at all, plain HTTP still works and every
/// HTTPS call fails with a TLS error that says so.
#[cfg_attr(
    feature = "rustls",
    doc = "\nIts TLS settings are [`tls::client_config`](super::tls::client_config) with no \
           extra roots; [`hyper_client_with_tls`] takes settings of yours."
)]
pub fn hyper_client<B>() -> HyperClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    #[cfg(feature = "rustls")]
    let connector = https_connector(super::tls::platform_config());
    #[cfg(not(feature = "rustls"))]
    let connector = http_connector();
    build(connector)
}

/// [`hyper_client`] with TLS settings of your own, typically from
/// [`tls::client_config`](super::tls::client_config) with a private CA added, or
/// [`tls::client_config_with_identity`](super::tls::client_config_with_identity) for mutual
/// TLS. ALPN is set here (HTTP/2, then HTTP/1.1); the rest of `config` is used as given. Give
/// the client to [`CourierLayer::hyper_with`](crate::CourierLayer::hyper_with).
#[cfg(feature = "rustls")]
pub fn hyper_client_with_tls<B>(config: rustls::ClientConfig) -> HyperClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    build(https_connector(config))
}

fn http_connector() -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    http
}

#[cfg(feature = "rustls")]
fn https_connector(config: rustls::ClientConfig) -> Connector {
    let mut http = http_connector();
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http)
}

fn build<B>(connector: Connector) -> HyperClient<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .retry_canceled_requests(false)
        .build(connector)
}
