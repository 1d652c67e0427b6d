//! Deadline expiries through the `metrics` facade (feature `metrics`).
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `courier.deadline.expiries` | counter | {expiry} | `kind`: `deadline` (the call's budget, `DeadlineLayer`) or `attempt_timeout` (`AttemptTimeoutLayer`) |
//!
//! Counted once per bound that fails a call, whether it passed while waiting for the answer's
//! head or while its body was read.

/// `courier.deadline.expiries`.
pub const EXPIRIES: &str = "courier.deadline.expiries";

/// Describes the metric above to the installed recorder (unit and help text).
#[cfg(feature = "metrics")]
pub fn describe() {
    metrics::describe_counter!(
        EXPIRIES,
        metrics::Unit::Count,
        "Calls failed by a spent deadline or an attempt timeout, by kind."
    );
}

/// A bound of kind `kind` (`deadline` or `attempt_timeout`) failed a call.
#[cold]
pub(crate) fn expired(kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(EXPIRIES, "kind" => kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = kind;
}
