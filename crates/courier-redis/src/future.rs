//! The future of one decision of a [`RedisStore`] (and of a
//! [`LocalOrRedis`](crate::LocalOrRedis) store).

use crate::backend::BoxFut;
use crate::error::CommandTimedOut;
use crate::key::RedisKey;
use crate::script::Reply;
use crate::store::RedisStore;
use courier_core::BoxError;
use courier_ratelimit::{Decision, Denial, Quota, RateLimitStore};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Timeout};

pin_project! {
    /// Resolves to the decision: at once when it was taken in process, else when Redis answers
    /// or the command timeout passes (then the failure policy decides). Never an error.
    ///
    /// The longest wait counts from the moment the decision was asked for (the layer bounds it
    /// by the request's deadline): when it ends before Redis answers, the decision is a refusal
    /// (`retry_in` zero) without counting Redis as down; a slot Redis reserved within it on its
    /// own clock, but that starts later than that on ours (the reply was slow), is given back
    /// and refused; after a command timeout, the failure policy gets what is left of the wait.
    ///
    /// Dropping it while Redis works leaves the slot, if one was reserved, spent: that only
    /// lowers the rate for a moment.
    #[must_use = "futures do nothing unless polled"]
    pub struct AcquireFuture<K> {
        #[pin]
        state: State<K>,
    }
}

pin_project! {
    // Ready => Done
    // Remote => Done
    #[project = StateProj]
    enum State<K> {
        Ready { decision: Option<Decision> },
        Remote {
            #[pin]
            call: Timeout<BoxFut<Reply>>,
            store: RedisStore<K>,
            key: K,
            quota: Quota,
            asked: Instant,
            max_wait: Duration,
        },
        Done,
    }
}

// === impl AcquireFuture ===

impl<K> AcquireFuture<K> {
    pub(crate) fn ready(decision: Decision) -> Self {
        Self {
            state: State::Ready {
                decision: Some(decision),
            },
        }
    }

    pub(crate) fn remote(
        call: Timeout<BoxFut<Reply>>,
        store: RedisStore<K>,
        key: K,
        quota: Quota,
        asked: Instant,
        max_wait: Duration,
    ) -> Self {
        Self {
            state: State::Remote {
                call,
                store,
                key,
                quota,
                asked,
                max_wait,
            },
        }
    }
}

impl<K> Future for AcquireFuture<K>
where
    K: RedisKey + Hash + Eq + Clone + Send + Sync + 'static,
{
    type Output = Result<Decision, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let decision = match this.state.as_mut().project() {
            StateProj::Ready { decision } => decision
                .take()
                .expect("AcquireFuture polled after it completed"),
            StateProj::Remote {
                call,
                store,
                key,
                quota,
                asked,
                max_wait,
            } => {
                let result = ready!(call.poll(cx));
                let now = Instant::now();
                match result {
                    Ok(Ok(reply)) => match reply.into_decision(now) {
                        // A slot to wait for, later than the caller accepted once laid on our
                        // clock (a slot free at once is taken at once).
                        Decision::Admit(grant)
                            if reply.wait_us > 0
                                && asked.checked_add(*max_wait).is_some_and(|l| grant.at() > l) =>
                        {
                            store.cancel(key, *quota, &grant);
                            Decision::Deny(Denial::new(grant.at() - now))
                        }
                        Decision::Admit(grant) => {
                            store.booked(key, grant.ticket());
                            Decision::Admit(grant)
                        }
                        decision => decision,
                    },
                    Ok(Err(err)) => {
                        let left = max_wait.saturating_sub(now - *asked);
                        store.on_failure(&err, key, *quota, left)
                    }
                    Err(_) => {
                        let left = max_wait.saturating_sub(now - *asked);
                        store.on_failure(&CommandTimedOut, key, *quota, left)
                    }
                }
            }
            StateProj::Done => panic!("AcquireFuture polled after it completed"),
        };
        this.state.set(State::Done);
        Poll::Ready(Ok(decision))
    }
}

impl<K: fmt::Debug> fmt::Debug for AcquireFuture<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Ready { decision } => f
                .debug_struct("AcquireFuture")
                .field("ready", decision)
                .finish(),
            State::Remote { key, .. } => f
                .debug_struct("AcquireFuture")
                .field("waiting_on_redis", key)
                .finish(),
            State::Done => f.write_str("AcquireFuture(done)"),
        }
    }
}
