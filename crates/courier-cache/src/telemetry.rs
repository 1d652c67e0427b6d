//! The call span of a call through an active cache, and what the cache tells the `metrics`
//! facade (feature `metrics`).
//!
//! The cache is the outermost layer that sees a whole call, a fresh hit included, so an active
//! cache makes the call span, `courier.call` (target `courier::cache`, `INFO`), a child of the
//! caller's current span, and polls the layers below inside it: courier's retry layer takes it
//! as its call span and hangs its attempt spans under it. The span has `http.request.method`,
//! `server.address`, `server.port`, `url.full` (never userinfo nor the query), and once the
//! call is over `courier.cache.status` (`hit`, `revalidated`, `miss`, `stale`, `bypass`),
//! `http.response.status_code` of the answer the caller gets (a 304 the cache merged is a 200
//! to the caller), `error.type` and `otel.status_code` for a 4xx or 5xx; the retry layer adds
//! `courier.attempts`, `courier.retry.reason` and a failure's `error.type`. A call ended from
//! outside while it waits in the cache itself (on another caller's revalidation, before it
//! sends again) gets `error.type` `deadline_exceeded` when its deadline had passed, else
//! `canceled`; waiting on the layers below, the retry layer there records it. A fresh hit is a
//! call span with no attempt under it. A pass-through cache makes no span, and neither does
//! an active one until a `tracing` subscriber has been set; after that a subscriber that does
//! not want the span has it disabled where it is made: nothing is formatted or allocated.
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.cache.lookups` | counter | {lookup} | `status`: `hit`, `revalidated`, `miss`, `stale` |
//!
//! Every answer of an active cache carries a [`CacheStatus`]; each one but `bypass` is a
//! lookup.

use courier_core::CacheStatus;
use courier_core::telemetry::{self as names, UrlFull};
use http::{Request, Response};
use tracing::Span;
use tracing::field::Empty;

/// `courier.cache.lookups`.
pub const LOOKUPS: &str = "courier.cache.lookups";

/// Describes the metric above to the installed recorder (unit and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_counter!(
        LOOKUPS,
        metrics::Unit::Count,
        "Cache lookups by status: hit, revalidated, miss, stale."
    );
}

/// The call span of a request through an active cache. None at all until a `tracing`
/// subscriber has been set anywhere (one atomic load): then no field is computed, not even for
/// tracing's `log` compatibility.
#[inline]
pub(crate) fn call_span<B>(req: &Request<B>) -> Span {
    if tracing::dispatcher::has_been_set() {
        listened_call_span(req)
    } else {
        Span::none()
    }
}

#[inline(never)]
fn listened_call_span<B>(req: &Request<B>) -> Span {
    let (address, port) = names::server(req.uri(), req.headers());
    tracing::info_span!(
        target: "courier::cache",
        "courier.call",
        http.request.method = names::method(req.method()),
        server.address = address,
        server.port = port.map(i64::from),
        url.full = %UrlFull::new(req.uri(), false),
        http.response.status_code = Empty,
        error.type = Empty,
        otel.status_code = Empty,
        courier.attempts = Empty,
        courier.retry.reason = Empty,
        courier.cache.status = Empty,
    )
}

/// Records the answer the cache gives on its call span and counts its lookup, and hands the
/// answer on.
#[inline]
pub(crate) fn observed<B, E>(span: &Span, res: Result<Response<B>, E>) -> Result<Response<B>, E> {
    // Nothing to record without a span or a metrics recorder: not even the status is looked up.
    let recording = recording();
    if span.is_none() && !recording {
        return res;
    }
    if let Ok(r) = &res {
        let status = r.extensions().get::<CacheStatus>().copied();
        if !span.is_disabled() {
            answered(span, r.status(), status);
        }
        if recording
            && let Some(status) = status
            && status != CacheStatus::Bypass
        {
            lookup(status);
        }
    }
    res
}

/// Whether a `metrics` recorder listens (never without the feature).
#[inline]
fn recording() -> bool {
    #[cfg(feature = "metrics")]
    return names::metrics_recording();
    #[cfg(not(feature = "metrics"))]
    false
}

/// Records on the call span that the call ended from outside while it waited in the cache:
/// `error.type` `deadline_exceeded` when its deadline had passed, else `canceled`.
#[cold]
#[inline(never)]
pub(crate) fn ended_from_outside(span: &Span, deadline: Option<tokio::time::Instant>) {
    if span.is_disabled() {
        return;
    }
    let passed = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
    span.record("error.type", names::ended_from_outside(passed));
    span.record("otel.status_code", "ERROR");
}

#[inline(never)]
fn answered(span: &Span, code: http::StatusCode, status: Option<CacheStatus>) {
    span.record("http.response.status_code", i64::from(code.as_u16()));
    if names::is_error_status(code) {
        span.record("error.type", code.as_str());
        span.record("otel.status_code", "ERROR");
    }
    if let Some(status) = status {
        span.record("courier.cache.status", status.as_str());
    }
}

#[inline(never)]
fn lookup(status: CacheStatus) {
    // A literal name and literal labels (the name is `LOOKUPS`): a static key, hashed at
    // compile time, nothing allocated.
    #[cfg(feature = "metrics")]
    match status {
        CacheStatus::Hit => {
            metrics::counter!("courier.cache.lookups", "status" => "hit").increment(1)
        }
        CacheStatus::Revalidated => {
            metrics::counter!("courier.cache.lookups", "status" => "revalidated").increment(1);
        }
        CacheStatus::Miss => {
            metrics::counter!("courier.cache.lookups", "status" => "miss").increment(1)
        }
        CacheStatus::Stale => {
            metrics::counter!("courier.cache.lookups", "status" => "stale").increment(1)
        }
        _ => {}
    }
    #[cfg(not(feature = "metrics"))]
    let _ = status;
}
