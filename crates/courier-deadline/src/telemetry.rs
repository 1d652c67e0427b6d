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

/// A bound failed a call: the call's deadline when `deadline`, else an attempt timeout.
#[cold]
pub(crate) fn expired(deadline: bool) {
    // A literal name and literal labels (the name is `EXPIRIES`): a static key, hashed at
    // compile time, nothing allocated.
    #[cfg(feature = "metrics")]
    if deadline {
        metrics::counter!("courier.deadline.expiries", "kind" => "deadline").increment(1);
    } else {
        metrics::counter!("courier.deadline.expiries", "kind" => "attempt_timeout").increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = deadline;
}
