//! The transport under the client's preset: hyper or reqwest, one type.

use super::Body;
use crate::Courier;
use crate::transport::HyperService;
use bytes::Bytes;
use courier_core::{BoxError, CallContext};
use http_body::Frame;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;
use tower_service::Service;

/// Either transport, so that [`Client`](super::Client) has one type whichever it runs on.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    kind: Kind,
    /// Whether a redirect answer carries the call's deadline up ([`HopDeadline`]).
    redirects: bool,
}

#[derive(Clone, Debug)]
enum Kind {
    Hyper(HyperService<Body>),
    #[cfg(feature = "reqwest")]
    Reqwest(crate::transport::ReqwestService<Body>),
}

/// The deadline the preset gave a call, put on a redirect answer by the transport: the next
/// hop of the chain gets the same one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HopDeadline(pub(crate) Instant);

impl Transport {
    /// The transport the preset made of `layer.hyper_with(client)` (its `User-Agent`
    /// included), taken out of it to be wrapped again.
    pub(crate) fn hyper(preset: &Courier<HyperService<Body>>, redirects: bool) -> Self {
        Self {
            kind: Kind::Hyper(transport_of(preset).clone()),
            redirects,
        }
    }

    /// As [`hyper`](Self::hyper), for `layer.reqwest(client)`.
    #[cfg(feature = "reqwest")]
    pub(crate) fn reqwest(
        preset: &Courier<crate::transport::ReqwestService<Body>>,
        redirects: bool,
    ) -> Self {
        Self {
            kind: Kind::Reqwest(transport_of(preset).clone()),
            redirects,
        }
    }
}

/// The transport at the bottom of a preset's stack: the preset's builders set it up (its
/// `User-Agent`), and the client wraps it in its own type.
fn transport_of<S>(preset: &Courier<S>) -> &S {
    preset // Deadline
        .get_ref()
        .get_ref() // EtagCache
        .get_ref() // Retry
        .get_ref() // CircuitBreaker
        .get_ref() // TokenBucketRateLimit
        .get_ref() // AdaptivePacing
        .get_ref() // ConcurrencyLimit
        .get_ref() // AttemptTimeout
        .get_ref() // ClassifyBody
        .get_ref()
}

impl Service<http::Request<Body>> for Transport {
    type Response = http::Response<TransportBody>;
    type Error = BoxError;
    type Future = TransportFuture;

    #[inline]
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Both transports are always ready.
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, req: http::Request<Body>) -> TransportFuture {
        let deadline = if self.redirects {
            CallContext::deadline_in(req.extensions())
        } else {
            None
        };
        let inner = match &mut self.kind {
            Kind::Hyper(svc) => Inner::Hyper(svc.call(req)),
            #[cfg(feature = "reqwest")]
            Kind::Reqwest(svc) => Inner::Reqwest(svc.call(req)),
        };
        TransportFuture { inner, deadline }
    }
}

type HyperFuture = <HyperService<Body> as Service<http::Request<Body>>>::Future;

/// The future of [`Transport`].
pub(crate) struct TransportFuture {
    inner: Inner,
    deadline: Option<Instant>,
}

enum Inner {
    Hyper(HyperFuture),
    #[cfg(feature = "reqwest")]
    Reqwest(crate::transport::ResponseFuture),
}

impl Future for TransportFuture {
    type Output = Result<http::Response<TransportBody>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = match &mut self.inner {
            // Both are `Unpin`: hyper-util's future and reqwest's are boxed.
            Inner::Hyper(fut) => match Pin::new(fut).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r
                    .map(|resp| resp.map(TransportBody::Hyper))
                    .map_err(BoxError::from),
            },
            #[cfg(feature = "reqwest")]
            Inner::Reqwest(fut) => match Pin::new(fut).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r.map(|resp| resp.map(TransportBody::Reqwest)),
            },
        };
        Poll::Ready(polled.map(|mut resp| {
            if let Some(at) = self.deadline
                && resp.status().is_redirection()
            {
                resp.extensions_mut().insert(HopDeadline(at));
            }
            resp
        }))
    }
}

/// The response body of either transport.
#[derive(Debug)]
pub(crate) enum TransportBody {
    Hyper(hyper::body::Incoming),
    #[cfg(feature = "reqwest")]
    Reqwest(reqwest::Body),
}

impl http_body::Body for TransportBody {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Self::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
            #[cfg(feature = "reqwest")]
            Self::Reqwest(b) => Pin::new(b).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Hyper(b) => b.is_end_stream(),
            #[cfg(feature = "reqwest")]
            Self::Reqwest(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            Self::Hyper(b) => b.size_hint(),
            #[cfg(feature = "reqwest")]
            Self::Reqwest(b) => b.size_hint(),
        }
    }
}
