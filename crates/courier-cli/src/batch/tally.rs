//! The attempts of each batch request, gathered from the retry layer's `courier::retry` events.
//!
//! A response carries its attempt records, but an error carries none; the events are written
//! for both. Each request runs inside a span named [`SPAN_NAME`] with its line number, and
//! [`TallyLayer`] files every attempt event under the line of the span it happened in.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The target of the spans and of the retry layer's events.
pub(crate) const SPAN_TARGET: &str = "courier::batch";
/// The name of the span around one request; its field `line` is the input line number.
pub(crate) const SPAN_NAME: &str = "request";
const RETRY_TARGET: &str = "courier::retry";

/// One attempt, as the retry layer reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Try {
    /// The status (`"429"`) or the failure kind (`"connect"`, `"local"`, ...).
    pub(crate) outcome: String,
    /// Why the retry layer went on or stopped (`"final_status"`, ...).
    pub(crate) reason: String,
    /// The wait before the next attempt, 0 when none.
    pub(crate) wait_ms: u64,
    /// Where the wait came from (`"backoff"`, `"retry_after"`, ...), `"none"` when none.
    pub(crate) wait_source: String,
}

/// The attempts of every request still running, by line number. Clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tallies {
    by_line: Arc<Mutex<HashMap<u64, Vec<Try>>>>,
}

// === impl Tallies ===

impl Tallies {
    /// The layer that fills these tallies.
    pub(crate) fn layer(&self) -> TallyLayer {
        TallyLayer {
            tallies: self.clone(),
        }
    }

    /// Takes the attempts of `line` (none when the retry layer saw none, as for a cache hit).
    pub(crate) fn take(&self, line: u64) -> Vec<Try> {
        self.lock().remove(&line).unwrap_or_default()
    }

    fn push(&self, line: u64, attempt: Try) {
        self.lock().entry(line).or_default().push(attempt);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<Try>>> {
        // A panic while the map was held left it whole: every update is one insert.
        self.by_line.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A `tracing` layer that files the retry layer's attempt events by batch line.
#[derive(Debug)]
pub(crate) struct TallyLayer {
    tallies: Tallies,
}

/// The line number of a request span, kept in the span's extensions.
struct LineNo(u64);

impl<S> tracing_subscriber::Layer<S> for TallyLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let meta = attrs.metadata();
        if meta.target() != SPAN_TARGET || meta.name() != SPAN_NAME {
            return;
        }
        let mut line = LineField(None);
        attrs.record(&mut line);
        if let (Some(line), Some(span)) = (line.0, ctx.span(id)) {
            span.extensions_mut().insert(LineNo(line));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != RETRY_TARGET {
            return;
        }
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let Some(line) = scope
            .into_iter()
            .find_map(|span| span.extensions().get::<LineNo>().map(|l| l.0))
        else {
            return;
        };
        let mut attempt = Try::default();
        event.record(&mut attempt);
        self.tallies.push(line, attempt);
    }
}

struct LineField(Option<u64>);

impl Visit for LineField {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "line" {
            self.0 = Some(value);
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn fmt::Debug) {}
}

impl Visit for Try {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "wait_ms" {
            self.wait_ms = value;
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "reason" => value.clone_into(&mut self.reason),
            "wait_source" => value.clone_into(&mut self.wait_source),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `outcome = %r.outcome`: the Debug of a `%` value is its Display text.
        if field.name() == "outcome" {
            self.outcome = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_are_filed_under_the_line_of_their_span() {
        let tallies = Tallies::default();
        let subscriber = tracing_subscriber::registry().with(tallies.layer());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: SPAN_TARGET, SPAN_NAME, line = 7u64);
            let _in = span.enter();
            for (outcome, reason, wait_ms, source) in [
                ("429", "retryable_status", 1000u64, "retry_after"),
                ("200", "final_status", 0, "none"),
            ] {
                let outcome = http::StatusCode::from_u16(outcome.parse().unwrap()).unwrap();
                tracing::event!(
                    target: "courier::retry",
                    tracing::Level::INFO,
                    attempt = 1u32,
                    outcome = %outcome.as_u16(),
                    reason = reason,
                    wait_ms = wait_ms,
                    wait_source = source,
                    "attempt"
                );
            }
            // Outside any request span, or of another target: not filed.
            drop(_in);
            tracing::event!(target: "courier::retry", tracing::Level::INFO, outcome = %200, "attempt");
            let _in = span.enter();
            tracing::event!(target: "elsewhere", tracing::Level::INFO, outcome = %200, "other");
        });
        let tries = tallies.take(7);
        assert_eq!(
            tries,
            [
                Try {
                    outcome: "429".into(),
                    reason: "retryable_status".into(),
                    wait_ms: 1000,
                    wait_source: "retry_after".into(),
                },
                Try {
                    outcome: "200".into(),
                    reason: "final_status".into(),
                    wait_ms: 0,
                    wait_source: "none".into(),
                },
            ]
        );
        assert!(tallies.take(7).is_empty(), "taken once");
    }
}
