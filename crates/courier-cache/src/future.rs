//! The response future of [`EtagCache`](crate::EtagCache).

use crate::body::CacheBody;
use crate::entry::Entry;
use crate::service::{Lookup, Pending};
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::sync::oneshot;
use tokio::time::Sleep;
use tower_service::Service;

pin_project! {
    /// The response future of [`EtagCache`](crate::EtagCache): a stored response, ready at
    /// once; the upstream's answer, to merge, store or replace; or, while another request
    /// revalidates the same entry, a wait for its result.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F> {
        // A fresh hit: no request was sent.
        Ready { response: Option<Response<Bytes>> },
        // Another request revalidates this entry: wait for it, then maybe go ourselves.
        Following { follower: Box<Follower<S, B>> },
        // Waiting on the upstream; `pending` says what to do with its answer.
        Forwarded { #[pin] future: F, pending: Option<Pending> },
    }
}

/// A revalidation waiting for the leader of its flight (boxed: only under contention).
pub(crate) struct Follower<S, B> {
    pub(crate) leader: oneshot::Receiver<Arc<Entry>>,
    pub(crate) waiting: bool,
    pub(crate) timeout: Pin<Box<Sleep>>,
    pub(crate) inner: S,
    pub(crate) request: Option<Request<B>>,
    pub(crate) pending: Option<Lookup>,
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(crate) fn ready(response: Response<Bytes>) -> Self {
        Self {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    pub(crate) fn forwarded(future: S::Future, pending: Pending) -> Self {
        Self {
            state: State::Forwarded {
                future,
                pending: Some(pending),
            },
        }
    }

    pub(crate) fn following(follower: Follower<S, B>) -> Self {
        Self {
            state: State::Following {
                follower: Box::new(follower),
            },
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Ready { .. } => f.write_str("ResponseFuture::Ready"),
            State::Following { follower } => f
                .debug_struct("ResponseFuture::Following")
                .field("pending", &follower.pending)
                .finish(),
            State::Forwarded { pending, .. } => f
                .debug_struct("ResponseFuture::Forwarded")
                .field("pending", pending)
                .finish(),
        }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    RB: Body,
{
    type Output = Result<Response<CacheBody<RB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Ready { response } => {
                    let response = response
                        .take()
                        .expect("a ready response future is polled once");
                    return Poll::Ready(Ok(response.map(CacheBody::stored)));
                }
                // Waiting => (Ready | Forwarded)
                StateProj::Following { follower } => {
                    if follower.waiting {
                        match Pin::new(&mut follower.leader).poll(cx) {
                            Poll::Ready(Ok(entry)) => {
                                let pending =
                                    follower.pending.take().expect("a follower completes once");
                                return Poll::Ready(Ok(pending.followed(&entry)));
                            }
                            // The leader failed, was dropped or got another answer.
                            Poll::Ready(Err(_)) => follower.waiting = false,
                            Poll::Pending => {
                                ready!(follower.timeout.as_mut().poll(cx));
                                follower.waiting = false;
                            }
                        }
                    }
                    ready!(follower.inner.poll_ready(cx))?;
                    let request = follower
                        .request
                        .take()
                        .expect("a follower sends its request once");
                    let future = follower.inner.call(request);
                    let pending = follower.pending.take().map(Pending::Lookup);
                    state.set(State::Forwarded { future, pending });
                }
                StateProj::Forwarded { future, pending } => {
                    let result = ready!(future.poll(cx));
                    let output = pending
                        .as_mut()
                        .expect("a forwarded response future completes once")
                        .complete(result);
                    *pending = None;
                    return Poll::Ready(output);
                }
            }
        }
    }
}
