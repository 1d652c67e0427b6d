//! `courier batch [FILE]`: many requests through one preset client.
//!
//! Requests are read one per line from FILE or stdin and sent through a single client, up to
//! `--parallel` at once, so that the whole batch shares one token bucket per host
//! (`--rate/--burst`), one circuit breaker per host, one retry budget and one cache: pacing
//! holds across the batch, as it cannot across separate `courier request` runs.
//!
//! Each request gets one JSON line on stdout when it ends, in the order they end; a summary goes
//! to stderr at the end, with a progress bar before it while stderr is a terminal. Ctrl-C or
//! SIGTERM stops reading and sending, in every input mode (a file, a pipe, a terminal); the
//! requests in flight finish (within their deadline) and are reported; a second signal abandons
//! them. When stdout closes (`courier batch FILE | head -1`), nothing more is sent, the requests
//! in flight are dropped, and the summary says so (unless stderr closed with it, as in `2>&1 |
//! head -1`: then the summary is lost, and nothing else is). Exit status: 0 when every request reported
//! ended with a status below 400, 1 otherwise (a failed request, a line that is not a request,
//! unreadable input), 2 for a usage error, 130 after Ctrl-C, 143 after SIGTERM.

mod input;
mod report;
mod tally;

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write as _};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

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
use self::report::{Ended, Summary, bad_line, result_line};
use self::tally::Tallies;
use crate::client::{Client, ClientArgs, describe};
use crate::config::ConfigArgs;
use crate::output::write_or_quit;
use crate::signal::{Hangups, Stops, next_hangup, next_stop};
use crate::stack::{Stack, StackArgs};
use crate::{USAGE_ERROR, parse};

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
reason, cache (hit, revalidated, miss, stale or bypass; a miss with no attempts is the answer to
another line's request for the same URL, in flight at the time), elapsed_ms, bytes, tries (each
attempt's outcome and wait), and body with --body.

Exit status:
  0    every request ended with a status below 400
  1    a request failed or ended with 400 or more, a line was not a request, or the input
       could not be read to its end
  2    a usage error: a bad option, FILE, --cacert, --cert, --key or --config cannot be read,
       --key does not match --cert, or the --config file has a bad field (each named on
       stderr, `path: message`)
  130  Ctrl-C stopped the batch: nothing more is sent, the requests in flight finish (a
       second Ctrl-C abandons them), and the summary says which line to resume from
  143  SIGTERM stopped the batch, as Ctrl-C does

When stdout closes (e.g. piped into head), nothing more is sent and the requests in flight are
dropped; the exit status is then that of the results written.

With --config, SIGHUP reads the file again (with the environment and the flags over it, as at
the start) and applies it to the running client: what did not change keeps its state (buckets,
breakers, budgets, the cache), requests in flight finish under the policy they started with.
A file with a bad field is not applied at all; stderr says `config reloaded`, or
`config not reloaded:` and why.";

/// Arguments of `courier batch`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct BatchArgs {
    /// The requests, one per line; `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    input: Option<PathBuf>,
    /// Requests in flight at once.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = parse::checked(parse::parallel))]
    parallel: usize,
    /// A header for every request, `Name: value`; a line's own header of that name replaces
    /// it. Repeat for more.
    #[arg(
        short = 'H',
        long = "header",
        value_name = "'Name: value'",
        value_parser = parse::checked(parse::header)
    )]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Put each response body in its output line: `body` as text, or `body_base64` when it
    /// is not UTF-8.
    #[arg(long)]
    body: bool,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    client: ClientArgs,
}

/// Sends every request of the input and reports each.
pub(crate) fn run(args: BatchArgs) -> ExitCode {
    let transport = match args.client.transport() {
        Ok(transport) => transport,
        Err(message) => {
            say!("error: {message}");
            return USAGE_ERROR.into();
        }
    };
    let file = match args.input.as_deref() {
        Some(path) if path.as_os_str() != "-" => match std::fs::File::open(path) {
            Ok(file) => Some(file),
            Err(e) => {
                say!(
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
    let built = match &args.config.config {
        None => {
            // A Redis store spawns its connection's task on the runtime.
            let _runtime = runtime.enter();
            Stack::from_args(&args.stack)
                .layer()
                .map(|layer| (layer, None))
        }
        Some(path) => crate::config::load(path, Some(&args.stack)).and_then(|config| {
            let (layer, handle) = courier::CourierLayer::from_config_reloadable(&config)
                .map_err(|e| crate::config::lines(&e))?;
            let reload = Reload {
                path: path.clone(),
                flags: args.stack.clone(),
                handle,
            };
            Ok((layer, Some(reload)))
        }),
    };
    let (layer, reload) = match built {
        Ok(built) => built,
        Err(message) => {
            say!("error: {message}");
            return USAGE_ERROR.into();
        }
    };
    let batch = Batch {
        client: transport.client(layer),
        common,
        parallel: args.parallel,
        keep_body: args.body,
        tallies,
        progress: Progress::new(show_progress, total),
        reload,
    };
    let code = runtime.block_on(async move {
        let input: Pin<Box<dyn AsyncBufRead + Send>> = match file {
            Some(file) => Box::pin(tokio::io::BufReader::new(tokio::fs::File::from_std(file))),
            None => Box::pin(tokio::io::BufReader::new(tokio::io::stdin())),
        };
        batch.run(input).await
    });
    // Reading stdin blocks a thread of the runtime's pool until a line or the end of input
    // comes, and dropping a runtime waits for its pool: a batch stopped while its input is a
    // terminal or an open pipe would hang there. Nothing is left to do; leave the read behind.
    runtime.shutdown_background();
    code
}

/// What one batch shares.
struct Batch {
    client: Client,
    common: HeaderMap,
    parallel: usize,
    keep_body: bool,
    tallies: Tallies,
    progress: Progress,
    /// What SIGHUP applies, with --config.
    reload: Option<Reload>,
}

/// The file `batch --config` read, and how to apply it again.
struct Reload {
    path: PathBuf,
    /// The flags put over the file's default policy, each time it is read.
    flags: StackArgs,
    handle: courier::config::ReloadHandle,
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
    /// A second signal, or stdout closed: the requests in flight are dropped (reported as
    /// abandoned while stdout is open).
    Abandoned,
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
        // No handler (a runtime without signals): the default, ending the process, stays.
        let mut stops = Stops::install().ok();
        // Without --config, SIGHUP keeps its default: it ends the process.
        let mut hangups = self.reload.as_ref().and_then(|_| Hangups::install().ok());
        let mut stdout = io::stdout();
        loop {
            let reading = state == State::Sending && tasks.len() < self.parallel;
            if !reading && tasks.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                stop = next_stop(&mut stops) => {
                    state = match state {
                        State::Sending | State::InputDone => {
                            summary.stopped_by = Some(stop);
                            if state == State::Sending {
                                summary.resume_from = Some(reader.lines_read() + 1);
                            }
                            self.progress.note(&format!(
                                "{}: nothing more is sent; waiting for {} request{} in \
                                 flight ({} again to abandon them)",
                                stop.outcome(),
                                tasks.len(),
                                if tasks.len() == 1 { "" } else { "s" },
                                stop.name(),
                            ));
                            State::Interrupted
                        }
                        State::Interrupted | State::Abandoned => {
                            tasks.abort_all();
                            State::Abandoned
                        }
                    };
                }
                () = next_hangup(&mut hangups) => self.reload_config(),
                Some(joined) = tasks.join_next_with_id() => {
                    let (id, ended) = match joined {
                        Ok((id, ended)) => (id, ended),
                        Err(e) => {
                            let Some((line, method, url)) = in_flight.remove(&e.id()) else {
                                continue;
                            };
                            if e.is_cancelled() && summary.output_closed.is_some() {
                                // Nobody reads the results any more: counted, not reported.
                                summary.dropped += 1;
                                continue;
                            }
                            let error = if e.is_cancelled() {
                                summary.abandoned += 1;
                                "abandoned in flight; it may have reached the server".to_owned()
                            } else {
                                format!("the request's task failed: {e}")
                            };
                            (e.id(), Ended {
                                line, method, url,
                                elapsed: started.elapsed(),
                                status: None, error: Some(error), bytes: 0, cache: None, body: None,
                            })
                        }
                    };
                    in_flight.remove(&id);
                    let tries = self.tallies.take(ended.line);
                    summary.count(&ended, &tries);
                    self.progress.done(&summary);
                    if summary.output_closed.is_none() {
                        let line = result_line(&ended, &tries);
                        let lines_read = reader.lines_read();
                        Self::emit(&mut stdout, &line, &mut summary, &mut tasks, &mut state, lines_read);
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
                                let lines_read = reader.lines_read();
                                Self::emit(&mut stdout, &line, &mut summary, &mut tasks, &mut state, lines_read);
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
        // The summary ends its own last line; lost, as `say!`'s lines are, when stderr is gone.
        let _ = write!(io::stderr().lock(), "{summary}");
        summary.exit_code()
    }

    /// Reads the --config file again and applies it, or says why not.
    fn reload_config(&self) {
        let Some(reload) = &self.reload else {
            return;
        };
        let applied = crate::config::load(&reload.path, Some(&reload.flags)).and_then(|config| {
            reload
                .handle
                .reload(&config)
                .map_err(|e| crate::config::lines(&e))
        });
        match applied {
            Ok(()) => self.progress.note("config reloaded"),
            Err(message) => self
                .progress
                .note(&format!("config not reloaded: {message}")),
        }
    }

    /// Writes one output line. When stdout is closed (the reader went away, nobody sees the
    /// rest), nothing more is read or sent, and what is in flight is dropped.
    fn emit(
        stdout: &mut io::Stdout,
        line: &str,
        summary: &mut Summary,
        tasks: &mut JoinSet<Ended>,
        state: &mut State,
        lines_read: u64,
    ) {
        let Err(code) =
            write_or_quit(stdout, line.as_bytes()).and_then(|()| write_or_quit(stdout, b""))
        else {
            return;
        };
        summary.output_closed = Some(code);
        if *state == State::Sending {
            summary.resume_from = Some(lines_read + 1);
        }
        tasks.abort_all();
        *state = State::Abandoned;
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
                cache: None,
                body: keep_body.then(Vec::new),
            };
            match client.oneshot(req).await {
                Err(e) => ended.error = Some(describe(&courier::Error::from(e))),
                Ok(resp) => {
                    let (parts, mut body) = resp.into_parts();
                    ended.status = Some(parts.status);
                    ended.cache = parts.extensions.get().copied();
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
            Some(bar) => bar.suspend(|| say!("{line}")),
            None => say!("{line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
