//! The response future of [`Hedge`](super::Hedge) and of each attempt of a
//! [`Retry`](crate::Retry) that hedges, and the requests of one hedged call.
//!
//! A call that may not be hedged (not retry-safe, no delay learned yet, hedging off) polls the
//! inner future in place, noting its latency when the delay is learned. One that may be hedged
//! is boxed once: its requests, the first included, are polled together with the timer of the
//! next hedge.

use super::sketch::Sketch;
use super::{Config, HedgeOutcome, HedgeRecord, Hedged};
use crate::body::RetryBody;
use crate::budget::Withdrawal;
use crate::telemetry::TARGET;
use courier_core::classifier::Class;
use courier_core::grpc::{GrpcCode, Pushback, is_grpc};
use courier_core::{
    BoxError, CircuitOpen, ConcurrencyLimited, DeadlineExceeded, RateLimited, ResponseHead,
    is_caused_by,
};
use courier_core::{Classifier, HintConfig};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;
use tokio::time::Instant;
use tower_service::Service;
use tracing::Span;
use tracing::field::Empty;

type BoxResponse<RB> = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

/// The header gRPC's hedging puts on every hedge: how many requests of the call went before.
const PREVIOUS_ATTEMPTS: &str = "grpc-previous-rpc-attempts";

pin_project! {
    /// The response future of [`Hedge`](super::Hedge).
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F, RB> {
        #[pin]
        state: State<F, RB>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB> {
        Direct {
            #[pin]
            fut: F,
            // The host's latencies and when the request went, when the delay is learned.
            learn: Option<(Arc<Sketch>, Instant)>,
        },
        Hedged { fut: BoxResponse<RB> },
    }
}

impl<F, RB> ResponseFuture<F, RB> {
    pub(super) fn direct(fut: F, learn: Option<(Arc<Sketch>, Instant)>) -> Self {
        Self {
            state: State::Direct { fut, learn },
        }
    }

    pub(super) fn hedged(fut: BoxResponse<RB>) -> Self {
        Self {
            state: State::Hedged { fut },
        }
    }
}

impl<F, RB, E> Future for ResponseFuture<F, RB>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<RB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Direct { fut, learn } => {
                let res = ready!(fut.poll(cx)).map_err(Into::into);
                if let (Some((sketch, sent)), Ok(_)) = (learn.take(), &res) {
                    let now = Instant::now();
                    sketch.record(now.saturating_duration_since(sent), now);
                }
                Poll::Ready(res)
            }
            StateProj::Hedged { fut } => fut.as_mut().poll(cx),
        }
    }
}

impl<F, RB> fmt::Debug for ResponseFuture<F, RB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Direct { .. } => "direct",
            State::Hedged { .. } => "hedged",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// A call that may be hedged: what each of its requests is made from.
pub(super) struct Hedging<S, B> {
    config: Arc<Config>,
    /// What the answers mean: the retry layer's classifier and hints when it hedges its
    /// attempts, else the hedge's own.
    classifier: Classifier,
    hints: HintConfig,
    svc: S,
    parts: Parts,
    /// The body every hedge copies.
    template: B,
    delay: Duration,
    deadline: Option<Instant>,
    sketch: Option<Arc<Sketch>>,
    start: Instant,
    /// The span the requests' spans go under: the current one when the call was made.
    parent: Span,
    /// Requests sent so far, the first included.
    sent: u32,
    /// When each request went, in order.
    sends: Vec<Instant>,
    /// No hedge may go any more: pushback, a refusal below, the budget, the deadline.
    stopped: bool,
    records: Vec<HedgeRecord>,
}

/// One request out.
struct Out<RB> {
    fut: BoxResponse<RB>,
    attempt: u32,
    offset: Duration,
    sent_at: Instant,
    span: Span,
}

/// What an answer means for the call.
enum Judgement {
    /// It is the call's answer.
    Wins,
    /// It might change: the next hedge goes at once, unless the server pushed back.
    NonFatal { pushback: bool },
    /// A layer below refused the hedge before sending it.
    Refused,
}

impl<S, B> Hedging<S, B> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        config: Arc<Config>,
        classifier: Classifier,
        hints: HintConfig,
        svc: S,
        parts: Parts,
        template: B,
        delay: Duration,
        deadline: Option<Instant>,
        sketch: Option<Arc<Sketch>>,
        start: Instant,
    ) -> Self {
        Self {
            config,
            classifier,
            hints,
            svc,
            parts,
            template,
            delay,
            deadline,
            sketch,
            start,
            parent: Span::current(),
            sent: 1,
            sends: vec![start],
            stopped: false,
            records: Vec::new(),
        }
    }
}

impl<S, B, RB> Hedging<S, B>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: RetryBody + Send + 'static,
    RB: Send + 'static,
{
    /// Sends the first request through `ready` (the instance `poll_ready` made ready) and
    /// returns the call's future.
    pub(super) fn start(self, ready: &mut S, body: B) -> BoxResponse<RB> {
        let span = self.span(1, Duration::ZERO);
        let fut = {
            let _entered = span.enter();
            ready.call(Request::from_parts(self.parts.clone(), body))
        };
        let first = Out {
            fut: Box::pin(async move { fut.await.map_err(Into::into) }),
            attempt: 1,
            offset: Duration::ZERO,
            sent_at: self.start,
            span,
        };
        Box::pin(self.run(first))
    }

    async fn run(mut self, first: Out<RB>) -> Result<Response<RB>, BoxError> {
        let mut out = vec![first];
        // The last non-fatal answer: the call's if nothing better comes.
        let mut held: Option<Result<Response<RB>, BoxError>> = None;
        let mut timer = std::pin::pin!(tokio::time::sleep_until(self.start + self.delay));
        loop {
            let may_hedge = !self.stopped && self.sent < self.config.attempts;
            let event = poll_fn(|cx| {
                for (i, o) in out.iter_mut().enumerate() {
                    let polled = {
                        let _entered = o.span.enter();
                        o.fut.as_mut().poll(cx)
                    };
                    if let Poll::Ready(res) = polled {
                        return Poll::Ready(Some((i, res)));
                    }
                }
                if may_hedge && timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await;
            let Some((i, res)) = event else {
                self.hedge(&mut out);
                timer.as_mut().reset(Instant::now() + self.delay);
                continue;
            };
            let done = out.remove(i);
            let now = Instant::now();
            if let (Some(sketch), Ok(_)) = (&self.sketch, &res) {
                sketch.record(now.saturating_duration_since(done.sent_at), now);
            }
            match self.judge(&res, done.attempt > 1) {
                Judgement::Wins => {
                    self.end(&done, HedgeOutcome::Won, Some(&res));
                    // The latest request to go: every cancelled one sent before it had not
                    // answered when it went.
                    let last_sent = out
                        .iter()
                        .map(|o| o.sent_at)
                        .chain([done.sent_at])
                        .max()
                        .unwrap_or(done.sent_at);
                    for o in out.drain(..) {
                        if let Some(sketch) = &self.sketch
                            && o.sent_at < last_sent
                        {
                            // Overtaken: slower than the wait before the next request at
                            // least, and counted as that, not as the time the winner took,
                            // which would raise the delay with every hedge that wins.
                            let next = self.next_sent_after(o.sent_at, last_sent);
                            sketch.record(next.saturating_duration_since(o.sent_at), now);
                        }
                        self.end(&o, HedgeOutcome::Cancelled, None);
                    }
                    return self.finish(res, done.attempt);
                }
                Judgement::Refused => {
                    self.stopped = true;
                    self.end(&done, HedgeOutcome::Refused, Some(&res));
                    if out.is_empty() {
                        let res = held.take().unwrap_or(res);
                        return self.finish(res, 0);
                    }
                }
                Judgement::NonFatal { pushback } => {
                    self.stopped |= pushback;
                    self.end(&done, HedgeOutcome::NonFatal, Some(&res));
                    held = Some(res);
                    if !self.stopped && self.sent < self.config.attempts {
                        self.hedge(&mut out);
                        timer.as_mut().reset(Instant::now() + self.delay);
                    }
                    if out.is_empty() {
                        let res = held.take().expect("just held");
                        return self.finish(res, 0);
                    }
                }
            }
        }
    }

    /// Sends the next hedge, if the deadline, the body and the budget allow it; else no hedge
    /// goes any more, but for a body not yet read whole, which waits for the next tick.
    fn hedge(&mut self, out: &mut Vec<Out<RB>>) {
        let now = Instant::now();
        if self.deadline.is_some_and(|d| now >= d) {
            self.stopped = true;
            return;
        }
        let body = match self
            .template
            .poll_replayable(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(true) => self.template.try_clone_body(),
            // Still being read by the first request (a slow upload): tried again one delay on.
            Poll::Pending => return,
            Poll::Ready(false) => None,
        };
        let Some(body) = body else {
            self.stopped = true;
            return;
        };
        let Some(withdrawal) = self.config.budget.withdraw(&self.parts, now) else {
            self.stopped = true;
            #[cfg(feature = "metrics")]
            crate::metrics::hedge(crate::metrics::HEDGE_BUDGET_REFUSALS, &self.parts);
            return;
        };
        let attempt = self.sent + 1;
        self.sent = attempt;
        self.sends.push(now);
        let mut parts = self.parts.clone();
        if is_grpc(&parts.headers) {
            parts
                .headers
                .insert(PREVIOUS_ATTEMPTS, HeaderValue::from(attempt - 1));
        }
        let offset = now.saturating_duration_since(self.start);
        let span = self.span(attempt, offset);
        let mut svc = self.svc.clone();
        let req = Request::from_parts(parts, body);
        let (deadline, start) = (self.deadline, self.start);
        // The hedge's share of the budget is spent once it goes out; dropped before that (a
        // hedge that lost while it waited to be ready, or never got ready in time), it goes
        // back, and so it does when a layer below refused it.
        let mut withdrawal: Withdrawal = withdrawal;
        let fut: BoxResponse<RB> = Box::pin(async move {
            let ready = poll_fn(|cx| svc.poll_ready(cx));
            match deadline {
                // Readiness may take longer than the deadline leaves (a full concurrency
                // limit below): no hedge goes out once it has passed.
                Some(deadline) => match tokio::time::timeout_at(deadline, ready).await {
                    Ok(Ok(())) if Instant::now() < deadline => {}
                    Ok(Err(e)) => return Err(e.into()),
                    Ok(Ok(())) | Err(_) => {
                        let budget = deadline.saturating_duration_since(start);
                        let elapsed = Instant::now().saturating_duration_since(start);
                        return Err(Box::new(DeadlineExceeded::new(budget, elapsed)) as BoxError);
                    }
                },
                None => ready.await.map_err(Into::into)?,
            }
            withdrawal.commit();
            let res = svc.call(req).await.map_err(Into::into);
            if let Err(e) = &res
                && refused_below(&**e)
            {
                withdrawal.give_back();
            }
            res
        });
        #[cfg(feature = "metrics")]
        crate::metrics::hedge(crate::metrics::HEDGES_SENT, &self.parts);
        out.push(Out {
            fut,
            attempt,
            offset,
            sent_at: now,
            span,
        });
    }
}

impl<S, B> Hedging<S, B> {
    /// What `res` means for the call; `hedge` says whether it answered a hedge.
    fn judge<RB>(&self, res: &Result<Response<RB>, BoxError>, hedge: bool) -> Judgement {
        let config = &*self.config;
        match res {
            Err(e) => {
                // Refused below, or cut by the deadline: a hedge that says nothing of the
                // requests still out.
                let refused = refused_below(&**e) || is_caused_by::<DeadlineExceeded>(&**e);
                if hedge && refused {
                    return Judgement::Refused;
                }
                if self.classifier.classify_error(&**e).may_change() {
                    Judgement::NonFatal { pushback: false }
                } else {
                    Judgement::Wins
                }
            }
            // The copies of a request that only its key makes safe are out together, and a
            // server that keeps keys answers a later one 409 while the first is under way:
            // that says nothing of the call while another copy is out, and more copies would
            // get the same.
            Ok(r) if r.status() == StatusCode::CONFLICT && !self.parts.method.is_idempotent() => {
                Judgement::NonFatal { pushback: true }
            }
            Ok(r) => {
                let head = ResponseHead::of(r);
                let grpc = head.grpc_status();
                let verdict = self.classifier.classify_response_with_grpc(&head, grpc);
                let non_fatal = match (&config.non_fatal_grpc, grpc) {
                    (Some(codes), Some(code)) => code != GrpcCode::OK && codes.contains(&code),
                    _ => verdict.may_change(),
                };
                if !non_fatal {
                    return Judgement::Wins;
                }
                // gRPC's pushback is its own header; an HTTP host pushes back with an overload
                // status or a wait.
                let pushback = match grpc {
                    Some(_) => Pushback::parse(r.headers()).is_some(),
                    None => {
                        matches!(verdict.class(), Class::Overload { .. })
                            || self.hints.parse(r.headers()).is_some()
                    }
                };
                Judgement::NonFatal { pushback }
            }
        }
    }

    /// When the first request after `sent` went, `last` at the latest.
    fn next_sent_after(&self, sent: Instant, last: Instant) -> Instant {
        self.sends
            .iter()
            .copied()
            .filter(|&t| t > sent)
            .min()
            .unwrap_or(last)
    }

    /// The span of request `attempt`, sent `offset` after the first.
    fn span(&self, attempt: u32, offset: Duration) -> Span {
        if !tracing::dispatcher::has_been_set() {
            return Span::none();
        }
        tracing::info_span!(
            target: TARGET,
            parent: &self.parent,
            "courier.hedge",
            courier.hedge.attempt = i64::from(attempt),
            courier.hedge.offset_ms = offset.as_millis() as i64,
            courier.hedge.outcome = Empty,
            http.response.status_code = Empty,
            error.type = Empty,
        )
    }

    /// Notes how request `o` ended, with its answer unless it was cancelled.
    fn end<RB>(
        &mut self,
        o: &Out<RB>,
        outcome: HedgeOutcome,
        res: Option<&Result<Response<RB>, BoxError>>,
    ) {
        self.records.push(HedgeRecord {
            attempt: o.attempt,
            offset: o.offset,
            outcome,
        });
        if o.span.is_disabled() {
            return;
        }
        o.span.record("courier.hedge.outcome", outcome.as_str());
        match res {
            Some(Ok(r)) => {
                o.span
                    .record("http.response.status_code", i64::from(r.status().as_u16()));
            }
            Some(Err(e)) => {
                o.span
                    .record("error.type", courier_core::telemetry::error_type(&**e));
            }
            None => {}
        }
    }

    /// The call's answer: with the [`Hedged`] records when a hedge went. `winner` is the
    /// request that won, 0 when none did.
    fn finish<RB>(
        &mut self,
        res: Result<Response<RB>, BoxError>,
        winner: u32,
    ) -> Result<Response<RB>, BoxError> {
        #[cfg(feature = "metrics")]
        if winner > 1 {
            crate::metrics::hedge(crate::metrics::HEDGES_WON, &self.parts);
        }
        let _ = winner;
        if self.sent < 2 {
            return res;
        }
        let mut requests = std::mem::take(&mut self.records);
        requests.sort_by_key(|r| r.attempt);
        res.map(|mut r| {
            r.extensions_mut().insert(Hedged { requests });
            r
        })
    }
}

/// Whether a layer below refused a request before sending it: the breaker, the rate limiter
/// or the concurrency limit.
pub(crate) fn refused_below(e: &(dyn std::error::Error + 'static)) -> bool {
    is_caused_by::<CircuitOpen>(e)
        || is_caused_by::<RateLimited>(e)
        || is_caused_by::<ConcurrencyLimited>(e)
}
