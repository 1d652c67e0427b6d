//! `ConcurrencyLimitLayer`: a bound on the calls in flight to each host, learned from latency.
//!
//! Pacing bounds how often a host is called; this layer bounds how many calls to it are under
//! way at once. When a host slows down, the calls to it pile up: without a bound, every task
//! that calls it waits with them, and the host's own queue (and its latency) grows with every
//! call added. With one, the calls beyond the limit wait in a bounded queue of the layer's
//! (or fail at once, by default), and the host keeps the latency it has when it is not
//! queueing. A host that never refuses but queues is never slowed by adaptive pacing, which
//! learns from refusals; this layer learns from latency.
//!
//! - **Keys**: one limit per host (scheme and authority,
//!   [`HostKey`](courier_core::HostKey)) by default ([`ConcurrencyLimitLayer::per_host`]); one
//!   for everything with [`ConcurrencyLimitLayer::global`]; or a key of your own (a route, a
//!   tenant) with [`ConcurrencyLimitLayer::key_by`]. The keys are courier-core's
//!   [`KeyFn`](courier_core::KeyFn)s, as the breaker's and the rate limiter's are, and at most
//!   [`max_keys`](ConcurrencyLimitLayer::max_keys) are kept.
//! - **Permits**: a call takes a permit before the inner service is called and holds it until
//!   the response body ends, fails or is dropped ([`ConcurrencyBody`]), or, with
//!   [`release_at_headers`](ConcurrencyLimitLayer::release_at_headers), until the headers
//!   arrive. Every path gives it back: an answer, a failure, the response future dropped at
//!   any point, a body dropped midway, an inner service that panics in `call`.
//! - **Waiting**: never in `poll_ready`, which only asks the inner service. A call that finds
//!   the limit full waits in the response future, in a first-come first-served queue of at
//!   most [`max_queue`](ConcurrencyLimitLayer::max_queue) calls, for at most
//!   [`max_wait`](ConcurrencyLimitLayer::max_wait) and never past its
//!   deadline ([`CallContext`](courier_core::CallContext)). With no room in the queue, or no permit in time, it
//!   fails with [`ConcurrencyLimited`](courier_core::ConcurrencyLimited), which carries the
//!   calls in flight and the limit. Nothing was sent: courier's classifier calls it a local
//!   refusal, so retry does not spend its budget on it and the breaker does not count it.
//! - **Adaptive or fixed**: a limit learned per key from latency by default
//!   ([`ConcurrencyLimitLayer::adaptive`], [`AdaptiveLimit`]), or a fixed one
//!   ([`ConcurrencyLimitLayer::fixed`]).
//! - **Off and on are one type**: [`ConcurrencyLimit::pass_through`] is the layer switched
//!   off, of the same type as an active service, its bodies holding no permit.
//! - **Telemetry**: a wait and a refusal are recorded on the current span (inside courier's
//!   retry layer, the attempt's); with the `metrics` feature, calls in flight, limits, waits
//!   and refusals per host are metrics. See [`telemetry`].
//!
//! ```
//! use courier_concurrency::ConcurrencyLimitLayer;
//! use courier_core::{BoxError, ConcurrencyLimited, HostKey};
//! use http::{Request, Response};
//! use std::num::NonZeroUsize;
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), BoxError> {
//! let layer = ConcurrencyLimitLayer::new().fixed(NonZeroUsize::new(1).unwrap());
//! let handle = layer.handle();
//! let svc = ServiceBuilder::new().layer(layer).service(service_fn(|_req: Request<()>| async {
//!     tokio::time::sleep(Duration::from_secs(1)).await;
//!     Ok::<_, BoxError>(Response::new(String::from("done")))
//! }));
//!
//! let first = tokio::spawn(svc.clone().oneshot(Request::get("http://slow.example/").body(())?));
//! tokio::task::yield_now().await;
//! let err = svc.oneshot(Request::get("http://slow.example/").body(())?).await.unwrap_err();
//! let refusal = err.downcast_ref::<ConcurrencyLimited>().unwrap();
//! assert_eq!((refusal.in_flight(), refusal.limit()), (1, 1));
//!
//! drop(first.await??);
//! let host = HostKey::from_request(&Request::get("http://slow.example/").body(())?);
//! assert_eq!(handle.status(&host).unwrap().in_flight, 0);
//! # Ok(())
//! # }
//! ```
//!
//! # The adaptive limit
//!
//! Each key's limit is learned from the latency of its answers (from the call to the response
//! headers), within [`AdaptiveLimit`]'s bounds (1 to 1000 by default, from 20), by additive
//! increase and multiplicative decrease on latency:
//!
//! - **Windows**: answers are gathered into windows of at least as many answers as the limit
//!   (and 8) over at least 100 ms. A window gives its mean latency, the standard error of that
//!   mean, and the most calls that were in flight while it filled.
//! - **The unloaded latency** is measured by a probe: for one window the limit drops to a
//!   quarter of itself (not below the minimum; a window of 8 answers over 100 ms at least),
//!   and only answers to calls sent under the
//!   probe's limit count. The first answer of a key starts the first probe; the next come 1,
//!   2, 4 and 8 seconds apart, then every 10 seconds, so that a probe that still met a queue
//!   (a quarter of a limit far above the host's capacity) is soon followed by one at a
//!   quarter of the limit it led to, and a host that became slower or faster for good is
//!   measured anew.
//! - **A slow window** (its mean more than 5 % above the unloaded latency, and more than two
//!   standard errors of the two means beyond that, so that noise alone does not count), or a
//!   **drop** (an answer whose [verdict](courier_core::Verdict) is an overload signal: an
//!   overload without a server's hint, or a timeout; see
//!   [`classifier`](ConcurrencyLimitLayer::classifier)), multiplies the limit by 0.9.
//! - **A full window** (it used the whole limit) that is not slow doubles the limit until the
//!   key's first slow window or drop, then adds one. A window that did not use the limit
//!   leaves it: a quiet client learns nothing about the host's capacity.
//!
//! A host that queues what it cannot serve at once has a latency that rises with every call
//! beyond its capacity: the limit settles at the capacity, one call above it at most, and the
//! host's latency within a few percent of its unloaded latency. A host whose latency does not
//! rise with its load (a slow host that serves every call in parallel) is not queueing, and
//! its limit grows, up to the maximum, as fast as its answers fill windows.
//!
//! # Choosing the algorithm
//!
//! Three rules were run on the same simulated hosts (courier-bench's `concurrency` bench,
//! which picks the rule through this crate's `compare` feature; paused time, the same
//! figures on every run): a host with 8 workers, 5 ms a request, that
//! queues the rest, called by 200 callers in a loop for 30 s, the client queueing every call
//! beyond its limit; once with exactly 5 ms a request, once with 3 to 7 ms at random
//! (seeded). The host serves at most 1600 answers a second, its unloaded latency is 5 ms, and
//! in-flight calls above 8 are its queue. From the 5th second on:
//!
//! | rule | host | settled within 20 % of 8 at | in-flight | host latency | goodput |
//! | --- | --- | --- | --- | --- | --- |
//! | no limit | exact | never | 200 | 125 ms | 100 % |
//! | latency AIMD (this crate's) | exact | 1 s | 8.4 | 5.31 ms | 99.1 % |
//! | Gradient2 | exact | never | 131 | 81.9 ms | 100 % |
//! | Vegas | exact | never | 27.0 | 16.9 ms | 100 % |
//! | no limit | jittered | never | 200 | 125 ms | 99.8 % |
//! | latency AIMD (this crate's) | jittered | 14 s | 9.1 | 5.72 ms | 98.9 % |
//! | Gradient2 | jittered | never | 129 | 80.6 ms | 99.8 % |
//! | Vegas | jittered | never | 24.6 | 15.4 ms | 99.8 % |
//!
//! (Goodput is answers per second over 1600; the jittered host's timer rounding serves a
//! little more. On the jittered host the latency AIMD's in-flight stays between 8.2 and 9.9
//! a second; the 13th and 14th seconds are just over 20 % above 8.)
//!
//! - **Gradient2** compares each window's latency with a long average of the windows before
//!   it, lets it reach 1.5 times that average, and adds a headroom of 4 calls. The average
//!   follows the queue the headroom lets in, so the limit climbs as long as the host queues:
//!   it never settled, and latency ended at the host's 125 ms.
//! - **Vegas** estimates the host's queue as `limit × (1 − unloaded / latency)` and keeps it
//!   between 3 and 6 calls (3 and 6 × log10 of the limit). Its unloaded latency is the lowest
//!   it has seen, and a client that starts above the host's capacity never sees the host
//!   unloaded: it settled with some 19 calls queued, three times the unloaded latency.
//! - **Envoy's gradient controller** was not run: it measures the unloaded latency by a
//!   probe at a fixed minimum concurrency, and adds a headroom of the square root of the
//!   limit, which alone keeps about 3 calls queued at a limit of 8, over a third of the
//!   host's capacity. Its probe, at a quarter of the limit here (a fixed minimum would starve
//!   a large host's probe of throughput), is the latency AIMD's.
//! - **Latency AIMD** holds the host at its capacity with 6 % added latency, and at 99 % of
//!   its goodput (the probes cost the rest: a probe second serves 92 %); on the jittered
//!   host, the noise allowance lets about one call queue. It was kept: it is the one that meets the bar of holding a
//!   queueing host within 20 % of its capacity, at under twice its latency, and it needs no
//!   setting but its bounds.
//!
//! # Defaults
//!
//! [`ConcurrencyLimitLayer::new`] is adaptive: a fixed limit must be chosen per host to mean
//! anything (a fixed 1000 never binds on a host that serves 8 at once), while the adaptive
//! limit finds each host's capacity, bounded by a maximum of 1000 as a fixed limit would be.
//! The queue is empty by default: a call over the limit fails at once. A queue moves the wait
//! from the host into the client; the callers wait as long as they would have (in the
//! simulation above, the callers' latency is 125 ms with or without the limit, the client's
//! queue holding what the host's held), and a caller that is refused at once can do
//! something else. Give a queue to callers that would rather wait.
//!
//! # Hot path
//!
//! Without a queue (the default) a call admitted at once takes no lock: one compare-and-swap
//! below its key's limit admits it, one subtraction gives its permit back, and an adaptive
//! limit takes its key's mutex once more to learn from the answer and reads the clock at the
//! call and at its answer (a loom model checks the count in every interleaving). With a
//! queue, the calls in flight are counted under that mutex, taken twice per call, so that no
//! interleaving of calls, drops and grants can lose a permit; the property tests drop calls
//! at every await point, with and without a queue. The limiter of the previous call is kept
//! by the service, so a run of calls to one key skips the key and the map (a `papaya` map).
//!
//! # Errors
//!
//! The service's error is [`BoxError`](courier_core::BoxError):
//! [`ConcurrencyLimited`](courier_core::ConcurrencyLimited) when the limit refused the call
//! (test for it with [`is_caused_by`](courier_core::is_caused_by)), else the inner service's
//! error, unchanged. A response's body is its inner body in a [`ConcurrencyBody`].
//!
//! # Features
//!
#![doc = document_features::document_features!()]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algorithm;
pub mod body;
mod config;
mod direct;
pub mod future;
mod handle;
mod layer;
mod limiter;
mod service;
pub mod telemetry;

#[cfg(feature = "compare")]
pub use algorithm::Algorithm;
pub use body::ConcurrencyBody;
pub use config::AdaptiveLimit;
pub use handle::{ConcurrencyHandle, ConcurrencyStatus};
pub use layer::ConcurrencyLimitLayer;
pub use service::ConcurrencyLimit;

/// What a limit key must be: hashable, comparable, cheap to clone, printable for logs (the
/// bounds of [`KeyFn::Key`](courier_core::KeyFn::Key)).
pub trait LimitKey: std::hash::Hash + Eq + Clone + std::fmt::Debug + Send + Sync + 'static {}

impl<T: std::hash::Hash + Eq + Clone + std::fmt::Debug + Send + Sync + 'static> LimitKey for T {}

#[cfg(test)]
mod send_sync {
    use super::*;
    use courier_core::{BoxError, Global};

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    type Svc = tower::util::BoxCloneSyncService<http::Request<()>, http::Response<()>, BoxError>;

    #[test]
    fn everything_is_send_sync_static() {
        assert_send_sync_static::<ConcurrencyLimitLayer>();
        assert_send_sync_static::<ConcurrencyLimitLayer<Global>>();
        assert_send_sync_static::<ConcurrencyLimit<Svc>>();
        assert_send_sync_static::<ConcurrencyBody<String>>();
        assert_send_sync_static::<ConcurrencyHandle<courier_core::HostKey>>();
    }
}
