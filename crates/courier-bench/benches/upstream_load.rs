//! Prints the upstream-load tables (BENCHMARKS.md, "What the server sees", and "Overload
//! through the preset"), and draws the herd and the recovery as SVG charts in `docs/bench/`.
//!
//! `cargo bench -p courier-bench --bench upstream_load`
//!
//! Paused time: the figures are the same on every run and every machine, and so are the charts.

use courier_bench::{charts, overload, sim};
use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    if !courier_bench::selected("upstream_load") {
        return Ok(());
    }
    let figures = sim::run_all();
    println!("{figures}");
    let overload = overload::run_all();
    println!("{overload}");

    let dir = charts::chart_dir();
    let herd = dir.join("herd.svg");
    herd_chart(&herd, &figures)?;
    let recovery = dir.join("recovery.svg");
    recovery_chart(&recovery, &overload.recovery)?;
    for path in [herd, recovery] {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Requests per second at the host, one line per backoff, up to the last client's 200 (at
/// most [`sim::HERD_CHART_SECONDS`]).
fn herd_chart(path: &std::path::Path, figures: &sim::Figures) -> Result<(), Box<dyn Error>> {
    let seconds = figures
        .herd
        .iter()
        .map(|h| h.finish.as_secs() as usize + 1)
        .max()
        .unwrap_or(0)
        .min(sim::HERD_CHART_SECONDS);
    let names: Vec<String> = figures.herd.iter().map(|h| h.backoff.to_string()).collect();
    let series: Vec<(&str, Vec<(f64, f64)>)> = figures
        .herd
        .iter()
        .zip(&names)
        .map(|(h, name)| {
            let points = h
                .per_second
                .iter()
                .take(seconds)
                .enumerate()
                .map(|(k, &n)| (k as f64, n as f64))
                .collect();
            (name.as_str(), points)
        })
        .collect();
    charts::lines(
        path,
        &format!(
            "{} clients at once, host serves 5/s, the rest 503 without Retry-After",
            sim::CLIENTS
        ),
        "second since start",
        "requests the host saw that second",
        &series,
    )
}

/// Requests per second at the host, the learned rate (a gap while not paced) and the host's
/// capacity, second by second, on a log scale: the learned rate climbs far past the capacity
/// while it probes.
fn recovery_chart(
    path: &std::path::Path,
    recovery: &overload::RecoveryOutcome,
) -> Result<(), Box<dyn Error>> {
    let recovered = overload::RECOVERY_AT.as_secs_f64();
    let sent = recovery
        .per_second
        .iter()
        .enumerate()
        .map(|(k, &n)| (k as f64, n as f64))
        .collect();
    let learned = recovery
        .learned
        .iter()
        .enumerate()
        .map(|(k, rate)| (k as f64, rate.unwrap_or(f64::NAN)))
        .collect();
    // A step: 5 up to the recovery, 100 from it.
    let seconds = (0..recovery.per_second.len()).map(|k| k as f64);
    let capacity = seconds
        .clone()
        .filter(|&k| k <= recovered)
        .map(|k| (k, 5.0))
        .chain(seconds.filter(|&k| k >= recovered).map(|k| (k, 100.0)))
        .collect();
    charts::lines_log(
        path,
        &format!("20 callers in a loop, host serves 5/s, then 100/s from {recovered} s"),
        "second since start",
        "per second (log scale)",
        &[
            ("requests the host saw", sent),
            ("learned rate (a gap: not paced)", learned),
            ("host capacity", capacity),
        ],
    )
}
