//! The response future of [`EtagCache`](crate::EtagCache).

use crate::body::CacheBody;
use crate::entry::Variants;
use crate::flight::{Drive, Handoff};
use crate::response::{Completion, Lookup, Pending, pass};
use crate::service::Route;
use crate::store::StoreFuture;
use crate::telemetry::observed;
use bytes::Bytes;
use courier_core::CallContext;
use courier_core::body::RetryBody;
use courier_core::extensions::CacheStatus;
use http::header::HeaderMap;
use http::{Extensions, Method, Request, Response, Uri, Version};
use http_body::Body;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};
use tower_service::Service;
use tracing::Span;

pin_project! {
    /// The response future of [`EtagCache`](crate::EtagCache): a stored response, ready at
    /// once; the upstream's answer, to merge, store or replace; or, while another request
    /// revalidates the same entry or asks for the same missing key, a wait for its result.
    /// When the 304 to a revalidation the cache made selects no stored response, it sends the
    /// request once more without the conditionals and answers with that. With a store that
    /// can wait, it looks the key up first.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future, S::Response>,
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
    pub(crate) enum State<S, B, F, R> {
        // A response made in the cache: a fresh hit, or a stale one within
        // `stale-while-revalidate`.
        Ready { response: Option<Response<Bytes>> },
        // Waiting for a store that can wait to look the key up.
        Looking { looking: Box<Looking<S, B>> },
        // Another request revalidates this entry, or asks for this missing key: wait for it,
        // then maybe go ourselves.
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
        // An unsafe method's answer, held until a store that can wait has removed what it
        // invalidates.
        Removing { removing: Box<Mutex<Removing<R>>> },
        // A pass-through service's: the upstream's answer, as it comes.
        Passing { #[pin] future: F },
    }
}

/// A lookup in a store that can wait (boxed: the in-memory store is looked up in place).
pub(crate) struct Looking<S, B> {
    /// In a mutex only to be `Sync`: it is polled through `&mut`, never locked.
    pub(crate) lookup: Mutex<StoreFuture<'static, Option<Arc<Variants>>>>,
    pub(crate) route: Route,
    /// The instance the caller made ready.
    pub(crate) inner: S,
    pub(crate) request: Option<Request<B>>,
}

/// An answer waiting for the removals it made.
pub(crate) struct Removing<R> {
    pub(crate) removal: StoreFuture<'static, ()>,
    pub(crate) response: Option<R>,
}

/// What it takes to send a GET or HEAD again without the conditionals the cache added: a
/// service, and a copy of the caller's request (boxed: only revalidations keep one).
pub(crate) struct Resend<S, B> {
    pub(crate) inner: S,
    pub(crate) version: Version,
    pub(crate) uri: Uri,
    /// A HEAD's fields (a GET's are the lookup's copy of them).
    pub(crate) headers: Option<HeaderMap>,
    /// The caller's extensions, its `CallContext` among them.
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

/// A request waiting for the leader of its flight (boxed: only under contention).
pub(crate) struct Follower<S, B> {
    pub(crate) leader: oneshot::Receiver<Handoff>,
    /// The leader's answer, read on while waiting for it to be stored.
    pub(crate) answer: Option<Arc<dyn Drive>>,
    pub(crate) waiting: bool,
    pub(crate) timeout: Pin<Box<Sleep>>,
    pub(crate) inner: S,
    pub(crate) request: Option<Request<B>>,
    pub(crate) pending: Option<Lookup>,
    pub(crate) resend: Option<Box<Resend<S, B>>>,
}

impl<S, B, F, R> State<S, B, F, R> {
    /// Whether the call is unanswered and waits in the cache itself (on the store, on another
    /// caller's request, to send again, or a hit not yet handed out), with the call's deadline
    /// when it is known: a call dropped then was ended from outside, and no layer below
    /// can say so. Waiting on the layers below, the retry layer there says it.
    fn waiting_here(&self) -> Option<Option<Instant>> {
        match self {
            Self::Looking { looking } => Some(
                looking
                    .request
                    .as_ref()
                    .and_then(|r| CallContext::deadline_in(r.extensions())),
            ),
            Self::Following { follower } if follower.pending.is_some() => Some(
                follower
                    .request
                    .as_ref()
                    .and_then(|r| CallContext::deadline_in(r.extensions())),
            ),
            Self::Resending { resend, .. } => Some(
                resend
                    .as_ref()
                    .and_then(|r| CallContext::deadline_in(&r.extensions)),
            ),
            Self::Ready { response: Some(_) } => Some(None),
            _ => None,
        }
    }

    pub(crate) fn ready(response: Response<Bytes>) -> Self {
        Self::Ready {
            response: Some(response),
        }
    }

    /// Waiting on the upstream, with how to ask again when its 304 selects nothing.
    pub(crate) fn forwarded(
        future: F,
        pending: Pending,
        resend: Option<Box<Resend<S, B>>>,
    ) -> Self {
        Self::Forwarded {
            future,
            pending: Some(pending),
            resend,
        }
    }

    pub(crate) fn following(follower: Follower<S, B>) -> Self {
        Self::Following {
            follower: Box::new(follower),
        }
    }

    pub(crate) fn looking(looking: Looking<S, B>) -> Self {
        Self::Looking {
            looking: Box::new(looking),
        }
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    /// The future in `state`, polled inside `span` (the call span of an active cache).
    #[inline]
    pub(crate) fn new(state: State<S, B, S::Future, S::Response>, span: Span) -> Self {
        Self { state, span }
    }

    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn passing(future: S::Future) -> Self {
        Self::new(State::Passing { future }, Span::none())
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Ready { .. } => f.write_str("ResponseFuture::Ready"),
            State::Looking { looking } => f
                .debug_struct("ResponseFuture::Looking")
                .field("route", &looking.route)
                .finish(),
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
            State::Removing { .. } => f.write_str("ResponseFuture::Removing"),
            State::Passing { .. } => f.write_str("ResponseFuture::Passing"),
        }
    }
}

impl<S, B> Follower<S, B> {
    /// Takes what the leader handed over: the answer, when its entry serves this request, or
    /// else the flight to lead (leaving `waiting`, and sending its own request).
    fn take<RB>(&mut self, handoff: Handoff) -> Option<Response<CacheBody<RB>>> {
        match handoff {
            Handoff::Entry(entry) => {
                let pending = self.pending.as_ref()?;
                let response = pending.followed(&entry)?;
                self.pending = None;
                Some(response)
            }
            Handoff::Lead(guard) => {
                if let Some(pending) = self.pending.as_mut() {
                    pending.flight = Some(guard);
                }
                None
            }
            // Past waiting, there is nothing left to read it for.
            Handoff::Answer(..) => None,
        }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    S::Future: Send + 'static,
    B: RetryBody,
    RB: Body + Send + 'static,
    RB::Error: Send,
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
                // Looking => any state but Looking
                StateProj::Looking { looking } => {
                    let lookup = looking.lookup.get_mut().unwrap_or_else(|p| p.into_inner());
                    let variants = ready!(lookup.as_mut().poll(cx));
                    ready!(looking.inner.poll_ready(cx))?;
                    let request = looking.request.take().expect("a lookup completes once");
                    let next =
                        looking
                            .route
                            .clone()
                            .decide(&mut looking.inner, request, variants, None);
                    state.set(next);
                }
                // Following => (done | Forwarded)
                StateProj::Following { follower } => {
                    if follower.waiting {
                        let handoff = match Pin::new(&mut follower.leader).poll(cx) {
                            Poll::Ready(Ok(Handoff::Answer(answer, next))) => {
                                follower.answer = Some(answer);
                                follower.leader = next;
                                continue;
                            }
                            Poll::Ready(handoff) => handoff.ok(),
                            Poll::Pending => {
                                // Once read to its end, the answer's outcome is handed over.
                                let read = follower.answer.as_ref().map(|a| a.poll_drive(cx));
                                if read.is_some_and(|r| r.is_ready()) {
                                    follower.answer = None;
                                    continue;
                                }
                                ready!(follower.timeout.as_mut().poll(cx));
                                // Out of time: a handoff made meanwhile still counts.
                                follower.leader.try_recv().ok()
                            }
                        };
                        follower.answer = None;
                        follower.waiting = false;
                        if let Some(response) = handoff.and_then(|h| follower.take(h)) {
                            return Poll::Ready(observed(span, Ok(response)));
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
                // Forwarded => (done | Resending | Removing)
                StateProj::Forwarded {
                    future,
                    pending,
                    resend,
                } => {
                    let result = ready!(future.poll(cx));
                    let looked_up = pending
                        .as_mut()
                        .expect("a forwarded response future completes once");
                    // Most answers: marked and handed on, looked at in place.
                    if let Some(status) = looked_up.passes(&result) {
                        *pending = None;
                        return Poll::Ready(observed(span, result.map(|r| pass(r, status))));
                    }
                    let completion = looked_up.complete(result, resend.is_some());
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
                        Completion::Removing(removal, response) => {
                            *pending = None;
                            state.set(State::Removing {
                                removing: Box::new(Mutex::new(Removing {
                                    removal,
                                    response: Some(response),
                                })),
                            });
                        }
                    }
                }
                StateProj::Removing { removing } => {
                    let removing = removing.get_mut().unwrap_or_else(|p| p.into_inner());
                    ready!(removing.removal.as_mut().poll(cx));
                    let response = removing
                        .response
                        .take()
                        .expect("an answer is handed on once");
                    return Poll::Ready(observed(span, Ok(pass(response, CacheStatus::Bypass))));
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
