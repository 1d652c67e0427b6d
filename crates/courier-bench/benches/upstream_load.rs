//! Prints the upstream-load tables (BENCHMARKS.md, "What the server sees", and "Overload
//! through the preset").
//!
//! `cargo bench -p courier-bench --bench upstream_load`
//!
//! Paused time: the figures are the same on every run and every machine.

fn main() {
    // `cargo bench -- <filter>` passes its filter to every bench binary: run only when it
    // matches this one, or when there is none.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filter.is_empty() && !filter.iter().any(|f| "upstream_load".contains(f.as_str())) {
        return;
    }
    println!("{}", courier_bench::sim::run_all());
    println!("{}", courier_bench::overload::run_all());
}
