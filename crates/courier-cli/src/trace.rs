//! `courier request --trace`: the span tree of the call, printed on stderr once the call span
//! closes.
//!
//! ```text
//! trace: courier.call GET http://127.0.0.1:8080/s/flaky  208.4 ms  200 (3 attempts, final_status)  cache miss
//!   ├ GET #1  1.2 ms  503 (error 503)  retry in 96 ms (backoff)
//!   ├ GET #2  0.9 ms  503 (error 503)  retry in 104 ms (backoff)
//!   └ GET #3  0.8 ms  200  stop (final_status)
//! ```
//!
//! A layer of our own keeps, for each span of a `courier` target, its fields as recorded and
//! when it opened; a closing span hangs itself under its parent, and a closing span with no
//! courier parent (the call span) finishes its tree. The call span closes when the response's
//! head arrives, before its body is read: the tree waits in [`Trees`] until the caller has read
//! the body, so that a body that broke off is marked on the call's line
//! (`body broke off after 12 bytes: ...`).

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Subscriber, span};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// One span as the tree shows it.
#[derive(Debug)]
struct Node {
    name: String,
    fields: Vec<(&'static str, String)>,
    opened: Instant,
    took: std::time::Duration,
    children: Vec<Node>,
}

impl Node {
    fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The one-line summary of a span: its name, how long it lasted and what it got.
    fn line(&self) -> String {
        let mut out = self.name.clone();
        if let Some(attempt) = self.get("courier.attempt") {
            let _ = write!(out, " #{attempt}");
        } else if let (Some(method), Some(url)) =
            (self.get("http.request.method"), self.get("url.full"))
        {
            let _ = write!(out, " {method} {url}");
        }
        let _ = write!(out, "  {}", Millis(self.took));
        match (
            self.get("http.response.status_code"),
            self.get("error.type"),
        ) {
            (Some(status), Some(error)) => {
                let _ = write!(out, "  {status} (error {error})");
            }
            (Some(status), None) => {
                let _ = write!(out, "  {status}");
            }
            (None, Some(error)) => {
                let _ = write!(out, "  error {error}");
            }
            (None, None) => {}
        }
        if let Some(attempts) = self.get("courier.attempts") {
            let reason = self.get("courier.retry.reason").unwrap_or("-");
            let noun = if attempts == "1" {
                "attempt"
            } else {
                "attempts"
            };
            let _ = write!(out, " ({attempts} {noun}, {reason})");
        }
        match self.get("courier.retry.decision") {
            Some("retry") => {
                let wait = self.get("courier.retry.wait_ms").unwrap_or("0");
                let source = self.get("courier.retry.wait_source").unwrap_or("-");
                let _ = write!(out, "  retry in {wait} ms ({source})");
            }
            Some(decision) => {
                let reason = self.get("courier.retry.reason").unwrap_or("-");
                let _ = write!(out, "  {decision} ({reason})");
            }
            None => {}
        }
        if let Some(state) = self.get("courier.breaker.state") {
            let _ = write!(out, "  breaker {state}");
        }
        if let Some(wait) = self.get("courier.ratelimit.wait_ms") {
            let _ = write!(out, "  paced {wait} ms");
        }
        if let Some(wait) = self.get("courier.pacing.wait_ms") {
            let _ = write!(out, "  adaptive pacing {wait} ms");
        }
        if let Some(status) = self.get("courier.cache.status") {
            let _ = write!(out, "  cache {status}");
        }
        out
    }

    fn render(&self, out: &mut String, prefix: &str) {
        let count = self.children.len();
        for (i, child) in self.children.iter().enumerate() {
            let last = i + 1 == count;
            let _ = writeln!(
                out,
                "{prefix}{} {}",
                if last { "└" } else { "├" },
                child.line()
            );
            let deeper = format!("{prefix}{}", if last { "  " } else { "│ " });
            child.render(out, &deeper);
        }
    }
}

/// A duration in milliseconds with one decimal.
struct Millis(std::time::Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} ms", self.0.as_secs_f64() * 1000.0)
    }
}

struct Fields<'a>(&'a mut Vec<(&'static str, String)>);

impl Fields<'_> {
    fn set(&mut self, field: &Field, value: String) {
        match self.0.iter_mut().find(|(n, _)| *n == field.name()) {
            Some(slot) => slot.1 = value,
            None => self.0.push((field.name(), value)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field, format!("{value:?}"));
    }
}

/// Collects the spans of `courier` targets and keeps each call's tree for [`Trees::print`].
#[derive(Debug, Default)]
pub(crate) struct TreeLayer {
    trees: Trees,
}

/// The trees of the calls that ended, until they are printed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Trees(Arc<Mutex<Vec<Node>>>);

// === impl TreeLayer ===

impl TreeLayer {
    /// The trees this layer finishes.
    pub(crate) fn trees(&self) -> Trees {
        self.trees.clone()
    }
}

// === impl Trees ===

impl Trees {
    /// Prints every tree finished so far on stderr; `body_failure` (what arrived of the body
    /// and why it stopped) marks the calls' lines.
    pub(crate) fn print(&self, body_failure: Option<&str>) {
        let trees = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = String::new();
        for node in &trees {
            out.push_str(&render_call(node, body_failure));
        }
        let _ = std::io::stderr().lock().write_all(out.as_bytes());
    }
}

/// The whole tree of one call, its first line marked with `body_failure`.
fn render_call(node: &Node, body_failure: Option<&str>) -> String {
    let mut out = format!("trace: {}", node.line());
    if let Some(failure) = body_failure {
        let _ = write!(out, "  {failure}");
    }
    out.push('\n');
    node.render(&mut out, "  ");
    out
}

fn is_courier(meta: &tracing::Metadata<'_>) -> bool {
    meta.target() == "courier" || meta.target().starts_with("courier::")
}

impl<S> tracing_subscriber::Layer<S> for TreeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !is_courier(attrs.metadata()) {
            return;
        }
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let mut node = Node {
            name: attrs.metadata().name().to_owned(),
            fields,
            opened: Instant::now(),
            took: std::time::Duration::ZERO,
            children: Vec::new(),
        };
        if let Some(name) = node.get("otel.name") {
            node.name = name.to_owned();
        }
        span.extensions_mut().insert(node);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if let Some(node) = span.extensions_mut().get_mut::<Node>() {
            values.record(&mut Fields(&mut node.fields));
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(mut node) = span.extensions_mut().remove::<Node>() else {
            return;
        };
        node.took = node.opened.elapsed();
        let parent = span
            .parent()
            .filter(|p| p.extensions().get::<Node>().is_some());
        match parent {
            Some(parent) => {
                if let Some(up) = parent.extensions_mut().get_mut::<Node>() {
                    up.children.push(node);
                }
            }
            None => self
                .trees
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, fields: &[(&'static str, &str)], children: Vec<Node>) -> Node {
        Node {
            name: name.to_owned(),
            fields: fields.iter().map(|(n, v)| (*n, (*v).to_owned())).collect(),
            opened: Instant::now(),
            took: std::time::Duration::from_micros(1500),
            children,
        }
    }

    #[test]
    fn a_tree_prints_one_line_per_span_indented_under_its_parent() {
        let attempt = |n, status, decision| {
            node(
                "GET",
                &[
                    ("courier.attempt", n),
                    ("http.response.status_code", status),
                    ("courier.retry.decision", decision),
                    ("courier.retry.reason", "final_status"),
                    ("courier.retry.wait_ms", "7"),
                    ("courier.retry.wait_source", "backoff"),
                ],
                Vec::new(),
            )
        };
        let call = node(
            "courier.call",
            &[
                ("http.request.method", "GET"),
                ("url.full", "http://h/x"),
                ("http.response.status_code", "200"),
                ("courier.attempts", "2"),
                ("courier.retry.reason", "final_status"),
            ],
            vec![attempt("1", "503", "retry"), attempt("2", "200", "stop")],
        );
        assert_eq!(
            render_call(&call, None),
            "trace: courier.call GET http://h/x  1.5 ms  200 (2 attempts, final_status)\n\
             \x20 ├ GET #1  1.5 ms  503  retry in 7 ms (backoff)\n\
             \x20 └ GET #2  1.5 ms  200  stop (final_status)\n"
        );
        let marked = render_call(&call, Some("body broke off after 3 bytes: reset"));
        assert!(
            marked.starts_with(
                "trace: courier.call GET http://h/x  1.5 ms  200 (2 attempts, final_status)  \
                 body broke off after 3 bytes: reset\n"
            ),
            "{marked}"
        );
    }
}
