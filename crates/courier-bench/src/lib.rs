//! Benchmarks of courier side by side with its peers, and the upstream-load simulations.
//!
//! The benches live in `benches/` (see BENCHMARKS.md at the root of the workspace);
//! `cargo bench -p courier-bench` runs them all and writes every chart:
//!
//! - `instructions`: instructions and allocations per call with callgrind ([`callgrind`]), in
//!   process and end to end;
//! - `layers`: criterion, each layer's added cost on the happy path next to its floor
//!   ([`floors`]) and its peer, the preset next to the same stack built from peers ([`peer`]),
//!   courier's bucket next to governor, and one GET over reqwest;
//! - `loopback`: requests per second and latency over 127.0.0.1 against
//!   [`server::LoopbackServer`], raw clients against the preset and the peer stack over them;
//! - `scale`: memory per host at 100 000 hosts, and the cache filled past its capacity;
//! - `upstream_load`: the [`sim`] and [`overload`] tables (paused time, deterministic);
//! - `replicas`: the [`replicas`] tables, replicas of one service with their own breakers or
//!   one shared open state, and a host that goes down (paused time, deterministic).
//! - `hedge`: a host with a slow tail over 127.0.0.1 ([`hedge`]: 5 % of the answers in 500 ms),
//!   the preset without and with hedging and tower's `Hedge`: latency percentiles, the load
//!   the host sees, and the latency CDF drawn in `docs/bench/hedge.svg`.
//!
//! Charts are drawn by [`charts`] into `docs/bench/`. This library holds what the benches
//! share: the loopback server, the mock upstream [`host::Host`], the simulations themselves,
//! the variants, and the [`report`] tables; all of them are tested here.

pub mod callgrind;
pub mod charts;
pub mod concurrency;
pub mod floors;
pub mod happy;
pub mod hedge;
pub mod host;
pub mod overload;
pub mod peer;
pub mod replicas;
pub mod report;
pub mod server;
pub mod sim;

/// Whether the bench binary `name` (a `harness = false` bench) should run: `cargo bench --
/// <filter>` passes its filter to every bench binary, so a bench runs only when a filter is a
/// part of its name, or when there is none. Flags (`--bench`) are not filters.
pub fn selected(name: &str) -> bool {
    filters_select(name, std::env::args().skip(1))
}

fn filters_select(name: &str, args: impl Iterator<Item = String>) -> bool {
    let mut filters = args.filter(|a| !a.starts_with('-')).peekable();
    filters.peek().is_none() || filters.any(|f| name.contains(f.as_str()))
}

#[cfg(test)]
mod tests {
    use super::filters_select;

    fn args(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|a| (*a).to_owned())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn a_bench_runs_with_no_filter_or_one_that_names_it() {
        assert!(filters_select("loopback", args(&["--bench"])));
        assert!(filters_select("loopback", args(&["--bench", "loop"])));
        assert!(!filters_select("loopback", args(&["--bench", "scale"])));
        assert!(filters_select("scale", args(&["happy", "scale"])));
    }
}
