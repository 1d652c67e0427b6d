//! `N` requests over loopback through the raw hyper-util client or a stack over it, from
//! `TASKS` tasks: for a profile of one variant (`valgrind --tool=callgrind`).
//!
//! ```text
//! cargo run --release -p courier-bench --example loopback_calls -- VARIANT N TASKS
//! ```
//!
//! VARIANT: one of `courier_bench::callgrind::LOOPBACK_VARIANTS`: `raw`, `bare` (the preset
//! with every layer off), `bare_no_ua` (the same, sending no `User-Agent`, as the raw client
//! does not), `deadline`, `attempt_timeout`, `cache`, `retry`, `breaker` (that layer alone),
//! `preset`, `preset_oneshot` (`oneshot` on a clone per request), `preset_wrapped` (the same
//! through one more `async fn`), `preset_from_str` (`oneshot`, each URI made from the URL
//! string as the client makes it), `client` (`courier::Client::new()`: `get(url).send()`,
//! then `bytes()`), `peer`
//! (the same features built from peers: `courier_bench::peer`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let variant = args.first().map_or("raw", String::as_str);
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let tasks: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
    courier_bench::callgrind::loopback_calls(variant, n, tasks);
}
