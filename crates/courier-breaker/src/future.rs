//! The response future of [`CircuitBreaker`](crate::CircuitBreaker).

use crate::key::BreakerKey;
use crate::outcome::{Outcome, Role};
use crate::registry::Breaker;
use crate::state::Ticket;
use courier_core::{BoxError, CircuitOpen, Verdict};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use std::{fmt, mem};

pin_project! {
    /// The response future of [`CircuitBreaker`](crate::CircuitBreaker): the inner call, or
    /// an at-once `CircuitOpen` when the circuit refused it.
    ///
    /// Dropping it before it completes reports nothing; a half-open trial gives its permit
    /// back so the next call becomes the trial.
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F, K: BreakerKey> {
        #[pin]
        kind: Kind<F>,
        guard: Option<Guard<K>>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Called {
            #[pin]
            fut: F,
        },
        Rejected {
            err: Option<CircuitOpen>,
        },
    }
}

impl<F, K: BreakerKey> ResponseFuture<F, K> {
    pub(crate) fn called(fut: F, guard: Guard<K>) -> Self {
        Self {
            kind: Kind::Called { fut },
            guard: Some(guard),
        }
    }

    /// The inner future and nothing else: a pass-through service's.
    #[inline]
    pub(crate) fn pass(fut: F) -> Self {
        Self {
            kind: Kind::Called { fut },
            guard: None,
        }
    }

    pub(crate) fn rejected(err: CircuitOpen) -> Self {
        Self {
            kind: Kind::Rejected { err: Some(err) },
            guard: None,
        }
    }
}

impl<F, K, B, E> Future for ResponseFuture<F, K>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    K: BreakerKey,
{
    type Output = Result<http::Response<B>, BoxError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.kind.project() {
            KindProj::Rejected { err } => Poll::Ready(Err(refused(err))),
            KindProj::Called { fut } => {
                let result = ready!(fut.poll(cx)).map_err(Into::into);
                if let Some(guard) = this.guard {
                    guard.finish(&result);
                }
                Poll::Ready(result)
            }
        }
    }
}

#[cold]
#[inline(never)]
fn refused(err: &mut Option<CircuitOpen>) -> BoxError {
    Box::new(
        err.take()
            .expect("a refused call's future is polled to completion once"),
    )
}

impl<F, K: BreakerKey> fmt::Debug for ResponseFuture<F, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match (&self.kind, &self.guard) {
            (Kind::Rejected { .. }, _) => "rejected",
            (Kind::Called { .. }, Some(g)) if g.ticket != Ticket::SPENT => "called",
            (Kind::Called { .. }, _) => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

// === impl Guard ===

/// An admitted call's claim on its breaker: reports the outcome once, or on drop reports
/// nothing and gives a trial permit back.
pub(crate) struct Guard<K: BreakerKey> {
    breaker: Arc<Breaker<K>>,
    /// [`Ticket::pack`]ed (18 bits) with the attempt's [`Role`] above [`ROLE_SHIFT`];
    /// [`Ticket::SPENT`] once the outcome is reported.
    ticket: u32,
    /// When the call started, in milliseconds since the breaker's base instant, wrapping;
    /// taken only when a slow-call threshold is set. Four bytes keep the guard at two words,
    /// so a response future is no larger than it must be.
    start_ms: u32,
}

/// Where a guard keeps the attempt's role, above the packed ticket.
const ROLE_SHIFT: u32 = 24;
const TICKET_MASK: u32 = (1 << ROLE_SHIFT) - 1;

impl<K: BreakerKey> Guard<K> {
    /// `ticket` is [`Ticket::pack`]ed; `role` says whether the attempt is a retry.
    #[inline]
    pub(crate) fn new(breaker: Arc<Breaker<K>>, ticket: u32, role: Role) -> Self {
        // Truncating wraps: a call shorter than 49 days still measures right.
        let start_ms = if !breaker.plain {
            breaker.core.now_ms() as u32
        } else {
            0
        };
        Self {
            breaker,
            ticket: ticket | role.bits() << ROLE_SHIFT,
            start_ms,
        }
    }

    fn role(&self) -> Role {
        Role::from_bits(self.ticket >> ROLE_SHIFT)
    }

    #[inline]
    fn finish<B>(&mut self, result: &Result<http::Response<B>, BoxError>) {
        let classifier = &self.breaker.core.config.classifier;
        let judged = result.as_ref().map(|res| classifier.classify(res));
        // The usual case inline: a first attempt's success while closed with nothing counted,
        // and no slow-call threshold. It changes no state (a window counts it).
        if let Some(generation) = Ticket::packed_closed(self.ticket & TICKET_MASK)
            && let Ok(verdict) = judged
            && !verdict.counts_against_host()
            && self.breaker.success_in_passing(generation, self.role())
        {
            self.ticket = Ticket::SPENT;
            return;
        }
        self.finish_slow(judged);
    }

    /// `judged`: the verdict on the answer, or the failure.
    #[cold]
    #[inline(never)]
    fn finish_slow(&mut self, judged: Result<Verdict, &BoxError>) {
        let role = self.role();
        let Some(ticket) = self.take_ticket() else {
            return;
        };
        let config = &self.breaker.core.config;
        let outcome = match judged {
            Ok(verdict) => match Outcome::of_answer(verdict) {
                // The clock is read only when a slow-call threshold is set.
                Outcome::Success => match config.slow_call {
                    Some(limit) if self.is_slow(limit) => Outcome::Failure,
                    _ => Outcome::Success,
                },
                failing => failing,
            },
            Err(e) => Outcome::of_failure(config.classifier.classify_error(&**e)),
        };
        self.breaker.record(ticket, outcome, role);
    }

    /// The ticket, once: `None` when the outcome is reported already.
    fn take_ticket(&mut self) -> Option<Ticket> {
        match mem::replace(&mut self.ticket, Ticket::SPENT) {
            Ticket::SPENT => None,
            packed => Ticket::unpack(packed & TICKET_MASK),
        }
    }

    /// Dropped before the outcome: reports nothing, gives a trial permit back.
    #[cold]
    #[inline(never)]
    fn abandon(&mut self) {
        if let Some(ticket) = self.take_ticket() {
            self.breaker.record(ticket, Outcome::Neither, Role::FIRST);
        }
    }

    #[cold]
    fn is_slow(&self, limit: Duration) -> bool {
        let elapsed = (self.breaker.core.now_ms() as u32).wrapping_sub(self.start_ms);
        u128::from(elapsed) > limit.as_millis()
    }
}

impl<K: BreakerKey> Drop for Guard<K> {
    #[inline]
    fn drop(&mut self) {
        if self.ticket != Ticket::SPENT {
            self.abandon();
        }
    }
}
