//! The `courier` command line.

fn main() {}
