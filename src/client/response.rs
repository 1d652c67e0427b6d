//! The answer [`Client`](super::Client) gives: [`Response`].

use super::error::{DecodeError, StatusError, with_response_attempts};
use super::transport::TransportBody;
use crate::Error;
use crate::preset::PresetBody;
use bytes::Bytes;
use courier_core::{Attempts, BoxError, CacheStatus};
use futures_core::Stream;
use http::{HeaderMap, StatusCode, Version};
use http_body::Body as _;
use std::fmt;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use url::Url;

/// The body as the preset hands it up. In a `Mutex` only to make [`Response`] `Sync` (and so
/// an [`Error::Status`] that holds one): it is reached through `&mut` alone, never locked.
type Inner = Mutex<PresetBody<TransportBody>>;

static NO_ATTEMPTS: Attempts = Attempts::new();

/// An answer: its head at once, its body read with [`bytes`](Self::bytes),
/// [`text`](Self::text), [`json`](Self::json) or [`bytes_stream`](Self::bytes_stream), each
/// within the call's deadline.
pub struct Response {
    head: http::response::Parts,
    body: Inner,
    url: Url,
}

// === impl Response ===

impl Response {
    /// The answer `resp` to a request for `url`, after the redirect hops whose records are
    /// `earlier`.
    pub(crate) fn new(
        resp: http::Response<PresetBody<TransportBody>>,
        url: Url,
        earlier: Attempts,
    ) -> Self {
        let (mut head, body) = resp.into_parts();
        if earlier.count() > 0 {
            let own = head.extensions.remove::<Attempts>().unwrap_or_default();
            let all: Attempts = earlier.iter().chain(&own).cloned().collect();
            head.extensions.insert(all);
        }
        Self {
            head,
            body: Mutex::new(body),
            url,
        }
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.head.status
    }

    /// The HTTP version.
    pub fn version(&self) -> Version {
        self.head.version
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }

    /// The URL that answered: the request's, or the last redirect's.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// Every attempt of the call, the first first: the records of every redirect hop, each
    /// hop's counted from 1 ([redirects](super::redirect)). Empty for an answer served from
    /// the cache without a request ([`cache_status`](Self::cache_status) `Hit`).
    pub fn attempts(&self) -> &Attempts {
        self.head
            .extensions
            .get::<Attempts>()
            .unwrap_or(&NO_ATTEMPTS)
    }

    /// How the cache answered, when the cache was on.
    pub fn cache_status(&self) -> Option<CacheStatus> {
        self.head.extensions.get::<CacheStatus>().copied()
    }

    /// `Err(`[`Error::Status`]`)` for a 4xx or 5xx answer, holding this response, whose body
    /// can still be read ([`StatusError::into_response`]); the response otherwise.
    pub fn error_for_status(self) -> Result<Self, Error> {
        let status = self.status();
        if status.is_client_error() || status.is_server_error() {
            Err(Error::Status(StatusError::new(self)))
        } else {
            Ok(self)
        }
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes, Error> {
        let Self { head, body, .. } = self;
        let body = body.into_inner().unwrap_or_else(|p| p.into_inner());
        match http_body_util::BodyExt::collect(body).await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) => Err(body_error(e, &head)),
        }
    }

    /// The whole body as text: UTF-8, anything else replaced by `U+FFFD`.
    pub async fn text(self) -> Result<String, Error> {
        let bytes = self.bytes().await?;
        Ok(match String::from_utf8(bytes.to_vec()) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The whole body, read as JSON into `T`. A body that is not is an [`Error::Decode`].
    pub async fn json<T: serde::de::DeserializeOwned>(self) -> Result<T, Error> {
        let status = self.status();
        let attempts = self.attempts().clone();
        let bytes = self.bytes().await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Decode(DecodeError::new(e, status, attempts)))
    }

    /// The body as a stream of chunks, as they come.
    pub fn bytes_stream(self) -> BytesStream {
        BytesStream {
            body: self.body.into_inner().unwrap_or_else(|p| p.into_inner()),
            head: self.head,
            done: false,
        }
    }
}

fn body_error(e: BoxError, head: &http::response::Parts) -> Error {
    let attempts = head.extensions.get::<Attempts>().unwrap_or(&NO_ATTEMPTS);
    with_response_attempts(Error::from(e), attempts)
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("url", &self.url.as_str())
            .field("status", &self.head.status)
            .field("version", &self.head.version)
            .field("headers", &self.head.headers)
            .finish_non_exhaustive()
    }
}

/// The body of a [`Response`] as a stream of chunks ([`Response::bytes_stream`]).
pub struct BytesStream {
    body: PresetBody<TransportBody>,
    head: http::response::Parts,
    done: bool,
}

impl Stream for BytesStream {
    type Item = Result<Bytes, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.done = true,
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(body_error(e, &this.head))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
            }
        }
    }
}

impl fmt::Debug for BytesStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BytesStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
