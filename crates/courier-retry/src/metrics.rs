//! The metrics of the attempt loop, through the `metrics` facade (feature `metrics`).
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `http.client.request.duration` | histogram | s | `http.request.method`, `server.address`, `server.port`, `http.response.status_code` or `error.type` |
//! | `courier.retry.retries` | counter | {retry} | `host`, `method`, `reason`, `outcome` (status class or failure kind) |
//! | `courier.retry.budget_refusals` | counter | {retry} | `host`, `method` |
//!
//! One duration per attempt, each retry decided counted once (a retry that a wait or a body
//! then cancels still counts: it was decided). The labels are bounded: a host is a key of the
//! budget, a method is one of nine or `_OTHER`, a status code or class and a failure kind are
//! small sets; no path, no query.

use courier_core::extensions::{AttemptOutcome, Decision, Reason};
use courier_core::telemetry as names;
use courier_core::{AttemptRecord, BoxError, HostKey};
use http::Response;
use http::request::Parts;
use std::time::Duration;

/// `http.client.request.duration`.
pub const REQUEST_DURATION: &str = "http.client.request.duration";
/// `courier.retry.retries`.
pub const RETRIES: &str = "courier.retry.retries";
/// `courier.retry.budget_refusals`.
pub const BUDGET_REFUSALS: &str = "courier.retry.budget_refusals";

/// Describes the metrics above to the installed recorder (units and help text).
pub fn describe() {
    metrics::describe_histogram!(
        REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Duration of one HTTP client attempt, from the request handed on to the answer's head."
    );
    metrics::describe_counter!(
        RETRIES,
        metrics::Unit::Count,
        "Retries decided, by host, method, reason and what the attempt before got."
    );
    metrics::describe_counter!(
        BUDGET_REFUSALS,
        metrics::Unit::Count,
        "Retries the retry budget refused, by host and method."
    );
}

/// Records one attempt that ended with `res` and was decided as `record` says.
pub(crate) fn attempt<RB>(
    parts: &Parts,
    res: &Result<Response<RB>, BoxError>,
    record: &AttemptRecord,
    took: Duration,
) {
    let method = names::method(&parts.method);
    let address = names::server_address(&parts.uri, &parts.headers)
        .unwrap_or_default()
        .to_owned();
    let port = names::server_port(&parts.uri, &parts.headers)
        .map(|p| p.to_string())
        .unwrap_or_default();
    let histogram = match res {
        Ok(r) => metrics::histogram!(
            REQUEST_DURATION,
            "http.request.method" => method,
            "server.address" => address,
            "server.port" => port,
            "http.response.status_code" => r.status().as_str().to_owned(),
        ),
        Err(e) => metrics::histogram!(
            REQUEST_DURATION,
            "http.request.method" => method,
            "server.address" => address,
            "server.port" => port,
            "error.type" => names::error_type(&**e),
        ),
    };
    histogram.record(took.as_secs_f64());

    let host = || HostKey::from_parts(&parts.uri, &parts.headers).to_string();
    if record.decision == Decision::Retry {
        let outcome = match record.outcome {
            AttemptOutcome::Status(status) => names::status_class(status),
            AttemptOutcome::Failure(kind) => kind.as_str(),
        };
        metrics::counter!(
            RETRIES,
            "host" => host(),
            "method" => method,
            "reason" => record.reason.as_str(),
            "outcome" => outcome,
        )
        .increment(1);
    } else if record.reason == Reason::BudgetExhausted {
        metrics::counter!(BUDGET_REFUSALS, "host" => host(), "method" => method).increment(1);
    }
}
