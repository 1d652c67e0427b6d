//! `courier serve [--port P]`: the fault server on loopback.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Args;
use courier_faultserver::FaultServer;

/// Arguments of `courier serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The port on 127.0.0.1; 0 lets the system choose one.
    #[arg(long, short, default_value_t = 8080)]
    port: u16,
}

/// Serves until Ctrl-C; the first line on stdout is `listening on <url>`.
pub(crate) fn run(args: ServeArgs) -> ExitCode {
    init_logs();
    let runtime = match crate::start_runtime(tokio::runtime::Builder::new_multi_thread()) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
        let server = match FaultServer::bind(addr).await {
            Ok(server) => server,
            Err(e) => {
                say!("error: cannot listen on {addr}: {e}; pick another --port (0 for any)");
                return ExitCode::FAILURE;
            }
        };
        let mut stdout = std::io::stdout().lock();
        // A closed stdout must not stop the server.
        let _ = writeln!(stdout, "listening on {}", server.url());
        let _ = stdout.flush();
        drop(stdout);
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!("interrupted; stopping"),
            Err(e) => say!("error: cannot wait for Ctrl-C: {e}; stopping"),
        }
        server.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
