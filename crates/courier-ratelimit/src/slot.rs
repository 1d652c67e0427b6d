//! What the token bucket ([`TokenBucketRateLimit`](crate::TokenBucketRateLimit)) and adaptive
//! pacing ([`AdaptivePacing`](crate::AdaptivePacing)) share: the service around the limiting,
//! and the future of a request that holds a slot.
//!
//! A request either starts at once, or holds a slot: it waits for the store's decision (unless
//! the service took it in `call`), then for the slot's moment, then calls the inner service.
//! What a decision means, when to wake and whether to go then is each limiter's own
//! ([`Slot`]); the sequence, and the rule both keep, are here: a slot reserved for a request
//! that is never sent goes back to the store exactly once (the future is dropped before the
//! call, the request is refused after all, or the limiter no longer needs it), and once the
//! inner service is called the slot is spent.

use crate::store::{Decision, Denial, Grant};
use courier_core::BoxError;
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::time::{Instant, Sleep, sleep_until};
use tower_service::Service;

/// How one limiter decides what to do with one request's slot, gives it back, and reads the
/// answer.
pub(crate) trait Slot: fmt::Debug {
    /// A store's decision that comes later (over the network).
    type Acquire: Future<Output = Result<Decision, BoxError>>;

    /// What to do with `grant`, just reserved, at `now`, for a request due by `deadline`.
    fn admitted(&self, grant: &Grant, now: Instant, deadline: Option<Instant>) -> Next;

    /// What to do with `grant` when the wait [`Next::Wait`] asked for ends, at `now`.
    fn woke(&self, grant: &Grant, now: Instant, deadline: Option<Instant>) -> Next;

    /// Gives `grant` back to the store: its request will never be sent with it.
    fn give_back(&self, grant: &Grant);

    /// The error of a refused request: the store's `denial`, or (`gave_back`) the refusal of a
    /// request whose slot just went back.
    fn refusal(&self, denial: Denial, gave_back: bool) -> BoxError;

    /// Reads the answer to a request that was sent.
    fn answered<ResB>(&self, result: &Result<Response<ResB>, BoxError>);
}

/// What a request holding a slot does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The slot has come: the request is sent, and the slot is spent.
    Go,
    /// The slot is not needed after all: it goes back, and the request is sent at once.
    Skip,
    /// Wait until then, and ask [`Slot::woke`] again.
    Wait(Instant),
    /// The request is never sent: the slot goes back, and the request fails.
    Refuse(Denial),
}

pin_project! {
    /// A request's way through a limiter: straight through (a pass-through service's), or
    /// holding a slot of `P`.
    #[project = SlotFutureProj]
    pub(crate) enum SlotFuture<S, B, P>
    where
        S: Service<Request<B>>,
        P: Slot,
    {
        Slotted { #[pin] fut: Slotted<S, B, P> },
        Passing { #[pin] fut: S::Future },
    }
}

pin_project! {
    // A request of an active limiter.
    pub(crate) struct Slotted<S, B, P>
    where
        S: Service<Request<B>>,
        P: Slot,
    {
        #[pin]
        state: State<P::Acquire, S::Future>,
        // The instance made ready and the request, until the call starts. Boxed: a call that
        // starts at once (the usual case) carries neither, and the future stays small.
        pending: Option<Box<(S, Request<B>)>>,
        slot: P,
    }

    impl<S, B, P> PinnedDrop for Slotted<S, B, P>
    where
        S: Service<Request<B>>,
        P: Slot,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Dropped before the call started: give the slot back.
            let grant = match this.state.project() {
                StateProj::Sleeping { grant, .. } => grant,
                StateProj::Decided { decision: Decision::Admit(grant) } => grant,
                _ => return,
            };
            this.slot.give_back(grant);
        }
    }
}

pin_project! {
    // Acquire => Decided
    // Decided => (Sleeping | Calling | Done)
    // Sleeping => (Calling | Done)
    // Calling => Done
    #[project = StateProj]
    enum State<A, F> {
        Acquire { #[pin] fut: A },
        Decided { decision: Decision },
        // The slot reserved, to give back if the request is never sent; the timer is boxed, as
        // only a waiting request needs one.
        Sleeping { sleep: Pin<Box<Sleep>>, grant: Grant },
        Calling { #[pin] fut: F },
        Done,
    }
}

// === impl SlotFuture ===

impl<S, B, P> SlotFuture<S, B, P>
where
    S: Service<Request<B>>,
    P: Slot,
{
    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn pass(fut: S::Future) -> Self {
        Self::Passing { fut }
    }

    /// The call started at once, holding no slot.
    #[inline]
    pub(crate) fn calling(fut: S::Future, slot: P) -> Self {
        Self::slotted(State::Calling { fut }, None, slot)
    }

    /// Goes on with a decision the service took; `pending` is `None` only for a refusal.
    pub(crate) fn decided(
        decision: Decision,
        pending: Option<Box<(S, Request<B>)>>,
        slot: P,
    ) -> Self {
        Self::slotted(State::Decided { decision }, pending, slot)
    }

    /// Waits for the store's decision, then goes on with `pending`.
    pub(crate) fn acquiring(acquire: P::Acquire, pending: Box<(S, Request<B>)>, slot: P) -> Self {
        Self::slotted(State::Acquire { fut: acquire }, Some(pending), slot)
    }

    #[inline]
    fn slotted(
        state: State<P::Acquire, S::Future>,
        pending: Option<Box<(S, Request<B>)>>,
        slot: P,
    ) -> Self {
        Self::Slotted {
            fut: Slotted {
                state,
                pending,
                slot,
            },
        }
    }
}

impl<S, B, ResB, P> Future for SlotFuture<S, B, P>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    P: Slot,
{
    type Output = Result<Response<ResB>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            SlotFutureProj::Slotted { fut } => fut.poll_slotted(cx),
            SlotFutureProj::Passing { fut } => fut.poll(cx).map_err(Into::into),
        }
    }
}

impl<S, B, P> fmt::Debug for SlotFuture<S, B, P>
where
    S: Service<Request<B>>,
    P: Slot,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::Slotted { fut } = self else {
            return f.write_str("ResponseFuture::Passing");
        };
        let (state, grant) = match &fut.state {
            State::Acquire { .. } => ("acquire", None),
            State::Decided { .. } => ("decided", None),
            State::Sleeping { grant, .. } => ("sleeping", Some(grant)),
            State::Calling { .. } => ("calling", None),
            State::Done => ("done", None),
        };
        f.debug_struct("ResponseFuture")
            .field("slot", &fut.slot)
            .field("state", &state)
            .field("grant", &grant)
            .finish()
    }
}

// === impl Slotted ===

impl<S: Service<Request<B>>, B, P: Slot> Slotted<S, B, P> {
    #[inline]
    fn poll_slotted<ResB>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Response<ResB>, BoxError>>
    where
        S: Service<Request<B>, Response = Response<ResB>>,
        S::Error: Into<BoxError>,
    {
        let mut this = self.project();
        loop {
            let (grant, next) = match this.state.as_mut().project() {
                StateProj::Calling { fut } => {
                    let result = ready!(fut.poll(cx)).map_err(Into::into);
                    this.state.set(State::Done);
                    this.slot.answered(&result);
                    return Poll::Ready(result);
                }
                StateProj::Acquire { fut } => match ready!(fut.poll(cx)) {
                    Ok(decision) => {
                        this.state.set(State::Decided { decision });
                        continue;
                    }
                    Err(err) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(err));
                    }
                },
                StateProj::Decided { decision } => match *decision {
                    Decision::Admit(grant) => {
                        let deadline = deadline_of(this.pending);
                        (grant, this.slot.admitted(&grant, Instant::now(), deadline))
                    }
                    Decision::Deny(denial) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Err(this.slot.refusal(denial, false)));
                    }
                },
                StateProj::Sleeping { sleep, grant } => {
                    ready!(sleep.as_mut().poll(cx));
                    let grant = *grant;
                    let deadline = deadline_of(this.pending);
                    match this.slot.woke(&grant, Instant::now(), deadline) {
                        Next::Wait(at) => {
                            sleep.as_mut().reset(at);
                            continue;
                        }
                        next => (grant, next),
                    }
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            };
            // Out of the state that holds the grant first: it goes back at most once, and from
            // the call on it is spent.
            this.state.set(State::Done);
            match next {
                Next::Go => {}
                Next::Skip => this.slot.give_back(&grant),
                Next::Wait(at) => {
                    this.state.set(State::Sleeping {
                        sleep: Box::pin(sleep_until(at)),
                        grant,
                    });
                    continue;
                }
                Next::Refuse(denial) => {
                    this.slot.give_back(&grant);
                    return Poll::Ready(Err(this.slot.refusal(denial, true)));
                }
            }
            this.state.set(State::Calling {
                fut: start(this.pending),
            });
        }
    }
}

/// The deadline of the request held while its slot is pending.
fn deadline_of<S, B>(pending: &Option<Box<(S, Request<B>)>>) -> Option<Instant> {
    pending
        .as_deref()
        .and_then(|(_, req)| courier_core::CallContext::deadline_in(req.extensions()))
}

/// Calls the inner service with the request held while the slot was pending.
#[cold]
fn start<S, B>(pending: &mut Option<Box<(S, Request<B>)>>) -> S::Future
where
    S: Service<Request<B>>,
{
    let (mut inner, req) = *pending
        .take()
        .expect("the request is taken only when the call starts");
    inner.call(req)
}

/// Defines a limiter's service and its response future: all but the limiting itself.
///
/// The service `$service`, made by `$layer` (whose field `shared` holds its state, a
/// `$shared<KF, St>`), keeps the inner service, the layer's state (`None` passing through),
/// and what the previous request's key led to (a `$last<KF::Key>`); it gets `new`,
/// `pass_through`, the accessors, `Clone`, `Debug` (the inner service and the `config` of the
/// layer's state) and `Service`: `poll_ready` forwards the inner service's readiness, and
/// `call` hands an active service's request to the service's own `limit(shared, req)`, which
/// returns a [`SlotFuture`] of `$slot`. The response future `$future` wraps that
/// [`SlotFuture`].
macro_rules! limiter {
    (
        $(#[$doc:meta])*
        pub struct $service:ident($layer:ident) {
            shared: $shared:ident,
            $(#[$last_doc:meta])*
            last: $last:ident,
        }
        $(#[$future_doc:meta])*
        pub struct $future:ident($slot:ident);
    ) => {
        $(#[$doc])*
        pub struct $service<
            S,
            KF: ::courier_core::KeyFn = ::courier_core::PerHost,
            St = $crate::store::InMemoryStore<::courier_core::HostKey>,
        > {
            inner: S,
            /// `None` in a pass-through service.
            shared: Option<::std::sync::Arc<$shared<KF, St>>>,
            $(#[$last_doc])*
            last: Option<::std::sync::Arc<$last<KF::Key>>>,
        }

        impl<S, KF: ::courier_core::KeyFn, St> $service<S, KF, St> {
            /// Wraps `inner`, sharing the state of every other service `layer` (or a clone of
            /// it) makes; the same as `layer.layer(inner)`.
            pub fn new(inner: S, layer: $layer<KF, St>) -> Self {
                Self {
                    inner,
                    shared: Some(layer.shared),
                    last: None,
                }
            }

            /// The layer switched off: every call goes straight to `inner`, taking no slot,
            /// and nothing is read from its answer.
            #[doc = concat!(
                "The same type as an active `", stringify!($service), "<S, KF, St>`, so a ",
                "stack can switch it at run time."
            )]
            pub const fn pass_through(inner: S) -> Self {
                Self {
                    inner,
                    shared: None,
                    last: None,
                }
            }

            /// Whether this service was made by [`pass_through`](Self::pass_through).
            pub const fn is_pass_through(&self) -> bool {
                self.shared.is_none()
            }

            /// The inner service.
            pub fn get_ref(&self) -> &S {
                &self.inner
            }

            /// The inner service, mutably.
            pub fn get_mut(&mut self) -> &mut S {
                &mut self.inner
            }

            /// The inner service, consuming the wrapper.
            pub fn into_inner(self) -> S {
                self.inner
            }
        }

        impl<S: Clone, KF: ::courier_core::KeyFn, St> $service<S, KF, St> {
            /// The instance that was made ready, leaving a fresh clone for the next
            /// `poll_ready`.
            fn take_ready(&mut self) -> S {
                let clone = self.inner.clone();
                ::std::mem::replace(&mut self.inner, clone)
            }
        }

        impl<S: ::std::fmt::Debug, KF: ::courier_core::KeyFn, St> ::std::fmt::Debug
            for $service<S, KF, St>
        {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($service))
                    .field("inner", &self.inner)
                    .field("config", &self.shared.as_deref().map(|shared| &shared.config))
                    .finish()
            }
        }

        impl<S: Clone, KF: ::courier_core::KeyFn, St> Clone for $service<S, KF, St> {
            fn clone(&self) -> Self {
                Self {
                    inner: self.inner.clone(),
                    shared: self.shared.clone(),
                    // A clone made per request (as a retry layer above does) stays warm.
                    last: self.last.clone(),
                }
            }
        }

        impl<S, B, ResB, KF, St> ::tower_service::Service<::http::Request<B>>
            for $service<S, KF, St>
        where
            S: ::tower_service::Service<::http::Request<B>, Response = ::http::Response<ResB>>
                + Clone,
            S::Error: Into<::courier_core::BoxError>,
            KF: ::courier_core::KeyFn,
            St: $crate::store::RateLimitStore<KF::Key>,
        {
            type Response = ::http::Response<ResB>;
            type Error = ::courier_core::BoxError;
            type Future = $future<S, B, KF, St>;

            fn poll_ready(
                &mut self,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<Result<(), Self::Error>> {
                ::tower_service::Service::poll_ready(&mut self.inner, cx).map_err(Into::into)
            }

            #[inline]
            fn call(&mut self, req: ::http::Request<B>) -> Self::Future {
                // Each arm builds the whole future: one built first and wrapped after the
                // `match` was copied twice more on its way out.
                match &self.shared {
                    Some(shared) => {
                        let shared = ::std::sync::Arc::clone(shared);
                        $future { fut: self.limit(shared, req) }
                    }
                    None => $future {
                        fut: $crate::slot::SlotFuture::pass(
                            ::tower_service::Service::call(&mut self.inner, req),
                        ),
                    },
                }
            }
        }

        ::pin_project_lite::pin_project! {
            $(#[$future_doc])*
            #[must_use = "futures do nothing unless polled"]
            pub struct $future<S, B, KF, St>
            where
                S: ::tower_service::Service<::http::Request<B>>,
                KF: ::courier_core::KeyFn,
                St: $crate::store::RateLimitStore<KF::Key>,
            {
                #[pin]
                fut: $crate::slot::SlotFuture<S, B, $slot<KF, St>>,
            }
        }

        impl<S, B, ResB, KF, St> ::std::future::Future for $future<S, B, KF, St>
        where
            S: ::tower_service::Service<::http::Request<B>, Response = ::http::Response<ResB>>,
            S::Error: Into<::courier_core::BoxError>,
            KF: ::courier_core::KeyFn,
            St: $crate::store::RateLimitStore<KF::Key>,
        {
            type Output = Result<::http::Response<ResB>, ::courier_core::BoxError>;

            #[inline]
            fn poll(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<Self::Output> {
                ::std::future::Future::poll(self.project().fut, cx)
            }
        }

        impl<S, B, KF, St> ::std::fmt::Debug for $future<S, B, KF, St>
        where
            S: ::tower_service::Service<::http::Request<B>>,
            KF: ::courier_core::KeyFn,
            St: $crate::store::RateLimitStore<KF::Key>,
        {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Debug::fmt(&self.fut, f)
            }
        }
    };
}

pub(crate) use limiter;
