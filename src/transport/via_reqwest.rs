//! A `reqwest::Client` as a tower service.

use super::{default_user_agent, set_user_agent};
use courier_core::BoxError;
use http::HeaderValue;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A `reqwest::Client` as a `tower::Service<http::Request<B>>`, answering
/// `http::Response<reqwest::Body>`.
///
/// It fails with a [`TransportError`](courier_core::classify::TransportError) (boxed) that says what kind of
/// failure reqwest's error is ([Failures](super#failures)).
///
/// Build the client with [`reqwest_client_builder`] (or switch its retries off yourself with
/// `.retry(reqwest::retry::never())`) so that courier's retry layer is the only one.
///
/// # Clone
///
/// Cheap: `reqwest::Client` is an `Arc` inside; clones share its connection pool.
///
/// `B` is the request body type, fixed per service as hyper's client fixes it, so that type
/// inference through a deep stack stays cheap.
pub struct ReqwestService<B = http_body_util::Full<bytes::Bytes>> {
    client: reqwest::Client,
    user_agent: Option<HeaderValue>,
    _body: std::marker::PhantomData<fn(B)>,
}

impl<B> Clone for ReqwestService<B> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            user_agent: self.user_agent.clone(),
            _body: std::marker::PhantomData,
        }
    }
}

impl<B> std::fmt::Debug for ReqwestService<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqwestService")
            .field("client", &self.client)
            .field("user_agent", &self.user_agent)
            .finish()
    }
}

impl<B> ReqwestService<B> {
    /// Wraps `client`, sending [`DEFAULT_USER_AGENT`](super::DEFAULT_USER_AGENT) on every
    /// request that has no `User-Agent`.
    ///
    /// That includes a client built with a `user_agent` of its own: the request's header wins
    /// over the client's. To keep the client's, switch this one off with
    /// [`user_agent(None)`](Self::user_agent).
    ///
    /// The agent is then this service's own: [`CourierLayer::service`](crate::CourierLayer::service)
    /// wraps it as it is, and the layer's [`user_agent`](crate::CourierLayer::user_agent) does
    /// not reach it. Set it with [`user_agent`](Self::user_agent), or let
    /// [`CourierLayer::reqwest`](crate::CourierLayer::reqwest) make the service.
    pub fn new(client: reqwest::Client) -> Self {
        Self {
            client,
            user_agent: default_user_agent(),
            _body: std::marker::PhantomData,
        }
    }

    /// The `User-Agent` put on a request that has none, or `None` to add none.
    /// Defaults to [`DEFAULT_USER_AGENT`](super::DEFAULT_USER_AGENT).
    pub fn user_agent(mut self, user_agent: impl Into<Option<HeaderValue>>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// A service over a client from [`reqwest_client_builder`].
    ///
    /// # Errors
    ///
    /// When reqwest cannot build its client (its TLS backend failed to start).
    pub fn with_defaults() -> Result<Self, reqwest::Error> {
        Ok(Self::new(reqwest_client_builder().build()?))
    }

    /// The client.
    pub const fn get_ref(&self) -> &reqwest::Client {
        &self.client
    }

    /// The client, mutably.
    pub fn get_mut(&mut self) -> &mut reqwest::Client {
        &mut self.client
    }

    /// Unwraps the client.
    pub fn into_inner(self) -> reqwest::Client {
        self.client
    }
}

/// A `reqwest::ClientBuilder` with courier's transport defaults: connect timeout 3.05 s,
/// `TCP_NODELAY`, reqwest's own retries off, and redirects not followed.
#[cfg_attr(
    feature = "rustls",
    doc = "\nIts HTTPS is reqwest's own, checked against the operating system's trust store; \
           [`reqwest_client_builder_with_tls`] gives it TLS settings of yours instead."
)]
///
/// A redirect comes back to the caller as the 3xx it is, as over hyper: followed inside the
/// transport, it would be unseen by the layers above, which key their breakers, buckets
/// and cache entries by the host asked, and by pagination, which checks the origin of every
/// page it is sent to. Set a `reqwest::redirect::Policy` on the builder to follow them
/// anyway.
pub fn reqwest_client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(super::CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
}

/// [`reqwest_client_builder`] with TLS settings of your own, typically from
/// [`tls::client_config`](super::tls::client_config) or
/// [`tls::client_config_with_identity`](super::tls::client_config_with_identity): the
/// settings [`hyper_client_with_tls`](super::hyper_client_with_tls) takes, so that both
/// transports trust the same roots and present the same client identity. ALPN is set here
/// (HTTP/2, then HTTP/1.1); the rest of `config` is used as given, and reqwest's own TLS
/// settings on the builder (`tls_certs_merge`, `identity` and the like) are then unused.
#[cfg(feature = "rustls")]
pub fn reqwest_client_builder_with_tls(mut config: rustls::ClientConfig) -> reqwest::ClientBuilder {
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest_client_builder().tls_backend_preconfigured(config)
}

impl<B> tower_service::Service<http::Request<B>> for ReqwestService<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<reqwest::Body>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        set_user_agent(&mut req, self.user_agent.as_ref());
        let client = self.client.clone();
        let req = req.map(reqwest::Body::wrap);
        ResponseFuture {
            inner: Box::pin(async move {
                let req = reqwest::Request::try_from(req).map_err(super::classified)?;
                let resp = client.execute(req).await.map_err(super::classified)?;
                Ok(http::Response::from(resp))
            }),
        }
    }
}

type Inner = Pin<Box<dyn Future<Output = Result<http::Response<reqwest::Body>, BoxError>> + Send>>;

/// The future of [`ReqwestService`].
#[must_use = "futures do nothing unless polled"]
pub struct ResponseFuture {
    inner: Inner,
}

impl std::fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<reqwest::Body>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
