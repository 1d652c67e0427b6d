//! `courier demo`: the scenario table through the preset against a fault server on loopback.

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use courier_faultserver::FaultServer;

use courier_cli::scenarios::{self, Transport};

/// The demo gives up past this; its rows take about 3 s.
const TIME_LIMIT: Duration = Duration::from_secs(15);

/// Runs every row; exit 1 when a row fails.
pub(crate) fn run() -> ExitCode {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2);
    let runtime = match crate::start_runtime(builder) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(demo())
}

async fn demo() -> ExitCode {
    let server = match FaultServer::start().await {
        Ok(server) => server,
        Err(e) => {
            say!("error: cannot start the fault server on 127.0.0.1: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "fault server on {}; every row goes through the preset over hyper\n",
        server.url()
    );
    let started = tokio::time::Instant::now();
    let results =
        match tokio::time::timeout(TIME_LIMIT, scenarios::run_all(&server, Transport::Hyper)).await
        {
            Ok(results) => results,
            Err(_) => {
                say!(
                    "error: the scenarios took longer than {} s; is the machine overloaded?",
                    TIME_LIMIT.as_secs()
                );
                return ExitCode::FAILURE;
            }
        };
    let elapsed = started.elapsed();
    server.shutdown().await;
    let passed = results.iter().filter(|r| r.pass).count();
    let mut stdout = io::stdout().lock();
    let _ = write!(stdout, "{}", scenarios::table(&results));
    let _ = writeln!(
        stdout,
        "\n{passed} of {} rows passed in {:.1} s",
        results.len(),
        elapsed.as_secs_f64()
    );
    let _ = stdout.flush();
    if passed == results.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
