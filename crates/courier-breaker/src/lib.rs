//! CircuitBreakerLayer: per-host closed / open / half-open.
