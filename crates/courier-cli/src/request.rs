//! `courier request METHOD URL ...`: one call through the preset.
//!
//! The body goes to stdout (or `-o FILE`), whole or not at all: a body the deadline or the
//! connection cuts short writes nothing unless `--partial` is given. One JSON line per attempt
//! goes to stderr (or `--log FILE`), and errors too. Exit status: 0 for a final status below
//! 400, 1 for an HTTP error status or a failed call, 2 for a usage error.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use courier::core::Attempts;
use http::{HeaderName, HeaderValue, Method};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use url::Url;

use crate::USAGE_ERROR;
use crate::client::{ClientArgs, describe};
use crate::config::ConfigArgs;
use crate::data;
use crate::output::write_or_quit;
use crate::parse;
use crate::plan::Plan;
use crate::stack::StackArgs;
use crate::trace::{TreeLayer, Trees};

/// `courier request --help`, after the options.
const AFTER_HELP: &str = "\
Exit status:
  0  the final status is below 400
  1  a status of 400 or more, or a failed call: connection, TLS, deadline, open circuit, or a
     body cut short
  2  a usage error: a bad option, an unreadable -d @FILE, --cacert, --cert, --key, --config or
     -o file, a --key that does not match --cert, a --config file with a bad field (each
     named on stderr, `path: message`), or a -d @FILE larger than --max-data

A -d @FILE is streamed as it is sent, with its length; -d @- (or a pipe or device) is read up
to 8 MiB to learn its length, then streamed. Both are read under the deadline, and at most
--max-data bytes (1 GiB by default) are sent. Up to 8 MiB of the body is kept so that a retry
can send it again: a larger body is sent once.

Pacing (--rate/--burst), the circuit breaker, the cache and the retry budget last one
invocation: each run starts with a full bucket and a closed circuit. To pace many requests,
send them through one client with `courier batch`.";

/// Arguments of `courier request`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct RequestArgs {
    /// The method, e.g. GET or POST (sent upper-cased).
    #[arg(value_parser = parse::checked(parse::method))]
    pub(crate) method: Method,
    /// An absolute http:// or https:// URL.
    #[arg(value_parser = parse::checked(parse::url))]
    pub(crate) url: Url,
    /// The request body: DATA as given, @FILE for a file's bytes, @- for stdin (as curl's
    /// --data-binary: newlines are kept). Set its Content-Type with -H.
    #[arg(
        short = 'd',
        long = "data",
        visible_alias = "data-binary",
        value_name = "DATA"
    )]
    pub(crate) data: Option<String>,
    /// The request body as given, even when it starts with @.
    #[arg(long, value_name = "DATA", conflicts_with = "data")]
    pub(crate) data_raw: Option<String>,
    /// The most bytes a -d @FILE or @- body may hold, e.g. 500000, 64K, 10M or 2G (powers of
    /// 1024) [default: 1G].
    #[arg(long, value_name = "SIZE", value_parser = parse::checked(parse::size))]
    pub(crate) max_data: Option<u64>,
    /// A request header, `Name: value`; repeat for more.
    #[arg(
        short = 'H',
        long = "header",
        value_name = "'Name: value'",
        value_parser = parse::checked(parse::header)
    )]
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    #[command(flatten)]
    pub(crate) stack: StackArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Send this Idempotency-Key, so that a POST or PATCH may be retried.
    #[arg(
        long,
        value_name = "K",
        value_parser = parse::checked(parse::idempotency_key),
        conflicts_with = "auto_idempotency_key"
    )]
    pub(crate) idempotency_key: Option<HeaderValue>,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Print the status line and the response headers before the body.
    #[arg(short = 'i', long)]
    pub(crate) include: bool,
    /// Write the body (and the headers with -i) to FILE instead of stdout; FILE appears only
    /// once the body is whole.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Write the body as it arrives, so that a body cut short leaves its first part.
    #[arg(long)]
    pub(crate) partial: bool,
    /// Print the plan (retry-safety, attempts, backoff ceilings, limits) and send nothing.
    #[arg(long, conflicts_with = "config")]
    pub(crate) dry_run: bool,
    /// Drop the per-attempt lines (errors are still printed).
    #[arg(long, short, conflicts_with = "log")]
    pub(crate) quiet: bool,
    /// Append the per-attempt lines to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub(crate) log: Option<PathBuf>,
    /// Print the call's span tree on stderr once it is over: the call, each attempt, how long
    /// each took, what it got and what was decided.
    #[arg(long)]
    pub(crate) trace: bool,
}

/// Sends the request, or prints the plan with `--dry-run`.
pub(crate) fn run(args: RequestArgs) -> ExitCode {
    let max_data = args.max_data.unwrap_or(data::DEFAULT_MAX_DATA);
    let source = match request_body(&args, max_data) {
        Ok(source) => source,
        Err(message) => {
            say!("error: {message}");
            return USAGE_ERROR.into();
        }
    };
    let transport = match args.client.transport() {
        Ok(transport) => transport,
        Err(message) => {
            say!("error: {message}");
            return USAGE_ERROR.into();
        }
    };
    let config = match &args.config.config {
        None => None,
        Some(path) => match crate::config::load(path, Some(&args.stack)) {
            Ok(config) => Some(config),
            Err(message) => {
                say!("error: {message}");
                return USAGE_ERROR.into();
            }
        },
    };
    let plan = Plan::from_args(&args, source.describe());
    if args.dry_run {
        return match writeln!(io::stdout().lock(), "{plan}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let sink = match Sink::open(args.output.as_deref(), args.partial) {
        Ok(sink) => sink,
        Err(code) => return code,
    };
    let mut trees = None;
    if !args.quiet {
        let writer = match &args.log {
            None => BoxMakeWriter::new(io::stderr),
            Some(path) => match File::options().create(true).append(true).open(path) {
                Ok(file) => BoxMakeWriter::new(Mutex::new(file)),
                Err(e) => {
                    say!(
                        "error: cannot open the log file {}: {e}; pick a writable path",
                        path.display()
                    );
                    sink.discard();
                    return USAGE_ERROR.into();
                }
            },
        };
        trees = init_attempt_log(Some(writer), args.trace);
    } else if args.trace {
        trees = init_attempt_log(None, true);
    }
    let runtime = match crate::start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(code) => {
            sink.discard();
            return code;
        }
    };
    let code = runtime.block_on(async {
        // The deadline starts now: reading the body counts against it.
        let started = tokio::time::Instant::now();
        let deadline = match config.as_ref().and_then(|c| c.default.deadline) {
            Some(courier::config::OrOff::On(d)) => d.0,
            _ => plan.stack.deadline,
        };
        let body = match tokio::time::timeout(deadline, source.body(max_data)).await {
            Ok(Ok(body)) => body,
            Ok(Err(message)) => {
                sink.discard();
                say!("error: {message}");
                return ExitCode::FAILURE;
            }
            Err(_) => {
                sink.discard();
                say!(
                    "error: deadline exceeded: the call's budget of {} ms was spent reading \
                     the body; raise --deadline or send a body that ends",
                    deadline.as_millis()
                );
                return ExitCode::FAILURE;
            }
        };
        let layer = match &config {
            Some(config) => {
                let config = crate::config::less_spent(config, started.elapsed());
                courier::CourierLayer::from_config(&config).map_err(|e| crate::config::lines(&e))
            }
            None => {
                let mut stack = plan.stack.clone();
                stack.deadline = deadline
                    .saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1));
                stack.layer()
            }
        };
        let layer = match layer {
            Ok(layer) => layer,
            Err(message) => {
                say!("error: {message}");
                return USAGE_ERROR.into();
            }
        };
        let client = transport.client(layer);
        send(client, &plan, body, args.include, sink, Trace(trees)).await
    });
    // A read of stdin cut by the deadline still blocks a thread of the runtime's pool, which
    // dropping the runtime would wait for: leave it behind.
    runtime.shutdown_background();
    code
}

/// The body `-d` or `--data-raw` names: `@FILE` is opened here, before anything is sent, so
/// that a missing file is a usage error rather than a request with the wrong body; it is read
/// as it is sent (see [`data`]).
fn request_body(args: &RequestArgs, max_data: u64) -> Result<data::Source, String> {
    if let Some(raw) = &args.data_raw {
        return Ok(data::Source::Given(Bytes::copy_from_slice(raw.as_bytes())));
    }
    let Some(given) = &args.data else {
        return Ok(data::Source::Given(Bytes::new()));
    };
    match given.strip_prefix('@') {
        None => Ok(data::Source::Given(Bytes::copy_from_slice(
            given.as_bytes(),
        ))),
        Some("") => Err("-d @ names no file; write -d @FILE, -d @- for stdin, or \
                         --data-raw @ to send a literal @"
            .to_owned()),
        Some(path) => data::Source::open(path, max_data),
    }
}

/// One JSON object per line for each event of target `courier::retry` (one per attempt), to
/// `writer`; with `trace`, the span tree of the call on stderr too, printed through the
/// [`Trees`] returned once the body has been read.
fn init_attempt_log(writer: Option<BoxMakeWriter>, trace: bool) -> Option<Trees> {
    let lines = writer.map(|writer| {
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(writer);
        let filter = Targets::new().with_target("courier::retry", tracing::Level::DEBUG);
        tracing_subscriber::Layer::with_filter(layer, filter)
    });
    let layer = trace.then(TreeLayer::default);
    let trees = layer.as_ref().map(TreeLayer::trees);
    let tree = layer.map(|layer| {
        let filter = Targets::new().with_target("courier", tracing::Level::INFO);
        tracing_subscriber::Layer::with_filter(layer, filter)
    });
    let _ = tracing_subscriber::registry()
        .with(lines)
        .with(tree)
        .try_init();
    trees
}

/// The call's span tree, when `--trace` asked for it: printed once what became of the body is
/// known, before any error line.
struct Trace(Option<Trees>);

impl Trace {
    fn print(&self, body_failure: Option<&str>) {
        if let Some(trees) = &self.0 {
            trees.print(body_failure);
        }
    }
}

async fn send(
    client: crate::client::Client<data::RequestBody>,
    plan: &Plan,
    body: data::RequestBody,
    include: bool,
    mut sink: Sink,
    trace: Trace,
) -> ExitCode {
    let resp = match client.oneshot(plan.request(body)).await {
        Ok(resp) => resp,
        Err(e) => {
            trace.print(None);
            sink.discard();
            say!("error: {}", describe(&courier::Error::from(e)));
            return ExitCode::FAILURE;
        }
    };
    let (parts, mut body) = resp.into_parts();
    let status = parts.status;
    // The exit status once the output is done, or when its reader went away.
    let done = |code: ExitCode| {
        if status.as_u16() < 400 {
            code
        } else {
            ExitCode::FAILURE
        }
    };
    if include && let Err(code) = sink.write(&status_and_headers(&parts)) {
        trace.print(None);
        sink.discard();
        return done(code);
    }
    let mut received = 0_u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    received += data.len() as u64;
                    if let Err(code) = sink.write(data) {
                        trace.print(None);
                        sink.discard();
                        return done(code);
                    }
                }
            }
            Err(e) => {
                trace.print(Some(&format!(
                    "body broke off after {received} byte{}",
                    if received == 1 { "" } else { "s" }
                )));
                let kept = sink.abandon();
                say!(
                    "error: the response body broke off: {}; {kept}",
                    describe(&courier::Error::from(e))
                );
                return ExitCode::FAILURE;
            }
        }
    }
    trace.print(None);
    if let Err(code) = sink.finish() {
        return done(code);
    }
    if status.as_u16() < 400 {
        return ExitCode::SUCCESS;
    }
    let how = match parts.extensions.get::<Attempts>() {
        Some(attempts) => {
            let reason = attempts
                .last()
                .map_or_else(String::new, |r| format!(", stopped because: {}", r.reason));
            let n = attempts.count();
            format!(
                " after {n} attempt{}{reason}",
                if n == 1 { "" } else { "s" }
            )
        }
        None => String::new(),
    };
    say!("error: the server answered {status}{how}");
    ExitCode::FAILURE
}

/// The status line and the headers as curl's `-i` prints them, ending with a blank line.
fn status_and_headers(parts: &http::response::Parts) -> Vec<u8> {
    let version = match parts.version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    };
    let mut head = format!("{version} {}", parts.status.as_u16());
    if let Some(reason) = parts.status.canonical_reason() {
        head.push(' ');
        head.push_str(reason);
    }
    head.push_str("\r\n");
    let mut head = head.into_bytes();
    for (name, value) in &parts.headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Where the output goes: stdout or a file, as it arrives (`--partial`) or once it is whole.
#[derive(Debug)]
enum Sink {
    /// Straight to stdout.
    Stdout,
    /// Held until the body is whole, then written to stdout.
    HeldForStdout(Vec<u8>),
    /// Straight to FILE.
    File { path: PathBuf, file: File },
    /// To a hidden file beside FILE, renamed to FILE once the body is whole.
    Staged {
        path: PathBuf,
        staging: PathBuf,
        file: File,
    },
}

// === impl Sink ===

impl Sink {
    /// Opens the output before anything is sent, so that an unwritable path sends nothing.
    fn open(output: Option<&Path>, partial: bool) -> Result<Self, ExitCode> {
        let path = match output {
            None => None,
            Some(path) if path.as_os_str() == "-" => None,
            Some(path) => Some(path.to_path_buf()),
        };
        let Some(path) = path else {
            return Ok(if partial {
                Self::Stdout
            } else {
                Self::HeldForStdout(Vec::new())
            });
        };
        let cannot = |e: io::Error, path: &Path| {
            say!(
                "error: cannot write to {}: {e}; pick a writable path",
                path.display()
            );
            ExitCode::from(USAGE_ERROR)
        };
        if partial {
            let file = File::create(&path).map_err(|e| cannot(e, &path))?;
            return Ok(Self::File { path, file });
        }
        let name = path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let staging = path.with_file_name(format!(".{name}.courier-{}.part", std::process::id()));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(&staging)
            .map_err(|e| cannot(e, &path))?;
        Ok(Self::Staged {
            path,
            staging,
            file,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ExitCode> {
        match self {
            Self::Stdout => write_or_quit(&mut io::stdout().lock(), bytes),
            Self::HeldForStdout(held) => {
                held.extend_from_slice(bytes);
                Ok(())
            }
            Self::File { path, file } => write_file(file, path, bytes),
            Self::Staged { path, file, .. } => write_file(file, path, bytes),
        }
    }

    /// The body is whole: writes what was held, or puts the file in place.
    fn finish(self) -> Result<(), ExitCode> {
        match self {
            Self::Stdout => write_or_quit(&mut io::stdout().lock(), b""),
            Self::HeldForStdout(held) => {
                let mut stdout = io::stdout().lock();
                write_or_quit(&mut stdout, &held)?;
                write_or_quit(&mut stdout, b"")
            }
            Self::File { path, file } => sync_file(&file, &path),
            Self::Staged {
                path,
                staging,
                file,
            } => {
                let synced = sync_file(&file, &path);
                drop(file);
                let placed = synced.and_then(|()| {
                    std::fs::rename(&staging, &path).map_err(|e| {
                        say!("error: cannot write to {}: {e}", path.display());
                        ExitCode::FAILURE
                    })
                });
                if placed.is_err() {
                    let _ = std::fs::remove_file(&staging);
                }
                placed
            }
        }
    }

    /// The body broke off: drops what was held; says what the output now holds.
    fn abandon(self) -> &'static str {
        match self {
            Self::Stdout => {
                let _ = io::stdout().lock().flush();
                "what arrived before was written (--partial)"
            }
            Self::File { .. } => "what arrived before was written to the file (--partial)",
            Self::HeldForStdout(_) | Self::Staged { .. } => {
                self.discard();
                "nothing was written (--partial keeps what arrives)"
            }
        }
    }

    /// Removes a staged file that will not be used.
    fn discard(self) {
        if let Self::Staged { staging, file, .. } = self {
            drop(file);
            let _ = std::fs::remove_file(&staging);
        }
    }
}

fn write_file(file: &mut File, path: &Path, bytes: &[u8]) -> Result<(), ExitCode> {
    file.write_all(bytes).map_err(|e| {
        say!("error: cannot write to {}: {e}", path.display());
        ExitCode::FAILURE
    })
}

fn sync_file(file: &File, path: &Path) -> Result<(), ExitCode> {
    file.sync_all().map_err(|e| {
        say!("error: cannot write to {}: {e}", path.display());
        ExitCode::FAILURE
    })
}
