//! `courier batch [FILE]`: many requests through one preset client.
//!
//! Requests are read one per line from FILE or stdin and sent through a single client, up to
//! `--parallel` at once, so that the whole batch shares one token bucket per host
//! (`--rate/--burst`), one circuit breaker per host, one retry budget and one cache: pacing
//! holds across the batch, as it cannot across separate `courier request` runs.
//!
//! Each request gets one JSON line on stdout when it ends, in the order they end; a summary goes
//! to stderr at the end, with a progress bar before it while stderr is a terminal. Ctrl-C stops
//! reading and sending; the requests in flight finish (within their deadline) and are reported;
//! a second Ctrl-C abandons them. Exit status: 0 when every request ended with a status below
//! 400, 1 otherwise (a failed request, a line that is not a request, unreadable input), 2 for a
//! usage error, 130 after Ctrl-C.

mod input;
mod tally;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use base64::Engine as _;
use clap::Args;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::BodyExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::io::AsyncBufRead;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;
use tracing::Instrument;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use url::Url;

use self::input::{LineReader, Spec};
use self::tally::{Tallies, Try};
use crate::client::{Client, ClientArgs, describe};
use crate::output::write_or_quit;
use crate::stack::{Stack, StackArgs};
use crate::{INTERRUPTED, USAGE_ERROR, parse};

/// `courier batch --help`, after the options.
const AFTER_HELP: &str = "\
Each input line is one request:
  URL                     a GET
  METHOD URL              e.g. DELETE http://127.0.0.1:8080/items/7
  {\"method\": \"POST\", \"url\": \"...\", \"headers\": {\"Name\": \"value\"}, \"body\": \"...\"}
                          method defaults to GET, or POST when there is a body; a body that is
                          not a string is sent as JSON (Content-Type: application/json)
Blank lines and lines starting with # are skipped.

Each request ends with one JSON line on stdout: line, method, url, status (or error), attempts,
reason, elapsed_ms, bytes, tries (each attempt's outcome and wait), and body with --body.

Exit status:
  0    every request ended with a status below 400
  1    a request failed or ended with 400 or more, a line was not a request, or the input
       could not be read to its end
  2    a usage error: a bad option, or FILE or --cacert cannot be read
  130  Ctrl-C stopped the batch: nothing more is sent, the requests in flight finish (a
       second Ctrl-C abandons them), and the summary says which line to resume from";

/// Arguments of `courier batch`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct BatchArgs {
    /// The requests, one per line; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    input: Option<PathBuf>,
    /// Requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = parse::parallel)]
    parallel: usize,
    /// A header for every request, `Name: value`; a line's own header of that name replaces
    /// it. Repeat for more.
    #[arg(
        short = 'H',
        long = "header",
        value_name = "'Name: value'",
        value_parser = parse::header
    )]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Put each response body in its output line: `body` as text, or `body_base64` when it
    /// is not UTF-8.
    #[arg(long)]
    body: bool,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    client: ClientArgs,
}

/// Sends every request of the input and reports each.
pub(crate) fn run(args: BatchArgs) -> ExitCode {
    let file = match args.input.as_deref() {
        Some(path) if path.as_os_str() != "-" => match std::fs::File::open(path) {
            Ok(file) => Some(file),
            Err(e) => {
                eprintln!(
                    "error: cannot read {}: {e}; give a file of requests, or - for stdin",
                    path.display()
                );
                return USAGE_ERROR.into();
            }
        },
        _ => None,
    };
    let show_progress = io::stderr().is_terminal();
    // A file's requests are counted first, for the length of the bar.
    let total = match &file {
        Some(f) if show_progress => f.try_clone().ok().and_then(|f| {
            let total = input::count_requests(io::BufReader::new(&f)).ok();
            io::Seek::rewind(&mut &f).ok().and(total)
        }),
        _ => None,
    };
    let tallies = Tallies::default();
    let filter = Targets::new()
        .with_target("courier::retry", tracing::Level::DEBUG)
        .with_target(tally::SPAN_TARGET, tracing::Level::INFO);
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::Layer::with_filter(
            tallies.layer(),
            filter,
        ))
        .try_init();
    let runtime = match crate::start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let mut common = HeaderMap::new();
    for (name, value) in &args.headers {
        common.append(name.clone(), value.clone());
    }
    let batch = Batch {
        client: args.client.client(Stack::from_args(&args.stack).layer()),
        common,
        parallel: args.parallel,
        keep_body: args.body,
        tallies,
        progress: Progress::new(show_progress, total),
    };
    runtime.block_on(async move {
        let input: Pin<Box<dyn AsyncBufRead + Send>> = match file {
            Some(file) => Box::pin(tokio::io::BufReader::new(tokio::fs::File::from_std(file))),
            None => Box::pin(tokio::io::BufReader::new(tokio::io::stdin())),
        };
        batch.run(input).await
    })
}

/// What one batch shares.
struct Batch {
    client: Client,
    common: HeaderMap,
    parallel: usize,
    keep_body: bool,
    tallies: Tallies,
    progress: Progress,
}

/// Where the batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading and sending.
    Sending,
    /// The input ended (or failed); the requests in flight finish.
    InputDone,
    /// Ctrl-C: nothing more is sent; the requests in flight finish.
    Interrupted,
    /// A second Ctrl-C, or stdout closed: the requests in flight are dropped (reported as
    /// abandoned while stdout is open).
    Abandoned,
}

/// A request that ended.
struct Ended {
    line: u64,
    method: Method,
    url: Url,
    elapsed: Duration,
    status: Option<http::StatusCode>,
    error: Option<String>,
    bytes: u64,
    body: Option<Vec<u8>>,
}

type Interrupt = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

fn interrupt() -> Interrupt {
    Box::pin(tokio::signal::ctrl_c())
}

// === impl Batch ===

impl Batch {
    async fn run(self, input: Pin<Box<dyn AsyncBufRead + Send>>) -> ExitCode {
        let started = Instant::now();
        let mut reader = LineReader::new(input);
        let mut tasks: JoinSet<Ended> = JoinSet::new();
        let mut in_flight: HashMap<tokio::task::Id, (u64, Method, Url)> = HashMap::new();
        let mut summary = Summary::default();
        let mut state = State::Sending;
        let mut ctrl_c = interrupt();
        let mut stdout = io::stdout();
        loop {
            let reading = state == State::Sending && tasks.len() < self.parallel;
            if !reading && tasks.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                signal = &mut ctrl_c => {
                    if signal.is_err() {
                        // No Ctrl-C handler: the default (ending the process) stays.
                        ctrl_c = Box::pin(std::future::pending());
                        continue;
                    }
                    ctrl_c = interrupt();
                    state = match state {
                        State::Sending | State::InputDone => {
                            summary.interrupted = true;
                            if state == State::Sending {
                                summary.resume_from = Some(reader.lines_read() + 1);
                            }
                            self.progress.note(&format!(
                                "interrupted: nothing more is sent; waiting for {} request{} in \
                                 flight (Ctrl-C again to abandon them)",
                                tasks.len(),
                                if tasks.len() == 1 { "" } else { "s" }
                            ));
                            State::Interrupted
                        }
                        State::Interrupted | State::Abandoned => {
                            tasks.abort_all();
                            State::Abandoned
                        }
                    };
                }
                Some(joined) = tasks.join_next_with_id() => {
                    let (id, ended) = match joined {
                        Ok((id, ended)) => (id, ended),
                        Err(e) => {
                            let Some((line, method, url)) = in_flight.remove(&e.id()) else {
                                continue;
                            };
                            let error = if e.is_cancelled() {
                                summary.abandoned += 1;
                                "abandoned in flight; it may have reached the server".to_owned()
                            } else {
                                format!("the request's task failed: {e}")
                            };
                            (e.id(), Ended {
                                line, method, url,
                                elapsed: started.elapsed(),
                                status: None, error: Some(error), bytes: 0, body: None,
                            })
                        }
                    };
                    in_flight.remove(&id);
                    let tries = self.tallies.take(ended.line);
                    summary.count(&ended, &tries);
                    self.progress.done(&summary);
                    if summary.output_closed.is_none() {
                        let line = result_line(&ended, &tries);
                        if let Err(code) = write_or_quit(&mut stdout, line.as_bytes())
                            .and_then(|()| write_or_quit(&mut stdout, b""))
                        {
                            // The reader went away: nobody sees the rest.
                            summary.output_closed = Some(code);
                            tasks.abort_all();
                            state = State::Abandoned;
                        }
                    }
                }
                next = reader.next(), if reading => match next {
                    Ok(None) => state = State::InputDone,
                    Ok(Some((line, text))) => {
                        match text.and_then(|t| input::parse_line(&t)) {
                            Ok(None) => {}
                            Ok(Some(spec)) => {
                                let id = self.spawn(&mut tasks, line, spec.clone());
                                in_flight.insert(id, (line, spec.method, spec.url));
                            }
                            Err(error) => {
                                summary.bad_lines += 1;
                                let line = bad_line(line, &error);
                                if let Err(code) = write_or_quit(&mut stdout, line.as_bytes())
                                    .and_then(|()| write_or_quit(&mut stdout, b""))
                                {
                                    summary.output_closed = Some(code);
                                    tasks.abort_all();
                                    state = State::Abandoned;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        summary.input_error = Some(format!(
                            "cannot read the input after line {}: {e}",
                            reader.lines_read()
                        ));
                        state = State::InputDone;
                    }
                },
            }
        }
        self.progress.finish();
        summary.elapsed = started.elapsed();
        eprint!("{summary}");
        summary.exit_code()
    }

    fn spawn(&self, tasks: &mut JoinSet<Ended>, line: u64, spec: Spec) -> tokio::task::Id {
        let client = self.client.clone();
        let req = spec.request(&self.common);
        let keep_body = self.keep_body;
        let span = tracing::info_span!(target: tally::SPAN_TARGET, tally::SPAN_NAME, line);
        let task = async move {
            let started = Instant::now();
            let mut ended = Ended {
                line,
                method: spec.method,
                url: spec.url,
                elapsed: Duration::ZERO,
                status: None,
                error: None,
                bytes: 0,
                body: keep_body.then(Vec::new),
            };
            match client.oneshot(req).await {
                Err(e) => ended.error = Some(describe(&courier::Error::from(e))),
                Ok(resp) => {
                    let (parts, mut body) = resp.into_parts();
                    ended.status = Some(parts.status);
                    while let Some(frame) = body.frame().await {
                        match frame {
                            Ok(frame) => {
                                if let Some(data) = frame.data_ref() {
                                    ended.bytes += data.len() as u64;
                                    if let Some(kept) = &mut ended.body {
                                        kept.extend_from_slice(data);
                                    }
                                }
                            }
                            Err(e) => {
                                ended.error = Some(format!(
                                    "the response body broke off: {}",
                                    describe(&courier::Error::from(e))
                                ));
                                break;
                            }
                        }
                    }
                }
            }
            ended.elapsed = started.elapsed();
            ended
        };
        tasks.spawn(task.instrument(span)).id()
    }
}

/// The JSON line of a request that ended, newline included.
fn result_line(ended: &Ended, tries: &[Try]) -> String {
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
fn bad_line(line: u64, error: &str) -> String {
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
struct Summary {
    requests: u64,
    statuses: BTreeMap<u16, u64>,
    failed: u64,
    bad_lines: u64,
    attempts: u64,
    retries: u64,
    answered_429: u64,
    refused_locally: u64,
    abandoned: u64,
    interrupted: bool,
    resume_from: Option<u64>,
    input_error: Option<String>,
    output_closed: Option<ExitCode>,
    elapsed: Duration,
}

// === impl Summary ===

impl Summary {
    fn count(&mut self, ended: &Ended, tries: &[Try]) {
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

    fn exit_code(&self) -> ExitCode {
        if self.interrupted {
            return INTERRUPTED.into();
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
                "abandoned: {} in flight at the second Ctrl-C; each may have reached the server",
                self.abandoned
            )?;
        }
        if let Some(line) = self.resume_from {
            writeln!(
                f,
                "interrupted: no request from line {line} on was sent; resume from there \
                 (e.g. tail -n +{line} FILE | courier batch ...)"
            )?;
        } else if self.interrupted {
            writeln!(f, "interrupted after the last line was sent")?;
        }
        if let Some(error) = &self.input_error {
            writeln!(f, "error: {error}")?;
        }
        Ok(())
    }
}

/// A progress bar on stderr while it is a terminal; nothing otherwise.
struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    fn new(show: bool, total: Option<u64>) -> Self {
        if !show {
            return Self { bar: None };
        }
        let (bar, template) = match total {
            Some(n) => (
                ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                "{spinner} {elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
            ),
            None => (
                ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                "{spinner} {elapsed_precise} {pos} done {msg}",
            ),
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(200));
        Self { bar: Some(bar) }
    }

    fn done(&self, summary: &Summary) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            if summary.failed + summary.bad_lines > 0 {
                bar.set_message(format!("{} failed", summary.failed + summary.bad_lines));
            }
        }
    }

    /// Prints a line above the bar.
    fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
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
        let line = result_line(&e, &tries(&["429", "200"]));
        assert_eq!(
            line,
            "{\"line\":3,\"method\":\"GET\",\"url\":\"http://127.0.0.1:1/a?b=%22c%22\",\
             \"status\":200,\"attempts\":2,\"reason\":\"final_status\",\"elapsed_ms\":12,\
             \"bytes\":2,\"tries\":[{\"outcome\":\"429\",\"wait_ms\":1000,\
             \"wait_source\":\"retry_after\"},{\"outcome\":\"200\"}],\"body\":\"ok\"}\n"
        );
        let mut e = ended(None, Some("connect \"failure\""));
        e.body = Some(vec![0xff, 0x00]);
        let v: serde_json::Value = serde_json::from_str(&result_line(&e, &[])).unwrap();
        assert_eq!(v["status"], serde_json::Value::Null);
        assert_eq!(v["error"], "connect \"failure\"");
        assert_eq!(v["attempts"], 0);
        assert_eq!(v["reason"], serde_json::Value::Null);
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
        s.interrupted = true;
        s.resume_from = Some(9);
        assert_eq!(s.exit_code(), ExitCode::from(INTERRUPTED));
        assert!(s.to_string().contains("from line 9 on"));

        let mut s = Summary::default();
        s.count(&ended(Some(204), None), &tries(&["204"]));
        assert_eq!(s.exit_code(), ExitCode::SUCCESS);
    }
}
