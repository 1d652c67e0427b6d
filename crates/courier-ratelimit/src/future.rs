//! The response future of [`TokenBucketRateLimit`](crate::TokenBucketRateLimit).

use crate::error::RateLimited;
use crate::key::KeyFn;
use crate::layer::Shared;
use crate::store::{Decision, Grant, RateLimitStore};
use courier_core::{BoxError, CacheStatus, WaitSource};
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
    /// Decides, waits for the slot if there is one to wait for, then calls the inner service and
    /// reads the server's hints off its response.
    ///
    /// Dropping the future while it waits for its slot hands the slot back to the store (see
    /// [`RateLimitStore::cancel`]); nobody else waits longer because of it.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        #[pin]
        state: State<St::Acquire, S::Future>,
        inner: Option<S>,
        req: Option<Request<B>>,
        key: KF::Key,
        shared: Arc<Shared<KF, St>>,
        // Set while sleeping: the slot to give back if the caller drops us.
        grant: Option<Grant>,
    }

    impl<S, B, KF, St> PinnedDrop for ResponseFuture<S, B, KF, St>
    where
        S: Service<Request<B>>,
        KF: KeyFn,
        St: RateLimitStore<KF::Key>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(grant) = this.grant.take() {
                this.shared.store.cancel(this.key, this.shared.config.quota, &grant);
            }
        }
    }
}

pin_project! {
    // Acquire => (Sleeping | Calling | Done)
    // Sleeping => Calling
    // Calling => Done
    #[project = StateProj]
    enum State<A, F> {
        Acquire { #[pin] fut: A },
        Sleeping { #[pin] sleep: Sleep },
        Calling { #[pin] fut: F },
        Done,
    }
}

// === impl ResponseFuture ===

impl<S, B, KF, St> ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    pub(crate) fn new(
        acquire: St::Acquire,
        inner: S,
        req: Request<B>,
        key: KF::Key,
        shared: Arc<Shared<KF, St>>,
    ) -> Self {
        Self {
            state: State::Acquire { fut: acquire },
            inner: Some(inner),
            req: Some(req),
            key,
            shared,
            grant: None,
        }
    }
}

impl<S, B, ResB, KF, St> Future for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    type Output = Result<Response<ResB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquire { fut } => {
                    let decision = match ready!(fut.poll(cx)) {
                        Ok(decision) => decision,
                        Err(err) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(err));
                        }
                    };
                    match decision {
                        Decision::Deny(denial) => {
                            this.state.set(State::Done);
                            tracing::debug!(
                                host = ?this.key,
                                retry_in_ms = denial.retry_in().as_millis() as u64,
                                parked = denial.is_parked(),
                                "rate limited: no slot soon enough"
                            );
                            return Poll::Ready(Err(Box::new(RateLimited::new(denial.retry_in()))));
                        }
                        Decision::Admit(grant) => {
                            let now = Instant::now();
                            if grant.at() > now {
                                let wait = grant.at() - now;
                                if wait > this.shared.config.log_waits_over {
                                    tracing::info!(
                                        host = ?this.key,
                                        wait_ms = wait.as_millis() as u64,
                                        "rate limit: waiting for a slot"
                                    );
                                }
                                *this.grant = Some(grant);
                                this.state.set(State::Sleeping {
                                    sleep: tokio::time::sleep_until(grant.at()),
                                });
                                continue;
                            }
                        }
                    }
                }
                StateProj::Sleeping { sleep } => {
                    ready!(sleep.poll(cx));
                    // The slot has come: from here on it is spent.
                    *this.grant = None;
                }
                StateProj::Calling { fut } => {
                    let result = ready!(fut.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(match result {
                        Ok(resp) => {
                            observe(this.shared, this.key, &resp);
                            Ok(resp)
                        }
                        Err(err) => Err(err.into()),
                    });
                }
                StateProj::Done => panic!("ResponseFuture polled after it completed"),
            }
            // Acquire (slot now) or Sleeping (slot came) => Calling
            let mut inner = this
                .inner
                .take()
                .expect("the inner service is taken only when the call starts");
            let req = this
                .req
                .take()
                .expect("the request is taken only when the call starts");
            this.state.set(State::Calling {
                fut: inner.call(req),
            });
        }
    }
}

impl<S, B, KF, St> fmt::Debug for ResponseFuture<S, B, KF, St>
where
    S: Service<Request<B>>,
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Acquire { .. } => "acquire",
            State::Sleeping { .. } => "sleeping",
            State::Calling { .. } => "calling",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("key", &self.key)
            .field("state", &state)
            .field("grant", &self.grant)
            .finish()
    }
}

/// Parks the response's key when the server asks for quiet.
fn observe<ResB, KF, St>(shared: &Shared<KF, St>, key: &KF::Key, resp: &Response<ResB>)
where
    KF: KeyFn,
    St: RateLimitStore<KF::Key>,
{
    let Some(hints) = &shared.config.hints else {
        return;
    };
    if resp
        .extensions()
        .get::<CacheStatus>()
        .is_some_and(CacheStatus::is_from_cache)
    {
        return; // old news: the hint was obeyed (or not) when the response was fresh
    }
    let Some(hint) = hints.parse(resp.headers()) else {
        return;
    };
    let status = resp.status().as_u16();
    // Retry-After means "rate limited" only on these; on a redirect or a 201 it means other things.
    if hint.source() == WaitSource::RetryAfter && !matches!(status, 403 | 429 | 503) {
        return;
    }
    if hint.wait().is_zero() {
        return;
    }
    shared.store.park(key, hint.wait());
    tracing::info!(
        host = ?key,
        until = %httpdate::fmt_http_date(hints.wall_clock().now() + hint.wait()),
        wait_ms = hint.wait().as_millis() as u64,
        why = hint.source().as_str(),
        status,
        "rate limit: host parked by the server"
    );
}
