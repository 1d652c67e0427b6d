//! The concurrency-limit simulations ([`courier_bench::concurrency`]) on paused time: prints
//! the tables of BENCHMARKS.md's concurrency section.

fn main() {
    if !courier_bench::selected("concurrency") {
        return;
    }
    let (queueing, two) = courier_bench::concurrency::run_all();
    println!("{}", courier_bench::concurrency::report(&queueing, &two));
}
