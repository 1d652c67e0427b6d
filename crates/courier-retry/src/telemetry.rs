//! The spans of a call and of each attempt, and (with the `opentelemetry` feature) the trace
//! context each attempt sends.
//!
//! See [Telemetry](crate#telemetry) for the shape. Integers are recorded as `i64`, which
//! `tracing-opentelemetry` exports as integer attributes (an unsigned one becomes a string).
//!
//! What it costs when nothing listens: until a `tracing` subscriber has been set anywhere
//! (`tracing::dispatcher::has_been_set`, one atomic load) no span is made at all, so none of
//! the fields is computed (tracing's `log` compatibility would otherwise compute them for a
//! disabled span), and a call keeps one empty pointer. Once a subscriber is set, the spans
//! are made with `tracing`'s macros, disabled at their callsites when the subscriber does not
//! want them, and boxed (one allocation per call) only when it does.

use crate::layer::Config;
use courier_core::extensions::{AttemptOutcome, Decision};
use courier_core::grpc::{GrpcCode, is_grpc, status_in_headers};
use courier_core::telemetry::{self as names, UrlFull};
use courier_core::{AttemptRecord, BoxError};
use http::Response;
use http::request::Parts;
use tracing::Span;
use tracing::field::Empty;

/// The target of every span and event of the attempt loop.
pub(crate) const TARGET: &str = "courier::retry";

/// The spans of a call, and when its attempt under way began.
pub(crate) struct Spans {
    /// `None` when nothing listens.
    spans: Option<Box<Open>>,
    /// When the attempt under way began, for `http.client.request.duration`; `None` when
    /// the next attempt was never handed on (its deadline passed while it waited).
    #[cfg(feature = "metrics")]
    began: Option<tokio::time::Instant>,
}

/// The call span and the span of the attempt under way.
struct Open {
    call: Span,
    /// Whether the call span is this layer's own, not an outer layer's adopted.
    own: bool,
    attempt: Span,
    /// The last attempt's span, ended but kept open for the `grpc-status` of its answer's
    /// trailers (see [`GrpcStatusSpans`]).
    awaiting: Option<Span>,
}

/// A request extension: whoever makes the request reads its answer's trailers, and takes
/// the [`GrpcStatusSpans`] the retry layer puts on a gRPC answer whose `grpc-status` is to
/// come in them (`courier::grpc`'s channel does). Without it every span closes when the
/// retry layer returns the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadsGrpcTrailers;

/// A response extension the retry layer adds to a gRPC answer that came without a
/// `grpc-status` in its headers, when the request carried [`ReadsGrpcTrailers`] and a
/// `tracing` subscriber wants the spans: the last attempt's span, and the call span when it
/// is the retry layer's own, kept open until the code is known.
/// [`complete`](Self::complete) records the trailers' code on them and closes them; dropped
/// without it (a body dropped or failed before its trailers), they close without a code.
#[derive(Clone)]
pub struct GrpcStatusSpans {
    attempt: Span,
    call: Option<Span>,
}

impl GrpcStatusSpans {
    /// The answer ended with `code`: `rpc.system = "grpc"` and `rpc.grpc.status_code` on the
    /// spans, and for a code other than OK its name as `error.type` and
    /// `otel.status_code = "ERROR"`, as on an answer whose code came with its headers. The
    /// spans close when this (and every clone) is dropped.
    pub fn complete(self, code: GrpcCode) {
        for span in std::iter::once(&self.attempt).chain(self.call.as_ref()) {
            record_grpc_code(span, code);
        }
    }
}

impl std::fmt::Debug for GrpcStatusSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcStatusSpans")
            .field("attempt", &self.attempt.id())
            .field("call", &self.call.as_ref().and_then(Span::id))
            .finish()
    }
}

impl Spans {
    /// The spans of a call; the first attempt's is open. The call span is the current span
    /// when that is an outer layer's call span (the cache's), else a new child of the current
    /// span.
    #[inline]
    pub(crate) fn start(parts: &Parts, query: bool, now: tokio::time::Instant) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = now;
        let spans = if tracing::dispatcher::has_been_set() {
            open(parts, query)
        } else {
            None
        };
        Self {
            spans,
            #[cfg(feature = "metrics")]
            began: Some(now),
        }
    }

    /// The span of the attempt under way (a disabled one between attempts); `None` when
    /// nothing listens.
    #[inline]
    pub(crate) fn attempt(&self) -> Option<&Span> {
        self.spans.as_deref().map(|s| &s.attempt)
    }

    /// Opens the span of attempt `n` (2 and up).
    pub(crate) fn begin(&mut self, parts: &Parts, query: bool, n: u32) {
        if let Some(s) = self.spans.as_mut() {
            s.attempt = attempt_span(&s.call, parts, query, n);
        }
        #[cfg(feature = "metrics")]
        {
            self.began = Some(tokio::time::Instant::now());
        }
    }

    /// Closes the attempt span with what the attempt got and what comes next: the time
    /// between two attempt spans is the wait.
    #[inline]
    pub(crate) fn end<RB>(
        &mut self,
        config: &Config,
        parts: &Parts,
        res: &Result<Response<RB>, BoxError>,
        record: &AttemptRecord,
        now: tokio::time::Instant,
    ) {
        #[cfg(feature = "metrics")]
        if let Some(began) = self.began.take()
            && names::metrics_recording()
        {
            let took = now.saturating_duration_since(began);
            crate::metrics::attempt(&config.durations, parts, res, record, took);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (config, parts, now);
        if let Some(s) = self.spans.as_deref_mut() {
            end_attempt(s, parts, res, record);
        }
    }

    /// Closes the call span with the call's answer, its attempts and why it stopped. On an
    /// outer layer's call span, the answer's status is that layer's to record (the cache's
    /// caller may get another status than the last attempt's: a 304 becomes a 200); a failure
    /// is recorded here.
    ///
    /// A gRPC answer whose code is to come in its trailers, for a caller that reads them
    /// ([`ReadsGrpcTrailers`]), leaves the last attempt's span and its own call span open:
    /// they are returned, for the answer to carry.
    #[inline]
    pub(crate) fn finish<RB>(
        &mut self,
        res: &Result<Response<RB>, BoxError>,
        record: &AttemptRecord,
    ) -> Option<GrpcStatusSpans> {
        let s = self.spans.take()?;
        finish_call(&s, res, record);
        let Open {
            call,
            own,
            awaiting,
            ..
        } = *s;
        let attempt = awaiting?;
        let call = (own && !call.is_disabled()).then_some(call);
        Some(GrpcStatusSpans { attempt, call })
    }
}

impl Spans {
    /// Closes the spans of a call ended from outside while `record`'s attempt was under way
    /// (or after it): the call span and the open attempt span say why, with the `error.type`
    /// of a spent deadline when `deadline_passed`, else `canceled`.
    pub(crate) fn cut(&mut self, record: &AttemptRecord, deadline_passed: bool) {
        let Some(s) = self.spans.take() else {
            return;
        };
        let error_type = names::ended_from_outside(deadline_passed);
        for span in [&s.attempt, &s.call] {
            if span.is_disabled() {
                continue;
            }
            span.record("error.type", error_type);
            span.record("otel.status_code", "ERROR");
            span.record("courier.retry.reason", record.reason.as_str());
        }
        if !s.attempt.is_disabled() {
            s.attempt
                .record("courier.retry.decision", record.decision.as_str());
        }
        if !s.call.is_disabled() {
            s.call.record("courier.attempts", i64::from(record.attempt));
        }
    }
}

/// Records on the call span the call's answer, its attempts and why it stopped.
#[inline(never)]
fn finish_call<RB>(s: &Open, res: &Result<Response<RB>, BoxError>, record: &AttemptRecord) {
    if s.call.is_disabled() {
        return;
    }
    if s.own || res.is_err() {
        outcome(&s.call, res, record);
    }
    s.call.record("courier.attempts", i64::from(record.attempt));
    s.call
        .record("courier.retry.reason", record.reason.as_str());
}

/// The spans of a call whose subscriber may want them: `None` when it wants neither.
#[inline(never)]
fn open(parts: &Parts, query: bool) -> Option<Box<Open>> {
    let (address, port) = names::server(&parts.uri, &parts.headers);
    let (call, own) = match outer_call_span() {
        Some(call) => (call, false),
        None => (
            tracing::info_span!(
                target: TARGET,
                "courier.call",
                http.request.method = names::method(&parts.method),
                server.address = address,
                server.port = port.map(i64::from),
                url.full = %UrlFull::new(&parts.uri, query),
                http.response.status_code = Empty,
                rpc.system = Empty,
                rpc.grpc.status_code = Empty,
                error.type = Empty,
                otel.status_code = Empty,
                courier.attempts = Empty,
                courier.retry.reason = Empty,
            ),
            true,
        ),
    };
    if call.is_disabled() {
        return None;
    }
    let attempt = attempt_span(&call, parts, query, 1);
    Some(Box::new(Open {
        call,
        own,
        attempt,
        awaiting: None,
    }))
}

/// Records on the attempt span what the attempt got and what was decided, and closes it; or
/// keeps it open for its trailers' `grpc-status` (see [`Spans::finish`]).
#[inline(never)]
fn end_attempt<RB>(
    s: &mut Open,
    parts: &Parts,
    res: &Result<Response<RB>, BoxError>,
    record: &AttemptRecord,
) {
    let span = std::mem::replace(&mut s.attempt, Span::none());
    if span.is_disabled() {
        return;
    }
    outcome(&span, res, record);
    span.record("courier.retry.decision", record.decision.as_str());
    span.record("courier.retry.reason", record.reason.as_str());
    if record.decision == Decision::Retry {
        span.record("courier.retry.wait_ms", millis(record.wait));
        if let Some(source) = record.wait_source {
            span.record("courier.retry.wait_source", source.as_str());
        }
    }
    if record.decision == Decision::Stop
        && matches!(record.outcome, AttemptOutcome::Status(_))
        && awaits_grpc_status(parts, res)
    {
        s.awaiting = Some(span);
    }
}

/// Whether `res` is a gRPC answer whose `grpc-status` is to come in its trailers, for a
/// caller that reads them.
fn awaits_grpc_status<RB>(parts: &Parts, res: &Result<Response<RB>, BoxError>) -> bool {
    match res {
        Ok(r) => {
            is_grpc(r.headers())
                && status_in_headers(r.headers()).is_none()
                && parts.extensions.get::<ReadsGrpcTrailers>().is_some()
        }
        Err(_) => false,
    }
}

/// The current span when it is the call span an outer courier layer made (the cache makes
/// one and polls the layers below inside it).
fn outer_call_span() -> Option<Span> {
    let current = Span::current();
    let meta = current.metadata()?;
    (meta.name() == "courier.call" && meta.target().starts_with("courier::")).then_some(current)
}

/// The span of attempt `n`, a child of `call`: named after the method, kind client.
fn attempt_span(call: &Span, parts: &Parts, query: bool, n: u32) -> Span {
    let method = names::method(&parts.method);
    let (address, port) = names::server(&parts.uri, &parts.headers);
    let span = tracing::info_span!(
        target: TARGET,
        parent: call,
        "courier.attempt",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = method,
        server.address = address,
        server.port = port.map(i64::from),
        url.full = %UrlFull::new(&parts.uri, query),
        http.request.resend_count = Empty,
        http.response.status_code = Empty,
        rpc.system = Empty,
        rpc.grpc.status_code = Empty,
        error.type = Empty,
        courier.attempt = i64::from(n),
        courier.retry.decision = Empty,
        courier.retry.reason = Empty,
        courier.retry.wait_ms = Empty,
        courier.retry.wait_source = Empty,
        courier.breaker.state = Empty,
        courier.ratelimit.wait_ms = Empty,
        courier.pacing.wait_ms = Empty,
        courier.concurrency.wait_ms = Empty,
        courier.concurrency.refused = Empty,
    );
    if n > 1 {
        span.record("http.request.resend_count", i64::from(n - 1));
    }
    span
}

/// Whole milliseconds as an `i64`: integers reach OpenTelemetry as integers only when signed.
fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Records a status or a failure on `span`: `http.response.status_code`, and for a 4xx, a 5xx
/// or a failure, `error.type` and `otel.status_code = "ERROR"`; a lower status the classifier
/// judged no success (the record's verdict) gets its class as `error.type`. A gRPC answer
/// whose code the record holds (a trailers-only one) adds `rpc.system = "grpc"` and
/// `rpc.grpc.status_code`, and a code other than OK is the `error.type`, by its name
/// (`UNAVAILABLE`).
fn outcome<RB>(span: &Span, res: &Result<Response<RB>, BoxError>, record: &AttemptRecord) {
    match res {
        Ok(r) => {
            let status = r.status();
            span.record("http.response.status_code", i64::from(status.as_u16()));
            let grpc = match record.outcome {
                AttemptOutcome::Grpc(answer) => Some(answer.code),
                _ => None,
            };
            if let Some(code) = grpc {
                record_grpc_code(span, code);
                if code != GrpcCode::OK {
                    return;
                }
            }
            let verdict = &record.verdict;
            let error_type = if names::is_error_status(status) {
                Some(status.as_str())
            } else if !verdict.is_success() {
                Some(verdict.class().as_str())
            } else {
                None
            };
            if let Some(error_type) = error_type {
                span.record("error.type", error_type);
                span.record("otel.status_code", "ERROR");
            }
        }
        Err(e) => {
            span.record("error.type", names::error_type(&**e));
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Records a gRPC answer's code on `span`: `rpc.system = "grpc"`, `rpc.grpc.status_code`,
/// and for a code other than OK, its name as `error.type` (a code gRPC does not define, its
/// number) and `otel.status_code = "ERROR"`.
fn record_grpc_code(span: &Span, code: GrpcCode) {
    span.record("rpc.system", "grpc");
    span.record("rpc.grpc.status_code", i64::from(code.get()));
    if code != GrpcCode::OK {
        span.record("error.type", tracing::field::display(code));
        span.record("otel.status_code", "ERROR");
    }
}

/// Writes the trace context of `span` (the attempt's) into `headers` through the global
/// propagator: W3C `traceparent` and `tracestate` with `TraceContextPropagator`. Nothing when
/// the span is disabled; a value that is empty (a `tracestate` without vendor state) or no
/// valid header is left out.
#[cfg(feature = "opentelemetry")]
pub(crate) fn inject(span: &Span, headers: &mut http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&cx, &mut HeaderInjector(headers));
    });
}

/// No trace context without the `opentelemetry` feature.
#[cfg(not(feature = "opentelemetry"))]
#[inline(always)]
pub(crate) fn inject(_span: &Span, _headers: &mut http::HeaderMap) {}

#[cfg(feature = "opentelemetry")]
struct HeaderInjector<'a>(&'a mut http::HeaderMap);

#[cfg(feature = "opentelemetry")]
impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    /// Sets a field, but none with an empty value: the W3C propagator gives `tracestate` an
    /// empty one when the trace has no vendor state, and an empty field is sent as is.
    fn set(&mut self, key: &str, value: String) {
        if value.is_empty() {
            return;
        }
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
