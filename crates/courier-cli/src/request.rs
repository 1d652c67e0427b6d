//! `courier request METHOD URL ...`: one call through the preset.
//!
//! The body goes to stdout, one JSON line per attempt to stderr (or `--log FILE`), errors to
//! stderr. Exit status: 0 for a final status below 400, 1 for an HTTP error status or a failed
//! call, 2 for a usage error.

use std::fs::File;
use std::io::{self, Write};
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use courier::core::Attempts;
use courier::ratelimit::Rate;
use http::{HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use tower::ServiceExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use url::Url;

use crate::USAGE_ERROR;
use crate::output::write_or_quit;
use crate::parse;
use crate::plan::Plan;

/// Arguments of `courier request`.
#[derive(Debug, Args)]
pub(crate) struct RequestArgs {
    /// The method, e.g. GET or POST (sent upper-cased).
    #[arg(value_parser = parse::method)]
    pub(crate) method: Method,
    /// An absolute http:// URL.
    #[arg(value_parser = parse::url)]
    pub(crate) url: Url,
    /// The request body, sent as given (set its Content-Type with -H).
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    pub(crate) data: Option<String>,
    /// A request header, `Name: value`; repeat for more.
    #[arg(
        short = 'H',
        long = "header",
        value_name = "'Name: value'",
        value_parser = parse::header
    )]
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// Retries after the first attempt.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2,
        value_parser = parse::retries,
        allow_negative_numbers = true
    )]
    pub(crate) retries: u32,
    /// The total budget of the call in seconds, waits and body included [default: 90].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::positive_seconds,
        allow_negative_numbers = true
    )]
    pub(crate) deadline: Option<Duration>,
    /// The bound on one attempt in seconds [default: 30].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::positive_seconds,
        allow_negative_numbers = true
    )]
    pub(crate) attempt_timeout: Option<Duration>,
    /// The longest server-requested wait honoured, in seconds; a server asking longer gets its
    /// answer back at once [default: 60].
    #[arg(
        long,
        value_name = "SECS",
        value_parser = parse::seconds,
        allow_negative_numbers = true
    )]
    pub(crate) max_wait: Option<Duration>,
    /// Pace attempts to this host at R requests per second (needs --burst).
    #[arg(
        long,
        value_name = "R",
        value_parser = parse::rate,
        requires = "burst",
        allow_negative_numbers = true
    )]
    pub(crate) rate: Option<Rate>,
    /// How many attempts may start at once on a full bucket (needs --rate).
    #[arg(
        long,
        value_name = "B",
        value_parser = parse::burst,
        requires = "rate",
        allow_negative_numbers = true
    )]
    pub(crate) burst: Option<NonZeroU32>,
    /// Send this Idempotency-Key, so that a POST or PATCH may be retried.
    #[arg(long, value_name = "K", value_parser = parse::idempotency_key)]
    pub(crate) idempotency_key: Option<HeaderValue>,
    /// Add a UUID v4 Idempotency-Key to a POST or PATCH that has none.
    #[arg(long, conflicts_with = "idempotency_key")]
    pub(crate) auto_idempotency_key: bool,
    /// Seed the backoff jitter, for reproducible waits.
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Print the plan (retry-safety, attempts, backoff ceilings, limits) and send nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Drop the per-attempt lines (errors are still printed).
    #[arg(long, short, conflicts_with = "log")]
    pub(crate) quiet: bool,
    /// Append the per-attempt lines to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub(crate) log: Option<PathBuf>,
}

/// Sends the request, or prints the plan with `--dry-run`.
pub(crate) fn run(args: RequestArgs) -> ExitCode {
    let plan = Plan::from_args(&args);
    if args.dry_run {
        return match writeln!(io::stdout().lock(), "{plan}") {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    if !args.quiet {
        let writer = match &args.log {
            None => BoxMakeWriter::new(io::stderr),
            Some(path) => match File::options().create(true).append(true).open(path) {
                Ok(file) => BoxMakeWriter::new(Mutex::new(file)),
                Err(e) => {
                    eprintln!(
                        "error: cannot open the log file {}: {e}; pick a writable path",
                        path.display()
                    );
                    return USAGE_ERROR.into();
                }
            },
        };
        init_attempt_log(writer);
    }
    let runtime = match crate::start_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(send(&plan))
}

/// One JSON object per line for each event of target `courier::retry` (one per attempt).
fn init_attempt_log(writer: BoxMakeWriter) {
    let layer = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(writer);
    let filter = Targets::new().with_target("courier::retry", tracing::Level::DEBUG);
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::Layer::with_filter(layer, filter))
        .try_init();
}

async fn send(plan: &Plan) -> ExitCode {
    let client = plan.layer().hyper::<Full<Bytes>>();
    let resp = match client.oneshot(plan.request()).await {
        Ok(resp) => resp,
        Err(e) => {
            eprintln!("error: {}", courier::Error::from(e));
            return ExitCode::FAILURE;
        }
    };
    let (parts, mut body) = resp.into_parts();
    // A reader that goes away ends the run quietly, with the status's exit code.
    let quit = |code| {
        if parts.status.as_u16() < 400 {
            code
        } else {
            ExitCode::FAILURE
        }
    };
    let mut stdout = io::stdout().lock();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref()
                    && let Err(code) = write_or_quit(&mut stdout, data)
                {
                    return quit(code);
                }
            }
            Err(e) => {
                let _ = stdout.flush();
                eprintln!(
                    "error: the response body broke off: {}",
                    courier::Error::from(e)
                );
                return ExitCode::FAILURE;
            }
        }
    }
    if let Err(code) = write_or_quit(&mut stdout, b"") {
        return quit(code);
    }
    let status = parts.status;
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
    eprintln!("error: the server answered {status}{how}");
    ExitCode::FAILURE
}
