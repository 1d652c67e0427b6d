//! Benchmarks of courier side by side with its peers, and the upstream-load simulations.
//!
//! The benches live in `benches/` (see BENCHMARKS.md at the root of the workspace):
//!
//! - `layers`: criterion, each layer's added cost on the happy path next to tower's own
//!   middleware, governor, tower-resilience, failsafe and reqwest-middleware;
//! - `loopback`: requests per second over 127.0.0.1 against [`server::LoopbackServer`], raw
//!   clients against the preset over them;
//! - `upstream_load`: prints the [`sim`] tables (paused time, deterministic);
//! - [`charts`]: SVG bar and line charts of the figures, in `docs/bench/` (`upstream_load` draws
//!   the herd and the recovery).
//!
//! This library holds what they share: the loopback server, the mock upstream [`host::Host`],
//! the simulations themselves, and the [`report`] tables the `layers` bench prints; all of them
//! are tested here.

pub mod callgrind;
pub mod charts;
pub mod floors;
pub mod happy;
pub mod host;
pub mod overload;
pub mod peer;
pub mod report;
pub mod server;
pub mod sim;
