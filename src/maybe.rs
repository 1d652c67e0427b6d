//! A layer that may be switched off, without boxing and without changing the stack's type.
//!
//! `tower::util::Either` needs both sides to answer with the same response type, but courier's
//! deadline and cache layers wrap the response body. [`Maybe`] answers with a [`MaybeBody`]
//! instead, so each layer of the preset can be on or off at run time while the whole stack keeps
//! one concrete type: no allocation per call.

use courier_core::BoxError;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tower_layer::Layer;
use tower_service::Service;

/// Applies `L` when it is `Some`, else passes requests straight to the inner service.
#[derive(Debug, Clone)]
pub struct MaybeLayer<L>(pub Option<L>);

impl<L, S> Layer<S> for MaybeLayer<L>
where
    L: Layer<S>,
{
    type Service = Maybe<L::Service, S>;

    fn layer(&self, inner: S) -> Self::Service {
        match &self.0 {
            Some(l) => Maybe::On(l.layer(inner)),
            None => Maybe::Off(inner),
        }
    }
}

/// A service that is either the layered one or the bare inner one.
#[derive(Debug, Clone)]
pub enum Maybe<A, B> {
    /// The layer is on.
    On(A),
    /// The layer is off.
    Off(B),
}

impl<A, B> Maybe<A, B> {
    /// Whether the layer is on.
    pub const fn is_on(&self) -> bool {
        matches!(self, Self::On(_))
    }
}

impl<A, B, Req, RA, RB> Service<http::Request<Req>> for Maybe<A, B>
where
    A: Service<http::Request<Req>, Response = http::Response<RA>>,
    A::Error: Into<BoxError>,
    B: Service<http::Request<Req>, Response = http::Response<RB>>,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<MaybeBody<RA, RB>>;
    type Error = BoxError;
    type Future = MaybeFuture<A::Future, B::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match self {
            Self::On(a) => a.poll_ready(cx).map_err(Into::into),
            Self::Off(b) => b.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, req: http::Request<Req>) -> Self::Future {
        match self {
            Self::On(a) => MaybeFuture::On { fut: a.call(req) },
            Self::Off(b) => MaybeFuture::Off { fut: b.call(req) },
        }
    }
}

pin_project! {
    /// The future of [`Maybe`].
    // Variant fields are documented by their variant.
    #[allow(missing_docs)]
    #[project = MaybeFutureProj]
    #[must_use = "futures do nothing unless polled"]
    #[derive(Debug)]
    pub enum MaybeFuture<FA, FB> {
        /// The layer is on.
        On { #[pin] fut: FA },
        /// The layer is off.
        Off { #[pin] fut: FB },
    }
}

impl<FA, FB, RA, RB, EA, EB> Future for MaybeFuture<FA, FB>
where
    FA: Future<Output = Result<http::Response<RA>, EA>>,
    FB: Future<Output = Result<http::Response<RB>, EB>>,
    EA: Into<BoxError>,
    EB: Into<BoxError>,
{
    type Output = Result<http::Response<MaybeBody<RA, RB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match self.project() {
            MaybeFutureProj::On { fut } => match ready!(fut.poll(cx)) {
                Ok(resp) => Ok(resp.map(|inner| MaybeBody::On { inner })),
                Err(e) => Err(e.into()),
            },
            MaybeFutureProj::Off { fut } => match ready!(fut.poll(cx)) {
                Ok(resp) => Ok(resp.map(|inner| MaybeBody::Off { inner })),
                Err(e) => Err(e.into()),
            },
        })
    }
}

pin_project! {
    /// The response body of [`Maybe`]: the layered body or the bare one.
    #[allow(missing_docs)]
    #[project = MaybeBodyProj]
    #[derive(Debug)]
    pub enum MaybeBody<A, B> {
        /// The layer is on.
        On { #[pin] inner: A },
        /// The layer is off.
        Off { #[pin] inner: B },
    }
}

impl<A, B> Body for MaybeBody<A, B>
where
    A: Body,
    A::Error: Into<BoxError>,
    B: Body<Data = A::Data>,
    B::Error: Into<BoxError>,
{
    type Data = A::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project() {
            MaybeBodyProj::On { inner } => inner.poll_frame(cx).map_err(Into::into),
            MaybeBodyProj::Off { inner } => inner.poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::On { inner } => inner.is_end_stream(),
            Self::Off { inner } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::On { inner } => inner.size_hint(),
            Self::Off { inner } => inner.size_hint(),
        }
    }
}
