//! What the rate limiter and adaptive pacing tell spans and (feature `metrics`) the `metrics`
//! facade, each under its own name: a wait the token bucket imposed is the rate limiter's
//! (the quota you gave it, or the server's park), one adaptive pacing imposed is pacing's (a
//! rate it learned).
//!
//! A wait for a slot of the token bucket records `courier.ratelimit.wait_ms` on the current
//! span, one for a slot of adaptive pacing `courier.pacing.wait_ms`: inside courier's retry
//! layer, the span of the attempt that waited. A call admitted at once records nothing and
//! costs nothing here.
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.ratelimit.wait.duration` | histogram | s | `host` |
//! | `courier.ratelimit.refusals` | counter | {call} | `host`, `parked` (`true` when the server's own limit held the host) |
//! | `courier.pacing.wait.duration` | histogram | s | `host` |
//! | `courier.pacing.refusals` | counter | {call} | `host` |
//!
//! A wait is recorded when a call had to wait for its slot (a call admitted at once is no
//! wait); a refusal likewise. `host` is the layer's key
//! ([`key_label`](courier_core::telemetry::key_label)): bounded by the layer's maximum of keys.

use std::fmt;
use std::time::Duration;

/// `courier.ratelimit.wait.duration`.
pub const WAIT_DURATION: &str = "courier.ratelimit.wait.duration";
/// `courier.ratelimit.refusals`.
pub const REFUSALS: &str = "courier.ratelimit.refusals";
/// `courier.pacing.wait.duration`.
pub const PACING_WAIT_DURATION: &str = "courier.pacing.wait.duration";
/// `courier.pacing.refusals`.
pub const PACING_REFUSALS: &str = "courier.pacing.refusals";

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
    metrics::describe_histogram!(
        PACING_WAIT_DURATION,
        metrics::Unit::Seconds,
        "Time a call waited for a slot of adaptive pacing, by host."
    );
    metrics::describe_counter!(
        PACING_REFUSALS,
        metrics::Unit::Count,
        "Calls adaptive pacing refused (no slot soon enough), by host."
    );
}

/// A call waits `wait` for its slot of the token bucket.
#[cold]
pub(crate) fn waiting<K: fmt::Debug + 'static>(key: &K, wait: Duration) {
    wait_on("courier.ratelimit.wait_ms", WAIT_DURATION, key, wait);
}

/// A call waits `wait` for a slot of adaptive pacing.
#[cold]
pub(crate) fn pacing_wait<K: fmt::Debug + 'static>(key: &K, wait: Duration) {
    wait_on("courier.pacing.wait_ms", PACING_WAIT_DURATION, key, wait);
}

/// Records a wait on the current span's `field` and in the histogram `metric`.
fn wait_on<K: fmt::Debug + 'static>(
    field: &'static str,
    metric: &'static str,
    key: &K,
    wait: Duration,
) {
    let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    tracing::Span::current().record(field, ms);
    #[cfg(feature = "metrics")]
    metrics::histogram!(metric, "host" => courier_core::telemetry::key_label(key))
        .record(wait.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (metric, key);
}

/// A call was refused by the token bucket.
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

/// Adaptive pacing refused a call.
#[cold]
pub(crate) fn pacing_refused<K: fmt::Debug + 'static>(key: &K) {
    #[cfg(feature = "metrics")]
    metrics::counter!(PACING_REFUSALS, "host" => courier_core::telemetry::key_label(key))
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = key;
}
