//! The response future of [`Retry`](crate::Retry).
//!
//! The first attempt is polled in place, with the call's context (the request template) held
//! inline: a call that ends after one attempt allocates nothing here (its one attempt record
//! is kept inline too), unless that attempt is hedged ([`crate::hedge`]). Only when a retry is decided does the context move into a boxed loop
//! that waits, drains the failed response body meanwhile, and drives further attempts.
//! Dropping the future at any point stops
//! everything: no further attempt is sent, and a budget withdrawal for a retry not yet sent is
//! given back.
//!
//! A gRPC answer whose `grpc-status` is to come in its trailers can carry its last attempt's
//! span, still open, to the caller that reads them: [`ReadsGrpcTrailers`] on the request,
//! [`GrpcStatusSpans`] on the response.

use crate::body::RetryBody;
use crate::budget::Withdrawal;
use crate::hedge;
use crate::layer::Config;
use crate::policy::backoff;
use crate::service::Spare;
use crate::telemetry::{self, Spans};
pub use crate::telemetry::{GrpcStatusSpans, ReadsGrpcTrailers};
use bytes::Buf;
use courier_core::classify::FailureKind;
use courier_core::extensions::{AttemptOutcome, Decision, GrpcAnswer, Reason};
use courier_core::grpc::Pushback;
use courier_core::{
    AttemptRecord, Attempts, BoxError, CallContext, CallFailed, Class, DeadlineExceeded, HostKey,
    ResponseHead, Verdict, WaitSource,
};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;
use tracing::{Instrument, Span};

/// The most bytes of a failed response body read (to keep the connection) before it is dropped.
const DRAIN_LIMIT: usize = 16 * 1024;
/// The most frames read while draining, whatever their size.
const DRAIN_FRAMES: usize = 256;

type BoxedLoop<RB> = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

pin_project! {
    /// The response future of [`Retry`](crate::Retry).
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, B, RB>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<hedge::ResponseFuture<S::Future, RB>, RB>,
        // Inline: boxed only when a retry is decided. `None` from the start in a pass-through
        // service: the first attempt's answer is the call's.
        ctx: Option<Ctx<S, B>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB> {
        // First => (done | Retrying)
        First { #[pin] fut: F },
        // Retrying => done
        Retrying { fut: BoxedLoop<RB> },
    }
}

/// What a call carries from attempt to attempt.
pub(crate) struct Ctx<S, B> {
    pub(crate) config: Arc<Config>,
    /// The hedging of every attempt, if any.
    pub(crate) hedge: Option<Arc<hedge::Config>>,
    /// What the later attempts' service is cloned from, if the call retries.
    pub(crate) spare: Arc<Spare<S>>,
    /// Method, URI, version, headers and extensions for the next attempt (without the deadline
    /// when it was the request's only extension: each later attempt gets it back).
    pub(crate) parts: Parts,
    /// The body to replay from; `None` when it cannot be replayed.
    pub(crate) body: Option<B>,
    /// The request's own [`CallOptions::retry_safe`](courier_core::CallOptions::retry_safe),
    /// else the classifier's word.
    pub(crate) retry_safe: bool,
    /// The request's own [`CallOptions::attempts`](courier_core::CallOptions::attempts), else
    /// the layer's.
    pub(crate) max_attempts: u32,
    pub(crate) deadline: Option<Instant>,
    pub(crate) start: Instant,
    /// The attempt under way, 1 for the first.
    pub(crate) attempt: u32,
    pub(crate) records: Attempts,
    pub(crate) rng: Option<SmallRng>,
    pub(crate) call_seq: u64,
    /// The call's span and the open attempt's.
    pub(crate) spans: Spans,
    /// Whether the call has ended with an answer or an error: a context dropped before is a
    /// call ended from outside (by a deadline above, or by its caller).
    pub(crate) finished: bool,
}

/// What follows an attempt.
enum Step<B> {
    Stop(AttemptRecord),
    Retry(AttemptRecord, Next<B>),
}

/// The next attempt: its body, the wait before it, the budget it spends.
struct Next<B> {
    /// `None` while an earlier attempt may still be sending the body: the copy is made once it
    /// has let go, if the body is still whole then.
    body: Option<B>,
    wait: Duration,
    withdrawal: Option<Withdrawal>,
}

// === impl ResponseFuture ===

impl<S, B, RB> ResponseFuture<S, B, RB>
where
    S: Service<Request<B>>,
{
    pub(crate) fn new(fut: hedge::ResponseFuture<S::Future, RB>, ctx: Ctx<S, B>) -> Self {
        Self {
            state: State::First { fut },
            ctx: Some(ctx),
        }
    }

    /// The inner future and nothing else: a pass-through service's.
    pub(crate) fn pass(fut: hedge::ResponseFuture<S::Future, RB>) -> Self {
        Self {
            state: State::First { fut },
            ctx: None,
        }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B, RB>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Body + Send + 'static,
{
    type Output = Result<Response<RB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::First { fut } => {
                    let polled = match this.ctx.as_ref() {
                        Some(ctx) => {
                            let _attempt = ctx.spans.attempt().map(Span::enter);
                            fut.poll(cx)
                        }
                        None => fut.poll(cx),
                    };
                    let res = ready!(polled);
                    let Some(ctx) = this.ctx.as_mut() else {
                        return Poll::Ready(res);
                    };
                    match ctx.decide(&res) {
                        Step::Stop(record) => {
                            let out = ctx.finish(res, record);
                            *this.ctx = None;
                            return Poll::Ready(out);
                        }
                        Step::Retry(record, next) => {
                            let ctx = Box::new(this.ctx.take().expect("just used"));
                            let fut: BoxedLoop<RB> = Box::pin(retry_loop(ctx, res, record, next));
                            this.state.set(State::Retrying { fut });
                        }
                    }
                }
                StateProj::Retrying { fut } => return fut.as_mut().poll(cx),
            }
        }
    }
}

impl<S, B, RB> fmt::Debug for ResponseFuture<S, B, RB>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::First { .. } => "first",
            State::Retrying { .. } => "retrying",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// Every attempt after the first: `res` is the answer of the attempt that `record` planned to
/// retry after `next.wait`.
async fn retry_loop<S, B, RB>(
    mut ctx: Box<Ctx<S, B>>,
    mut res: Result<Response<RB>, BoxError>,
    mut record: AttemptRecord,
    mut next: Next<B>,
) -> Result<Response<RB>, BoxError>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Body + Send + 'static,
{
    // The service of every later attempt, cloned once the first of them is sent.
    let mut service = None;
    loop {
        let mut sleep = std::pin::pin!(tokio::time::sleep(next.wait));
        let body = match next.body.take() {
            Some(body) => body,
            // The attempt was answered while it may still be sending the body. Its answer is
            // kept as it is until the body is known whole or not, by the end of the wait.
            None => match ctx.whole_body(sleep.as_mut()).await {
                Some(body) => body,
                None => {
                    // Not sent: `next` and its withdrawal go back unspent.
                    let stop = AttemptRecord {
                        decision: Decision::Stop,
                        reason: Reason::BodyNotReplayable,
                        wait: Duration::ZERO,
                        wait_source: None,
                        ..record
                    };
                    return ctx.finish(res, stop);
                }
            },
        };
        ctx.push(record);
        match res {
            Ok(failed) => drain_while(failed.into_body(), sleep).await,
            Err(_) => sleep.await,
        }
        ctx.attempt += 1;
        let mut parts = ctx.parts.clone();
        let call = CallContext::get_or_insert_parts(&mut parts);
        if let Some(deadline) = ctx.deadline {
            call.shrink_deadline(deadline);
        }
        // The records so far tell the layers below that this attempt is a retry, and how the
        // earlier ones ended: the breaker counts a call's failures once.
        call.set_earlier_attempts(ctx.records.clone());
        let mut req = Request::from_parts(parts, body);
        let svc = service.get_or_insert_with(|| ctx.spare.service());
        let ready = poll_fn(|cx| svc.poll_ready(cx));
        let ready: Result<(), BoxError> = match ctx.deadline {
            // The wait was planned to end before the deadline, but readiness may take longer
            // (a full concurrency limit below): no attempt goes out once the deadline is past.
            Some(deadline) => match tokio::time::timeout_at(deadline, ready).await {
                Ok(Ok(())) if Instant::now() < deadline => Ok(()),
                Ok(Err(e)) => Err(e.into()),
                Ok(Ok(())) | Err(_) => Err(ctx.deadline_exceeded(deadline)),
            },
            None => ready.await.map_err(Into::into),
        };
        res = match ready {
            Ok(()) => {
                let mut withdrawal = next.withdrawal.take();
                if let Some(w) = withdrawal.as_mut() {
                    w.commit();
                }
                ctx.spans
                    .begin(&ctx.parts, ctx.config.url_query, ctx.attempt);
                let span = ctx.spans.attempt().cloned().unwrap_or_else(Span::none);
                telemetry::inject(&span, req.headers_mut());
                let fut = {
                    let _attempt = span.enter();
                    let retry = ctx.config.to_hedges(ctx.retry_safe);
                    hedge::call(ctx.hedge.as_ref(), svc, req, Some(retry))
                };
                let res = fut.instrument(span).await;
                // Refused below by the breaker, the rate limiter or the concurrency limit: nothing was sent, so the retry
                // goes back to the budget. (A spent deadline may have cut it on the server.)
                if let (Some(w), Err(e)) = (withdrawal, &res)
                    && hedge::refused_below(&**e)
                {
                    w.give_back();
                }
                res
            }
            Err(e) => Err(e),
        };
        match ctx.decide(&res) {
            Step::Stop(record) => return ctx.finish(res, record),
            Step::Retry(r, n) => {
                record = r;
                next = n;
            }
        }
    }
}

/// Reads and discards a failed response body (up to [`DRAIN_LIMIT`]) while `sleep` runs, so the
/// connection can be reused; drops it at the limit, at its end, or when the sleep is over.
async fn drain_while<RB: Body>(body: RB, mut sleep: Pin<&mut Sleep>) {
    let mut body = Some(Box::pin(body));
    let (mut bytes, mut frames) = (0usize, 0usize);
    poll_fn(|cx| {
        while let Some(b) = body.as_mut() {
            match b.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    bytes += frame.data_ref().map_or(0, |d| d.remaining());
                    frames += 1;
                    if bytes > DRAIN_LIMIT || frames > DRAIN_FRAMES {
                        body = None;
                    }
                }
                Poll::Ready(_) => body = None,
                Poll::Pending => break,
            }
        }
        sleep.as_mut().poll(cx)
    })
    .await
}

// === impl Ctx ===

impl<S, B: RetryBody> Ctx<S, B> {
    /// A whole copy of the body once no earlier attempt can still read it; `None` when it is
    /// not whole then, or when `sleep` (the wait before the retry, which ends before the
    /// deadline) is over first.
    async fn whole_body(&mut self, mut sleep: Pin<&mut Sleep>) -> Option<B> {
        // Held mutably and moved into the poll function: `&mut B` is `Send` where `&B` would
        // need `B: Sync`.
        let template = self.body.as_mut()?;
        poll_fn(move |cx| match template.poll_replayable(cx) {
            Poll::Ready(true) => Poll::Ready(template.try_clone_body()),
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Pending => sleep.as_mut().poll(cx).map(|()| None),
        })
        .await
    }

    /// The error of a call whose deadline passed before its next attempt could be sent.
    #[cold]
    fn deadline_exceeded(&self, deadline: Instant) -> BoxError {
        let budget = deadline.saturating_duration_since(self.start);
        Box::new(DeadlineExceeded::new(budget, self.start.elapsed()))
    }

    /// Decides what follows the attempt that just ended, in the documented order.
    fn decide<RB>(&mut self, res: &Result<Response<RB>, BoxError>) -> Step<B> {
        let now = Instant::now();
        let classifier = &self.config.classifier;
        let (outcome, verdict, headers) = match res {
            Ok(r) => {
                let head = ResponseHead::of(r);
                let grpc = head.grpc_status();
                let outcome = match grpc {
                    Some(code) => AttemptOutcome::Grpc(GrpcAnswer {
                        status: r.status(),
                        code,
                    }),
                    None => AttemptOutcome::Status(r.status()),
                };
                (
                    outcome,
                    classifier.classify_response_with_grpc(&head, grpc),
                    Some(r.headers()),
                )
            }
            Err(e) => {
                let verdict = classifier.classify_error(&**e);
                let kind = verdict.failure_kind().unwrap_or(FailureKind::Other);
                (AttemptOutcome::Failure(kind), verdict, None)
            }
        };
        let (attempt, elapsed) = (self.attempt, now.saturating_duration_since(self.start));
        let record = |decision, reason, wait, wait_source| AttemptRecord {
            attempt,
            outcome,
            verdict,
            decision,
            reason,
            wait,
            wait_source,
            elapsed,
        };
        let step = match self.plan(now, outcome, verdict, headers) {
            Ok((next, source, reason)) => Step::Retry(
                record(Decision::Retry, reason, next.wait, Some(source)),
                next,
            ),
            Err(reason) => Step::Stop(record(Decision::Stop, reason, Duration::ZERO, None)),
        };
        let (Step::Stop(r) | Step::Retry(r, _)) = &step;
        self.spans.end(&self.config, &self.parts, res, r, now);
        step
    }

    fn plan(
        &mut self,
        now: Instant,
        outcome: AttemptOutcome,
        verdict: Verdict,
        headers: Option<&http::HeaderMap>,
    ) -> Result<(Next<B>, WaitSource, Reason), Reason> {
        let config = &*self.config;
        // 1. and 2.: may asking again change the answer at all?
        let reason = match (verdict.may_change(), headers.is_some()) {
            (true, true) => Reason::RetryableStatus,
            (true, false) => Reason::RetryableFailure,
            (false, true) => return Err(Reason::FinalStatus),
            (false, false) => return Err(Reason::NeverRetried),
        };
        // 3. Is repeating it safe? Nothing was sent after a connect failure.
        let nothing_sent = outcome == AttemptOutcome::Failure(FailureKind::Connect);
        if !self.retry_safe && !nothing_sent {
            return Err(Reason::NotRetrySafe);
        }
        // 4. Attempts left?
        if self.attempt >= self.max_attempts {
            return Err(Reason::AttemptsExhausted);
        }
        // A body that cannot be sent again whole ends the call. One that an earlier attempt may
        // still be sending is decided before the retry goes out (`whole_body`).
        let template = self.body.as_ref().ok_or(Reason::BodyNotReplayable)?;
        let body = match template.poll_replayable(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(true) => Some(template.try_clone_body().ok_or(Reason::BodyNotReplayable)?),
            Poll::Ready(false) => return Err(Reason::BodyNotReplayable),
            Poll::Pending => None,
        };
        // A wait that ends at the deadline or after it leaves the next attempt no time at all.
        let past_deadline = |wait: Duration| {
            self.deadline
                .is_some_and(|d| d.saturating_duration_since(now) <= wait)
        };
        // 5. The server's word, exactly; 6. else full jitter.
        let hint = match (outcome, headers) {
            // A gRPC server's word is its pushback: a wait, or "do not retry".
            (AttemptOutcome::Grpc(_), Some(h)) => match Pushback::parse(h) {
                Some(Pushback::After(wait)) => Some((wait, WaitSource::Pushback)),
                Some(Pushback::Never) => return Err(Reason::PushbackRefused),
                None => None,
            },
            _ => headers
                .and_then(|h| config.hints.parse(h))
                .map(|hint| (hint.wait(), hint.source())),
        };
        let (wait, source) = match hint {
            Some((wait, source)) => {
                if wait > config.max_wait {
                    return Err(Reason::HintTooLong);
                }
                (wait, source)
            }
            None => {
                let retry = self.attempt;
                // An HTTP answer saying the host is overloaded, without a hint, is a host
                // refusing work: spread wider than after a glitch. (A gRPC UNAVAILABLE is as
                // often a connection's glitch: the usual base.)
                let base = match (outcome, verdict.class()) {
                    (AttemptOutcome::Status(_), Class::Overload { .. }) => config.overload_base,
                    _ => config.base,
                };
                let wait = match (&mut self.rng, config.seed) {
                    (Some(rng), _) => backoff(base, config.cap, retry, config.jitter, rng),
                    (rng @ None, Some(seed)) => {
                        // One reproducible stream per call, numbered in call order.
                        let seed = seed ^ self.call_seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        let rng = rng.insert(SmallRng::seed_from_u64(seed));
                        backoff(base, config.cap, retry, config.jitter, rng)
                    }
                    (None, None) => {
                        backoff(base, config.cap, retry, config.jitter, &mut rand::rng())
                    }
                };
                (wait, WaitSource::Backoff)
            }
        };
        if past_deadline(wait) {
            return Err(Reason::PastDeadline);
        }
        // 7. The budget has the last word.
        let withdrawal = match &config.budget {
            Some(budget) => Some(
                budget
                    .withdraw(&self.parts, now)
                    .ok_or(Reason::BudgetExhausted)?,
            ),
            None => None,
        };
        Ok((
            Next {
                body,
                wait,
                withdrawal,
            },
            source,
            reason,
        ))
    }

    fn push(&mut self, record: AttemptRecord) {
        self.log(&record);
        self.records.push(record);
    }

    fn finish<RB>(
        &mut self,
        res: Result<Response<RB>, BoxError>,
        record: AttemptRecord,
    ) -> Result<Response<RB>, BoxError> {
        self.log(&record);
        let awaiting = self.spans.finish(&res, &record);
        self.records.push(record);
        self.finished = true;
        let records = std::mem::take(&mut self.records);
        match res {
            Ok(mut response) => {
                response.extensions_mut().insert(records);
                if let Some(spans) = awaiting {
                    response.extensions_mut().insert(spans);
                }
                Ok(response)
            }
            Err(e) => Err(Box::new(CallFailed::new(e, records))),
        }
    }

    /// One event per attempt. The host never shows userinfo, the path never its query.
    fn log(&self, r: &AttemptRecord) {
        macro_rules! attempt_event {
            ($level:expr) => {
                tracing::event!(
                    target: "courier::retry",
                    $level,
                    attempt = r.attempt,
                    method = %self.parts.method,
                    host = %HostKey::from_parts(&self.parts.uri, &self.parts.headers),
                    path = self.parts.uri.path(),
                    outcome = %r.outcome,
                    decision = r.decision.as_str(),
                    reason = r.reason.as_str(),
                    wait_ms = r.wait.as_millis() as u64,
                    wait_source = r.wait_source.map_or("none", |s| s.as_str()),
                    elapsed_ms = r.elapsed.as_millis() as u64,
                    "attempt"
                )
            };
        }
        if r.attempt == 1 && r.reason == Reason::FinalStatus {
            attempt_event!(tracing::Level::DEBUG);
        } else {
            attempt_event!(tracing::Level::INFO);
        }
    }
}

impl<S, B> Drop for Ctx<S, B> {
    fn drop(&mut self) {
        if !self.finished {
            self.cut();
        }
    }
}

impl<S, B> Ctx<S, B> {
    /// The call was ended from outside: by the deadline, when a layer above ended it at its
    /// deadline while this one still waited, or by its caller. The attempt under way gets its
    /// record, the spans say why the call ended, and the records go to the layer dropping the
    /// call when it asks for them ([`Attempts::of_dropped`]).
    #[cold]
    #[inline(never)]
    fn cut(&mut self) {
        let now = Instant::now();
        let deadline_passed = self.deadline.is_some_and(|d| now >= d);
        let reason = if deadline_passed {
            Reason::DeadlinePassed
        } else {
            Reason::Canceled
        };
        // Between attempts (waiting out a backoff) the last record is the attempt's already.
        let under_way = self.attempt as usize > self.records.count();
        let mut records = std::mem::take(&mut self.records);
        if under_way {
            let record = AttemptRecord {
                attempt: self.attempt,
                outcome: AttemptOutcome::Failure(FailureKind::Local),
                verdict: Verdict::failure(FailureKind::Local),
                decision: Decision::Stop,
                reason,
                wait: Duration::ZERO,
                wait_source: None,
                elapsed: now.saturating_duration_since(self.start),
            };
            self.spans.cut(&record, deadline_passed);
            records.push(record);
        } else if let Some(last) = records.last().cloned() {
            self.spans
                .cut(&AttemptRecord { reason, ..last }, deadline_passed);
        }
        records.hand_over();
    }
}
