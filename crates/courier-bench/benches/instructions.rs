//! Instruction counts and heap allocations per call with callgrind, for every happy-path
//! variant in process and every loopback variant end to end: the tables that do not move when
//! the machine is busy.
//!
//! ```text
//! cargo bench -p courier-bench --bench instructions
//! ```
//!
//! Needs valgrind (`apt-get install valgrind`); without it, it says so and counts nothing.
//! The binary runs itself under valgrind as a worker (`courier_bench::callgrind`).
//! `COURIER_BENCH_CALLS` sets the extra calls per happy-path variant (default 20 000).
//!
//! It draws `docs/bench/preset-layers.svg`: the preset's layers, each alone, in this run
//! beside the counts of the same harness before the decision model.

fn main() {
    if courier_bench::callgrind::run_worker() {
        return;
    }
    if !courier_bench::selected("instructions") {
        return;
    }
    if !courier_bench::callgrind::valgrind_available() {
        println!(
            "instruction counts: valgrind and callgrind_annotate not found \
             (apt-get install valgrind); not counted"
        );
        return;
    }
    let extra = std::env::var("COURIER_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &u64| n > 0)
        .unwrap_or(20_000);
    let exe = std::env::current_exe().expect("the bench's own path");
    match courier_bench::callgrind::tables(&exe, extra) {
        Ok(counts) => {
            println!("\ninstructions (callgrind)\n\n{}", counts.tables);
            draw(&counts.added);
        }
        Err(e) => {
            eprintln!("instruction counts failed: {e}");
            std::process::exit(1);
        }
    }
}

/// The preset's layers, each alone (the happy-path variant counted), in the preset's order.
const LAYERS: [(&str, &str); 7] = [
    ("deadline", "courier deadline"),
    ("cache (miss)", "courier cache (miss)"),
    ("retry", "courier retry"),
    (
        "breaker (the preset's rule)",
        "courier breaker (the preset's rule)",
    ),
    ("adaptive pacing", "courier adaptive pacing (healthy host)"),
    ("concurrency limit", "courier concurrency limit (fixed)"),
    ("attempt timeout", "courier attempt_timeout"),
];

/// Instructions per call added over the bare service before the decision model (one
/// classifier for every layer, the call context, the cache's flights and the concurrency limit
/// in the preset), at commit `bfa36ee` with this harness's `measured_calls` applied to it, each
/// the least of two processes: the layers in [`LAYERS`]' order (no concurrency limit then),
/// the preset beyond its layers alone, the whole preset.
const BEFORE: [Option<f64>; 9] = [
    Some(1247.0),
    Some(2477.0),
    Some(2309.0),
    Some(290.0),
    Some(534.0),
    None,
    Some(469.0),
    Some(415.0),
    Some(7741.0),
];

/// `docs/bench/preset-layers.svg`: where the preset's instructions go, per layer, before the
/// decision model and in this run.
fn draw(added: &[(&'static str, f64)]) {
    use courier_bench::charts;
    let of = |name: &str| added.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    let layers: Vec<Option<f64>> = LAYERS.iter().map(|(_, variant)| of(variant)).collect();
    let preset = of("courier preset (defaults, 5 layers)");
    let beyond = preset.map(|p| p - layers.iter().flatten().sum::<f64>());
    let mut groups: Vec<&str> = LAYERS.iter().map(|(label, _)| *label).collect();
    groups.extend(["the preset beyond its layers alone", "the whole preset"]);
    let now: Vec<Option<f64>> = layers.into_iter().chain([beyond, preset]).collect();
    let values: Vec<Vec<Option<f64>>> = BEFORE.iter().zip(now).map(|(b, n)| vec![*b, n]).collect();
    let path = charts::chart_dir().join("preset-layers.svg");
    match charts::grouped_bars(
        &path,
        "The preset's instructions per call, by layer (each alone over the bare service)",
        "instructions per call added over the bare service (callgrind)",
        &groups,
        &["before the decision model (bfa36ee)", "this run"],
        &values,
    ) {
        Ok(()) => println!("chart: {}", path.display()),
        Err(e) => eprintln!("chart {}: {e}", path.display()),
    }
}
