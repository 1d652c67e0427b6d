//! What the rate limiter tells spans and (feature `metrics`) the `metrics` facade.
//!
//! A wait for a slot, of the token bucket or of adaptive pacing, records
//! `courier.ratelimit.wait_ms` on the current span: inside courier's retry layer, the span of
//! the attempt that waited. A call admitted at once records nothing
//! and costs nothing here.
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.ratelimit.wait.duration` | histogram | s | `host` |
//! | `courier.ratelimit.refusals` | counter | {call} | `host`, `parked` (`true` when the server's own limit held the host) |
//!
//! A wait is recorded when a call had to wait for its slot (a call admitted at once is no
//! wait), from the bucket or from adaptive pacing; a refusal likewise. `host` is the limiter's key ([`key_label`](courier_core::telemetry::key_label)):
//! bounded by the layer's maximum of buckets.

use std::fmt;
use std::time::Duration;

/// `courier.ratelimit.wait.duration`.
pub const WAIT_DURATION: &str = "courier.ratelimit.wait.duration";
/// `courier.ratelimit.refusals`.
pub const REFUSALS: &str = "courier.ratelimit.refusals";

/// Describes the metrics above to the installed recorder (units and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_histogram!(
        WAIT_DURATION,
        metrics::Unit::Seconds,
        "Time a call waited for a rate-limiter slot, by host."
    );
    metrics::describe_counter!(
        REFUSALS,
        metrics::Unit::Count,
        "Calls the rate limiter refused (no slot soon enough), by host."
    );
}

/// A call waits `wait` for its slot.
#[cold]
pub(crate) fn waiting<K: fmt::Debug + 'static>(key: &K, wait: Duration) {
    let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    tracing::Span::current().record("courier.ratelimit.wait_ms", ms);
    #[cfg(feature = "metrics")]
    metrics::histogram!(WAIT_DURATION, "host" => courier_core::telemetry::key_label(key))
        .record(wait.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = key;
}

/// A call was refused.
#[cold]
pub(crate) fn refused<K: fmt::Debug + 'static>(key: &K, parked: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        REFUSALS,
        "host" => courier_core::telemetry::key_label(key),
        "parked" => if parked { "true" } else { "false" },
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (key, parked);
}
