//! [`Client`]: a client in reqwest's shape over the preset.
//!
//! Every call goes through the whole [preset](crate::preset) (deadline, cache, retry,
//! breaker, rate limit, pacing, concurrency limit, attempt timeout) over the hyper transport,
//! or over a `reqwest::Client` of your own; redirects are followed by the client, one hop at a
//! time ([`redirect`]).
//!
//! ```no_run
//! use courier::Client;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Item {
//!     id: u64,
//! }
//!
//! # async fn run() -> Result<(), courier::Error> {
//! let client = Client::new();
//! let items: Vec<Item> = client.get("http://127.0.0.1:8080/items").send().await?.json().await?;
//! # let _ = items.first().map(|i| i.id);
//! # Ok(()) }
//! ```
//!
//! # Coming from reqwest
//!
//! | reqwest | courier | what differs, and why |
//! | --- | --- | --- |
//! | `Client::new()` | [`Client::new()`] | every layer of the preset is on: 3 attempts for what is safe to repeat, an ETag cache, a 90 s deadline, the breaker and adaptive pacing per host |
//! | `Client::builder()` | [`Client::builder()`] | settings of the layers are the preset's: [`ClientBuilder::layer`] takes a [`CourierLayer`]; the transport's own (TLS, pools) are its: [`hyper`](ClientBuilder::hyper), [`reqwest`](ClientBuilder::reqwest) |
//! | `.default_headers(map)` | [`ClientBuilder::default_headers`] | the same |
//! | (none) | [`ClientBuilder::base_url`] | a relative URL is joined onto it |
//! | `.redirect(Policy::limited(n))` | [`ClientBuilder::redirect`]`(`[`RedirectPolicy::limited`]`(n))` | followed by courier, not by the transport, so that each hop is judged, paced and cached as a call to its own host; https to http refused; see [`redirect`] |
//! | `.timeout(d)` (client) | [`CourierLayer::deadline`] | one budget per call, retries and body included |
//! | `get`, `post`, `put`, `patch`, `delete`, `head`, `request` | the same | |
//! | `.header`, `.headers`, `.query`, `.json`, `.form`, `.body` | the same | a stream body ([`Body::wrap_stream`]) is sent again on a retry or a 307/308 only within its replay cap |
//! | `.bearer_auth`, `.basic_auth` | the same | |
//! | `.timeout(d)` (request) | [`RequestBuilder::timeout`] | it only shortens the preset's deadline, never extends it |
//! | (none) | [`RequestBuilder::idempotency_key`], [`RequestBuilder::retry_safe`] | a POST or PATCH is retried only with one of them (or after a failed connect, when nothing was sent) |
//! | `.send()` | [`RequestBuilder::send`] | the error is [`crate::Error`], with the attempts of the call |
//! | `status`, `headers`, `url`, `bytes`, `text`, `json`, `bytes_stream` | the same | `text` reads UTF-8 only |
//! | `error_for_status()` | [`Response::error_for_status`] | the error ([`crate::Error::Status`]) keeps the response: its body can still be read |
//! | (none) | [`Response::attempts`], [`Response::cache_status`] | what the preset did: every attempt of every hop, and how the cache answered |
//!
//! # Cost
//!
//! A [`Client`] is one `Arc`: its clones share the preset's state (breakers, buckets, budgets,
//! the cache) and the transport's pool. A call costs the preset's work plus the request's
//! URL, one clone of the stack (as `oneshot` over the preset does) and, while redirects are
//! followed, a copy of the request's headers for the next hop when it has any. BENCHMARKS.md
//! counts what the client adds over the preset beyond building the request.
//!
//! # Examples
//!
//! The common tasks, as the README shows them:
//!
//! ```no_run
//! use courier::{Client, CourierLayer};
//! use courier::ratelimit::{Rate, TokenBucketRateLimitLayer};
//! use courier::retry::RetryLayer;
//! use serde_json::{Value, json};
//! use std::num::NonZeroU32;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = Client::new();
//! // GET as JSON
//! let item: Value = client.get("http://127.0.0.1:8080/items/1").send().await?.json().await?;
//! // POST JSON with an idempotency key (retried safely, the same key every attempt)
//! let resp = client.post("http://127.0.0.1:8080/orders")
//!     .json(&json!({"sku": "a-1"}))
//!     .idempotency_key("order-42")
//!     .send().await?;
//! // Read the attempts
//! for record in resp.attempts() {
//!     println!("{} {} {}", record.attempt, record.outcome, record.reason);
//! }
//! // Change the attempts
//! let client = Client::builder()
//!     .layer(CourierLayer::new().retry(RetryLayer::new().attempts(5)))
//!     .build()?;
//! // A per-host rate limit
//! let rate = TokenBucketRateLimitLayer::new(Rate::per_second(10.0)?, NonZeroU32::new(5).unwrap());
//! let client = Client::builder().layer(CourierLayer::new().rate_limit(rate)).build()?;
//! # let _ = (item, client); Ok(()) }
//! ```

mod body;
mod error;
pub mod redirect;
mod request;
mod response;
mod transport;

pub use self::body::Body;
pub use self::error::{BuilderError, DecodeError, StatusError};
pub use self::redirect::{RedirectError, RedirectErrorKind, RedirectPolicy};
pub use self::request::RequestBuilder;
pub use self::response::{BytesStream, Response};
/// The URL type of the client ([`Response::url`], [`ClientBuilder::base_url`]).
pub use url::Url;

use self::error::prepend_attempts;
use self::redirect::{next_hop, rewrite};
use self::request::Pending;
use self::transport::{HopDeadline, Transport};
use crate::transport::HyperClient;
use crate::{Courier, CourierLayer, Error};
use courier_core::idempotency::RetrySafe;
use courier_core::{Attempts, CallContext};
use http::{HeaderMap, Method};
use std::fmt;
use std::sync::Arc;
use tower_service::Service;

/// A client in reqwest's shape over the preset: see the [module docs](self).
///
/// `Clone` is one reference count, and every clone shares the same preset (its breakers,
/// buckets, budgets and cache) and transport.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    service: Courier<Transport>,
    base_url: Option<Url>,
    default_headers: HeaderMap,
    redirect: RedirectPolicy,
}

/// Builds a [`Client`]: the preset's layer, the transport, a base URL, default headers and the
/// redirect policy.
#[must_use = "a builder does nothing until built"]
pub struct ClientBuilder {
    layer: CourierLayer,
    transport: TransportChoice,
    base_url: Option<String>,
    default_headers: HeaderMap,
    redirect: RedirectPolicy,
}

enum TransportChoice {
    Default,
    /// Boxed: the builder stays small.
    Hyper(Box<HyperClient<Body>>),
    #[cfg(feature = "reqwest")]
    Reqwest(reqwest::Client),
}

// === impl Client ===

impl Client {
    /// The preset's defaults ([`CourierLayer::new`]) over the hyper transport
    /// ([`hyper_client`](crate::transport::hyper_client): HTTPS with the system's trust store
    /// under the default `rustls` feature), following up to 10 redirects.
    pub fn new() -> Self {
        Self::builder().assemble(None)
    }

    /// A builder, starting from what [`new`](Self::new) gives.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            layer: CourierLayer::new(),
            transport: TransportChoice::Default,
            base_url: None,
            default_headers: HeaderMap::new(),
            redirect: RedirectPolicy::default(),
        }
    }

    /// A GET to `url` (joined onto the [base URL](ClientBuilder::base_url) when relative).
    pub fn get(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::GET, url)
    }

    /// A POST to `url`.
    pub fn post(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::POST, url)
    }

    /// A PUT to `url`.
    pub fn put(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::PUT, url)
    }

    /// A PATCH to `url`.
    pub fn patch(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::PATCH, url)
    }

    /// A DELETE to `url`.
    pub fn delete(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::DELETE, url)
    }

    /// A HEAD to `url`.
    pub fn head(&self, url: impl AsRef<str>) -> RequestBuilder {
        self.request(Method::HEAD, url)
    }

    /// A request of `method` to `url`: absolute, or joined onto the
    /// [base URL](ClientBuilder::base_url). An `http` or `https` URL only; credentials in it
    /// are sent as basic auth, never in the URL.
    pub fn request(&self, method: Method, url: impl AsRef<str>) -> RequestBuilder {
        let url = self.url(url.as_ref());
        RequestBuilder::new(self.clone(), method, url)
    }

    fn url(&self, url: &str) -> Result<Url, BuilderError> {
        let parsed = match &self.inner.base_url {
            Some(base) => base.join(url),
            None => Url::parse(url),
        };
        let mut url = parsed.map_err(|e| match e {
            url::ParseError::RelativeUrlWithoutBase => {
                BuilderError::bare("a relative URL, and the client has no base URL")
            }
            e => BuilderError::new("invalid URL", e),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BuilderError::bare("not an http or https URL"));
        }
        url.set_fragment(None);
        Ok(url)
    }

    /// Sends `pending` and every redirect hop after it. Takes the client, so that `send`'s
    /// future is this one, with no future around it to move it into.
    pub(crate) async fn execute(
        self,
        pending: Result<Pending, BuilderError>,
    ) -> Result<Response, Error> {
        let inner = &*self.inner;
        let pending = pending.map_err(Error::Builder)?;
        let Pending {
            mut method,
            mut url,
            mut headers,
            mut body,
            timeout,
            retry_safe,
        } = pending;
        for name in inner.default_headers.keys() {
            if !headers.contains_key(name) {
                for value in inner.default_headers.get_all(name) {
                    headers.append(name.clone(), value.clone());
                }
            }
        }
        let follows = inner.redirect.follows();
        let mut deadline = None;
        let mut earlier = Attempts::new();
        let mut hops = 0;
        loop {
            let uri = http::Uri::try_from(url.as_str())
                .map_err(|e| Error::Builder(BuilderError::new("invalid URL", e)))?;
            let keeper = follows.then(|| body.keeper());
            let mut req = http::Request::new(body);
            *req.method_mut() = method.clone();
            *req.uri_mut() = uri;
            // A request without headers of its own (the default ones merged) has nothing to
            // keep for the next hop: its empty map is taken, not copied.
            *req.headers_mut() = if follows && !headers.is_empty() {
                headers.clone()
            } else {
                std::mem::take(&mut headers)
            };
            if retry_safe {
                req.extensions_mut().insert(RetrySafe);
            }
            match (deadline, timeout) {
                (Some(at), _) => {
                    CallContext::get_or_insert(&mut req).shrink_deadline(at);
                }
                (None, Some(budget)) => {
                    deadline =
                        Some(CallContext::get_or_insert(&mut req).shrink_deadline_after(budget));
                }
                (None, None) => {}
            }
            // Not `oneshot`: its state would hold the service, the request and the call's
            // future in one enum, moved whole at the first poll.
            let mut svc = inner.service.clone();
            let called = match std::future::poll_fn(|cx| svc.poll_ready(cx)).await {
                Ok(()) => {
                    let fut = svc.call(req);
                    drop(svc);
                    fut.await
                }
                Err(e) => Err(e),
            };
            let resp = match called {
                Ok(resp) => resp,
                Err(e) => return Err(prepend_attempts(Error::from(e), &earlier)),
            };
            let status = resp.status();
            if !follows || !status.is_redirection() {
                return Ok(Response::new(resp, url, earlier));
            }
            let location = resp
                .headers()
                .get(http::header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let hop = match next_hop(inner.redirect, hops, status, &url, location.as_deref()) {
                Ok(Some(hop)) => hop,
                Ok(None) => return Ok(Response::new(resp, url, earlier)),
                Err(kind) => {
                    let attempts = hop_attempts(&earlier, resp.extensions());
                    return Err(Error::Redirect(RedirectError::new(
                        kind,
                        status,
                        location.as_deref().unwrap_or_default(),
                        attempts,
                    )));
                }
            };
            earlier = hop_attempts(&earlier, resp.extensions());
            if let Some(HopDeadline(at)) = resp.extensions().get::<HopDeadline>().copied() {
                deadline = Some(deadline.map_or(at, |d: tokio::time::Instant| d.min(at)));
            }
            drop(resp);
            method = rewrite(&hop, method, &mut headers);
            body = if hop.to_get {
                Body::empty()
            } else {
                // Boxed: a hop that replays a body is rare, and its wait would otherwise make
                // every call's future larger.
                let whole = match (keeper, deadline) {
                    (None, _) => None,
                    (Some(keeper), Some(at)) => {
                        Box::pin(tokio::time::timeout_at(at, keeper.whole()))
                            .await
                            .ok()
                            .flatten()
                    }
                    (Some(keeper), None) => Box::pin(keeper.whole()).await,
                };
                match whole {
                    Some(bytes) if bytes.is_empty() => Body::empty(),
                    Some(bytes) => Body::from(bytes),
                    None => {
                        return Err(Error::Redirect(RedirectError::new(
                            RedirectErrorKind::BodyNotReplayable,
                            status,
                            location.as_deref().unwrap_or_default(),
                            earlier,
                        )));
                    }
                }
            };
            url = hop.url;
            hops += 1;
        }
    }
}

/// `earlier` followed by the records of a hop's answer.
fn hop_attempts(earlier: &Attempts, ext: &http::Extensions) -> Attempts {
    let own = ext.get::<Attempts>();
    earlier
        .iter()
        .chain(own.into_iter().flatten())
        .cloned()
        .collect()
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.inner.base_url.as_ref().map(Url::as_str))
            .field("default_headers", &self.inner.default_headers)
            .field("redirect", &self.inner.redirect)
            .finish_non_exhaustive()
    }
}

// === impl ClientBuilder ===

impl ClientBuilder {
    /// The preset: every layer's settings. Defaults to [`CourierLayer::new`]. Its
    /// [`user_agent`](CourierLayer::user_agent) is sent by either transport.
    pub fn layer(mut self, layer: CourierLayer) -> Self {
        self.layer = layer;
        self
    }

    /// Runs over a hyper-util client of your own, such as
    /// [`hyper_client_with_tls`](crate::transport::hyper_client_with_tls)`::<courier::client::Body>(config)`
    /// with a private CA. Defaults to [`hyper_client`](crate::transport::hyper_client).
    pub fn hyper(mut self, client: HyperClient<Body>) -> Self {
        self.transport = TransportChoice::Hyper(Box::new(client));
        self
    }

    /// Runs over a `reqwest::Client` (build it from
    /// [`reqwest_client_builder`](crate::transport::reqwest_client_builder), which turns its
    /// own retries and redirects off).
    #[cfg(feature = "reqwest")]
    pub fn reqwest(mut self, client: reqwest::Client) -> Self {
        self.transport = TransportChoice::Reqwest(client);
        self
    }

    /// The URL that relative request URLs are joined onto, as a link in a page at that URL
    /// would be: its path is a folder (a `/` is added at its end when missing), so with
    /// `http://host/api/`, `items` is `http://host/api/items` and `/items` is
    /// `http://host/items`. An absolute request URL is used as it is.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Headers sent with every request that does not set the same name itself.
    pub fn default_headers(mut self, headers: HeaderMap) -> Self {
        self.default_headers = headers;
        self
    }

    /// Which redirects are followed ([`redirect`]). Defaults to
    /// [`RedirectPolicy::default`], 10 hops; [`RedirectPolicy::none`] returns every 3xx as it
    /// came.
    pub fn redirect(mut self, policy: RedirectPolicy) -> Self {
        self.redirect = policy;
        self
    }

    /// The client.
    ///
    /// # Errors
    ///
    /// [`Error::Builder`] when the base URL is no `http` or `https` URL.
    pub fn build(mut self) -> Result<Client, Error> {
        let base_url = match self.base_url.take() {
            None => None,
            Some(text) => {
                let mut url = Url::parse(&text)
                    .map_err(|e| Error::Builder(BuilderError::new("invalid base URL", e)))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(Error::Builder(BuilderError::bare(
                        "the base URL is not an http or https URL",
                    )));
                }
                if !url.path().ends_with('/') {
                    let path = format!("{}/", url.path());
                    url.set_path(&path);
                }
                url.set_fragment(None);
                Some(url)
            }
        };
        Ok(self.assemble(base_url))
    }

    /// The client, with the base URL checked.
    fn assemble(self, base_url: Option<Url>) -> Client {
        let layer = self.layer;
        let follows = self.redirect.follows();
        // Each transport as the preset's own builder sets it up (its `User-Agent`).
        let transport = match self.transport {
            TransportChoice::Default => {
                Transport::hyper(&layer.hyper_with(crate::transport::hyper_client()), follows)
            }
            TransportChoice::Hyper(client) => Transport::hyper(&layer.hyper_with(*client), follows),
            #[cfg(feature = "reqwest")]
            TransportChoice::Reqwest(client) => Transport::reqwest(&layer.reqwest(client), follows),
        };
        Client {
            inner: Arc::new(Inner {
                service: layer.service(transport),
                base_url,
                default_headers: self.default_headers,
                redirect: self.redirect,
            }),
        }
    }
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("layer", &self.layer)
            .field("base_url", &self.base_url)
            .field("default_headers", &self.default_headers)
            .field("redirect", &self.redirect)
            .finish_non_exhaustive()
    }
}
