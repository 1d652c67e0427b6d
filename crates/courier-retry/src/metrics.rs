//! The metrics of the attempt loop, through the `metrics` facade (feature `metrics`).
//!
//! | name | kind | unit | labels |
//! | --- | --- | --- | --- |
//! | `http.client.request.duration` | histogram | s | `http.request.method`, `server.address`, `server.port`, `http.response.status_code` or `error.type` |
//! | `courier.retry.retries` | counter | {retry} | `host`, `method`, `reason`, `outcome` (status class or failure kind) |
//! | `courier.retry.budget_refusals` | counter | {retry} | `host`, `method` |
//! | `courier.hedge.sent` | counter | {request} | `host` |
//! | `courier.hedge.won` | counter | {call} | `host` |
//! | `courier.hedge.budget_refusals` | counter | {request} | `host` |
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
use papaya::Equivalent;
use std::cell::RefCell;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

/// `http.client.request.duration`.
pub const REQUEST_DURATION: &str = "http.client.request.duration";
/// `courier.retry.retries`.
pub const RETRIES: &str = "courier.retry.retries";
/// `courier.retry.budget_refusals`.
pub const BUDGET_REFUSALS: &str = "courier.retry.budget_refusals";

/// `courier.hedge.sent`: hedges sent ([`crate::hedge`]).
pub const HEDGES_SENT: &str = "courier.hedge.sent";
/// `courier.hedge.won`: calls whose answer came from a hedge.
pub const HEDGES_WON: &str = "courier.hedge.won";
/// `courier.hedge.budget_refusals`: hedges the hedge budget refused.
pub const HEDGE_BUDGET_REFUSALS: &str = "courier.hedge.budget_refusals";

/// Counts one hedge event `name` for the host of `parts`.
pub(crate) fn hedge(name: &'static str, parts: &Parts) {
    let host = HostKey::from_parts(&parts.uri, &parts.headers).to_string();
    metrics::counter!(name, "host" => host).increment(1);
}

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
    metrics::describe_counter!(
        HEDGES_SENT,
        metrics::Unit::Count,
        "Hedged requests sent, by host."
    );
    metrics::describe_counter!(
        HEDGES_WON,
        metrics::Unit::Count,
        "Calls whose answer came from a hedge, by host."
    );
    metrics::describe_counter!(
        HEDGE_BUDGET_REFUSALS,
        metrics::Unit::Count,
        "Hedges the hedge budget refused, by host."
    );
}

/// Records one attempt that ended with `res` and was decided as `record` says.
pub(crate) fn attempt<RB>(
    durations: &Durations,
    parts: &Parts,
    res: &Result<Response<RB>, BoxError>,
    record: &AttemptRecord,
    took: Duration,
) {
    let method = names::method(&parts.method);
    // Looked up by the authority as written: split into address and port only to register.
    let series = SeriesRef {
        recorder: recorder_address(),
        method,
        authority: names::authority(&parts.uri, &parts.headers).unwrap_or_default(),
        default_port: names::default_port(parts.uri.scheme_str()).unwrap_or(0),
        outcome: match res {
            Ok(r) => Outcome::Status(r.status().as_u16()),
            Err(e) => Outcome::Error(names::error_type(&**e)),
        },
    };
    durations.record(&series, took.as_secs_f64());

    let host = || HostKey::from_parts(&parts.uri, &parts.headers).to_string();
    if record.decision == Decision::Retry {
        let outcome = match record.outcome {
            AttemptOutcome::Status(status) => names::status_class(status),
            AttemptOutcome::Failure(kind) => kind.as_str(),
            // A gRPC refusal by its code's name: 17 values at most, and `grpc` for the rest.
            AttemptOutcome::Grpc(answer) => answer.code.name().unwrap_or("grpc"),
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

// === request durations ===

/// The most `http.client.request.duration` series whose handles are kept; past it, each
/// attempt of a new series registers its handle anew.
const MAX_SERIES: usize = 4096;

/// The handles of the `http.client.request.duration` series a layer has seen: an attempt of a
/// known series records into its handle, with no label to build and nothing to allocate (and
/// with no recorder installed, nothing is looked up: see
/// `courier_core::telemetry::metrics_recording`). A handle belongs
/// to the recorder it was registered with, so the recorder (told apart by its address) is part
/// of the series: one installed later gets handles of its own. Shared by the layer and every
/// service it makes.
#[derive(Default)]
pub(crate) struct Durations {
    map: papaya::HashMap<Series, metrics::Histogram, foldhash::fast::RandomState>,
}

thread_local! {
    /// The series this thread recorded last, with the layer's map it came from: most attempts
    /// a thread sees go to the host and status of the one before, and this skips the map.
    static LAST: RefCell<Option<(usize, Series, metrics::Histogram)>> = const { RefCell::new(None) };
}

impl Durations {
    fn record(&self, series: &SeriesRef<'_>, seconds: f64) {
        let me = std::ptr::from_ref(self).addr();
        let recorded = LAST.with_borrow(|last| match last {
            Some((map, last, histogram)) if *map == me && series.equivalent(last) => {
                histogram.record(seconds);
                true
            }
            _ => false,
        });
        if recorded {
            return;
        }
        let map = self.map.pin();
        let (key, histogram) = match map.get_key_value(series) {
            // A clone of the key is a count more on its authority: nothing allocated.
            Some((key, histogram)) => (key.clone(), histogram.clone()),
            None => {
                let (key, histogram) = (series.to_owned(), series.register());
                if map.len() < MAX_SERIES {
                    map.insert(key.clone(), histogram.clone());
                }
                (key, histogram)
            }
        };
        histogram.record(seconds);
        LAST.set(Some((me, key, histogram)));
    }
}

/// The address of the recorder the metrics facade hands out on this thread now: the local
/// one, else the global one, else its no-op recorder. It tells recorders apart.
fn recorder_address() -> usize {
    metrics::with_recorder(|r| std::ptr::from_ref(r).cast::<()>().addr())
}

/// What an attempt got: a status or a failure's `error.type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    Status(u16),
    Error(&'static str),
}

/// One series: the recorder its handle belongs to, and what its labels are made of (the
/// authority as written and the scheme's default port give `server.address` and
/// `server.port`). Hashed as [`SeriesRef`].
#[derive(Clone, PartialEq, Eq, Hash)]
struct Series {
    recorder: usize,
    method: &'static str,
    authority: Arc<str>,
    default_port: u16,
    outcome: Outcome,
}

/// A [`Series`] borrowed from a request, to look its handle up without allocating.
#[derive(Hash)]
struct SeriesRef<'a> {
    recorder: usize,
    method: &'static str,
    authority: &'a str,
    default_port: u16,
    outcome: Outcome,
}

impl Equivalent<Series> for SeriesRef<'_> {
    fn equivalent(&self, key: &Series) -> bool {
        self.recorder == key.recorder
            && std::ptr::eq(self.method, key.method)
            && self.authority == &*key.authority
            && self.default_port == key.default_port
            && self.outcome == key.outcome
    }
}

impl SeriesRef<'_> {
    fn to_owned(&self) -> Series {
        Series {
            recorder: self.recorder,
            method: self.method,
            authority: self.authority.into(),
            default_port: self.default_port,
            outcome: self.outcome,
        }
    }

    /// Registers the series' histogram with the current recorder.
    fn register(&self) -> metrics::Histogram {
        let (address, port) = names::split_authority(self.authority);
        let port = match port.unwrap_or(self.default_port) {
            0 => String::new(),
            port => port.to_string(),
        };
        match self.outcome {
            Outcome::Status(status) => metrics::histogram!(
                REQUEST_DURATION,
                "http.request.method" => self.method,
                "server.address" => address.to_owned(),
                "server.port" => port,
                "http.response.status_code" => status.to_string(),
            ),
            Outcome::Error(error) => metrics::histogram!(
                REQUEST_DURATION,
                "http.request.method" => self.method,
                "server.address" => address.to_owned(),
                "server.port" => port,
                "error.type" => error,
            ),
        }
    }
}
