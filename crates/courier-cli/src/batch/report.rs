//! What a batch reports: one JSON line per request on stdout, and the summary on stderr.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use base64::Engine as _;
use http::Method;
use url::Url;

use super::tally::Try;
use crate::signal::Stop;

/// A request that ended.
pub(super) struct Ended {
    pub(super) line: u64,
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) elapsed: Duration,
    pub(super) status: Option<http::StatusCode>,
    pub(super) error: Option<String>,
    pub(super) bytes: u64,
    /// How the preset's cache answered, when it answered.
    pub(super) cache: Option<courier::core::CacheStatus>,
    pub(super) body: Option<Vec<u8>>,
}

/// The JSON line of a request that ended, newline included.
pub(super) fn result_line(ended: &Ended, tries: &[Try]) -> String {
    let mut o = JsonLine::default();
    o.raw("line", &ended.line.to_string());
    o.string("method", ended.method.as_str());
    o.string("url", ended.url.as_str());
    match ended.status {
        Some(status) => o.raw("status", &status.as_u16().to_string()),
        None => o.raw("status", "null"),
    }
    if let Some(error) = &ended.error {
        o.string("error", error);
    }
    o.raw("attempts", &tries.len().to_string());
    match tries.last() {
        Some(last) => o.string("reason", &last.reason),
        None => o.raw("reason", "null"),
    }
    if let Some(cache) = ended.cache {
        o.string("cache", cache.as_str());
    }
    o.raw("elapsed_ms", &ended.elapsed.as_millis().to_string());
    o.raw("bytes", &ended.bytes.to_string());
    let mut list = String::from("[");
    for (i, t) in tries.iter().enumerate() {
        if i > 0 {
            list.push(',');
        }
        let mut one = JsonLine::default();
        one.string("outcome", &t.outcome);
        if t.wait_ms > 0 || t.wait_source != "none" {
            one.raw("wait_ms", &t.wait_ms.to_string());
            one.string("wait_source", &t.wait_source);
        }
        list.push_str(&one.finish_inline());
    }
    list.push(']');
    o.raw("tries", &list);
    if let Some(body) = &ended.body {
        match std::str::from_utf8(body) {
            Ok(text) => o.string("body", text),
            Err(_) => o.string(
                "body_base64",
                &base64::engine::general_purpose::STANDARD.encode(body),
            ),
        }
    }
    o.finish()
}

/// The JSON line of an input line that is not a request, newline included.
pub(super) fn bad_line(line: u64, error: &str) -> String {
    let mut o = JsonLine::default();
    o.raw("line", &line.to_string());
    o.string("error", error);
    o.finish()
}

/// A JSON object written field by field, in the order given.
#[derive(Default)]
struct JsonLine(String);

impl JsonLine {
    fn key(&mut self, key: &str) {
        self.0.push(if self.0.is_empty() { '{' } else { ',' });
        let _ = write!(self.0, "\"{key}\":");
    }

    fn raw(&mut self, key: &str, json: &str) {
        self.key(key);
        self.0.push_str(json);
    }

    fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        self.0.push_str(&serde_json::Value::from(value).to_string());
    }

    fn finish_inline(mut self) -> String {
        if self.0.is_empty() {
            self.0.push('{');
        }
        self.0.push('}');
        self.0
    }

    fn finish(self) -> String {
        let mut line = self.finish_inline();
        line.push('\n');
        line
    }
}

/// The counts behind the summary.
#[derive(Debug, Default)]
pub(super) struct Summary {
    pub(super) requests: u64,
    pub(super) statuses: BTreeMap<u16, u64>,
    pub(super) failed: u64,
    pub(super) bad_lines: u64,
    pub(super) attempts: u64,
    pub(super) retries: u64,
    pub(super) answered_429: u64,
    pub(super) refused_locally: u64,
    /// Requests in flight dropped at a second signal, reported as abandoned.
    pub(super) abandoned: u64,
    /// Requests in flight dropped when stdout closed; nobody read their results.
    pub(super) dropped: u64,
    /// The signal that stopped the batch.
    pub(super) stopped_by: Option<Stop>,
    pub(super) resume_from: Option<u64>,
    pub(super) input_error: Option<String>,
    pub(super) output_closed: Option<ExitCode>,
    pub(super) elapsed: Duration,
}

// === impl Summary ===

impl Summary {
    pub(super) fn count(&mut self, ended: &Ended, tries: &[Try]) {
        self.requests += 1;
        if let Some(status) = ended.status {
            *self.statuses.entry(status.as_u16()).or_default() += 1;
        }
        if ended.error.is_some() || ended.status.is_none_or(|s| s.as_u16() >= 400) {
            self.failed += 1;
        }
        self.attempts += tries.len() as u64;
        self.retries += tries.len().saturating_sub(1) as u64;
        self.answered_429 += tries.iter().filter(|t| t.outcome == "429").count() as u64;
        self.refused_locally += tries.iter().filter(|t| t.outcome == "local").count() as u64;
    }

    pub(super) fn exit_code(&self) -> ExitCode {
        if let Some(stop) = self.stopped_by {
            return stop.exit_status().into();
        }
        if self.failed > 0 || self.bad_lines > 0 || self.input_error.is_some() {
            return ExitCode::FAILURE;
        }
        self.output_closed.unwrap_or(ExitCode::SUCCESS)
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural =
            |n: u64, one: &'static str, many: &'static str| if n == 1 { one } else { many };
        write!(
            f,
            "batch: {} {} in {:.2} s",
            self.requests,
            plural(self.requests, "request", "requests"),
            self.elapsed.as_secs_f64()
        )?;
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(status, n)| format!("{status} ×{n}"))
            .collect();
        if !statuses.is_empty() {
            write!(f, "; status {}", statuses.join(", "))?;
        }
        writeln!(
            f,
            "; {} failed; {} bad {}",
            self.failed,
            self.bad_lines,
            plural(self.bad_lines, "line", "lines")
        )?;
        writeln!(
            f,
            "attempts: {} ({} {}); refusals: {} answered 429, {} refused locally (rate limit, \
             open circuit, deadline)",
            self.attempts,
            self.retries,
            plural(self.retries, "retry", "retries"),
            self.answered_429,
            self.refused_locally,
        )?;
        if self.abandoned > 0 {
            writeln!(
                f,
                "abandoned: {} in flight at the second {}; each may have reached the server",
                self.abandoned,
                self.stopped_by.map_or("signal", Stop::name),
            )?;
        }
        let why = match (self.stopped_by, &self.output_closed) {
            (Some(stop), _) => Some(stop.outcome()),
            (None, Some(_)) => Some("stdout closed"),
            (None, None) => None,
        };
        if self.output_closed.is_some() {
            writeln!(
                f,
                "stdout closed: nothing more was sent; {} {} in flight dropped, each may have \
                 reached the server",
                self.dropped,
                plural(self.dropped, "request", "requests"),
            )?;
        }
        if let (Some(why), Some(line)) = (why, self.resume_from) {
            writeln!(
                f,
                "{why}: no request from line {line} on was sent; resume from there \
                 (e.g. tail -n +{line} FILE | courier batch ...)"
            )?;
        } else if let Some(why) = why {
            writeln!(f, "{why} after the last line was sent")?;
        }
        if let Some(error) = &self.input_error {
            writeln!(f, "error: {error}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(status: Option<u16>, error: Option<&str>) -> Ended {
        Ended {
            line: 3,
            method: Method::GET,
            url: Url::parse("http://127.0.0.1:1/a?b=\"c\"").unwrap(),
            elapsed: Duration::from_millis(12),
            status: status.map(|s| http::StatusCode::from_u16(s).unwrap()),
            error: error.map(Into::into),
            bytes: 2,
            cache: None,
            body: None,
        }
    }

    fn tries(outcomes: &[&str]) -> Vec<Try> {
        outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| Try {
                outcome: (*o).into(),
                reason: if i + 1 == outcomes.len() {
                    "final_status"
                } else {
                    "retryable_status"
                }
                .into(),
                wait_ms: if i + 1 == outcomes.len() { 0 } else { 1000 },
                wait_source: if i + 1 == outcomes.len() {
                    "none"
                } else {
                    "retry_after"
                }
                .into(),
            })
            .collect()
    }

    #[test]
    fn a_result_line_is_one_json_object_in_a_fixed_order() {
        let mut e = ended(Some(200), None);
        e.body = Some(b"ok".to_vec());
        e.cache = Some(courier::core::CacheStatus::Revalidated);
        let line = result_line(&e, &tries(&["429", "200"]));
        assert_eq!(
            line,
            "{\"line\":3,\"method\":\"GET\",\"url\":\"http://127.0.0.1:1/a?b=%22c%22\",\
             \"status\":200,\"attempts\":2,\"reason\":\"final_status\",\"cache\":\"revalidated\",\
             \"elapsed_ms\":12,\"bytes\":2,\"tries\":[{\"outcome\":\"429\",\"wait_ms\":1000,\
             \"wait_source\":\"retry_after\"},{\"outcome\":\"200\"}],\"body\":\"ok\"}\n"
        );
        let mut e = ended(None, Some("connect \"failure\""));
        e.body = Some(vec![0xff, 0x00]);
        let v: serde_json::Value = serde_json::from_str(&result_line(&e, &[])).unwrap();
        assert_eq!(v["status"], serde_json::Value::Null);
        assert_eq!(v["error"], "connect \"failure\"");
        assert_eq!(v["attempts"], 0);
        assert_eq!(v["reason"], serde_json::Value::Null);
        assert!(v.get("cache").is_none(), "no answer, no cache field: {v}");
        assert_eq!(v["body_base64"], "/wA=");
        let v: serde_json::Value = serde_json::from_str(&bad_line(4, "bad\nline")).unwrap();
        assert_eq!(v, serde_json::json!({"line": 4, "error": "bad\nline"}));
    }

    #[test]
    fn the_summary_counts_statuses_failures_and_refusals() {
        let mut s = Summary::default();
        s.count(&ended(Some(200), None), &tries(&["429", "200"]));
        s.count(&ended(Some(200), None), &tries(&["200"]));
        s.count(&ended(Some(503), None), &tries(&["503", "503", "503"]));
        s.count(&ended(None, Some("circuit open")), &tries(&["local"]));
        s.count(
            &ended(Some(200), Some("the response body broke off")),
            &tries(&["200"]),
        );
        s.elapsed = Duration::from_millis(1500);
        let text = s.to_string();
        assert!(
            text.starts_with("batch: 5 requests in 1.50 s; status 200 ×3, 503 ×1; 3 failed;"),
            "{text}"
        );
        assert!(text.contains("attempts: 8 (3 retries)"), "{text}");
        assert!(text.contains("1 answered 429, 1 refused locally"), "{text}");
        assert_eq!(s.exit_code(), ExitCode::FAILURE);
        s.stopped_by = Some(Stop::Interrupt);
        s.resume_from = Some(9);
        assert_eq!(s.exit_code(), ExitCode::from(crate::INTERRUPTED));
        assert!(
            s.to_string()
                .contains("interrupted: no request from line 9 on")
        );
        s.stopped_by = Some(Stop::Terminate);
        assert_eq!(s.exit_code(), ExitCode::from(crate::TERMINATED));
        assert!(
            s.to_string()
                .contains("terminated: no request from line 9 on")
        );

        let mut s = Summary::default();
        s.count(&ended(Some(204), None), &tries(&["204"]));
        assert_eq!(s.exit_code(), ExitCode::SUCCESS);
    }

    #[test]
    fn a_closed_stdout_is_not_a_signal_and_not_a_failure() {
        let mut s = Summary::default();
        s.count(&ended(Some(200), None), &tries(&["200"]));
        s.output_closed = Some(ExitCode::SUCCESS);
        s.dropped = 60;
        s.resume_from = Some(65);
        let text = s.to_string();
        assert!(!text.contains("Ctrl-C"), "{text}");
        assert!(!text.contains("abandoned"), "{text}");
        assert!(
            text.contains("stdout closed: nothing more was sent; 60 requests in flight dropped"),
            "{text}"
        );
        assert!(
            text.contains("stdout closed: no request from line 65 on"),
            "{text}"
        );
        assert_eq!(s.exit_code(), ExitCode::SUCCESS);
        s.count(&ended(Some(500), None), &tries(&["500"]));
        assert_eq!(
            s.exit_code(),
            ExitCode::FAILURE,
            "a failure written still counts"
        );
    }
}
