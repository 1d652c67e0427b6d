//! What the concurrency limit tells spans and (feature `metrics`) the `metrics` facade.
//!
//! A call that waited in the queue records `courier.concurrency.wait_ms` on the current span
//! (inside courier's retry layer, the span of the attempt that waited) once it has its
//! permit; a refused call records `courier.concurrency.refused = true` there, and is one
//! `tracing` event (target `courier::concurrency`, debug level) with the fields `host`,
//! `in_flight`, `limit` and `waited_ms`. A field is recorded only on a span that declares it.
//! A call admitted at once records nothing here.
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.concurrency.in_flight` | gauge | {call} | `host` |
//! | `courier.concurrency.limit` | gauge | {call} | `host` |
//! | `courier.concurrency.wait.duration` | histogram | s | `host` |
//! | `courier.concurrency.refusals` | counter | {call} | `host` |
//!
//! The in-flight gauge changes as permits are taken and given back, the limit gauge as the
//! limit is learned (and when a key is first seen). A key's in-flight gauge is registered once,
//! when the key is first seen, with the recorder installed then: install the recorder before
//! the first call. `host` is the layer's key
//! ([`key_label`](courier_core::telemetry::key_label)): bounded by the layer's
//! [`max_keys`](crate::ConcurrencyLimitLayer::max_keys).

use std::fmt;
use std::time::Duration;

/// `courier.concurrency.in_flight`.
pub const IN_FLIGHT: &str = "courier.concurrency.in_flight";
/// `courier.concurrency.limit`.
pub const LIMIT: &str = "courier.concurrency.limit";
/// `courier.concurrency.wait.duration`.
pub const WAIT_DURATION: &str = "courier.concurrency.wait.duration";
/// `courier.concurrency.refusals`.
pub const REFUSALS: &str = "courier.concurrency.refusals";

/// Describes the metrics above to the installed recorder (units and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_gauge!(
        IN_FLIGHT,
        "Calls in flight under the concurrency limit, by host."
    );
    metrics::describe_gauge!(LIMIT, "The concurrency limit, by host.");
    metrics::describe_histogram!(
        WAIT_DURATION,
        metrics::Unit::Seconds,
        "Time a call waited in the queue for a concurrency permit, by host."
    );
    metrics::describe_counter!(
        REFUSALS,
        metrics::Unit::Count,
        "Calls the concurrency limit refused, by host."
    );
}

/// The in-flight gauge of one key, registered once with the recorder installed when the key
/// was first seen: setting it looks nothing up and builds no label.
pub(crate) struct InFlight {
    #[cfg(feature = "metrics")]
    gauge: metrics::Gauge,
}

impl InFlight {
    pub(crate) fn new<K: fmt::Debug + 'static>(key: &K) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = key;
        Self {
            #[cfg(feature = "metrics")]
            gauge: metrics::gauge!(IN_FLIGHT, "host" => courier_core::telemetry::key_label(key)),
        }
    }

    /// The calls in flight to the key are now `n` (with the limiter's lock held).
    #[inline]
    pub(crate) fn set(&self, n: usize) {
        #[cfg(feature = "metrics")]
        self.gauge.set(n as f64);
        #[cfg(not(feature = "metrics"))]
        let _ = n;
    }

    /// One call more in flight (counted without a lock: the steps commute).
    #[inline]
    pub(crate) fn up(&self) {
        #[cfg(feature = "metrics")]
        self.gauge.increment(1.0);
    }

    /// One call fewer in flight.
    #[inline]
    pub(crate) fn down(&self) {
        #[cfg(feature = "metrics")]
        self.gauge.decrement(1.0);
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InFlight")
    }
}

/// The limit of `key` is now `n`.
#[cold]
pub(crate) fn limit<K: fmt::Debug + 'static>(key: &K, n: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LIMIT, "host" => courier_core::telemetry::key_label(key)).set(n as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = (key, n);
}

/// A queued call got its permit after `wait`.
#[cold]
pub(crate) fn waited<K: fmt::Debug + 'static>(key: &K, wait: Duration) {
    let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    tracing::Span::current().record("courier.concurrency.wait_ms", ms);
    #[cfg(feature = "metrics")]
    metrics::histogram!(WAIT_DURATION, "host" => courier_core::telemetry::key_label(key))
        .record(wait.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = key;
}

/// A call was refused after waiting `wait` (zero: at once).
#[cold]
pub(crate) fn refused<K: fmt::Debug + 'static>(
    key: &K,
    refusal: &courier_core::ConcurrencyLimited,
    wait: Duration,
) {
    let ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
    let span = tracing::Span::current();
    span.record("courier.concurrency.refused", true);
    if !wait.is_zero() {
        span.record("courier.concurrency.wait_ms", ms);
    }
    tracing::debug!(
        target: "courier::concurrency",
        host = ?key,
        in_flight = refusal.in_flight(),
        limit = refusal.limit(),
        waited_ms = ms,
        "concurrency limit refused the call"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!(REFUSALS, "host" => courier_core::telemetry::key_label(key)).increment(1);
}
