//! What the breaker tells spans and (feature `metrics`) the `metrics` facade.
//!
//! A refusal records `courier.breaker.state` (`open`, `half_open`, `forced_open`) on the
//! current span: inside courier's retry layer, the span of the attempt it refused. Both calls
//! here are on cold paths (a refusal, a transition), never on an admitted call.
//!
//! # Metrics
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.breaker.transitions` | counter | {transition} | `host`, `from`, `to` |
//! | `courier.breaker.state` | gauge | 0 closed, 1 half-open, 2 open, 3 forced open, 4 forced closed | `host` |
//! | `courier.breaker.refusals` | counter | {call} | `host`, `state` |
//!
//! `host` is the breaker's key ([`key_label`](courier_core::telemetry::key_label)): bounded
//! by the layer's maximum of breakers. The gauge changes at each transition, so a host's
//! breaker that never left closed has no gauge.

use crate::CircuitState;
use std::fmt;

/// `courier.breaker.transitions`.
pub const TRANSITIONS: &str = "courier.breaker.transitions";
/// `courier.breaker.state`.
pub const STATE: &str = "courier.breaker.state";
/// `courier.breaker.refusals`.
pub const REFUSALS: &str = "courier.breaker.refusals";

/// Describes the metrics above to the installed recorder (units and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_counter!(
        TRANSITIONS,
        metrics::Unit::Count,
        "Circuit breaker state changes, by host, from and to."
    );
    metrics::describe_gauge!(
        STATE,
        "Circuit breaker state by host: 0 closed, 1 half-open, 2 open, 3 forced open, 4 forced closed."
    );
    metrics::describe_counter!(
        REFUSALS,
        metrics::Unit::Count,
        "Calls the circuit breaker refused without sending them, by host and state."
    );
}

/// The gauge value of a state.
#[cfg(feature = "metrics")]
pub(crate) const fn gauge_value(state: CircuitState) -> f64 {
    match state {
        CircuitState::Closed => 0.0,
        CircuitState::HalfOpen => 1.0,
        CircuitState::Open => 2.0,
        CircuitState::ForcedOpen => 3.0,
        CircuitState::ForcedClosed => 4.0,
    }
}

/// A call refused in `state`.
#[cold]
pub(crate) fn refused<K: fmt::Debug + 'static>(key: &K, state: CircuitState) {
    tracing::Span::current().record("courier.breaker.state", state.as_str());
    #[cfg(feature = "metrics")]
    metrics::counter!(
        REFUSALS,
        "host" => courier_core::telemetry::key_label(key),
        "state" => state.as_str(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = key;
}

/// A breaker went from `from` to `to`.
#[cold]
pub(crate) fn transition<K: fmt::Debug + 'static>(key: &K, from: CircuitState, to: CircuitState) {
    #[cfg(feature = "metrics")]
    {
        let host = courier_core::telemetry::key_label(key);
        metrics::counter!(
            TRANSITIONS,
            "host" => host.clone(),
            "from" => from.as_str(),
            "to" => to.as_str(),
        )
        .increment(1);
        metrics::gauge!(STATE, "host" => host).set(gauge_value(to));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (key, from, to);
}
