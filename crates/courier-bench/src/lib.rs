//! Benchmarks of courier side by side with its peers (see the benches and BENCHMARKS.md).
