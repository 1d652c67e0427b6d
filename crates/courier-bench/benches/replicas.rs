//! Prints the replicas tables: replicas of one service, each with its own breaker or all on
//! one shared open state, calling a host that goes down, and what reading a shared open state
//! from Redis on every call would cost ([`courier_bench::replicas`]).
//!
//! `cargo bench -p courier-bench --bench replicas`
//!
//! Paused time: the figures are the same on every run and every machine.

use courier_bench::replicas;

fn main() {
    if !courier_bench::selected("replicas") {
        return;
    }
    println!("{}", replicas::run_all());
}
