//! Runs one happy-path variant `ITERS` times, for instruction counts under callgrind, which
//! stay stable when the machine is busy (wall-clock timings do not).
//!
//! ```text
//! cargo run --release -p courier-bench --example instructions            # list the variants
//! cargo run --release -p courier-bench --example instructions -- 7 20000 # variant 7, 20000 calls
//! crates/courier-bench/callgrind.sh                                       # the whole table
//! ```
//!
//! `callgrind.sh` runs each variant twice (a few calls, then 20 000 more) and divides the
//! difference in instructions by the extra calls: start-up and first-call costs cancel out.

use courier_bench::happy;
use std::hint::black_box;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _rt = rt.enter();
    let mut variants = happy::variants();
    let (Some(which), Some(iters)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        for (i, v) in variants.iter().enumerate() {
            println!("{i}\t{}", v.name);
        }
        return;
    };
    let Some(v) = variants.get_mut(which) else {
        eprintln!("no variant {which}; run without arguments for the list");
        std::process::exit(2);
    };
    let mut ok = 0u64;
    for _ in 0..iters {
        ok += u64::from(black_box((v.call)()));
    }
    assert_eq!(ok, iters, "{} left the happy path", v.name);
}
