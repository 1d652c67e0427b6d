//! The `courier` command line.
//!
//! Each subcommand lives in its own module; `main` parses the arguments and hands over.
//! Exit status: 0 when the call worked, 1 when it failed (an HTTP error status, a transport
//! failure, an open circuit, a page that failed, a batch request that did not end below 400, a
//! failed demo row), 2 for a usage error, 130 when Ctrl-C (143 when SIGTERM) stopped a batch or
//! a listing.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `eprintln!` that cannot panic: when stderr is gone (`courier batch 2>&1 | head -1`, a
/// closed terminal), the line is lost, not the run and its exit status.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod batch;
mod client;
mod config;
mod data;
mod demo;
mod output;
mod paginate;
mod parse;
mod plan;
mod request;
mod serve;
mod signal;
mod stack;
mod trace;

/// The exit status of a usage error (clap's own too).
const USAGE_ERROR: u8 = 2;
/// The exit status after Ctrl-C, as a shell reports a command that SIGINT ended.
const INTERRUPTED: u8 = 130;
/// The exit status after SIGTERM, as a shell reports a command that SIGTERM ended.
const TERMINATED: u8 = 143;

/// `courier --help`, after the subcommands.
const AFTER_HELP: &str = "\
Exit status:
  0    the call worked (every call, for batch and paginate)
  1    a call failed: a status of 400 or more, a connection, TLS or deadline failure, an open
       circuit, a page that failed, a batch line that is not a request, a failed demo row
  2    a usage error: a bad option, a file named on the command line that cannot be read,
       or a --config file with a bad field
  130  Ctrl-C stopped a batch or a listing (143: SIGTERM did)";

/// Service-to-service HTTP calls that retry, pace, time out and cache with care.
#[derive(Debug, Parser)]
#[command(name = "courier", version, about, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send one request through the preset: body on stdout, one JSON line per attempt on
    /// stderr.
    Request(Box<request::RequestArgs>),
    /// Send requests read one per line through one preset client, some in parallel: one JSON
    /// line per request on stdout, a summary on stderr.
    Batch(Box<batch::BatchArgs>),
    /// Print every item of a paginated JSON collection, one per line.
    Paginate(Box<paginate::PaginateArgs>),
    /// Run the fault server on 127.0.0.1 until Ctrl-C.
    Serve(serve::ServeArgs),
    /// Run the scenario table through the preset against a fault server of its own.
    Demo,
    /// Print a shell completion script, e.g. `courier completions bash >
    /// ~/.local/share/bash-completion/completions/courier`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Starts a tokio runtime from `builder` (its drivers enabled); `Err` carries the exit status
/// when it cannot start, after saying why.
fn start_runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        say!("error: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Request(args) => request::run(*args),
        Command::Batch(args) => batch::run(*args),
        Command::Paginate(args) => paginate::run(*args),
        Command::Serve(args) => serve::run(args),
        Command::Demo => demo::run(),
        Command::Completions { shell } => completions(shell),
    }
}

/// Writes the completion script for `shell` to stdout.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "courier", &mut script);
    let mut stdout = std::io::stdout().lock();
    match output::write_or_quit(&mut stdout, &script)
        .and_then(|()| output::write_or_quit(&mut stdout, b""))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}
