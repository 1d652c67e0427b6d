//! Transports for the preset: a hyper-util client built for you, and a `reqwest::Client` as a
//! tower service. Both have their own retries switched off: courier retries in one place only.

#[cfg(feature = "hyper-client")]
pub use self::hyper_impl::*;

#[cfg(feature = "reqwest")]
pub use self::reqwest_impl::*;

/// The connect timeout of the clients built here: just above a multiple of TCP's 3 s initial
/// retransmission timeout, so a lost SYN gets its one retransmission.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(3050);

#[cfg(feature = "hyper-client")]
mod hyper_impl {
    use super::CONNECT_TIMEOUT;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// The connector of [`hyper_client`]: plain HTTP, or HTTP and HTTPS with the `rustls` feature.
    #[cfg(not(feature = "rustls"))]
    pub type Connector = HttpConnector;

    /// The connector of [`hyper_client`]: plain HTTP, or HTTP and HTTPS with the `rustls` feature.
    #[cfg(feature = "rustls")]
    pub type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

    /// The hyper-util client that [`hyper_client`] builds.
    pub type HyperClient<B> = Client<Connector, B>;

    /// A [`HyperClient`] shared behind an `Arc`: the transport of
    /// [`CourierLayer::hyper`](crate::CourierLayer::hyper).
    ///
    /// The retry layer keeps a clone of the stack below it for each call (to drive later
    /// attempts); cloning this is one reference count, where cloning the client itself copies
    /// 300 bytes and counts a dozen references. The pool, the connector and the settings are
    /// those of the client: clones share one connection pool.
    pub struct HyperService<B> {
        client: Arc<HyperClient<B>>,
    }

    impl<B> HyperService<B> {
        /// Shares `client`.
        pub fn new(client: HyperClient<B>) -> Self {
            Self {
                client: Arc::new(client),
            }
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
            }
        }
    }

    impl<B> std::fmt::Debug for HyperService<B> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("HyperService").finish_non_exhaustive()
        }
    }

    impl<B> tower_service::Service<http::Request<B>> for HyperService<B>
    where
        B: http_body::Body + Send + Unpin + 'static,
        B::Data: Send,
        B::Error: Into<courier_core::BoxError>,
    {
        type Response = <HyperClient<B> as tower_service::Service<http::Request<B>>>::Response;
        type Error = <HyperClient<B> as tower_service::Service<http::Request<B>>>::Error;
        type Future = <HyperClient<B> as tower_service::Service<http::Request<B>>>::Future;

        /// Always ready, as the client is: the pool makes room (or a connection) per request.
        #[inline]
        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        #[inline]
        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            self.client.request(req)
        }
    }

    /// A pooled hyper-util client for the preset: connect timeout 3.05 s, `TCP_NODELAY`, idle
    /// connections kept 90 s, HTTP/1.1 and HTTP/2 (negotiated by ALPN over TLS), and hyper's own
    /// retry of canceled requests off.
    ///
    /// With the `rustls` feature it speaks HTTPS too, trusting the webpki roots.
    pub fn hyper_client<B>() -> HyperClient<B>
    where
        B: http_body::Body + Send + 'static,
        B::Data: Send,
    {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        #[cfg(feature = "rustls")]
        let connector = {
            http.enforce_http(false);
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_webpki_roots()
                .https_or_http()
                .enable_http1()
                .enable_http2()
                .wrap_connector(http)
        };
        #[cfg(not(feature = "rustls"))]
        let connector = http;
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .retry_canceled_requests(false)
            .build(connector)
    }
}

#[cfg(feature = "reqwest")]
mod reqwest_impl {
    use courier_core::BoxError;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A `reqwest::Client` as a `tower::Service<http::Request<B>>`, answering
    /// `http::Response<reqwest::Body>`.
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
        _body: std::marker::PhantomData<fn(B)>,
    }

    impl<B> Clone for ReqwestService<B> {
        fn clone(&self) -> Self {
            Self::new(self.client.clone())
        }
    }

    impl<B> std::fmt::Debug for ReqwestService<B> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("ReqwestService")
                .field("client", &self.client)
                .finish()
        }
    }

    impl<B> ReqwestService<B> {
        /// Wraps `client`.
        pub const fn new(client: reqwest::Client) -> Self {
            Self {
                client,
                _body: std::marker::PhantomData,
            }
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

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            let client = self.client.clone();
            let req = req.map(reqwest::Body::wrap);
            ResponseFuture {
                inner: Box::pin(async move {
                    let req = reqwest::Request::try_from(req)?;
                    let resp = client.execute(req).await?;
                    Ok(http::Response::from(resp))
                }),
            }
        }
    }

    type Inner =
        Pin<Box<dyn Future<Output = Result<http::Response<reqwest::Body>, BoxError>> + Send>>;

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
}
