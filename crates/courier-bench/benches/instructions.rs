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
        Ok(tables) => println!("\ninstructions (callgrind)\n\n{tables}"),
        Err(e) => {
            eprintln!("instruction counts failed: {e}");
            std::process::exit(1);
        }
    }
}
