//! The response future of [`EtagCache`](crate::EtagCache).

use crate::body::CacheBody;
use crate::entry::Entry;
use crate::response::{Completion, Lookup, Pending};
use crate::telemetry::observed;
use bytes::Bytes;
use courier_core::Deadline;
use http::header::HeaderMap;
use http::{Extensions, Method, Request, Response, Uri, Version};
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
use tracing::Span;

pin_project! {
    /// The response future of [`EtagCache`](crate::EtagCache): a stored response, ready at
    /// once; the upstream's answer, to merge, store or replace; or, while another request
    /// revalidates the same entry, a wait for its result. When the 304 to a revalidation the
    /// cache made selects no stored response, it sends the request once more without the
    /// conditionals and answers with that.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future>,
        // The call span of an active cache; polled inside it.
        span: Span,
    }

    impl<S, B> PinnedDrop for ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if this.span.is_none() {
                return;
            }
            if let Some(deadline) = this.state.as_ref().get_ref().waiting_here() {
                crate::telemetry::ended_from_outside(this.span, deadline);
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F> {
        // A fresh hit: no request was sent.
        Ready { response: Option<Response<Bytes>> },
        // Another request revalidates this entry: wait for it, then maybe go ourselves.
        Following { follower: Box<Follower<S, B>> },
        // Waiting on the upstream; `pending` says what to do with its answer, `resend` how to
        // ask again (once) when that answer is a 304 that selects nothing.
        Forwarded {
            #[pin]
            future: F,
            pending: Option<Pending>,
            resend: Option<Box<Resend<S, B>>>,
        },
        // Waiting for the service to send the request again.
        Resending { resend: Option<Box<Resend<S, B>>>, pending: Option<Pending> },
        // A pass-through service's: the upstream's answer, as it comes.
        Passing { #[pin] future: F },
    }
}

/// What it takes to send a GET or HEAD again without the conditionals the cache added: a
/// service, and a copy of the caller's request (boxed: only revalidations keep one).
pub(crate) struct Resend<S, B> {
    pub(crate) inner: S,
    pub(crate) version: Version,
    pub(crate) uri: Uri,
    /// A HEAD's fields (a GET's are the lookup's copy of them).
    pub(crate) headers: Option<HeaderMap>,
    /// The caller's extensions, its `Deadline` among them.
    pub(crate) extensions: Extensions,
    pub(crate) body: B,
}

impl<S, B> Resend<S, B> {
    /// The caller's request again, without the conditionals it never had.
    fn request(self, lookup: &Lookup) -> (S, Request<B>) {
        let head = lookup.is_head();
        let headers = match self.headers {
            Some(headers) => Some(headers),
            None if head => None,
            None => lookup.caller_headers(),
        };
        let mut request = Request::new(self.body);
        *request.method_mut() = if head { Method::HEAD } else { Method::GET };
        *request.uri_mut() = self.uri;
        *request.version_mut() = self.version;
        if let Some(headers) = headers {
            *request.headers_mut() = headers;
        }
        *request.extensions_mut() = self.extensions;
        (self.inner, request)
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
    pub(crate) resend: Option<Box<Resend<S, B>>>,
}

impl<S, B, F> State<S, B, F> {
    /// Whether the call is unanswered and waits in the cache itself (on another caller's
    /// revalidation, to send again, or a hit not yet handed out), with the call's deadline
    /// when it is known: a call dropped then was ended from outside, and no layer below
    /// can say so. Waiting on the layers below, the retry layer there says it.
    fn waiting_here(&self) -> Option<Option<Deadline>> {
        match self {
            Self::Following { follower } if follower.pending.is_some() => Some(
                follower
                    .request
                    .as_ref()
                    .and_then(|r| Deadline::get(r.extensions())),
            ),
            Self::Resending { resend, .. } => {
                Some(resend.as_ref().and_then(|r| Deadline::get(&r.extensions)))
            }
            Self::Ready { response: Some(_) } => Some(None),
            _ => None,
        }
    }
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
            span: Span::none(),
        }
    }

    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn passing(future: S::Future) -> Self {
        Self {
            state: State::Passing { future },
            span: Span::none(),
        }
    }

    pub(crate) fn forwarded(future: S::Future, pending: Pending) -> Self {
        Self::resendable(future, pending, None)
    }

    /// Waiting on the upstream, with how to ask again when its 304 selects nothing.
    pub(crate) fn resendable(
        future: S::Future,
        pending: Pending,
        resend: Option<Box<Resend<S, B>>>,
    ) -> Self {
        Self {
            state: State::Forwarded {
                future,
                pending: Some(pending),
                resend,
            },
            span: Span::none(),
        }
    }

    /// The same future, polled inside `span`.
    #[inline]
    pub(crate) fn in_span(mut self, span: Span) -> Self {
        self.span = span;
        self
    }

    pub(crate) fn following(follower: Follower<S, B>) -> Self {
        Self {
            state: State::Following {
                follower: Box::new(follower),
            },
            span: Span::none(),
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
            State::Resending { pending, .. } => f
                .debug_struct("ResponseFuture::Resending")
                .field("pending", pending)
                .finish(),
            State::Passing { .. } => f.write_str("ResponseFuture::Passing"),
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
        let this = self.project();
        let mut state = this.state;
        let span = &*this.span;
        let _entered = span.enter();
        loop {
            match state.as_mut().project() {
                StateProj::Passing { future } => {
                    let response = ready!(future.poll(cx))?;
                    return Poll::Ready(Ok(response.map(CacheBody::upstream)));
                }
                StateProj::Ready { response } => {
                    let response = response
                        .take()
                        .expect("a ready response future is polled once");
                    return Poll::Ready(observed(span, Ok(response.map(CacheBody::stored))));
                }
                // Waiting => (Ready | Forwarded)
                StateProj::Following { follower } => {
                    if follower.waiting {
                        match Pin::new(&mut follower.leader).poll(cx) {
                            Poll::Ready(Ok(entry)) => {
                                let pending =
                                    follower.pending.take().expect("a follower completes once");
                                return Poll::Ready(observed(span, Ok(pending.followed(&entry))));
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
                    let resend = follower.resend.take();
                    state.set(State::Forwarded {
                        future,
                        pending,
                        resend,
                    });
                }
                // Forwarded => (done | Resending)
                StateProj::Forwarded {
                    future,
                    pending,
                    resend,
                } => {
                    let result = ready!(future.poll(cx));
                    let completion = pending
                        .as_mut()
                        .expect("a forwarded response future completes once")
                        .complete(result, resend.is_some());
                    match completion {
                        Completion::Done(output) => {
                            *pending = None;
                            return Poll::Ready(observed(span, output));
                        }
                        Completion::Resend => {
                            let resend = resend.take();
                            let pending = pending.take();
                            state.set(State::Resending { resend, pending });
                        }
                    }
                }
                // Resending => Forwarded, with nothing to resend: never more than once.
                StateProj::Resending { resend, pending } => {
                    let inner = &mut resend.as_mut().expect("a request is sent again once").inner;
                    ready!(inner.poll_ready(cx))?;
                    let resend = resend.take().expect("a request is sent again once");
                    let Some(Pending::Lookup(lookup)) = pending.take() else {
                        unreachable!("only a lookup asks for the request to be sent again")
                    };
                    let (mut inner, request) = resend.request(&lookup);
                    let future = inner.call(request);
                    state.set(State::Forwarded {
                        future,
                        pending: Some(Pending::Lookup(lookup)),
                        resend: None,
                    });
                }
            }
        }
    }
}
