//! One request being built: [`RequestBuilder`].

use super::error::BuilderError;
use super::{Body, Client};
use crate::Error;
use base64::Engine as _;
use courier_core::idempotency::IDEMPOTENCY_KEY;
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Serialize;
use std::fmt;
use std::time::Duration;
use url::Url;

/// A request being built, in reqwest's shape: made by [`Client::get`] and its kin, sent by
/// [`send`](Self::send).
///
/// Each setter that can fail (a bad header, a body that does not serialize) keeps the first
/// failure; [`send`](Self::send) reports it as [`Error::Builder`] without sending anything.
#[must_use = "a request does nothing until it is sent"]
pub struct RequestBuilder {
    client: Client,
    request: Result<Pending, BuilderError>,
}

/// A request, built.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Body,
    pub(crate) timeout: Option<Duration>,
    pub(crate) retry_safe: bool,
}

// === impl RequestBuilder ===

impl RequestBuilder {
    pub(crate) fn new(client: Client, method: Method, url: Result<Url, BuilderError>) -> Self {
        let request = url.map(|mut url| {
            let mut headers = HeaderMap::new();
            // Credentials in the URL become basic auth, as a browser's would; never sent in it.
            if !url.username().is_empty() || url.password().is_some() {
                let user = percent_decoded(url.username());
                let password = url.password().map(percent_decoded);
                headers.insert(AUTHORIZATION, basic(&user, password.as_deref()));
                let _ = url.set_username("");
                let _ = url.set_password(None);
            }
            Pending {
                method,
                url,
                headers,
                body: Body::empty(),
                timeout: None,
                retry_safe: false,
            }
        });
        Self { client, request }
    }

    fn with(mut self, f: impl FnOnce(&mut Pending) -> Result<(), BuilderError>) -> Self {
        if let Ok(pending) = &mut self.request
            && let Err(e) = f(pending)
        {
            self.request = Err(e);
        }
        self
    }

    /// Adds a header (after any of the same name).
    pub fn header<K, V>(self, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.with(|p| {
            let name = HeaderName::try_from(name)
                .map_err(|e| BuilderError::new("invalid header name", e.into()))?;
            let value = HeaderValue::try_from(value)
                .map_err(|e| BuilderError::new("invalid header value", e.into()))?;
            p.headers.append(name, value);
            Ok(())
        })
    }

    /// Sets every header of `headers`, each replacing the values of its name set so far.
    pub fn headers(self, headers: HeaderMap) -> Self {
        self.with(|p| {
            let mut last = None;
            for (name, value) in headers {
                let name = match name {
                    Some(name) => {
                        p.headers.remove(&name);
                        last = Some(name.clone());
                        name
                    }
                    None => match &last {
                        Some(name) => name.clone(),
                        None => continue,
                    },
                };
                p.headers.append(name, value);
            }
            Ok(())
        })
    }

    /// Adds `query`, serialized as `application/x-www-form-urlencoded`, to the URL's query.
    pub fn query<T: Serialize + ?Sized>(self, query: &T) -> Self {
        self.with(|p| {
            let added = serde_urlencoded::to_string(query)
                .map_err(|e| BuilderError::new("query not serialized", e))?;
            if !added.is_empty() {
                let all = match p.url.query() {
                    Some(q) if !q.is_empty() => format!("{q}&{added}"),
                    _ => added,
                };
                p.url.set_query(Some(&all));
            }
            Ok(())
        })
    }

    /// The body: `json` serialized as JSON, with `Content-Type: application/json` unless one
    /// is set.
    pub fn json<T: Serialize + ?Sized>(self, json: &T) -> Self {
        self.with(|p| {
            let bytes = serde_json::to_vec(json)
                .map_err(|e| BuilderError::new("JSON not serialized", e))?;
            p.body = bytes.into();
            p.headers
                .entry(CONTENT_TYPE)
                .or_insert(HeaderValue::from_static("application/json"));
            Ok(())
        })
    }

    /// The body: `form` serialized as `application/x-www-form-urlencoded`, with that
    /// `Content-Type` unless one is set.
    pub fn form<T: Serialize + ?Sized>(self, form: &T) -> Self {
        self.with(|p| {
            let text = serde_urlencoded::to_string(form)
                .map_err(|e| BuilderError::new("form not serialized", e))?;
            p.body = text.into();
            p.headers
                .entry(CONTENT_TYPE)
                .or_insert(HeaderValue::from_static(
                    "application/x-www-form-urlencoded",
                ));
            Ok(())
        })
    }

    /// The body: bytes, text, or a stream ([`Body::wrap_stream`]).
    pub fn body(self, body: impl Into<Body>) -> Self {
        self.with(|p| {
            p.body = body.into();
            Ok(())
        })
    }

    /// `Authorization: Bearer <token>`, marked sensitive.
    pub fn bearer_auth<T: fmt::Display>(self, token: T) -> Self {
        self.with(|p| {
            let mut value = HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|e| BuilderError::new("invalid bearer token", e))?;
            value.set_sensitive(true);
            p.headers.insert(AUTHORIZATION, value);
            Ok(())
        })
    }

    /// `Authorization: Basic <base64(user:password)>`, marked sensitive.
    pub fn basic_auth<U: fmt::Display, P: fmt::Display>(
        self,
        username: U,
        password: Option<P>,
    ) -> Self {
        self.with(|p| {
            let password = password.map(|p| p.to_string());
            p.headers.insert(
                AUTHORIZATION,
                basic(&username.to_string(), password.as_deref()),
            );
            Ok(())
        })
    }

    /// The call's deadline: `timeout` from [`send`](Self::send), redirects, retries, waits
    /// and the response body included. It can only shorten the preset's
    /// [`deadline`](crate::CourierLayer::deadline) (90 s by default), never extend it: the
    /// earlier of the two ends the call. Without it, the preset's deadline applies.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.with(|p| {
            p.timeout = Some(timeout);
            Ok(())
        })
    }

    /// `Idempotency-Key: <key>`: the server may deduplicate the request, so retry may repeat
    /// a POST or PATCH, and a 307 or 308 sends it again with the same key.
    pub fn idempotency_key<V>(self, key: V) -> Self
    where
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.with(|p| {
            let value = HeaderValue::try_from(key)
                .map_err(|e| BuilderError::new("invalid idempotency key", e.into()))?;
            p.headers.insert(IDEMPOTENCY_KEY, value);
            Ok(())
        })
    }

    /// Marks the request safe to send again whatever its method
    /// ([`RetrySafe`](courier_core::idempotency::RetrySafe)): retry repeats it as it repeats
    /// a GET.
    pub fn retry_safe(self) -> Self {
        self.with(|p| {
            p.retry_safe = true;
            Ok(())
        })
    }

    /// Sends the request through the preset, following redirects
    /// ([`RedirectPolicy`](super::RedirectPolicy)).
    ///
    /// # Errors
    ///
    /// [`Error::Builder`] for a request that could not be built (nothing is sent),
    /// [`Error::Redirect`] for a redirect not followed, and the preset's failures
    /// ([`Error`]), each with the attempts of every hop. An HTTP status is no error:
    /// see [`Response::error_for_status`](super::Response::error_for_status).
    pub fn send(self) -> impl Future<Output = Result<super::Response, Error>> + Send + 'static {
        self.client.execute(self.request)
    }
}

impl fmt::Debug for RequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.request {
            Ok(p) => f
                .debug_struct("RequestBuilder")
                .field("method", &p.method)
                .field("url", &p.url.as_str())
                .field("headers", &p.headers)
                .field("body", &p.body)
                .finish(),
            Err(e) => f.debug_struct("RequestBuilder").field("error", e).finish(),
        }
    }
}

fn basic(user: &str, password: Option<&str>) -> HeaderValue {
    let pair = match password {
        Some(p) => format!("{user}:{p}"),
        None => format!("{user}:"),
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut value = HeaderValue::try_from(format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(&h), Some(&l)) = (bytes.get(i + 1), bytes.get(i + 2))
            && let (Some(h), Some(l)) = (hex(h), hex(l))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
