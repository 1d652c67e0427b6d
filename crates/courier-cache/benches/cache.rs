//! Cache benchmarks (being written).
fn main() {}
