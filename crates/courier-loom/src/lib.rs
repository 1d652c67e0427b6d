//! Loom models of courier's lock-free state, each compiled from its module's own source file
//! with loom's atomics: the breaker's state machine (`tests/breaker.rs`: half-open permits),
//! the rate limiter's bucket cell (`tests/bucket.rs`: a park or a reservation racing an
//! eviction) and the concurrency limit's count without a queue (`tests/permits.rs`: calls
//! admitted and given back on several threads). The library is empty; the models are its tests, and run only under
//! `--cfg courier_loom`:
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg courier_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p courier-loom --release
//! ```
//!
//! (`--cfg loom` itself would also switch tokio and hyper-util into their loom modes, which do
//! not build outside their own test suites.)
