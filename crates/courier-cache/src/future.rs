//! The response future of [`EtagCache`](crate::EtagCache).

use crate::body::CacheBody;
use crate::service::Pending;
use bytes::Bytes;
use http::Response;
use http_body::Body;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

pin_project! {
    /// The response future of [`EtagCache`](crate::EtagCache): either a stored response, ready
    /// at once, or the upstream's answer to merge, store or replace.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // A fresh hit: no request was sent.
        Ready { response: Option<Response<Bytes>> },
        // Waiting on the upstream; `pending` says what to do with its answer.
        Forwarded { #[pin] future: F, pending: Option<Pending> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn ready(response: Response<Bytes>) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    pub(crate) fn forwarded(future: F, pending: Pending) -> Self {
        Self {
            state: State::Forwarded {
                future,
                pending: Some(pending),
            },
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Ready { .. } => f.write_str("ResponseFuture::Ready"),
            State::Forwarded { pending, .. } => f
                .debug_struct("ResponseFuture::Forwarded")
                .field("pending", pending)
                .finish(),
        }
    }
}

impl<F, RB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
    RB: Body,
{
    type Output = Result<Response<CacheBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Ready { response } => {
                let response = response
                    .take()
                    .expect("a ready response future is polled once");
                Poll::Ready(Ok(response.map(CacheBody::stored)))
            }
            StateProj::Forwarded { future, pending } => {
                let result = ready!(future.poll(cx));
                let pending = pending
                    .take()
                    .expect("a forwarded response future completes once");
                Poll::Ready(pending.complete(result))
            }
        }
    }
}
