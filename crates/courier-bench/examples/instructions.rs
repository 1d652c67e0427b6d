//! Runs one happy-path variant `ITERS` times: for a profile of one variant, or its wall-clock
//! time over many calls.
//!
//! ```text
//! cargo run --release -p courier-bench --example instructions            # list the variants
//! cargo run --release -p courier-bench --example instructions -- 7 20000 # variant 7, 20000 calls
//! ```
//!
//! The instruction-count tables are the `instructions` bench's
//! (`cargo bench -p courier-bench --bench instructions`).

use courier_bench::{callgrind, happy};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(which), Some(iters)) = (
        args.first().and_then(|a| a.parse::<usize>().ok()),
        args.get(1).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _rt = rt.enter();
        for (i, v) in happy::variants().iter().enumerate() {
            println!("{i}\t{}", v.name);
        }
        return;
    };
    callgrind::happy_calls(which, iters);
}
