//! The `courier` command line.
//!
//! Each subcommand lives in its own module; `main` parses the arguments and hands over.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod serve;

/// Service-to-service HTTP calls that retry, pace, time out and cache with care.
#[derive(Debug, Parser)]
#[command(name = "courier", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the fault server on 127.0.0.1 until Ctrl-C.
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
    }
}
