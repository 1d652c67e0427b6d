//! What courier tells operators: a span per call and per attempt, trace context per attempt,
//! and metrics per host.
//!
//! # Spans
//!
//! Spans are made with `tracing` (no extra dependency), at level `INFO` on target
//! `courier::retry` and `courier::cache`, shaped by the OpenTelemetry HTTP client semantic
//! conventions so that `tracing-opentelemetry` exports them as the specification expects.
//!
//! The call span belongs to the outermost layer that sees the whole call: the cache when it
//! is on (a fresh hit is then a call span with no attempt under it, and the span says how the
//! cache answered), else the retry layer. The retry layer makes the attempt spans, under the
//! cache's call span or its own.
//!
//! ```text
//! courier.call                     one per call, a child of the caller's current span
//! ├ GET  (courier.attempt)         attempt 1: kind client
//! │        ... the wait before the retry is the gap between two attempt spans ...
//! ├ GET  (courier.attempt)         attempt 2: http.request.resend_count = 1
//! └ GET  (courier.attempt)         attempt 3: http.request.resend_count = 2
//! ```
//!
//! Waits (backoff, a server's `Retry-After`) are no spans of their own: an attempt span ends
//! when its answer's head comes and its retry is decided, the next one starts when that retry
//! is handed on, and the gap between them is the wait. The attempt span before a gap says how
//! long and why (`courier.retry.wait_ms`, `courier.retry.wait_source`). A pacing wait of the
//! rate limiter happens inside an attempt (the attempt is paced, not the call), so it is part
//! of the attempt span and recorded on it (`courier.ratelimit.wait_ms`), and so are a wait of
//! adaptive pacing, under its own name (`courier.pacing.wait_ms`), and a wait in the
//! concurrency limit's queue (`courier.concurrency.wait_ms`).
//!
//! The attempt span, `courier.attempt`, exported under the method's name:
//!
//! | field | value |
//! | --- | --- |
//! | `otel.name` | the method (`GET`), the span's name once exported |
//! | `otel.kind` | `client` |
//! | `http.request.method` | a known method, else `_OTHER` |
//! | `server.address`, `server.port` | the host (never userinfo) and the port, explicit or the scheme's |
//! | `url.full` | scheme, host, port and path; userinfo never; the query only with `RetryLayer::record_url_query(true)` |
//! | `http.request.resend_count` | absent on the first attempt, then 1, 2, ... |
//! | `http.response.status_code` | the status, when a response came |
//! | `rpc.system`, `rpc.grpc.status_code` | for a gRPC answer: `grpc` and the code's number, OK (`0`) included. A code that came with the headers (trailers-only, `14`) is recorded at once; through `courier::grpc`'s channel, an answer that streams its messages keeps the span of its last attempt (and the call span) open until its trailers are read, and their code is recorded then (a unary call's, before the generated client returns); a body dropped before its trailers closes them without a code. Elsewhere the span ends with the answer's head, without the trailers' code (the attempt's record gets it) |
//! | `error.type` | a gRPC code other than OK by its name (`UNAVAILABLE`, or `NOT_FOUND` from the trailers); else the status (`503`) for a 4xx or 5xx; for a failure, courier's refusal (`circuit_open`, `rate_limited`, `concurrency_limited`, `deadline_exceeded`, `attempt_timeout`) or the failure's kind (`connect`, `timeout`, `read`, `tls`, `local`, `other`); `canceled` for an attempt its caller dropped |
//! | `otel.status_code` | `ERROR` whenever `error.type` is set |
//! | `courier.attempt` | the attempt's number, from 1 |
//! | `courier.retry.decision`, `courier.retry.reason` | `retry` or `stop`, and why (the names of [`Reason`](crate::core::extensions::Reason)) |
//! | `courier.retry.wait_ms`, `courier.retry.wait_source` | before a retry: the wait and where it came from (`backoff`, `retry_after`, ...) |
//! | `courier.breaker.state` | the breaker's state when it refused the attempt (`open`, `half_open`, `forced_open`) |
//! | `courier.ratelimit.wait_ms` | how long the rate limiter (the token bucket) held the attempt for its slot |
//! | `courier.pacing.wait_ms` | how long adaptive pacing held the attempt for its slot |
//! | `courier.concurrency.wait_ms` | how long the attempt waited in the concurrency limit's queue for a permit |
//! | `courier.concurrency.refused` | `true` when the concurrency limit refused the attempt |
//!
//! The call span, `courier.call` (kind internal, a child of the caller's current span), has
//! `http.request.method`, `server.address`, `server.port`, `url.full`, and once the call is
//! over `http.response.status_code` (of the answer the caller gets: a 304 the cache merged is
//! a 200), `rpc.system` and `rpc.grpc.status_code` as on the attempt span, `error.type` and
//! `otel.status_code` of that answer, `courier.attempts` (how many),
//! `courier.retry.reason` (why the call stopped) and, when the cache made it,
//! `courier.cache.status` (`hit`, `revalidated`, `miss`, `stale`, `bypass`; its `url.full`
//! never has the query). A call that a layer below refused (an open circuit, the rate limiter)
//! has one attempt span with that `error.type`, and nothing reached the server. Every call span
//! says why the call ended, a call ended from outside too: when the deadline layer ends it
//! while an attempt still waits (no attempt timeout below to end that attempt first), the call
//! span and that attempt's span get `error.type = deadline_exceeded`,
//! `courier.retry.reason = deadline_passed` and `otel.status_code = ERROR`; a call its caller
//! dropped, `canceled` for both. A call ended while it waits in the cache itself (on another
//! caller's revalidation) has the same `error.type` on the cache's call span.
//!
//! The existing `courier::retry` event per attempt (see [`crate::retry`]) is unchanged.
//!
//! Until a `tracing` subscriber is set, no span is made at all; after that, a subscriber that
//! does not want them has them disabled where they are made. Either way nothing is formatted
//! and nothing allocated.
//!
//! # Trace context per attempt (feature `opentelemetry`)
//!
//! Each attempt injects the W3C `traceparent` and `tracestate` of its own attempt span through
//! the `opentelemetry` global text-map propagator and `tracing-opentelemetry`: the server sees
//! a distinct parent for each attempt. Install the propagator
//! (`opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`) and a
//! `tracing_opentelemetry` layer; without them nothing is injected.
//!
//! # Metrics (feature `metrics`)
//!
//! Through the `metrics` facade, so any recorder exports them (Prometheus, OpenTelemetry, ...).
//! Dots in names become underscores in Prometheus, which also appends `_seconds` or `_total`
//! where its conventions want them.
//!
//! | name | kind | unit | labels | counts |
//! | --- | --- | --- | --- | --- |
//! | `http.client.request.duration` | histogram | s | `http.request.method`, `server.address`, `server.port`, `http.response.status_code` or `error.type` | each attempt, from the request handed on to its answer's head |
//! | `courier.retry.retries` | counter | {retry} | `host`, `method`, `reason`, `outcome` (status class or failure kind) | each retry decided |
//! | `courier.retry.budget_refusals` | counter | {retry} | `host`, `method` | each retry the budget refused |
//! | `courier.breaker.transitions` | counter | {transition} | `host`, `from`, `to` | each state change |
//! | `courier.breaker.state` | gauge | 0 closed, 1 half-open, 2 open, 3 forced open, 4 forced closed | `host` | set at each state change |
//! | `courier.breaker.refusals` | counter | {call} | `host`, `state` | each call refused by an open or full half-open circuit |
//! | `courier.ratelimit.wait.duration` | histogram | s | `host` | each call that waited for its slot |
//! | `courier.ratelimit.refusals` | counter | {call} | `host`, `parked` | each call refused (no slot soon enough) |
//! | `courier.pacing.wait.duration` | histogram | s | `host` | each call that waited for a slot of adaptive pacing |
//! | `courier.pacing.refusals` | counter | {call} | `host` | each call adaptive pacing refused (no slot soon enough) |
//! | `courier.concurrency.in_flight` | gauge | {call} | `host` | set as each permit is taken and given back |
//! | `courier.concurrency.limit` | gauge | {call} | `host` | set as each key's limit changes |
//! | `courier.concurrency.wait.duration` | histogram | s | `host` | each call that waited in the queue |
//! | `courier.concurrency.refusals` | counter | {call} | `host` | each call the concurrency limit refused |
//! | `courier.cache.lookups` | counter | {lookup} | `status`: `hit`, `revalidated`, `miss`, `stale` | each answer of the cache (bypasses are no lookups) |
//! | `courier.deadline.expiries` | counter | {expiry} | `kind`: `deadline`, `attempt_timeout` | each call failed by a spent deadline or an attempt timeout |
//!
//! Labels are bounded: `host` is a key of the layer that counts (scheme, host and port; each
//! layer keeps at most its maximum of keys), a method is one of nine or `_OTHER`, a status is a
//! code or a class, a failure a kind. No label holds a path or a query.
//!
#![cfg_attr(
    feature = "metrics",
    doc = "Call [`describe_metrics`] once after installing a recorder to give each metric its \
           unit and help text."
)]
//!
//! With the feature on and no recorder installed, an attempt records nothing and looks no
//! handle up: the `metrics` facade cannot say whether a recorder is installed, so its no-op
//! recorder is told apart by where it lives (`courier_core::telemetry::metrics_recording`
//! says how, and names the one kind of recorder taken for none). What is left costs about
//! 150 instructions per call through the preset; without the feature, and with
//! `opentelemetry`, nothing is recorded or allocated until something listens (BENCHMARKS.md,
//! "Telemetry when nothing listens"). With a recorder, each attempt's
//! `http.client.request.duration` handle is kept per series and per recorder: nothing
//! allocated once a series is known. A recorder is told apart by its address: one dropped and
//! replaced by another at the same address (a local recorder of a test) while a layer lives
//! on leaves that layer recording into the first.

/// Describes every metric of the layers built in (unit and help text) to the installed
/// recorder. Optional: metrics are recorded without it.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    #[cfg(feature = "retry")]
    courier_retry::metrics::describe();
    #[cfg(feature = "breaker")]
    courier_breaker::telemetry::describe();
    #[cfg(feature = "ratelimit")]
    courier_ratelimit::telemetry::describe();
    #[cfg(feature = "cache")]
    courier_cache::telemetry::describe();
    #[cfg(feature = "concurrency")]
    courier_concurrency::telemetry::describe();
    #[cfg(feature = "deadline")]
    courier_deadline::telemetry::describe();
}
