//! The response future of [`ConcurrencyLimit`](crate::ConcurrencyLimit).

use crate::body::ConcurrencyBody;
use crate::limiter::{Limiter, Permit, Shared};
use courier_core::{BoxError, ConcurrencyLimited, FailureKind};
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

pin_project! {
    /// The response future of [`ConcurrencyLimit`](crate::ConcurrencyLimit): the inner call
    /// holding a permit, a wait in the queue for one, or an at-once refusal
    /// ([`ConcurrencyLimited`]).
    ///
    /// Dropping it while it waits gives its place in the queue back (or the permit it was
    /// handed meanwhile); dropping it during the call gives the permit back. The answer's body
    /// holds the permit until it ends or is dropped (see [`ConcurrencyBody`]).
    ///
    /// A pass-through service's future is the inner service's, its body holding no permit.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B, K>
    where
        S: Service<Request<B>>,
        K: crate::LimitKey,
    {
        #[pin]
        state: State<S, B, K>,
        active: Option<Active<K>>,
    }

    impl<S, B, K> PinnedDrop for ResponseFuture<S, B, K>
    where
        S: Service<Request<B>>,
        K: crate::LimitKey,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // Dropped in the queue: leave it, or give back the permit handed meanwhile.
            if let StateProj::Waiting { ticket, .. } = this.state.project()
                && let Some(active) = this.active
            {
                active.limiter.cancel(*ticket);
            }
        }
    }
}

/// What an active service's future holds: the layer's state and the key's limiter.
struct Active<K: crate::LimitKey> {
    shared: Arc<Shared<K>>,
    limiter: Arc<Limiter<K>>,
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, K>
    where
        S: Service<Request<B>>,
    {
        Calling {
            #[pin]
            fut: S::Future,
            permit: Option<Permit>,
            // When the call was sent and how many were in flight before it; `None` when the
            // answer teaches nothing (a fixed limit, a pass-through service).
            sent: Option<(Instant, usize)>,
        },
        Waiting {
            ticket: u64,
            since: Instant,
            // Until when the call may wait: the maximum wait, or the call's deadline.
            sleep: Pin<Box<Sleep>>,
            // The instance made ready and the request, until the call starts.
            pending: Option<Box<(S, Request<B>)>>,
        },
        Refused {
            err: Option<ConcurrencyLimited>,
            _key: std::marker::PhantomData<fn() -> K>,
        },
        Done,
    }
}

impl<S, B, K> ResponseFuture<S, B, K>
where
    S: Service<Request<B>>,
    K: crate::LimitKey,
{
    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn pass(fut: S::Future) -> Self {
        Self {
            state: State::Calling {
                fut,
                permit: None,
                sent: None,
            },
            active: None,
        }
    }

    /// Called at once with `permit`; `before` calls were in flight.
    pub(crate) fn calling(
        fut: S::Future,
        permit: Permit,
        shared: Arc<Shared<K>>,
        limiter: Arc<Limiter<K>>,
        before: usize,
    ) -> Self {
        let sent = shared.learns().then(|| (Instant::now(), before));
        Self {
            state: State::Calling {
                fut,
                permit: Some(permit),
                sent,
            },
            active: Some(Active { shared, limiter }),
        }
    }

    /// Queued under `ticket`, until `until` at the latest.
    pub(crate) fn waiting(
        ticket: u64,
        until: Instant,
        pending: Box<(S, Request<B>)>,
        shared: Arc<Shared<K>>,
        limiter: Arc<Limiter<K>>,
    ) -> Self {
        Self {
            state: State::Waiting {
                ticket,
                since: Instant::now(),
                sleep: Box::pin(tokio::time::sleep_until(until)),
                pending: Some(pending),
            },
            active: Some(Active { shared, limiter }),
        }
    }

    /// Refused at once.
    pub(crate) fn refused(
        err: ConcurrencyLimited,
        shared: Arc<Shared<K>>,
        limiter: Arc<Limiter<K>>,
    ) -> Self {
        Self {
            state: State::Refused {
                err: Some(err),
                _key: std::marker::PhantomData,
            },
            active: Some(Active { shared, limiter }),
        }
    }
}

impl<S, B, K, ResB> Future for ResponseFuture<S, B, K>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
    K: crate::LimitKey,
{
    type Output = Result<Response<ConcurrencyBody<ResB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { fut, permit, sent } => {
                    let result = ready!(fut.poll(cx)).map_err(Into::into);
                    let permit = permit.take();
                    let sent = sent.take();
                    this.state.set(State::Done);
                    let Some(active) = this.active.as_ref() else {
                        return Poll::Ready(result.map(|r| r.map(ConcurrencyBody::unlimited)));
                    };
                    if let Some((at, before)) = sent {
                        learn(active, &result, at, before);
                    }
                    let keep = (!active.shared.config.release_at_headers)
                        .then_some(permit)
                        .flatten();
                    return Poll::Ready(result.map(|r| r.map(|b| ConcurrencyBody::new(b, keep))));
                }
                StateProj::Waiting {
                    ticket,
                    since,
                    sleep,
                    pending,
                } => {
                    let Some(active) = this.active.as_ref() else {
                        unreachable!("only an active service's call waits");
                    };
                    let ticket = *ticket;
                    if let Some(before) = active.limiter.poll_ticket(ticket, cx.waker()) {
                        crate::telemetry::waited(&active.limiter.key, since.elapsed());
                        let (mut inner, req) = *pending
                            .take()
                            .expect("the request is taken only when the call starts");
                        let permit = Permit::new(active.limiter.clone());
                        // The state changes before the call: a permit, once handed, is the
                        // call's and no longer the ticket's.
                        this.state.set(State::Done);
                        let fut = inner.call(req);
                        let sent = active.shared.learns().then(|| (Instant::now(), before));
                        this.state.set(State::Calling {
                            fut,
                            permit: Some(permit),
                            sent,
                        });
                        continue;
                    }
                    ready!(sleep.as_mut().poll(cx));
                    let waited = since.elapsed();
                    this.state.set(State::Done);
                    // Leaves the queue, or gives back the permit handed since the last look.
                    let err = active.limiter.cancel(ticket);
                    crate::telemetry::refused(&active.limiter.key, &err, waited);
                    return Poll::Ready(Err(Box::new(err)));
                }
                StateProj::Refused { err, .. } => {
                    let err = err.take().unwrap_or(ConcurrencyLimited::new(0, 0));
                    this.state.set(State::Done);
                    if let Some(active) = this.active.as_ref() {
                        crate::telemetry::refused(&active.limiter.key, &err, Default::default());
                    }
                    return Poll::Ready(Err(Box::new(err)));
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            }
        }
    }
}

/// Teaches the limiter what the answer says: its latency, and whether it was a drop (an
/// overload without a hint, or a timeout). A failure that is not a timeout teaches nothing:
/// a refusal below, a connect failure or a reset says nothing about queueing.
fn learn<K: crate::LimitKey, ResB>(
    active: &Active<K>,
    result: &Result<Response<ResB>, BoxError>,
    at: Instant,
    before: usize,
) {
    let classifier = &active.shared.config.classifier;
    match result {
        Ok(res) => {
            let dropped = classifier.classify(res).is_overload_signal();
            active.limiter.learn(Some(at.elapsed()), before, dropped);
        }
        Err(e) => {
            if classifier.classify_error(&**e).failure_kind() == Some(FailureKind::Timeout) {
                active.limiter.learn(None, before, true);
            }
        }
    }
}

impl<S, B, K> fmt::Debug for ResponseFuture<S, B, K>
where
    S: Service<Request<B>>,
    K: crate::LimitKey,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Calling {
                permit: Some(_), ..
            } => "calling",
            State::Calling { permit: None, .. } => "passing",
            State::Waiting { .. } => "waiting",
            State::Refused { .. } => "refused",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
